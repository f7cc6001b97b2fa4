#!/usr/bin/env python3
"""A peft LoRA adapter for the tiny Qwen3 model and transformers + peft's logits with it applied
(tests/lora_reference.rs, peft_adapter_matches_transformers_and_peft).

Runs on the GPU machine, which has PyTorch and transformers (no network): peft 0.17.1,
accelerate 1.10.1 and gguf 0.19.0 travel as wheels on PYTHONPATH, llama.cpp's
convert_lora_to_gguf.py from its source tarball (scripts/device-native/lora.sh does all this).
Run from the repository root:
    python3 tests/goldens/gen_peft_goldens.py OUT_DIR LLAMA_CPP_SOURCE_DIR

What it does, deterministically, on the CPU in float64:
1. Builds transformers' Qwen3ForCausalLM with the shapes of tests/fixtures/arch/tiny-qwen3.gguf
   and loads that file's weights (read with gguf-py; GGUF keeps transformers' row order for
   qwen3), and checks that its logits equal the float64 reference in
   tests/goldens/arch/qwen3.json (so the model is the one the GGUF holds).
2. Wraps it with peft (LoraConfig r=8, lora_alpha=16, every projection: q, k, v, o, gate, up,
   down; no dropout), and sets every lora_A / lora_B to seeded random values rounded to f32
   (lora_A ~ N(0, 1/cols), lora_B ~ N(0, 0.36/r)), large enough to change the greedy tokens.
3. Records, for each prompt of the qwen3 goldens (their llama.cpp prompt ids): peft's greedy
   continuation (GREEDY_TOKENS, float64, each step's top-1/top-2 margin) and the teacher-forced
   logits of prompt + continuation: per position the argmax, the margin and the logits of the
   probe ids, in the layout of gen_arch_goldens.py ("f64" and "llama" are both peft's here).
4. Saves the adapter as peft saves it (adapter_config.json, adapter_model.safetensors, in f32)
   and converts it to a GGUF adapter with llama.cpp's convert_lora_to_gguf.py (--outtype f32,
   --base a folder with the base model's config.json); where that converter does not run (the
   source tarball's converter needs a newer gguf-py than the 0.19.0 wheel, as on 2026-12-08),
   with this script's own writer of the same layout, straight from peft's safetensors
   ("converter" in the goldens says which).

Output in OUT_DIR: peft-qwen3/ (the peft adapter), tiny-qwen3-peft.gguf, peft-qwen3.json.
"""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "tests" / "fixtures" / "arch" / "tiny-qwen3.gguf"
GOLDEN = ROOT / "tests" / "goldens" / "arch" / "qwen3.json"
GREEDY_TOKENS = 16
RANK, ALPHA = 8, 16
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def load_base():
    r = GGUFReader(str(BASE))
    W = {t.name: torch.from_numpy(dequantize(t.data, t.tensor_type).astype(np.float64))
         for t in r.tensors}
    cfg = Qwen3Config(
        vocab_size=W["token_embd.weight"].shape[0], hidden_size=64, intermediate_size=160,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=4096,
        tie_word_embeddings=False, attention_bias=False, attn_implementation="eager",
    )
    model = Qwen3ForCausalLM(cfg).to(torch.float64).eval()
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    sd = {"model.embed_tokens.weight": W["token_embd.weight"],
          "model.norm.weight": W["output_norm.weight"], "lm_head.weight": W["output.weight"]}
    for name, t in W.items():
        if name.startswith("blk."):
            _, i, kind, _ = name.split(".")
            sd[f"model.layers.{i}.{names[kind]}.weight"] = t
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return model, cfg


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def top2(row):
    order = np.argsort(-row, kind="stable")
    return int(order[0]), float(row[order[0]] - row[order[1]])


def summary(rows, probe):
    out = {"argmax": [], "margin": [], "probe": []}
    for row in rows:
        tok, margin = top2(row)
        out["argmax"].append(tok)
        out["margin"].append(round(margin, 6))
        out["probe"].append([round(float(row[i]), 6) for i in probe])
    return out


