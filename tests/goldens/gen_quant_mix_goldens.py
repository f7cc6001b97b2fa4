#!/usr/bin/env python3
"""A tiny Qwen3-shaped model quantized by llama.cpp's own quantizer to the presets that mix the
newer types, Q3_K_M (Q3_K with Q4_K, Q5_K and Q6_K) and IQ4_XS (with Q6_K), and their reference
logits (tests/arch_reference.rs, `quantization_presets_match_llama_cpp_and_f64`). Q2_K, IQ4_NL
and IQ3_M files made the same way gave the same agreement; two presets keep the fixtures small.

Pinned versions and set-up as gen_arch_goldens.py (whose vocabulary, writer, float64 pass and
llama.cpp runs this reuses). Run from the repository root:
    target/llama-venv/bin/python tests/goldens/gen_quant_mix_goldens.py

What it does, deterministically:
1. Writes an F16 model of Qwen3's layout whose rows are whole 256-value blocks (256 wide, 2
   blocks, 4 query heads of 64 over 2 KV heads, FFN 512, its own output matrix) to a temporary
   file, with gen_arch_goldens.py's writer and vocabulary.
2. Quantizes it with llama.cpp's `llama_model_quantize` (llama-cpp-python 0.3.36, no importance
   matrix) to each preset, into
   tests/fixtures/arch/tiny-qwen3-<preset>.gguf. Each file mixes types as llama.cpp's presets
   do (attn_v, ffn_down and the output keep more bits).
3. For each: llama.cpp's prompt ids, greedy continuation and logits, and the float64 pass over
   the dequantized weights (gguf-py's dequantize), as gen_arch_goldens.py records them, into
   tests/goldens/arch/qwen3-<preset>.json.
"""
import json
import sys
import tempfile
from pathlib import Path

import llama_cpp
import numpy as np
from gguf import GGUFReader

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_arch_goldens as arch  # noqa: E402

SHAPE = dict(dim=256, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=512, theta=1e6, eps=1e-6,
             tied=False, out_gain=1.0, seed=7)
PRESETS = {
    "q3_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    "iq4_xs": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_XS,
}


def main():
    llama_cpp.llama_backend_init()
    arch.FIXTURES.mkdir(parents=True, exist_ok=True)
    arch.OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        f16 = Path(tmp) / "tiny-qwen3-256-f16.gguf"
        arch.write_model("qwen3", SHAPE, f16)
        for name, ftype in PRESETS.items():
            path = arch.FIXTURES / f"tiny-qwen3-{name}.gguf"
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = ftype
            params.nthread = 1
            rc = llama_cpp.llama_model_quantize(str(f16).encode(), str(path).encode(), params)
            assert rc == 0, f"{name}: llama_model_quantize returned {rc}"
            types = sorted({t.tensor_type.name for t in GGUFReader(str(path)).tensors})
            cases, n_vocab, eos = arch.run_model(path)
            doc = {
                "generator": "tests/goldens/gen_quant_mix_goldens.py",
                "llama_cpp_python": llama_cpp.__version__,
                "gguf": "0.19.0",
                "numpy": np.__version__,
                "file": f"tests/fixtures/arch/{path.name}",
                "file_sha256": arch.sha256_file(path),
                "tensor_types": types,
                "settings": {"n_ctx": arch.N_CTX, "kv_cache": "F32", "flash_attn": False,
                             "backend": "CPU", "greedy_tokens": arch.GREEDY_TOKENS},
                "config": SHAPE,
                "probe_ids": arch.PROBE_IDS,
                "n_vocab": n_vocab,
                "eos": eos,
                "cases": cases,
            }
            enc = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
            body = ",\n  ".join(enc(x) for x in cases)
            head = ",\n ".join(f"{enc(k)}:{enc(v)}" for k, v in doc.items() if k != "cases")
            (arch.OUT / f"qwen3-{name}.json").write_text(
                "{\n " + head + ',\n "cases":[\n  ' + body + "\n ]\n}\n")
            print(f"{name}: {path.stat().st_size} bytes, types {types}")
            for x in cases:
                print(f"  {x['prompt']!r}: greedy {x['greedy_ids'][:6]}... min margin "
                      f"{min(x['greedy_step_margin']):.3f} llama-f64 {x['llama_vs_f64']} "
                      f"range {x['min_logit_range']}")


if __name__ == "__main__":
    sys.exit(main())
