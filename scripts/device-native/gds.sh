#!/usr/bin/env bash
# On the GPU machine (carry target/devgpu): the streaming reader against the disk. Writes a
# file of GDS_GB gigabytes (default 4; random bytes, so nothing compresses) on the machine's
# disk (GDS_DIR, default /tmp), drops it from the page cache where the kernel allows, then in
# one run: `dd iflag=direct` of the file (the disk's own speed), `tritium bench gds` with cuFile
# where libcufile loads, and `--staged`; everything in $OUT/gds/.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}/gds
mkdir -p "$O"
F=${GDS_DIR:-/tmp}/tritium-gds.bin
GB=${GDS_GB:-4}
df -h "$(dirname "$F")" | tail -1 | tee "$O/disk.txt"
ls -d /usr/local/cuda*/lib64/libcufile* /usr/lib/x86_64-linux-gnu/libcufile* 2>/dev/null | tee "$O/libcufile.txt"
lsmod 2>/dev/null | grep -i nvidia_fs | tee "$O/nvidia-fs.txt"
[ -s "$F" ] || head -c $((GB << 30)) /dev/urandom > "$F"
sync
echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(page cache not dropped)"
dd if="$F" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | tee "$O/dd-direct.txt"
# Again: a virtual disk's host may cache what was just read, so the first and later reads of
# one file can differ.
dd if="$F" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | tee "$O/dd-direct-again.txt"
(cd "$O" && tritium bench gds "$F" --rounds 5 --json > "$O/bench-gds.json" 2> "$O/bench-gds.err")
# cuFile's compatibility mode asked for in its configuration (and its log kept), then forced.
cat > /tmp/cufile-compat.json <<JSON
{ "logging": { "dir": "$O", "level": "INFO" }, "properties": { "allow_compat_mode": true } }
JSON
CUFILE_ENV_PATH_JSON=/tmp/cufile-compat.json tritium bench gds "$F" --rounds 3 --json \
  > "$O/bench-gds-compat.json" 2> "$O/bench-gds-compat.err"
CUFILE_FORCE_COMPAT_MODE=true tritium bench gds "$F" --rounds 3 --json \
  > "$O/bench-gds-forced.json" 2> "$O/bench-gds-forced.err"
ls "$O"/*.log 2>/dev/null && tail -n 20 "$O"/*.log | cut -c1-220
# cuFile asks udev for the block device's filesystem (ID_FS_USAGE); a container without udev's
# database has none, and cuFile then registers no file, even in compatibility mode. With
# GDS_UDEV_SHIM=1 (an experiment on this machine, not something tritium does) the database
# entry is written from what the kernel reports, and cuFile is measured again.
if [ "${GDS_UDEV_SHIM:-0}" = 1 ] && grep -q "ID_FS_USAGE" "$O"/*.log 2>/dev/null; then
  dev=$(findmnt -no MAJ:MIN -T "$F" | tr -d ' '); fs=$(findmnt -no FSTYPE -T "$F")
  mkdir -p /run/udev/data
  printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\n' "$fs" > "/run/udev/data/b$dev"
  echo "udev shim: /run/udev/data/b$dev ($fs)" | tee "$O/udev-shim.txt"
  CUFILE_ENV_PATH_JSON=/tmp/cufile-compat.json tritium bench gds "$F" --rounds 5 --json > "$O/bench-gds-shim.json" 2> "$O/bench-gds-shim.err"
  ls "$O"/*.log && tail -n 12 "$O"/*.log | cut -c1-220
fi
tritium bench gds "$F" --rounds 5 --staged --json > "$O/bench-gds-staged.json" 2> "$O/bench-gds-staged.err"
dd if="$F" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | tee "$O/dd-direct-last.txt"
for f in "$O"/bench-gds*.json; do echo "$(basename "$f"): $(cat "$f") $(cat "${f%.json}.err")"; done
