#!/usr/bin/env bash
# Make the requantized SmolLM2 variants the llama.cpp reference tests run (Q4_K_M, Q6_K, Q8_0)
# from the Q4_1 file, with our own `tritium quantize` (byte-identical to llama.cpp's
# llama-quantize; tests/llama_quant.rs checks that), into ./models (git-ignored).
# Uses the dev-profile binary that `cargo test` builds anyway. Safe to re-run: files already
# present are kept (delete one to remake it; tests/llama_reference.rs checks their SHA-256).
set -euo pipefail
cd "$(dirname "$0")/.."
src=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$src" ] || scripts/fetch-models.sh
for t in Q4_K_M Q6_K Q8_0; do
  out=models/SmolLM2-135M-Instruct.$t.gguf
  if [ ! -s "$out" ]; then
    cargo run -j2 --quiet --bin tritium -- quantize "$src" "$out" --type "$t"
  fi
done
echo "test models ready: $(ls models | tr '\n' ' ')"
