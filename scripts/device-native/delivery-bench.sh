#!/usr/bin/env bash
# The native delivery bench as BENCHMARKS.md records it, on a many-core machine:
# synthetic Llama-1B and BitNet 2B4T layouts converted to RDRR in /dev/shm (BLAKE3 and SHA-256
# copies), `tritium bench fetch --model` on each (served from memory), then `tritium pull` from
# `tritium serve-model` five times; plain hashing at the start and the end.
#   TRITIUM_BIN (default target/release/tritium), PARS (parallel fetches, default 8), ROUNDS (5).
# On the GPU machine: carry a stripped, xz-compressed release build (64 MiB limit) and run
#   xz -dc tritium.xz > /tmp/tritium && chmod +x /tmp/tritium && TRITIUM_BIN=/tmp/tritium bash scripts/device-native/delivery-bench.sh
set -uo pipefail
T=${TRITIUM_BIN:-target/release/tritium}
W=/dev/shm/tritium-delivery-bench; rm -rf $W; mkdir -p $W
trap 'rm -rf $W /dev/shm/tritium-delivery-store; kill %1 2>/dev/null' EXIT
nproc; lscpu | grep "Model name"
$T synth llama-1b-q4k $W/l1b.gguf >/dev/null
$T convert $W/l1b.gguf $W/l1b-b3 --blake3 >/dev/null 2>&1
$T convert $W/l1b.gguf $W/l1b-sha >/dev/null 2>&1
$T synth bitnet-2b4t $W/b2.gguf >/dev/null
$T convert $W/b2.gguf $W/b2-b3 --blake3 >/dev/null 2>&1
rm -f $W/*.gguf
$T bench hash --mib 512
for m in l1b-b3 l1b-sha b2-b3; do
  for p in ${PARS:-8}; do
    echo "== bench fetch $m parallel $p"
    $T bench fetch --model $W/$m --parallel $p --rounds ${ROUNDS:-5} --dir /dev/shm 2>&1 | tail -4
  done
done
# The CLI's own path: tritium serve-model (its own process, files from tmpfs) to tritium pull.
$T serve-model $W/l1b-b3 --port 8091 >/dev/null 2>&1 &
sleep 2
for i in 1 2 3 4 5; do
  rm -rf /dev/shm/tritium-delivery-store
  $T pull http://127.0.0.1:8091/ --name l --store /dev/shm/tritium-delivery-store --parallel 8 --json 2>/dev/null \
    | python3 -c 'import json,sys; s=json.load(sys.stdin); print("pull l1b-b3: %.0f MB/s, setup %.1f ms, finish %.1f ms, %.3f s, read back %d" % (s["fetched_bytes"]/s["seconds"]/1e6, s["setup_seconds"]*1e3, s["finish_seconds"]*1e3, s["seconds"], s["group_read_back_bytes"]))'
done
$T bench hash --mib 512