def main(out_dir, llama_src):
    out_dir, llama_src = Path(out_dir), Path(llama_src)
    out_dir.mkdir(parents=True, exist_ok=True)
    golden = json.loads(GOLDEN.read_text())
    probe = golden["probe_ids"]
    model, cfg = load_base()
    # The base model is the GGUF's: its logits are the float64 reference's.
    worst = 0.0
    for c in golden["cases"]:
        rows = logits_of(model, c["prompt_ids"] + c["greedy_ids"])
        want = np.array(c["f64"]["probe"])
        worst = max(worst, float(np.abs(rows[:, probe] - want).max()))
    assert worst < 1e-5, f"transformers' base logits are {worst} from the f64 reference"
    print(f"base model: transformers within {worst:.2e} of the f64 reference")
    lora = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=MODULES, lora_dropout=0.0,
                      init_lora_weights=False, bias="none")
    model = get_peft_model(model, lora).eval()
    gen = np.random.default_rng(21)
    for name, module in sorted(model.named_modules()):
        if name.endswith(".lora_A.default") or name.endswith(".lora_B.default"):
            w = module.weight
            rows, cols = w.shape
            gain = 1.0 / np.sqrt(cols) if ".lora_A." in name else 0.6 / np.sqrt(RANK)
            v = (gen.standard_normal((rows, cols)) * gain).astype(np.float32)
            with torch.no_grad():
                w.copy_(torch.from_numpy(v.astype(np.float64)))
    cases, changed = [], 0
    for c in golden["cases"]:
        ids = list(c["prompt_ids"])
        greedy, margins = [], []
        for _ in range(GREEDY_TOKENS):
            tok, margin = top2(logits_of(model, ids + greedy)[-1])
            greedy.append(tok)
            margins.append(round(margin, 5))
            if tok == golden["eos"]:
                break
        rows = logits_of(model, ids + greedy)
        s = summary(rows, probe)
        changed += greedy != c["greedy_ids"]
        cases.append({"prompt": c["prompt"], "prompt_ids": ids, "greedy_ids": greedy,
                      "greedy_step_margin": margins, "llama": s, "f64": s,
                      "llama_vs_f64": 0.0})
    print(f"peft changes the greedy tokens of {changed}/{len(cases)} prompts")
    adapter_dir = out_dir / "peft-qwen3"
    model.to(torch.float32).save_pretrained(str(adapter_dir))
    base_dir = out_dir / "base-config"
    base_dir.mkdir(exist_ok=True)
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.save_pretrained(str(base_dir))
    gguf_out = out_dir / "tiny-qwen3-peft.gguf"
    converter = "llama.cpp convert_lora_to_gguf.py --outtype f32"
    done = subprocess.run([sys.executable, str(llama_src / "convert_lora_to_gguf.py"), "--base",
                           str(base_dir), "--outtype", "f32", "--outfile", str(gguf_out),
                           str(adapter_dir)])
    if done.returncode != 0:
        # Where llama.cpp's converter does not run here: the same layout written from peft's
        # file directly (blk.N.<name>.weight.lora_a = lora_A (rank, cols), lora_b = lora_B).
        converter = "gen_peft_goldens.py's own writer (llama.cpp's converter failed)"
        print(f"convert_lora_to_gguf.py failed; {converter}")
        from gguf import GGUFWriter
        from safetensors.numpy import load_file
        names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
                 "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
                 "down_proj": "ffn_down"}
        w = GGUFWriter(str(gguf_out), "qwen3")
        w.add_string("general.type", "adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(ALPHA))
        for key, t in sorted(load_file(str(adapter_dir / "adapter_model.safetensors")).items()):
            parts = key.split(".")
            layer, module, half = parts[4], parts[6], parts[7]
            w.add_tensor(f"blk.{layer}.{names[module]}.weight.{half.lower()}",
                         t.astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    doc = {
        "generator": "tests/goldens/gen_peft_goldens.py",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "peft": __import__("peft").__version__,
        "converter": converter,
        "file": "tests/fixtures/arch/tiny-qwen3.gguf",
        "file_sha256": golden["file_sha256"],
        "adapters": [{
            "gguf": "tests/fixtures/lora/tiny-qwen3-peft.gguf",
            "gguf_sha256": hashlib.sha256(gguf_out.read_bytes()).hexdigest(),
            "peft": "tests/fixtures/lora/peft-qwen3",
            "scale": 1.0, "rank": RANK, "alpha": ALPHA,
        }],
        "settings": {"dtype": "float64", "device": "cpu", "greedy_tokens": GREEDY_TOKENS},
        "probe_ids": probe,
        "n_vocab": golden["n_vocab"],
        "eos": golden["eos"],
        "cases": cases,
    }
    (out_dir / "peft-qwen3.json").write_text(json.dumps(doc, indent=1) + "\n")
    for c in cases:
        print(f"  {c['prompt']!r}: greedy {c['greedy_ids']} min margin "
              f"{min(c['greedy_step_margin']):.3f}")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
