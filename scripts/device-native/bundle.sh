#!/usr/bin/env bash
# Pack this build of tritium (release, stripped: about 22 MB), the reference tests' binaries
# (about 9 MB) and the Vulkan loader for the
# GPU machine, which has NVIDIA's Vulkan driver (its ICD file in /usr/share/vulkan/icd.d) but
# no loader, and whose driver library needs glvnd's libGLdispatch: Debian's libvulkan1 and
# glvnd packages, unpacked into target/devgpu/root (about 7 MB; none of it is installed on
# either machine). Then on the GPU machine, one call (a machine idle for 30 s goes back):
#   run carry=[target/devgpu]: . scripts/device-native/env.sh && tritium selftest && ...
# (bench.sh runs the decode benches).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=target/devgpu
cargo build -j2 --release --bin tritium
rm -rf "$B" && mkdir -p "$B/debs" "$B/root"
strip -o "$B/tritium" target/release/tritium
(cd "$B/debs" && apt-get download libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libx11-6 \
  libx11-data libxext6 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0 2>&1 | grep -v unsandboxed || true)
for d in "$B"/debs/*.deb; do dpkg -x "$d" "$B/root"; done
rm -rf "$B/debs"
# The reference tests whose CUDA variants run there (TRITIUM_REPO and TRITIUM_BIN point them at
# the checkout and this binary; cuda-full.sh).
mkdir -p "$B/tests"
for t in bitnet_reference llama_reference arch_reference lora_reference; do
  exe=$(cargo test -j2 --release --features gds --no-run --test $t --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
  strip -o "$B/tests/$t" "$exe"
done
du -sh "$B"
