#!/usr/bin/env bash
# Build the library for the browser (wasm32, features gpu + web) and generate its JS bindings
# into target/browser-test/pkg (git-ignored), for tests/browser/run-selftest.mjs.
# wasm-bindgen-cli must be the version of the wasm-bindgen crate in Cargo.lock: scripts/setup.sh
# installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${CARGO_TARGET_DIR:-target}"
out_dir="${1:-$target_dir/browser-test/pkg}"

want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$want" != "$have" ]; then
  echo "error: wasm-bindgen-cli ${have:-(missing)} does not match the wasm-bindgen crate $want in" \
    "Cargo.lock; run scripts/setup.sh (cargo install wasm-bindgen-cli --version =$want)" >&2
  exit 1
fi

cargo build -j2 --lib --release --target wasm32-unknown-unknown --no-default-features \
  --features gpu,web,web-tests
wasm-bindgen --target web --out-dir "$out_dir" --out-name tritium \
  "$target_dir/wasm32-unknown-unknown/release/tritium.wasm"
echo "wrote $out_dir ($(du -sh "$out_dir/tritium_bg.wasm" | cut -f1) of wasm)"
