#!/usr/bin/env bash
# The main job: set up, build the CLI, and run it on the default model (SmolLM2-135M-Instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -j2
target/release/tritium inspect models/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
