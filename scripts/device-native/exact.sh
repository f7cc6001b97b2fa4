#!/usr/bin/env bash
# On the GPU machine (after bundle.sh; carry target/devgpu): exact arithmetic there.
# 1. The same tokens: `tritium run --exact` on the CPU and on the GPU, 64 tokens greedy,
#    seeded (--seed 7, the default sampler) and seeded with --repeat-penalty 1.1, on the
#    synthetic Llama-1B Q4_K and BitNet 2B4T (random weights: flat distributions, many near
#    ties) and the tiny BitNet fixtures; prints one line per case and a count.
# 2. What exactness costs: `bench generate` (prefill 512, decode 128) with the default
#    arithmetic and with --exact, alternating, ROUNDS times (default 2); JSON per run in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tritium synth llama-1b-q4k /tmp/l.gguf > /dev/null
tritium synth bitnet-2b4t /tmp/b.gguf > /dev/null
same=0 split=0
for model in /tmp/l.gguf /tmp/b.gguf tests/fixtures/bitnet/tiny-i2s.gguf tests/fixtures/bitnet/tiny-tq2_0.gguf; do
  prompts="1,17,300,42 400,5,499,6,250,128,77,3"
  # The synthetic models decode slowly on the CPU: one prompt each.
  case $model in /tmp/*) prompts=1,17,300,42 ;; esac
  for prompt in $prompts; do
    for mode in "--temperature 0" "--seed 7" "--seed 7 --repeat-penalty 1.1"; do
      ids() {
        # shellcheck disable=SC2086
        tritium run "$model" --backend "$1" --exact --max-tokens 64 --ids "$prompt" $mode --json \
          | python3 -c 'import json,sys; print(json.load(sys.stdin)["generated_ids"])'
      }
      c=$(ids cpu) g=$(ids gpu)
      if [ "$c" = "$g" ]; then same=$((same + 1)); r=same; else split=$((split + 1)); r=SPLIT; fi
      echo "$r $(basename "$model") ids=$prompt $mode: cpu $c gpu $g" | cut -c1-400
    done
  done
done
echo "same tokens: $same cases identical, $split split"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for m in l b; do
    for a in fast exact; do
      flag=""; [ "$a" = exact ] && flag=--exact
      tritium bench generate /tmp/$m.gguf --prompt 512 --decode 128 $flag --json \
        > "$O/exact-$m-$a-r$round.json" || echo "failed: $m $a $round"
    done
  done
done
python3 - "$O" <<'PY'
import glob, json, statistics, sys
o = sys.argv[1]
for m, name in [("l", "Llama-1B Q4_K (synthetic)"), ("b", "BitNet 2B4T I2_S (synthetic)")]:
    for key in ["prefill_tokens_per_s", "decode_tokens_per_s"]:
        v = {a: [json.load(open(f))[key] for f in sorted(glob.glob(f"{o}/exact-{m}-{a}-r*.json"))] for a in ["fast", "exact"]}
        if v["fast"] and v["exact"]:
            f, e = statistics.median(v["fast"]), statistics.median(v["exact"])
            print(f"{name} {key}: fast {v['fast']} exact {v['exact']} exact/fast {e / f:.3f}")
PY
