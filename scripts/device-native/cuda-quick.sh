#!/usr/bin/env bash
# On the GPU machine, a short lease (carry target/devgpu): `selftest --backend cuda`, then
# `bench generate --backend cuda` (prompt 512, 128 decoded) on the synthetic Llama-1B and BitNet.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
export TRITIUM_CUDA_CACHE=/tmp/tritium-cuda-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tritium synth llama-1b-q4k /tmp/l.gguf > /dev/null 2>&1
tritium synth bitnet-2b4t /tmp/b.gguf > /dev/null 2>&1
tritium selftest --backend cuda > /tmp/st.txt 2>&1; tail -1 /tmp/st.txt; grep -E "^FAIL|rror" /tmp/st.txt | head -5
for m in l b; do
  tritium bench generate /tmp/$m.gguf --backend cuda --prompt 512 --decode 128 2>&1 | grep -E "^(prefill|decode|memory)"
done
