#!/usr/bin/env bash
# Pack headless Chromium, node, playwright-core and this build of tritium for the GPU machine
# (which has no browser), to run tests/browser/run-delivery.mjs --bench on its 16 cores:
# three parts of at most 54 MB (the device tool carries 64 MiB a call, the working tree
# included) in target/devbundle/s1 .. s3. Needs this machine's `chromium` (scripts/setup.sh),
# `cargo build` and scripts/build-wasm-test.sh. Device use, one call per part, back to back
# (a machine idle for 30 s goes back):
#   run carry=[target/devbundle/s1]: bash scripts/device-browser/stage.sh   (then s2, then s3)
#   run: bash scripts/device-browser/bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
B=target/devbundle
rm -rf "$B" && mkdir -p "$B/debs" "$B/p2/root/lib" "$B/p2/root/chromium" "$B/p3/root/bin" "$B/p3/root/tritium"
# Debian's headless shell, the same version as the installed chromium (whose chromium-common
# files it needs).
(cd "$B/debs" && apt-get download "chromium-headless-shell=$(dpkg-query -W -f='${Version}' chromium)" 2>&1 | grep -v unsandboxed || true)
mkdir -p "$B/hs" && dpkg -x "$B"/debs/*.deb "$B/hs"
hs="$B/hs/usr/lib/chromium/chromium-headless-shell"
# The libraries it and node load (not glibc's own, nor libgcc/libstdc++: the GPU machine's
# are newer), NSS's modules.
ldd "$hs" /usr/bin/node | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u \
  | grep -v -E '^(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so' \
  | while read -r name path; do cp -L "$path" "$B/p2/root/lib/$name"; done
for f in libsoftokn3.so libfreeblpriv3.so libfreebl3.so libnssckbi.so libnssdbm3.so; do
  [ -e "/usr/lib/x86_64-linux-gnu/$f" ] && cp -L "/usr/lib/x86_64-linux-gnu/$f" "$B/p2/root/lib/"
done
cp -L /usr/lib/x86_64-linux-gnu/nss/* "$B/p2/root/lib/" 2>/dev/null || true
(cd /usr/lib/chromium && tar cf - --exclude=chromium --exclude=libVkLayer_khronos_validation.so \
  --exclude=libVkICD_mock_icd.so --exclude='*.TOC' .) | tar xf - -C "$B/p2/root/chromium"
cp -r node_modules/playwright-core "$B/p2/root/" && mkdir -p "$B/p2/root/node_modules" \
  && mv "$B/p2/root/playwright-core" "$B/p2/root/node_modules/"
cp -L /usr/bin/node "$B/p3/root/bin/"
cp target/debug/tritium "$B/p3/root/tritium/" && strip "$B/p3/root/tritium/tritium"
cp -r target/browser-test/pkg "$B/p3/root/tritium/pkg"
mkdir -p "$B/c2" "$B/c3"
tar cf - -C "$B/p2" root | gzip -6 > "$B/c2/p2.tar.gz"
tar cf - -C "$B/p3" root | gzip -6 > "$B/c3/p3.tar.gz"
(cd "$B" && tar cf - debs c2 c3 | split -b 54M - part.)
for i in 1 2 3; do mkdir -p "$B/s$i"; done
mv "$B/part.aa" "$B/s1/"; mv "$B/part.ab" "$B/s2/"; mv "$B/part.ac" "$B/s3/"
rm -rf "$B/hs" "$B/p2" "$B/p3" "$B/c2" "$B/c3" "$B/debs"
ls -la "$B"/s*/
