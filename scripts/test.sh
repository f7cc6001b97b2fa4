#!/usr/bin/env bash
# The whole test suite: set up, then formatting, lints, every test, the wasm build of the
# library, and the fuzz targets' build. What CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --check

echo "== cargo clippy"
cargo clippy -j2 --workspace --all-targets -- -D warnings

echo "== wasm32 build of the library"
cargo build -j2 --lib --target wasm32-unknown-unknown --no-default-features

echo "== fuzz targets build"
cargo check -j2 --manifest-path fuzz/Cargo.toml --bins

echo "== cargo test"
cargo test -j2 --workspace
