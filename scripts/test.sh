#!/usr/bin/env bash
# The whole test suite: set up, then formatting, lints, every test, the wasm build of the
# library, the fuzz targets' build, and the kernel suite in headless Chromium. What CI runs
# (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# GPU kernel tests run on lavapipe unless the caller points the Vulkan loader elsewhere.
export VK_ICD_FILENAMES="${VK_ICD_FILENAMES:-/usr/share/vulkan/icd.d/lvp_icd.x86_64.json}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
# A fresh clone gains nothing from incremental compilation, and its caches double target/'s size.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
# NVRTC from setup.sh's venv: native-gds compiles its CUDA kernels in the tests.
for d in "$PWD"/.venv-clients/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib; do
  [ -d "$d" ] && export TRITIUM_CUDA_LIBS="$d"
done
export TRITIUM_CUDA_CACHE="${TRITIUM_CUDA_CACHE:-$(mktemp -d)}"

echo "== cargo fmt --check"
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --check

echo "== cargo clippy"
cargo clippy -j2 --workspace --all-targets -- -D warnings

echo "== no import cycles between the files of the GPU runtime or of the downloader"
scripts/check-import-cycles.py crates/gpu/src
scripts/check-import-cycles.py crates/storage/src download

echo "== wasm32 build of the library"
cargo build -j2 --lib --target wasm32-unknown-unknown --no-default-features --features gpu

echo "== fuzz targets build"
cargo check -j2 --manifest-path fuzz/Cargo.toml --bins

echo "== test models (Q4_K_M, Q6_K, Q8_0 made from the Q4_1 file by tritium quantize)"
scripts/make-test-models.sh

echo "== cargo test"
cargo test -j2 --workspace

echo "== browser kernel suite (headless Chromium, WebGPU)"
scripts/build-wasm-test.sh
node tests/browser/run-selftest.mjs

echo "== browser end-to-end generation (headless Chromium, WebGPU) vs native"
node tests/browser/run-generate.mjs

echo "== browser model delivery into OPFS vs tritium serve-model (headless Chromium)"
node tests/browser/run-delivery.mjs

echo "== the npm package (pkg/): BitNet, worker mode, chat completions, errors (headless Chromium)"
npm run build
node tests/browser/run-package.mjs

echo "== the npm package's load and generation options vs native (headless Chromium)"
node tests/browser/run-package-options.mjs

echo "== the npm package in a Vite app: vite build and the dev server (headless Chromium)"
node tests/browser/run-vite.mjs

echo "== demos in headless Chromium: chat, TL;DR widget (offline reload), no WebGPU"
[ -f pkg/index.js ] || npm run build
node tests/browser/run-demos.mjs

echo "== disk used by this run: $(du -sh target 2>/dev/null | cut -f1) in target/"
