#!/usr/bin/env bash
# On the GPU machine, one call (carry target/devgpu and target/llama-src.tar.xz): starts the
# llama.cpp build, runs stream.sh and gds.sh while it builds (their files packed into
# $OUT/stream-gds.tgz), then cuda-full.sh (its knobs pass through).
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}
[ -z "${NO_LLAMA:-}" ] && bash scripts/device-native/llama-build.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
T0=$(date +%s)
OUT=/tmp/sg bash scripts/device-native/stream.sh
echo "stream.sh took $(( $(date +%s) - T0 )) s"
OUT=/tmp/sg bash scripts/device-native/gds.sh
echo "stream.sh and gds.sh took $(( $(date +%s) - T0 )) s"
tar czf "$O/stream-gds.tgz" -C /tmp/sg .
OUT=$O bash scripts/device-native/cuda-full.sh
