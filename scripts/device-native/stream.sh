#!/usr/bin/env bash
# On the GPU machine (carry target/devgpu): blocks read from storage under a GPU memory budget
# (--vram-budget). On the synthetic Llama-1B Q4_K (written to STREAM_DIR, default /tmp): the
# same greedy tokens with no budget, and with budgets from "everything fits" down to "two
# blocks' worth" (BUDGETS; each run prints its schedule), then `bench generate` under each
# budget (decode tokens/s and bytes read per token). Output in $OUT/stream/.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}/stream
mkdir -p "$O"
M=${STREAM_DIR:-/tmp}/l-stream.gguf
[ -s "$M" ] || tritium synth llama-1b-q4k "$M" > /dev/null
ids() {
  tritium run "$M" --backend cuda --ids 1,17,300,42 --max-tokens 32 --temperature 0 --json "$@" 2> "$O/err.txt" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["generated_ids"])' 2>&1 | tail -1
}
base=$(ids)
echo "no budget: $base" | tee "$O/tokens.txt"
for b in ${BUDGETS:-2GB 1GB 700MB 600MB 560MB 520MB}; do
  t=$(ids --vram-budget "$b")
  if [ "$t" = "$base" ]; then r=same; else r="DIFFERENT ($(tail -1 "$O/err.txt" | cut -c1-200))"; fi
  echo "$b: $r" | tee -a "$O/tokens.txt"
  tritium bench generate "$M" --backend cuda --vram-budget "$b" --prompt 128 --decode 64 > "$O/bench-$b.txt" 2>&1
  grep -E "decode|blocks from storage|error" "$O/bench-$b.txt" | cut -c1-200
done
