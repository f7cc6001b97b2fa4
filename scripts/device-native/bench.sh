#!/usr/bin/env bash
# On the GPU machine (after bundle.sh here): the kernel self-test, then `bench generate` on
# the synthetic Llama-1B Q4_K after a 512-token and a 1-token prompt, ROUNDS times (default
# 3), each figure beside the same process's decode with every norm in its own dispatch; the
# JSON of every run in $OUT (or /tmp). The first process of a new binary on a fresh machine
# runs slow (BENCHMARKS.md): an untimed one goes first.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tritium selftest > "$O/selftest.txt" 2>&1; tail -1 "$O/selftest.txt"; grep FAIL "$O/selftest.txt"
tritium synth llama-1b-q4k /tmp/l.gguf > /dev/null
tritium bench generate /tmp/l.gguf --prompt 16 --decode 16 > /dev/null
for round in $(seq 1 "${ROUNDS:-3}"); do
  for prompt in 512 1; do
    f="$O/generate-p$prompt-r$round.json"
    tritium bench generate /tmp/l.gguf --prompt "$prompt" --json > "$f" || continue
    python3 -c "import json, sys; r = json.load(open(sys.argv[1]))
print('prompt %s round %s: prefill %.0f, decode %.1f, with every norm in its own dispatch %.1f tokens/s'
      % (sys.argv[2], sys.argv[3], r['prefill_tokens_per_s'], r['decode_tokens_per_s'],
         r['decode_norm_dispatches_tokens_per_s']))" "$f" "$prompt" "$round"
  done
done
