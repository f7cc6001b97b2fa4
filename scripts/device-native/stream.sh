#!/usr/bin/env bash
# On the GPU machine (carry target/devgpu): blocks read from storage under a GPU memory budget
# (--vram-budget). On the synthetic Llama-1B Q4_K (written to STREAM_DIR, default /tmp): the
# same greedy tokens with no budget, and with budgets from "everything fits" down to "two
# blocks' worth" (BUDGETS; each run prints its schedule), then `bench generate` under each
# budget (decode tokens/s, bytes read per token, per-block read and slot-wait times), each
# beside `dd iflag=direct` of the model file (the disk's own rate: decode's limit is that rate
# over the bytes read per token). Output in $OUT/stream/.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}/stream
mkdir -p "$O"
M=${STREAM_DIR:-/tmp}/l-stream.gguf
[ -s "$M" ] || tritium synth llama-1b-q4k "$M" > /dev/null
ids() {
  tritium run "$M" --backend cuda --ids 1,17,300,42 --max-tokens 16 --temperature 0 --ctx 192 --json "$@" 2> "$O/err.txt" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["generated_ids"])' 2>&1 | tail -1
}
base=$(ids)
echo "no budget: $base" | tee "$O/tokens.txt"
for b in ${BUDGETS:-auto 2GB 800MB 650MB 560MB}; do
  t=$(ids --vram-budget "$b")
  if [ "$t" = "$base" ]; then r=same; else r="DIFFERENT ($(tail -1 "$O/err.txt" | cut -c1-200))"; fi
  echo "$b: $r" | tee -a "$O/tokens.txt"
  tritium bench generate "$M" --backend cuda --vram-budget "$b" --prompt 128 --decode 8 --json > "$O/bench-$b.json" 2> "$O/bench-$b.err"
done
dd if="$M" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | tee "$O/dd-direct.txt"
python3 - "$O" "$M" ${BUDGETS:-auto 2GB 800MB 650MB 560MB} <<'PY2'
import json, os, re, sys
o, m, budgets = sys.argv[1], sys.argv[2], sys.argv[3:]
dd = open(os.path.join(o, "dd-direct.txt")).read()
size = os.path.getsize(m)
secs = float(re.search(r"([0-9.]+) s,", dd).group(1))
disk = size / secs
print("disk (dd iflag=direct of the model): %.0f MB/s" % (disk / 1e6))
for b in budgets:
    try:
        r = json.load(open(os.path.join(o, "bench-%s.json" % b)))
    except Exception:
        print(b, "failed:", open(os.path.join(o, "bench-%s.err" % b)).read()[-300:]); continue
    s = r.get("streaming")
    line = "%s: decode %.1f tok/s" % (b, r["decode_tokens_per_s"])
    if s and s["bytes_read_per_decoded_token"] > 0:
        limit = disk / s["bytes_read_per_decoded_token"]
        line += (", %s; %.1f MiB read/token, disk limit %.1f tok/s (%.0f%%), "
                 "reads %.0f MB/s, %.2f ms read + %.2f ms slot wait per pass; %s") % (
            s["schedule"], s["bytes_read_per_decoded_token"] / 2**20, limit,
            100 * r["decode_tokens_per_s"] / limit, s["read_bytes_per_s"] / 1e6,
            s["read_s_per_pass"] * 1e3, s["slot_wait_s_per_pass"] * 1e3, s["reader"][:60])
    elif s:
        line += ", " + s["schedule"]
    print(line)
PY2
# Load time of the whole model resident: through the page cache and uploads (no budget) against
# the reader (a budget above the model: cuFile, or direct reads staged through page-locked
# memory), each with the page cache dropped first (cold) and again right after (warm).
for mode in cold warm; do
  for how in page reader; do
    [ $mode = cold ] && { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; }
    extra=(); [ $how = reader ] && extra=(--vram-budget 80GB)
    tritium bench generate "$M" --backend cuda "${extra[@]}" --prompt 16 --decode 4 --json \
      > "$O/load-$how-$mode.json" 2> "$O/load-$how-$mode.err"
  done
done
python3 - "$O" <<'PY3'
import json, os, sys
o = sys.argv[1]
for mode in ["cold", "warm"]:
    for how in ["page", "reader"]:
        try:
            r = json.load(open(os.path.join(o, "load-%s-%s.json" % (how, mode))))
        except Exception:
            print(mode, how, "failed:", open(os.path.join(o, "load-%s-%s.err" % (how, mode))).read()[-300:])
            continue
        s = r.get("streaming") or {}
        print("load %s, %s: %.0f ms %s" % (mode, how, r["load_ms"], s.get("reader", "(page cache, uploads)")[:90]))
PY3
# Bad storage under a budget, each of which must end in one clear message before anything is
# computed: an RDRR copy of the model with a shard missing, a shard cut short, a shard that
# is a folder; the GGUF cut short; budgets below what stays resident and below two blocks.
R=${STREAM_DIR:-/tmp}/l-stream-rdrr
[ -d "$R" ] || tritium convert "$M" "$R" > /dev/null
E=$O/errors.txt
: > "$E"
bad() {
  local label=$1 model=$2 budget=$3
  echo "== $label" >> "$E"
  tritium run "$model" --backend cuda --ids 1,17,300 --max-tokens 4 --temperature 0 --ctx 192 \
    --vram-budget "$budget" >> "$E" 2>&1
  echo "(exit $?)" >> "$E"
}
shard() { ls -S "$1" | grep -v '\.json$' | sed -n 3p; }
for how in missing short folder; do
  rm -rf "$R-$how" && cp -r "$R" "$R-$how"
  s=$(shard "$R-$how")
  case $how in
    missing) rm "$R-$how/$s" ;;
    short) truncate -s -1000000 "$R-$how/$s" ;;
    folder) rm "$R-$how/$s" && mkdir "$R-$how/$s" ;;
  esac
  bad "RDRR, shard $s $how" "$R-$how" 800MB
  rm -rf "$R-$how"
done
head -c $(( $(stat -c %s "$M") - 5000000 )) "$M" > "$M.short"
bad "GGUF cut 5 MB short" "$M.short" 800MB
rm -f "$M.short"
# What stays on the device besides the blocks for this run's shape, from the refusal of a
# budget far below it; then a budget of that plus one block (two slots are the least).
bad "budget 100MB" "$M" 100MB
fixed=$(grep -o '([0-9]* bytes: embeddings' "$E" | tail -1 | grep -o '[0-9]*' | head -1)
[ -n "$fixed" ] && bad "budget of the resident part plus 45 MiB (one block)" "$M" $((fixed + (45 << 20)))
bad "RDRR, intact, 650MB (two blocks' worth)" "$R" 650MB
cut -c1-300 "$E"
