#!/usr/bin/env bash
# On the GPU machine, one call (carry target/devgpu from bundle.sh, target/devpy with the peft
# 0.17.1, accelerate 1.10.1 and gguf 0.19.0 wheels, and target/llama-lora.tar.xz):
# 1. tests/goldens/gen_peft_goldens.py: transformers + peft logits of a peft adapter on the tiny
#    Qwen3, the adapter converted by llama.cpp's convert_lora_to_gguf.py (into $OUT/peft, and
#    into tests/ here for step 2; commit them from $OUT);
# 2. tests/lora_reference.rs's CUDA variant (every LoRA case, the peft one included);
# 3. the cost of one rank-16 adapter on every attention projection: bench generate on
#    llama-1b-q4k without and with it, on CUDA and on wgpu (Vulkan).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/peft" /tmp/py /tmp/lsrc
for w in target/devpy/*.whl; do python3 -m zipfile -e "$w" /tmp/py; done
tar xf target/llama-lora.tar.xz -C /tmp/lsrc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== peft goldens"
PYTHONPATH=/tmp/py python3 tests/goldens/gen_peft_goldens.py "$OUT/peft" /tmp/lsrc 2>&1 | tail -20
mkdir -p tests/fixtures/lora
cp "$OUT/peft/tiny-qwen3-peft.gguf" tests/fixtures/lora/ && cp "$OUT/peft/peft-qwen3.json" tests/goldens/lora/
echo "== lora_reference on CUDA"
TRITIUM_REPO=$PWD TRITIUM_BIN=$(command -v tritium) target/devgpu/tests/lora_reference --ignored \
  --nocapture 2>&1 | tail -15
TRITIUM_REPO=$PWD TRITIUM_BIN=$(command -v tritium) target/devgpu/tests/lora_reference \
  peft_adapter --nocapture 2>&1 | tail -5
echo "== rank-16 adapter cost"
tritium synth llama-1b-q4k /tmp/l1b.gguf >/dev/null
PYTHONPATH=/tmp/py python3 scripts/device-native/lora-adapter.py /tmp/l1b.gguf /tmp/l1b-r16.gguf 16
for b in cuda gpu; do
  for i in 1 2; do
    tritium bench generate /tmp/l1b.gguf --backend $b --json > "$OUT/bench-$b-base-$i.json"
    tritium bench generate /tmp/l1b.gguf --backend $b --json --lora /tmp/l1b-r16.gguf > "$OUT/bench-$b-lora-$i.json"
  done
  python3 - "$OUT" $b <<'PY'
import json, sys
out, b = sys.argv[1:3]
runs = {k: [json.load(open(f"{out}/bench-{b}-{k}-{i}.json")) for i in (1, 2)] for k in ("base", "lora")}
for k in ("prefill_tokens_per_s", "decode_tokens_per_s"):
    base = [r[k] for r in runs["base"]]
    lora = [r[k] for r in runs["lora"]]
    print(f"{b} {k}: base {base[0]:.1f} {base[1]:.1f}, rank-16 adapter {lora[0]:.1f} {lora[1]:.1f} "
          f"(best/best {max(lora) / max(base):.3f})")
PY
done
