#!/usr/bin/env bash
# tritium against llama.cpp on the same GPU, in the same run, on the same file.
#
#   scripts/bench-llama-cpp.sh [--rounds N] [--tritium BIN] [--llama-bench BIN]
#                              [--src SDIST_OR_DIR] [--model GGUF] [--work DIR]
#
# Builds llama.cpp's `llama-bench` with CUDA (the source vendored in the pinned
# llama-cpp-python sdist, fetched from PyPI unless --src or --llama-bench is given; nvcc and
# cmake must be installed), writes the synthetic Llama-3.2-1B-shaped Q4_K model
# (`tritium synth llama-1b-q4k`, which llama.cpp loads: no vocabulary, token ids only), then
# alternates the two engines for N rounds (default 3):
#
#   llama.cpp pp512          <->  tritium prefill of a 512-token prompt
#   llama.cpp tg128          <->  tritium decode of 128 tokens after a 1-token prompt
#   llama.cpp tg128 @ d512   <->  tritium decode of 128 tokens after a 512-token prompt
#                                 (`tritium bench generate`'s default)
#   llama.cpp tg128 @ d4096  <->  tritium decode of 128 tokens after a 4096-token prompt
#
# `--backend gpu|cuda` picks tritium's backend (default gpu: wgpu on Vulkan).
#
# and prints each round's figures and the median ratios (tritium / llama.cpp). A llama.cpp figure
# is the median of llama-bench's 5 repetitions (its first pp512 repetition runs about a quarter
# slower, a warm-up its mean would count; tritium's figures come after a warm-up run of its
# own). llama-bench decodes a fixed token and never reads the logits back; tritium's decode also
# picks each token (greedy, on the GPU) and feeds it to the next pass. The JSON of every run is
# kept under the work folder (llama-bench's messages in a .log beside its JSON). Last, each
# engine alone at context 640 under nvidia-smi: the peak GPU memory above idle (memory.json).
# GPU machine only: this is a benchmark, not a test.
set -euo pipefail

LLAMA_CPP_PYTHON=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
ROUNDS=3
BACKEND=gpu
WORK=${TMPDIR:-/tmp}/tritium-vs-llama-cpp
TRITIUM=""
LLAMA_BENCH=""
SRC=""
MODEL=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --tritium) TRITIUM=$2; shift 2 ;;
        --llama-bench) LLAMA_BENCH=$2; shift 2 ;;
        --src) SRC=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --backend) BACKEND=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
if [ -z "$TRITIUM" ]; then
    (cd "$HERE" && cargo build --release)
    TRITIUM=$HERE/target/release/tritium
fi

if [ -z "$LLAMA_BENCH" ]; then
    if [ -z "$SRC" ]; then
        SRC=$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz
        if [ ! -s "$SRC" ]; then
            # As scripts/fetch-test-data.sh: the sdist only (pip prepares its metadata from
            # wheels of the build backend; nothing is built).
            python3 -m pip download --quiet --no-deps --disable-pip-version-check \
                --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$WORK"
        fi
        echo "$LLAMA_CPP_PYTHON_SHA256  $SRC" | sha256sum --check --quiet
    fi
    if [ -f "$SRC" ]; then
        rm -rf "$WORK/src" && mkdir -p "$WORK/src"
        tar xzf "$SRC" -C "$WORK/src"
        SRC=$(dirname "$(find "$WORK/src" -maxdepth 4 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")
    fi
    [ -f "$SRC/CMakeLists.txt" ] || { echo "no llama.cpp source at $SRC" >&2; exit 1; }
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF > "$WORK/cmake.log"
    cmake --build "$WORK/build" -j"$(nproc)" --target llama-bench > "$WORK/build.log"
    LLAMA_BENCH=$WORK/build/bin/llama-bench
fi

if [ -z "$MODEL" ]; then
    # SYNTH picks the synthetic shape (`tritium synth --help`: llama-1b-q4k, qwen3-0.6b-q4k).
    MODEL=$WORK/${SYNTH:-llama-1b-q4k}.gguf
    [ -s "$MODEL" ] || "$TRITIUM" synth "${SYNTH:-llama-1b-q4k}" "$MODEL"
fi

# One untimed run of each first (clocks, driver caches).
"$TRITIUM" bench generate "$MODEL" --backend "$BACKEND" --prompt 16 --decode 16 --json > /dev/null
"$LLAMA_BENCH" -m "$MODEL" -p 16 -n 16 -r 1 > /dev/null 2>&1

