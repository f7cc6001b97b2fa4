#!/usr/bin/env bash
# On the GPU machine, one call (carry target/devgpu and target/llama-src.tar.xz): builds
# llama.cpp's llama-bench with CUDA in the background (llama-build.sh, unless already started) while the untimed steps run (cuda.sh's
# selftest and same tokens, then the per-kernel profile of `bench generate --profile`); with the
# build done, the timed steps: bench-llama-cpp.sh for both tritium backends on the synthetic
# Llama-1B, BitNet 2B4T on both backends, and decode without the CUDA fusions (env knobs:
# NO_LLAMA, VS_BACKENDS, VS_SYNTH, ROUNDS, PRE_STEPS, SAME_MODELS, PROFILE_MODELS, NOFUSE_MODELS,
# BITNET_PROMPTS). Everything is
# kept in $OUT/cuda-full.tgz (written at each stage, so a run cut short still returns it).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}
W=/tmp/cuda-full
L=/tmp/llama
mkdir -p $W $L/src
pack() { tar czf "$O/cuda-full.tgz" -C $W . 2>/dev/null; }
if [ -z "${NO_LLAMA:-}" ]; then
  bash scripts/device-native/llama-build.sh
else
  echo skipped > $L/rc
fi
T0=$(date +%s)
OUT=$W STEPS="${PRE_STEPS:-1 2}" scripts/device-native/cuda.sh 2>&1 | tee $W/steps12.txt | grep -v "^same "
echo "steps 1 2 took $(( $(date +%s) - T0 )) s"
if [ -x target/devgpu/tests/bitnet_reference ]; then
  TRITIUM_REPO=$PWD TRITIUM_BIN=$(command -v tritium) target/devgpu/tests/bitnet_reference --ignored \
    --exact i2s_and_tq2_0_on_cuda_match_transformers > $W/bitnet-reference.txt 2>&1
  echo "bitnet reference on cuda: rc $?"; grep -E "test result|panicked|max abs|FAILED" $W/bitnet-reference.txt | head -8 | cut -c1-200
fi
if [ -x target/devgpu/tests/arch_reference ]; then
  TRITIUM_REPO=$PWD TRITIUM_BIN=$(command -v tritium) target/devgpu/tests/arch_reference --ignored \
    --exact architectures_on_cuda_match_f64_and_llama_cpp > $W/arch-reference.txt 2>&1
  echo "architecture references on cuda: rc $?"; grep -E "test result|panicked|off by|argmax|greedy" $W/arch-reference.txt | head -8 | cut -c1-200
fi
pack
for m in ${PROFILE_MODELS:-l b}; do
  tritium bench generate /tmp/$m.gguf --backend cuda --prompt 512 --decode 64 --profile > $W/profile-$m.txt 2>&1
  echo "== $m"; grep -A12 "prompt token of the prefill" $W/profile-$m.txt | cut -c3-92
  grep -A18 "per decoded token" $W/profile-$m.txt | cut -c3-92
done
pack
for _ in $(seq 1 ${BUILD_WAIT:-420}); do [ -f $L/rc ] && break; sleep 1; done
echo "llama.cpp build: rc $(cat $L/rc 2>/dev/null || echo none) after $(( $(date +%s) - T0 )) s"
tail -2 $L/build.log | cut -c1-200
if [ -x $L/build/bin/llama-bench ]; then
  # VS_SYNTH: the synthetic shapes to compare on (llama-1b-q4k; qwen3-0.6b-q4k too).
  for syn in ${VS_SYNTH:-llama-1b-q4k}; do
    for be in ${VS_BACKENDS:-cuda gpu}; do
      r=${ROUNDS:-2}; [ $be = gpu ] && r=1
      tag=$be; [ $syn != llama-1b-q4k ] && tag=$be-$syn
      echo "== $syn, $be"
      SYNTH=$syn bash scripts/bench-llama-cpp.sh --llama-bench $L/build/bin/llama-bench \
        --tritium "$(command -v tritium)" --backend $be --rounds $r --work $W/vs-$tag 2>&1 \
        | tail -10 | tee $W/vs-llama-$tag.txt
      rm -f $W/vs-$tag/*.gguf; pack
    done
  done
fi
for be in cuda gpu; do
  for p in ${BITNET_PROMPTS:-512 3968}; do
    tritium bench generate /tmp/b.gguf --backend $be --prompt $p --decode 128 --json > $W/b-$be-$p.json 2> $W/b-$be-$p.err
  done
done
if [ -n "${NO_LLAMA:-}" ] || [ "${VS_BACKENDS:-cuda gpu}" = cuda ]; then
  for be in cuda gpu; do
    tritium bench generate /tmp/l.gguf --backend $be --prompt 512 --decode 128 --json > $W/l-$be-512.json 2> $W/l-$be-512.err
  done
  [ -n "${NO_LLAMA:-}" ] && tritium bench generate /tmp/l.gguf --backend cuda --prompt 4096 --batch 512 --decode 128 --json > $W/l-cuda-4096.json 2> $W/l-cuda-4096.err
fi
for m in ${NOFUSE_MODELS-l b}; do
  TRITIUM_CUDA_NO_FUSIONS=1 tritium bench generate /tmp/$m.gguf --backend cuda --prompt 512 --decode 128 --json > $W/nofuse-$m.json 2>&1
done
python3 - $W <<'PY'
import json, sys
w = sys.argv[1]
def show(name, path, extra=False):
    try:
        r = json.load(open(path))
    except Exception as e:
        print(name, "failed:", open(path.replace(".json", ".err") if path.endswith(".json") else path).read()[-300:]); return
    s = "%s: prefill %.0f tok/s, decode %.1f tok/s" % (name, r["prefill_tokens_per_s"], r["decode_tokens_per_s"])
    if "device_bytes_used" in r:
        s += ", no graphs %.1f, device MiB %.0f" % (r["decode_no_graphs_tokens_per_s"], r["device_bytes_used"] / 2**20)
    print(s)
for be in ["cuda", "gpu"]:
    for p in [512, 3968]:
        show("bitnet %s p%d" % (be, p), "%s/b-%s-%d.json" % (w, be, p))
for name in ["l-cuda-512", "l-gpu-512", "l-cuda-4096"]:
    show(name, "%s/%s.json" % (w, name))
for m in "lb":
    show("%s cuda no fusions" % m, "%s/nofuse-%s.json" % (w, m))
PY
pack
echo "total $(( $(date +%s) - T0 )) s"
