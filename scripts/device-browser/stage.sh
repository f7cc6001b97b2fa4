#!/usr/bin/env bash
# On the GPU machine: collect the carried part (target/devbundle/sN, see bundle.sh); after the
# third, unpack into target/devroot and check that Chromium starts.
set -euo pipefail
mkdir -p target/devroot/parts
cp target/devbundle/s*/part.* target/devroot/parts/
ls target/devroot/parts
if [ -f target/devroot/parts/part.ac ]; then
  (cd target/devroot && cat parts/part.* | tar xf - && dpkg -x debs/*.deb hs && tar xzf c2/p2.tar.gz \
    && tar xzf c3/p3.tar.gz && cp hs/usr/lib/chromium/* root/chromium/ && rm -rf parts debs c2 c3 hs)
  . scripts/device-browser/env.sh
  node --version; "$TRITIUM_BIN" --version; lscpu | grep -E "Model name|^CPU\(s\)"
  timeout 60 node scripts/device-browser/smoke.mjs
fi