for r in $(seq 1 "$ROUNDS"); do
    "$LLAMA_BENCH" -m "$MODEL" -p 512 -n 128 -r 5 -o json > "$WORK/llama-$r.json" 2> "$WORK/llama-$r.log"
    "$TRITIUM" bench generate "$MODEL" --backend "$BACKEND" --prompt 512 --decode 128 --json > "$WORK/tritium-512-$r.json"
    "$LLAMA_BENCH" -m "$MODEL" -p 0 -n 128 -d 512 -r 5 -o json > "$WORK/llama-d512-$r.json" 2> "$WORK/llama-d512-$r.log"
    "$TRITIUM" bench generate "$MODEL" --backend "$BACKEND" --prompt 1 --decode 128 --json > "$WORK/tritium-1-$r.json"
    "$LLAMA_BENCH" -m "$MODEL" -p 0 -n 128 -d 4096 -r 5 -o json > "$WORK/llama-d4096-$r.json" 2> "$WORK/llama-d4096-$r.log"
    "$TRITIUM" bench generate "$MODEL" --backend "$BACKEND" --prompt 4096 --batch 512 --decode 128 --json > "$WORK/tritium-4096-$r.json"
done

# GPU memory for the same file and context (prompt 512 + 128 decoded: llama-bench's context is
# p + n, tritium's prompt + decode): the device's memory.used above its idle reading, sampled by
# nvidia-smi every 50 ms while each program runs alone, its peak.
peak_mib() {
    local idle peak=0 m pid
    idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    "$@" > /dev/null 2>&1 &
    pid=$!
    while kill -0 "$pid" 2> /dev/null; do
        m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
        [ "$m" -gt "$peak" ] && peak=$m
        sleep 0.05
    done
    wait "$pid"
    echo $((peak - idle))
}
if command -v nvidia-smi > /dev/null; then
    t_mem=$(peak_mib "$TRITIUM" bench generate "$MODEL" --backend "$BACKEND" --prompt 512 --decode 128)
    l_mem=$(peak_mib "$LLAMA_BENCH" -m "$MODEL" -p 512 -n 128 -r 1)
    echo "{\"tritium_mib\": $t_mem, \"llama_cpp_mib\": $l_mem}" > "$WORK/memory.json"
fi

python3 - "$WORK" "$ROUNDS" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    with open(f"{work}/{name}") as f:
        return json.load(f)
rows = []
for r in range(1, rounds + 1):
    ll = {}
    for name in (f"llama-{r}.json", f"llama-d512-{r}.json", f"llama-d4096-{r}.json"):
        for t in load(name):
            ll[(t["n_prompt"], t["n_gen"], t.get("n_depth", 0))] = statistics.median(t["samples_ts"])
    t512, t1, t4k = load(f"tritium-512-{r}.json"), load(f"tritium-1-{r}.json"), load(f"tritium-4096-{r}.json")
    rows.append({
        "pp512": (t512["prefill_tokens_per_s"], ll[(512, 0, 0)]),
        "tg128": (t1["decode_tokens_per_s"], ll[(0, 128, 0)]),
        "tg128 @ d512": (t512["decode_tokens_per_s"], ll[(0, 128, 512)]),
        "tg128 @ d4096": (t4k["decode_tokens_per_s"], ll[(0, 128, 4096)]),
    })
first = load("tritium-512-1.json")
adapter = first.get("adapter") or f"{first['device']} (CUDA)"
print(f"tritium on {adapter} against llama.cpp (CUDA), tokens/s, {rounds} rounds alternating")
print(f"{'test':<14} {'round':>5} {'tritium':>10} {'llama.cpp':>10} {'ratio':>6}")
summary = {}
for test in ["pp512", "tg128", "tg128 @ d512", "tg128 @ d4096"]:
    for r, row in enumerate(rows, 1):
        t, l = row[test]
        print(f"{test:<14} {r:>5} {t:>10.1f} {l:>10.1f} {t / l:>6.3f}")
    ratio = statistics.median(row[test][0] / row[test][1] for row in rows)
    summary[test] = {
        "tritium": statistics.median(row[test][0] for row in rows),
        "llama_cpp": statistics.median(row[test][1] for row in rows),
        "ratio": ratio,
    }
for test, s in summary.items():
    print(f"median {test:<14} tritium {s['tritium']:.1f}  llama.cpp {s['llama_cpp']:.1f}  ratio {s['ratio']:.3f}")
try:
    mem = load("memory.json")
    print(f"GPU memory, context 640 (peak above idle, nvidia-smi): tritium {mem['tritium_mib']} MiB"
          f"  llama.cpp {mem['llama_cpp_mib']} MiB  ratio {mem['tritium_mib'] / max(mem['llama_cpp_mib'], 1):.3f}")
    summary["memory_mib"] = mem
except FileNotFoundError:
    pass
with open(f"{work}/summary.json", "w") as f:
    json.dump(summary, f, indent=1)
EOF
