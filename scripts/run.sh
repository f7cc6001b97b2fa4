#!/usr/bin/env bash
# The main job: set up, build the CLI, and generate text with the default model
# (SmolLM2-135M-Instruct) on the GPU (any Vulkan driver: lavapipe on a machine without a GPU).
# Extra arguments go to `tritium run` (for example --backend cpu, --max-tokens 64, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -j2
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
target/release/tritium run models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \
  -p "${PROMPT:-What is the capital of France? Answer in one sentence.}" --max-tokens 64 \
  --temperature 0 "$@"
