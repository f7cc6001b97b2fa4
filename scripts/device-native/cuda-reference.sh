#!/usr/bin/env bash
# On the GPU machine, after cuda-full.sh on the same warm machine (its target/devgpu stays): the
# SmolLM2 reference test's CUDA variant (tests/llama_reference.rs, cuda_backend_agrees_with_cpu:
# every variant's logits on the France prompt within 1% of the range of the CPU backend's, and
# llama.cpp's greedy tokens). The 98 MB model travels in two parts (target/smol, made by
#   split -b 50000000 models/SmolLM2-135M-Instruct.Q4_1.gguf target/smol/part-
# here), one call each: `cuda-reference.sh stash` keeps the first, `cuda-reference.sh run` joins
# them and runs the test (the other variants are made there with tritium quantize).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
case "${1:-}" in
  stash) cp target/smol/part-aa /tmp/smol-part-aa && ls -la /tmp/smol-part-aa ;;
  run)
    mkdir -p models
    cat /tmp/smol-part-aa target/smol/part-ab > models/SmolLM2-135M-Instruct.Q4_1.gguf
    echo "$(cat target/smol/sha256)  models/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c || exit 1
    TRITIUM_REPO=$PWD TRITIUM_BIN=$(command -v tritium) target/devgpu/tests/llama_reference --ignored \
      --exact cuda_backend_agrees_with_cpu --nocapture 2>&1 | tail -30 ;;
  *) echo "usage: $0 stash|run" >&2; exit 2 ;;
esac
