#!/usr/bin/env bash
# On the GPU machine, one call (carry target/devgpu from bundle.sh, target/llama-src.tar.xz and
# target/vocab/ggml-vocab-llama-bpe.gguf, llama.cpp's Llama 3 vocabulary from its test data):
# builds llama.cpp's llama-server with CUDA (about 5 minutes on 16 cores) while the synthetic
# Llama-3.2-1B Q4_K is written with that vocabulary (so both servers take text and chat), then
# runs the same streaming client (`tritium bench serve`: time to first token, inter-token
# latency, aggregate tokens/s) against `tritium serve --backend cuda` and against llama-server
# (-ngl 999, 16 slots) at 1, 4 and 16 clients, and `tritium bench generate --backend cuda` on
# the same model for the one-stream comparison. Results in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
OUT=${OUT:-/tmp/out}
L=/tmp/llama
mkdir -p $L/src
tar xJf target/llama-src.tar.xz -C $L/src
SRC=$(dirname "$(find $L/src -maxdepth 4 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cmake -S "$SRC" -B $L/build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch \
  -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON > $L/cmake.log 2>&1 \
  && cmake --build $L/build -j16 --target llama-server > $L/build.log 2>&1; echo $? > $L/rc) &
tritium synth llama-1b-q4k /tmp/l1b.gguf --vocab target/vocab/ggml-vocab-llama-bpe.gguf
wait
if [ "$(cat $L/rc)" != 0 ]; then tail -20 $L/cmake.log $L/build.log; exit 1; fi
SERVER=$(find $L/build -name llama-server -type f | head -1)
wait_up() {
  for _ in $(seq 1 240); do
    python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$1" \
      2>/dev/null && return 0
    sleep 0.5
  done
  echo "$1 never answered /health"; return 1
}
clients() { # url, engine
  for n in 1 4 16; do
    r=$(( n == 1 ? 4 : (n == 4 ? 2 : 1) ))
    tritium bench serve --url "$1" --model l1b --clients $n --requests $r --max-tokens 128 --json \
      > "$OUT/serve-$2-$n.json" 2> "$OUT/serve-$2-$n.err" || tail -3 "$OUT/serve-$2-$n.err"
  done
}
tritium bench generate /tmp/l1b.gguf --backend cuda --prompt 32 --decode 128 --json > "$OUT/generate-cuda.json"
tritium serve /tmp/l1b.gguf --backend cuda --port 8080 --ctx 1024 > /tmp/tserve.log 2>&1 &
TP=$!
wait_up http://127.0.0.1:8080 && clients http://127.0.0.1:8080 tritium
kill $TP; wait $TP 2>/dev/null
"$SERVER" -m /tmp/l1b.gguf -ngl 999 --host 127.0.0.1 --port 8081 -np 16 -c 16384 > /tmp/lserve.log 2>&1 &
LP=$!
wait_up http://127.0.0.1:8081 && clients http://127.0.0.1:8081 llama-server
kill $LP; wait $LP 2>/dev/null
tail -3 /tmp/tserve.log; grep -i -E "error|fail" /tmp/lserve.log | head -5
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
g = json.load(open(f"{out}/generate-cuda.json"))
print(f"bench generate cuda: decode {g['decode_tokens_per_s']:.1f} tok/s")
for eng in ("tritium", "llama-server"):
    for n in (1, 4, 16):
        p = f"{out}/serve-{eng}-{n}.json"
        if not os.path.exists(p) or os.path.getsize(p) == 0:
            print(eng, n, "no result"); continue
        r = json.load(open(p))
        print(eng, n, json.dumps({k: v for k, v in r.items() if k not in ("url", "model")}))
PY
