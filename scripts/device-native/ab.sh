#!/usr/bin/env bash
# On the GPU machine: two builds of tritium side by side, alternating, ROUNDS times (default
# 3): target/devgpu/tritium-a (the build before a change) and target/devgpu/tritium-b (after),
# each `bench generate` on the synthetic Llama-1B Q4_K and BitNet 2B4T after a 512-token
# prompt (prefill 512, decode) and a 1-token prompt (decode). The order within a round
# alternates (a first in odd rounds). Every run's JSON lands in $OUT (or /tmp); the medians
# and the b/a ratios are printed at the end. Pack with bundle.sh for b, then copy the
# stripped build before the change to target/devgpu/tritium-a.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}
D=target/devgpu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$D/tritium-b" synth llama-1b-q4k /tmp/l.gguf > /dev/null
"$D/tritium-b" synth bitnet-2b4t /tmp/b.gguf > /dev/null
# The first process of a new binary on a fresh machine runs slow (BENCHMARKS.md): one
# untimed run of each build on each model.
for build in a b; do
  for m in l b; do
    "$D/tritium-$build" bench generate /tmp/$m.gguf --prompt 16 --decode 16 > /dev/null
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  order="a b"
  [ $((round % 2)) -eq 0 ] && order="b a"
  for build in $order; do
    for m in l b; do
      for prompt in 512 1; do
        "$D/tritium-$build" bench generate /tmp/$m.gguf --prompt "$prompt" --json \
          > "$O/ab-$build-$m-p$prompt-r$round.json" || echo "failed: $build $m $prompt $round"
      done
    done
  done
done
python3 - "$O" <<'PY'
import glob, json, statistics, sys
o = sys.argv[1]
def med(build, m, prompt, key):
    v = [json.load(open(f))[key] for f in sorted(glob.glob(f"{o}/ab-{build}-{m}-p{prompt}-r*.json"))]
    return statistics.median(v), v
rows = [("llama-1b-q4k", "l"), ("bitnet-2b4t", "b")]
for name, m in rows:
    for what, prompt, key in [("prefill 512", 512, "prefill_tokens_per_s"),
                              ("decode after 512", 512, "decode_tokens_per_s"),
                              ("decode after 1", 1, "decode_tokens_per_s")]:
        (a, av), (b, bv) = med("a", m, prompt, key), med("b", m, prompt, key)
        print(f"{name:13} {what:17} a {a:9.1f} {av}  b {b:9.1f} {bv}  b/a {b / a:.3f}")
PY
