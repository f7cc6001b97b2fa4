#!/usr/bin/env python3
"""LoRA adapters for the tiny Qwen3, Phi-3 and Gemma 3 models of gen_arch_goldens.py, in
llama.cpp's GGUF form and in RDRR's, and the logits of each base model with its adapters
applied (tests/lora_reference.rs).

Same set-up as gen_arch_goldens.py (llama-cpp-python 0.3.36, gguf 0.19.0, numpy). Run from the
repository root, after gen_arch_goldens.py (the base models are its fixtures):
    target/llama-venv/bin/python tests/goldens/gen_lora_goldens.py

What it does, deterministically:
1. Per base model, seeded random low-rank pairs on every projection of every block (q, k, v, o,
   gate, up, down; Phi-3's stacked attn_qkv and ffn_up as one pair each, its lora_b rows
   stacked as the base weight's are): lora_a (rank, cols) and lora_b (rows, rank) as the base
   weight's product takes them, rank 4 (Phi-3: 8), lora_alpha 8 (so each pair is scaled by
   alpha / rank). Gains are chosen so that the adapter moves logits by units and changes
   greedy tokens. Qwen3 also gets a second adapter (rank 2, alpha 0: no alpha scaling, q and v
   only) to apply beside the first.
2. Writes each adapter as llama.cpp's convert_lora_to_gguf.py lays a GGUF adapter out
   (general.type = adapter, adapter.type = lora, adapter.lora.alpha, general.architecture of
   the base, tensors blk.N.<name>.weight.lora_a / .lora_b; Qwen3's in F32, Phi-3's and Gemma 3's
   in F16) to tests/fixtures/lora/<name>.gguf, and as an RDRR adapter folder following the
   RDRR format document's "LoRA Adapter Extension" (manifest.json with modelType and
   adapterType lora, baseModel, loraConfig {rank, alpha, targetModules}, one shard
   lora_weights.rdrr, tensors layers.N.<module>.lora_a of shape [cols, rank] and .lora_b of
   shape [rank, rows] in f32: x . A . B, each tensor 16-byte aligned, shard hashed with SHA-256)
   to tests/fixtures/lora/<name>.rdrr/. Phi-3's modules are named as transformers names them
   (qkv_proj, gate_up_proj).
3. llama.cpp (CPU, F32 KV cache) with the adapters applied by llama_set_adapters_lora at their
   scales: prompt ids, greedy continuation with step margins, and teacher-forced logits, as
   gen_arch_goldens.py records them.
4. The exact reference: gen_arch_goldens.f64_forward over the base model with each adapter
   merged into its weights in float64 (W + scale * alpha / rank * B A).

Output: the adapters and tests/goldens/lora/<case>.json.
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import llama_cpp
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType
from gguf.quants import dequantize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_arch_goldens as ga  # noqa: E402

ROOT = ga.ROOT
FIXTURES = ROOT / "tests" / "fixtures" / "lora"
OUT = ROOT / "tests" / "goldens" / "lora"

MODULES = {  # GGUF name -> transformers module name
    "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
    "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj",
    "attn_qkv": "qkv_proj",
}

# name: base arch, rank, alpha, targets (None: every projection), dtype, seed, gains (a, b)
ADAPTERS = {
    "qwen3-all": dict(arch="qwen3", rank=4, alpha=8.0, targets=None, dtype="F32", seed=11,
                      gain=(1.0, 0.6)),
    "qwen3-qv": dict(arch="qwen3", rank=2, alpha=0.0, targets=["attn_q", "attn_v"],
                     dtype="F32", seed=12, gain=(1.0, 1.0)),
    "phi3-all": dict(arch="phi3", rank=8, alpha=8.0, targets=None, dtype="F16", seed=13,
                     gain=(1.0, 0.6)),
    "gemma3-all": dict(arch="gemma3", rank=4, alpha=8.0, targets=None, dtype="F16", seed=14,
                       gain=(1.0, 0.6)),
}

# case: base arch, [(adapter, scale)]
CASES = {
    "qwen3": ("qwen3", [("qwen3-all", 1.0)]),
    "qwen3-two": ("qwen3", [("qwen3-all", 0.5), ("qwen3-qv", 1.5)]),
    "phi3": ("phi3", [("phi3-all", 1.0)]),
    "gemma3": ("gemma3", [("gemma3-all", 1.0)]),
}


def base_weights(arch):
    path = ROOT / "tests" / "fixtures" / "arch" / f"tiny-{arch}.gguf"
    reader = GGUFReader(str(path))
    return path, {t.name: dequantize(t.data, t.tensor_type).astype(np.float64)
                  for t in reader.tensors}


def make_pairs(name, spec):
    """{base weight name: (a (rank, cols), b (rows, rank))} with values as the file stores them."""
    _, W = base_weights(spec["arch"])
    rng = np.random.default_rng(spec["seed"])
    r = spec["rank"]
    dt = np.float32 if spec["dtype"] == "F32" else np.float16
    pairs = {}
    for wname in sorted(W):
        if not wname.startswith("blk.") or not wname.endswith(".weight"):
            continue
        kind = wname.split(".")[2]
        if kind not in MODULES or (spec["targets"] and kind not in spec["targets"]):
            continue
        rows, cols = W[wname].shape
        a = (rng.standard_normal((r, cols)) * spec["gain"][0] / np.sqrt(cols)).astype(dt)
        b = (rng.standard_normal((rows, r)) * spec["gain"][1] / np.sqrt(r)).astype(dt)
        pairs[wname] = (a, b)
    return pairs


def write_gguf_adapter(name, spec, pairs, path):
    w = GGUFWriter(str(path), spec["arch"])
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", spec["alpha"])
    for wname, (a, b) in pairs.items():
        w.add_tensor(wname + ".lora_a", a)
        w.add_tensor(wname + ".lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_rdrr_adapter(name, spec, pairs, folder):
    """The RDRR format document's LoRA adapter: x . A . B, A [cols, rank], B [rank, rows]."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    shard = bytearray()
    tensors = {}
    modules = set()
    for wname, (a, b) in pairs.items():
        layer, kind = wname.split(".")[1], wname.split(".")[2]
        module = MODULES[kind]
        if spec["arch"] == "phi3" and kind == "ffn_up":
            module = "gate_up_proj"
        modules.add(module)
        for half, m in (("lora_a", a.astype(np.float32).T), ("lora_b", b.astype(np.float32).T)):
            shard.extend(b"\0" * (-len(shard) % 16))
            data = np.ascontiguousarray(m).tobytes()
            tensors[f"layers.{layer}.{module}.{half}"] = {
                "shard": 0, "offset": len(shard), "size": len(data),
                "shape": list(m.shape), "dtype": "f32",
            }
            shard.extend(data)
    (folder / "lora_weights.rdrr").write_bytes(bytes(shard))
    manifest = {
        "version": "1.0",
        "modelId": f"tiny-{name}-lora",
        "modelType": "lora",
        "adapterType": "lora",
        "baseModel": f"tiny-{spec['arch']}",
        "quantization": "F32",
        "hashAlgorithm": "sha256",
        "loraConfig": {"rank": spec["rank"], "alpha": spec["alpha"],
                       "targetModules": sorted(modules)},
        "shards": [{"index": 0, "fileName": "lora_weights.rdrr", "size": len(shard),
                    "hash": hashlib.sha256(bytes(shard)).hexdigest()}],
        "tensors": tensors,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def merged_deltas(applied):
    """Each adapted weight's float64 update: scale * alpha / rank * B A, summed over adapters."""
    deltas = {}
    for spec, pairs, scale in applied:
        s = scale * (spec["alpha"] / spec["rank"] if spec["alpha"] else 1.0)
        for wname, (a, b) in pairs.items():
            d = s * (b.astype(np.float64) @ a.astype(np.float64))
            deltas[wname] = deltas.get(wname, 0.0) + d
    return deltas


def apply_adapters(adapters):
    """A run_model setup: llama.cpp's adapters at their scales (llama_set_adapters_lora)."""
    def setup(llm):
        handles = []
        for path, _ in adapters:
            h = llama_cpp.llama_adapter_lora_init(llm._model.model, str(path).encode())
            assert h, f"llama.cpp refused {path}"
            handles.append(h)
        arr = (llama_cpp.llama_adapter_lora_p_ctypes * len(handles))(*handles)
        scales = (llama_cpp.ctypes.c_float * len(handles))(*[s for _, s in adapters])
        assert llama_cpp.llama_set_adapters_lora(llm._ctx.ctx, arr, len(handles), scales) == 0
    return setup


def sha256_file(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main():
    FIXTURES.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    llama_cpp.llama_backend_init()
    made = {}
    for name, spec in ADAPTERS.items():
        pairs = make_pairs(name, spec)
        gguf_path = FIXTURES / f"tiny-{name}.gguf"
        rdrr_path = FIXTURES / f"tiny-{name}.rdrr"
        write_gguf_adapter(name, spec, pairs, gguf_path)
        write_rdrr_adapter(name, spec, pairs, rdrr_path)
        made[name] = (spec, pairs, gguf_path, rdrr_path)
        print(f"{name}: {len(pairs)} pairs, {gguf_path.stat().st_size} bytes")
    for case, (arch, applied) in CASES.items():
        base_path = ROOT / "tests" / "fixtures" / "arch" / f"tiny-{arch}.gguf"
        adapters = [(made[a][2], s) for a, s in applied]
        deltas = merged_deltas([(made[a][0], made[a][1], s) for a, s in applied])
        cases, n_vocab, eos = ga.run_model(base_path, apply_adapters(adapters), deltas)
        base_cases, _, _ = ga.run_model(base_path)
        changed = sum(c["greedy_ids"] != b["greedy_ids"] for c, b in zip(cases, base_cases))
        doc = {
            "generator": "tests/goldens/gen_lora_goldens.py",
            "llama_cpp_python": llama_cpp.__version__,
            "gguf": "0.19.0",
            "numpy": np.__version__,
            "arch": arch,
            "file": f"tests/fixtures/arch/{base_path.name}",
            "file_sha256": sha256_file(base_path),
            "adapters": [{
                "gguf": f"tests/fixtures/lora/{made[a][2].name}",
                "gguf_sha256": sha256_file(made[a][2]),
                "rdrr": f"tests/fixtures/lora/{made[a][3].name}",
                "scale": s,
                "rank": made[a][0]["rank"],
                "alpha": made[a][0]["alpha"],
            } for a, s in applied],
            "settings": {"n_ctx": ga.N_CTX, "kv_cache": "F32", "flash_attn": False,
                         "backend": "CPU", "greedy_tokens": ga.GREEDY_TOKENS},
            "probe_ids": ga.PROBE_IDS,
            "n_vocab": n_vocab,
            "eos": eos,
            "cases": cases,
        }
        ga.write_golden(OUT / f"{case}.json", doc)
        print(f"{case}: greedy changed by the adapters in {changed}/{len(cases)} prompts")
        for x in cases:
            print(f"  {x['prompt']!r}: greedy {x['greedy_ids']} min margin "
                  f"{min(x['greedy_step_margin']):.3f} llama-f64 {x['llama_vs_f64']} "
                  f"range {x['min_logit_range']}")


if __name__ == "__main__":
    sys.exit(main())
