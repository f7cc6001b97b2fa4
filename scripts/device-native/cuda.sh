#!/usr/bin/env bash
# On the GPU machine (after bundle.sh here; carry target/devgpu): the CUDA backend.
# 1. `tritium selftest --backend cuda`: every op against the CPU backend.
# 2. The same tokens: `tritium run --ids ... --max-tokens 64` on the CPU and on CUDA, greedy,
#    seeded and seeded with a repeat penalty, exact and default arithmetic, on the tiny BitNet
#    fixtures and the synthetic Llama-1B Q4_K; one line per case and a count.
# 3. `bench generate --backend cuda` beside `--backend gpu` (wgpu) on the synthetic Llama-1B
#    Q4_K and BitNet 2B4T: prompt 512 then 128 decoded tokens, and decode at depth 4096; JSON
#    per run in $OUT. STEPS picks (default "1 2 3").
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}
export TRITIUM_CUDA_CACHE=/tmp/tritium-cuda-cache
STEPS=${STEPS:-1 2 3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
tritium synth llama-1b-q4k /tmp/l.gguf > /dev/null
tritium synth bitnet-2b4t /tmp/b.gguf > /dev/null
case " $STEPS " in *" 1 "*)
  tritium selftest --backend cuda > "$O/cuda-selftest.txt" 2>&1
  tail -2 "$O/cuda-selftest.txt"; grep -E "FAIL|rror" "$O/cuda-selftest.txt" | head -40 | cut -c1-400 ;;
esac
case " $STEPS " in *" 2 "*)
  same=0 split=0
  for model in ${SAME_MODELS:-tests/fixtures/bitnet/tiny-i2s.gguf tests/fixtures/bitnet/tiny-tq2_0.gguf /tmp/l.gguf}; do
    for arith in --exact ""; do
      for mode in "--temperature 0" "--seed 7" "--seed 7 --repeat-penalty 1.1"; do
        ids() {
          # shellcheck disable=SC2086
          timeout 120 tritium run "$model" --backend "$1" $arith --max-tokens 64 --ids 1,17,300,42 $mode --json \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)["generated_ids"])' 2>&1 | tail -1
        }
        c=$(ids cpu) g=$(ids cuda)
        if [ "$c" = "$g" ]; then same=$((same + 1)); r=same; else split=$((split + 1)); r=SPLIT; fi
        echo "$r $(basename "$model") ${arith:-fast} $mode: cpu $c cuda $g" | cut -c1-300
      done
    done
  done
  echo "same tokens: $same cases identical, $split split" ;;
esac
case " $STEPS " in *" 3 "*)
  for m in l b; do
    for be in cuda gpu; do
      tritium bench generate /tmp/$m.gguf --backend $be --prompt 16 --decode 16 > /dev/null 2>&1
      tritium bench generate /tmp/$m.gguf --backend $be --prompt 512 --decode 128 --json > "$O/gen-$m-$be.json" 2> "$O/gen-$m-$be.err"
      tritium bench generate /tmp/$m.gguf --backend $be --prompt 4096 --decode 128 --batch 512 --json > "$O/gen4k-$m-$be.json" 2> "$O/gen4k-$m-$be.err"
    done
  done
  python3 - "$O" <<'PY'
import json, sys, os
o = sys.argv[1]
for m in "lb":
    for f in ["gen", "gen4k"]:
        for be in ["cuda", "gpu"]:
            p = f"{o}/{f}-{m}-{be}.json"
            try:
                r = json.load(open(p))
            except Exception as e:
                print(p, "failed:", open(p.replace(".json", ".err")).read()[-300:])
                continue
            extra = ""
            if be == "cuda":
                extra = " no-graphs %.1f, sampled %.1f, device MiB %.0f" % (r["decode_no_graphs_tokens_per_s"], r["decode_sampled_tokens_per_s"], r["device_bytes_used"] / 2**20)
            print("%s %s %s: prefill %.0f tok/s, decode %.1f tok/s%s" % (m, f, be, r["prefill_tokens_per_s"], r["decode_tokens_per_s"], extra))
PY
  ;;
esac
