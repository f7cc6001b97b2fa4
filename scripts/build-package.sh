#!/usr/bin/env bash
# Build the npm package `tritium` into pkg/ (generated; never edit it by hand):
#   1. the library for wasm32 (release, features gpu + web),
#   2. wasm-bindgen --target web (ES module glue, no bundler needed),
#   3. wasm-opt -Oz from the npm `binaryen` devDependency (scripts/setup.sh installs it),
#   4. the hand-written sources from js/ (index.js, worker.js, errors.js, index.d.ts, ...),
#   5. pkg/package.json with "exports" for "." and "./worker".
# Prints the wasm size raw and gzipped; fails when gzip exceeds the 1.5 MB budget.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${CARGO_TARGET_DIR:-target}"
out="${1:-pkg}"
# 1.5 MB (decimal, the stricter reading) of gzip for the core package, tokenizer included.
budget=1500000

want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$want" != "$have" ]; then
  echo "error: wasm-bindgen-cli ${have:-(missing)} does not match the wasm-bindgen crate $want in" \
    "Cargo.lock; run scripts/setup.sh" >&2
  exit 1
fi
wasm_opt=node_modules/.bin/wasm-opt
if [ ! -x "$wasm_opt" ]; then
  echo "error: $wasm_opt is missing (the npm binaryen devDependency): run scripts/setup.sh" >&2
  exit 1
fi

cargo build -j2 --lib --profile wasm-package --target wasm32-unknown-unknown --no-default-features \
  --features gpu,web
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wasm-bindgen --target web --out-dir "$tmp" --out-name tritium \
  "$target_dir/wasm32-unknown-unknown/wasm-package/tritium.wasm"
# Bulk memory, sign extension, nontrapping float-to-int and mutable globals are on by default
# in rustc's wasm32 target; wasm-opt must be told it may keep them. --converge repeats -Oz's
# passes until the size stops falling (about 3 KB of gzip).
"$wasm_opt" -Oz --converge --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  --strip-debug --strip-producers \
  -o "$tmp/tritium_bg.opt.wasm" "$tmp/tritium_bg.wasm"

rm -rf "$out"
mkdir -p "$out/wasm"
mv "$tmp/tritium_bg.opt.wasm" "$out/wasm/tritium_bg.wasm"
cp "$tmp/tritium.js" "$out/wasm/tritium.js"
cp "$tmp/tritium.d.ts" "$out/wasm/tritium.d.ts"
cp js/*.js js/*.d.ts "$out/"
cp LICENSE* "$out/" 2>/dev/null || true

version=$(node -p "require('./package.json').version")
cat > "$out/package.json" <<JSON
{
  "name": "tritium",
  "version": "$version",
  "description": "Quantized LLM inference on WebGPU (BitNet b1.58, GGML K-quants): load GGUF or RDRR models into OPFS and generate in the browser or a Web Worker",
  "license": "Apache-2.0",
  "type": "module",
  "main": "./index.js",
  "module": "./index.js",
  "types": "./index.d.ts",
  "exports": {
    ".": {
      "types": "./index.d.ts",
      "import": "./index.js",
      "default": "./index.js"
    },
    "./worker": {
      "types": "./worker.d.ts",
      "import": "./worker.js",
      "default": "./worker.js"
    },
    "./wasm/tritium_bg.wasm": "./wasm/tritium_bg.wasm",
    "./package.json": "./package.json"
  },
  "files": ["*.js", "*.d.ts", "wasm/"],
  "sideEffects": false
}
JSON

raw=$(stat -c %s "$out/wasm/tritium_bg.wasm")
gz=$(gzip -9 -c "$out/wasm/tritium_bg.wasm" | wc -c)
echo "wrote $out: wasm $raw bytes raw, $gz bytes gzip (budget $budget)"
if [ "$gz" -gt "$budget" ]; then
  echo "error: the wasm is over the 1.5 MB gzip budget ($gz > $budget bytes)" >&2
  exit 1
fi
