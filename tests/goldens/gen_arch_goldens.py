#!/usr/bin/env python3
"""Tiny Qwen2, Qwen3, Phi-3, Gemma 2 and Gemma 3 models and their reference logits
(tests/arch_reference.rs).

Pinned versions (the same set-up as gen_llama_goldens.py; about 9 minutes to build on two
cores):
    python3 -m venv target/llama-venv
    CMAKE_BUILD_PARALLEL_LEVEL=2 target/llama-venv/bin/pip install llama-cpp-python==0.3.36 \
        gguf==0.19.0 numpy
Run from the repository root:
    target/llama-venv/bin/python tests/goldens/gen_arch_goldens.py

What it does, deterministically:
1. Writes tests/fixtures/arch/tiny-qwen2.gguf and tiny-qwen3.gguf with gguf-py's writer, as
   llama.cpp's convert_hf_to_gguf.py lays these architectures out (the `qwen2` / `qwen3`
   metadata keys, q/k/v biases for qwen2, attn_q_norm / attn_k_norm for qwen3, NeoX RoPE as
   llama.cpp runs both): seeded random weights, matrices in F16, norms and biases in F32, a
   320-token byte-level BPE vocabulary (the 256 byte symbols, 61 merges learnt from CORPUS,
   three ChatML special tokens, pre-tokenizer `qwen2`) and Qwen's ChatML template. Qwen2's
   shape: 64 wide, 2 blocks, 2 query heads sharing 1 KV head of 32, FFN 192, tied output.
   Qwen3's: 64 wide, 2 blocks, 4 query heads over 2 KV heads of 32 (so q is 128 wide, twice
   the embedding: `attention.key_length`), FFN 160, its own output matrix. Phi-3's: 64 wide, 2
   blocks, 2 query heads over 1 KV head of 32, q/k/v stacked in `attn_qkv` and gate/up in
   `ffn_up` (gate first), FFN 128, its own output matrix, RoPE over 24 of the 32 dimensions,
   `rope_factors_short` and `rope_factors_long` with an original context of 64 (below N_CTX, so
   the long factors are taken) and longrope's attention factor for a 32x longer context,
   sqrt(1 + ln 32 / ln 64), as Phi-3.5's converter writes it. Gemma 2's: 64 wide, 2 blocks
   (block 0 over a sliding window of 8 positions, block 1 over all: the `gemma2` period of 2),
   2 query heads over 1 KV head of 32, pre- and post-norms, a GELU-gated FFN of 128, the
   embedding scaled by sqrt(64), attention scores soft-capped at 4 and final logits at 8, tied
   output. Gemma 3's: 64 wide, 6 blocks (blocks 0-4 over a window of 8 with RoPE base 10,000,
   block 5 over all with base 1e6 and linear scaling by 8), 4 query heads over 2 KV heads of
   32, per-head q/k norms, FFN 128, no soft caps, its own output matrix.
2. For each model, llama.cpp (llama-cpp-python, CPU, F32 KV cache): the prompt ids of PROMPTS,
   greedy continuations (GREEDY_TOKENS, one decode per token) with each step's top-1/top-2
   margin, and the teacher-forced logits of prompt + continuation in one batch: at every
   position the argmax, the top-1/top-2 margin and the logits of PROBE_IDS (every tenth id
   and the special tokens).
3. An exact reference for the same sequences: a float64 numpy forward pass written from the
   architecture (`f64_forward`) over the weights as stored (F16 values are exact in f64).

llama.cpp's F16 products round the activations to f16 first, so its logits differ from the
exact ones; the goldens record by how much (`llama_vs_f64`).

Output: the two fixtures and tests/goldens/arch/<arch>.json.
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import llama_cpp
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType, TokenType
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "arch"
OUT = ROOT / "tests" / "goldens" / "arch"

CORPUS = (
    "the quick brown fox jumps over the lazy dog. the capital of france is paris. "
    "once upon a time there was a little model that ran in the browser and on the server. "
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)"
)
PROMPTS = [
    "the capital of france is",
    "once upon a time",
    "def fibonacci(n):",
    "Zebra 42, naïve café!",
]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
N_MERGES = 61
GREEDY_TOKENS = 16
PROBE_IDS = list(range(0, 320, 10)) + [317, 318, 319]
N_CTX = 128
GGML_TYPE_F32 = 0
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

MODELS = {
    "qwen2": dict(dim=64, layers=2, heads=2, kv_heads=1, head_dim=32, ffn=192, theta=1e6,
                  eps=1e-6, tied=True, out_gain=6.0, seed=2),
    "qwen3": dict(dim=64, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=160, theta=1e6,
                  eps=1e-6, tied=False, out_gain=1.0, seed=3),
    "phi3": dict(dim=64, layers=2, heads=2, kv_heads=1, head_dim=32, ffn=128, theta=1e4,
                 eps=1e-5, tied=False, out_gain=3.0, seed=4, original_context=64, rot_dim=24,
                 attn_factor=float(np.sqrt(1 + np.log(32) / np.log(64)))),
    "gemma2": dict(dim=64, layers=2, heads=2, kv_heads=1, head_dim=32, ffn=128, theta=1e4,
                   eps=1e-6, tied=True, out_gain=2.0, seed=5, window=8, attn_softcap=4.0,
                   final_softcap=8.0),
    "gemma3": dict(dim=64, layers=6, heads=4, kv_heads=2, head_dim=32, ffn=128, theta=1e6,
                   eps=1e-6, tied=False, out_gain=1.0, seed=6, window=8, linear=8.0),
}


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the byte-level BPE's symbols)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def vocabulary():
    """256 byte symbols, N_MERGES merges learnt greedily from CORPUS (most frequent pair, ties
    by first occurrence), then the special tokens."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    words = []
    for i, w in enumerate(CORPUS.split(" ")):
        text = (" " if i else "") + w
        words.append([b2u[b] for b in text.encode("utf-8")])
    merges = []
    for _ in range(N_MERGES):
        counts, first = {}, {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
                first.setdefault((a, b), len(first))
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -first[p]))
        merges.append(pair)
        tokens.append(pair[0] + pair[1])
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == pair:
                    w[i:i + 2] = [pair[0] + pair[1]]
                else:
                    i += 1
    assert len(merges) == N_MERGES
    types = [TokenType.NORMAL] * len(tokens) + [TokenType.CONTROL] * len(SPECIAL)
    return tokens + SPECIAL, types, [f"{a} {b}" for a, b in merges]


def weights(arch, c, n_vocab):
    rng = np.random.default_rng(c["seed"])
    dim, hd = c["dim"], c["head_dim"]
    q_dim, kv_dim = c["heads"] * hd, c["kv_heads"] * hd
    mat = lambda rows, cols, gain=1.0: (rng.standard_normal((rows, cols)) * gain /
                                         np.sqrt(cols)).astype(np.float16)
    vec = lambda n, mean, sd: (mean + sd * rng.standard_normal(n)).astype(np.float32)
    if arch.startswith("gemma"):
        # Gemma's norms are stored as 1 + w (transformers keeps w): multiples of 2^-20, so that
        # w = stored - 1 and back are exact in f32 (tests/convert_hf.rs converts them back).
        plain = vec
        vec = lambda n, mean, sd: (np.round(plain(n, mean, sd) * 2.0**20) / 2.0**20).astype(
            np.float32)
    # Gemma scales the embedding by sqrt(dim) (8) itself.
    w = {"token_embd.weight": mat(n_vocab, dim, 1.0 if arch.startswith("gemma") else 8.0)}
    for i in range(c["layers"]):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = vec(dim, 1.0, 0.2)
        w[p + "attn_q.weight"] = mat(q_dim, dim, 2.0)
        w[p + "attn_k.weight"] = mat(kv_dim, dim, 2.0)
        w[p + "attn_v.weight"] = mat(kv_dim, dim)
        if arch == "qwen2":
            w[p + "attn_q.bias"] = vec(q_dim, 0.0, 0.5)
            w[p + "attn_k.bias"] = vec(kv_dim, 0.0, 1.0)
            w[p + "attn_v.bias"] = vec(kv_dim, 0.0, 0.2)
        elif arch in ("qwen3", "gemma3"):
            w[p + "attn_q_norm.weight"] = vec(hd, 1.0, 0.3)
            w[p + "attn_k_norm.weight"] = vec(hd, 1.0, 0.3)
        if arch.startswith("gemma"):
            w[p + "post_attention_norm.weight"] = vec(dim, 1.0, 0.2)
            w[p + "post_ffw_norm.weight"] = vec(dim, 1.0, 0.2)
        w[p + "attn_output.weight"] = mat(dim, q_dim, c["out_gain"])
        w[p + "ffn_norm.weight"] = vec(dim, 1.0, 0.2)
        w[p + "ffn_gate.weight"] = mat(c["ffn"], dim, 2.0)
        w[p + "ffn_up.weight"] = mat(c["ffn"], dim)
        w[p + "ffn_down.weight"] = mat(dim, c["ffn"], c["out_gain"])
    w["output_norm.weight"] = vec(dim, 1.0, 0.2)
    if not c["tied"]:
        w["output.weight"] = mat(n_vocab, dim, 4.0)
    if arch == "phi3":
        for i in range(c["layers"]):
            p = f"blk.{i}."
            w[p + "attn_qkv.weight"] = np.concatenate(
                [w.pop(p + "attn_q.weight"), w.pop(p + "attn_k.weight"),
                 w.pop(p + "attn_v.weight")])
            w[p + "ffn_up.weight"] = np.concatenate(
                [w.pop(p + "ffn_gate.weight"), w[p + "ffn_up.weight"]])
        pairs = c.get("rot_dim", hd) // 2
        w["rope_factors_short.weight"] = (1.0 + rng.random(pairs)).astype(np.float32)
        w["rope_factors_long.weight"] = (1.0 + 8.0 * rng.random(pairs)).astype(np.float32)
    return w


def write_model(arch, c, path):
    tokens, types, merges = vocabulary()
    n_vocab = len(tokens)
    w = GGUFWriter(str(path), arch)
    # Not "phi3" in the name: llama.cpp then expects the Phi-3 vocabulary's <s>, </s>, <unk>.
    w.add_name("tiny test model")
    w.add_context_length(4096)
    w.add_embedding_length(c["dim"])
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(c["ffn"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    if c["head_dim"] * c["heads"] != c["dim"]:
        w.add_key_length(c["head_dim"])
        w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(c["theta"])
    if "original_context" in c:
        w.add_rope_dimension_count(c.get("rot_dim", c["head_dim"]))
        w.add_rope_scaling_orig_ctx_len(c["original_context"])
        w.add_rope_scaling_attn_factors(c["attn_factor"])
    if "window" in c:
        w.add_sliding_window(c["window"])
    if "attn_softcap" in c:
        w.add_attn_logit_softcapping(c["attn_softcap"])
        w.add_final_logit_softcapping(c["final_softcap"])
    if "linear" in c:
        w.add_string(f"{arch}.rope.scaling.type", "linear")
        w.add_float32(f"{arch}.rope.scaling.factor", c["linear"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_file_type(1)  # MOSTLY_F16
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, t in weights(arch, c, n_vocab).items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def f64_forward(path, seqs, deltas=None):
    """Exact (float64) forward pass over the stored weights, each plus its entry of `deltas`
    where it has one (gen_lora_goldens.py's merged adapters): logits [T, vocab]."""
    reader = GGUFReader(str(path))
    meta = lambda k: reader.fields[k].parts[reader.fields[k].data[0]][0]
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    n_layer = int(meta(f"{arch}.block_count"))
    n_head = int(meta(f"{arch}.attention.head_count"))
    n_kv = int(meta(f"{arch}.attention.head_count_kv"))
    n_embd = int(meta(f"{arch}.embedding_length"))
    eps = float(meta(f"{arch}.attention.layer_norm_rms_epsilon"))
    base = float(meta(f"{arch}.rope.freq_base"))
    key = f"{arch}.attention.key_length"
    hd = int(meta(key)) if key in reader.fields else n_embd // n_head
    W = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
    for name, d in (deltas or {}).items():
        W[name] = W[name] + d
    out_w = W.get("output.weight", W["token_embd.weight"])
    for layer in range(n_layer):
        p = f"blk.{layer}."
        if p + "attn_qkv.weight" in W:  # Phi-3: q, k, v stacked; gate, up stacked
            q_dim, kv_dim = n_head * hd, n_kv * hd
            qkv = W.pop(p + "attn_qkv.weight")
            W[p + "attn_q.weight"] = qkv[:q_dim]
            W[p + "attn_k.weight"] = qkv[q_dim:q_dim + kv_dim]
            W[p + "attn_v.weight"] = qkv[q_dim + kv_dim:]
            up = W[p + "ffn_up.weight"]
            W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"] = np.split(up, 2)
    orig = f"{arch}.rope.scaling.original_context_length"
    rk = f"{arch}.rope.dimension_count"
    rot = int(meta(rk)) if rk in reader.fields else hd
    ak = f"{arch}.rope.scaling.attn_factor"
    mscale = float(meta(ak)) if ak in reader.fields else 1.0
    factors = np.ones(rot // 2)
    gemma = arch.startswith("gemma")
    fk = lambda k, d: float(meta(f"{arch}.{k}")) if f"{arch}.{k}" in reader.fields else d
    window = int(fk("attention.sliding_window", 4096 if arch == "gemma2" else 0))
    period = {"gemma2": 2, "gemma3": 6}.get(arch, 0)
    # llama.cpp's rule: with a period p, layer i is windowed where i % p < p - 1.
    windowed = [window > 0 and (period == 0 or i % period < period - 1) for i in range(n_layer)]
    attn_cap = fk("attn_logit_softcapping", 50.0) if arch == "gemma2" else 0.0
    final_cap = fk("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)
    linear = fk("rope.scaling.factor", 1.0)
    # Gemma 3's windowed layers: base rope.freq_base_swa (10,000), no linear scaling.
    local_base = fk("rope.freq_base_swa", 1e4 if arch == "gemma3" else base)
    if "rope_factors_long.weight" in W:  # llama.cpp: long past the original context
        long = orig in reader.fields and N_CTX > int(meta(orig))
        factors = W["rope_factors_long.weight" if long else "rope_factors_short.weight"]

    def norm(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    results = []
    for ids in seqs:
        T = len(ids)
        half = rot // 2

        def rope(v, b=base, scale=1.0 / linear):  # NeoX: pairs (i, i + rot / 2), first rot
            ang = np.arange(T)[:, None] * scale * (b ** (-np.arange(0, rot, 2) / rot) / factors)
            # llama.cpp's rotation scales cos and sin by the attention factor (mscale).
            cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
            a, bb, rest = v[..., :half], v[..., half:rot], v[..., rot:]
            return np.concatenate([a * cos - bb * sin, a * sin + bb * cos, rest], axis=-1)

        def gelu(g):  # the tanh form
            return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))

        def lin(h, name):
            y = h @ W[name + ".weight"].T
            return y + W[name + ".bias"] if name + ".bias" in W else y

        causal = np.triu(np.full((T, T), -np.inf), 1)
        # A window of w: query i sees keys i - w + 1 ..= i.
        local = causal + np.tril(np.full((T, T), -np.inf), -window) if window else causal
        x = W["token_embd.weight"][ids]
        if gemma:
            x = x * np.sqrt(n_embd)
        for layer in range(n_layer):
            p = f"blk.{layer}."
            h = norm(x, W[p + "attn_norm.weight"])
            q = lin(h, p + "attn_q").reshape(T, n_head, hd)
            k = lin(h, p + "attn_k").reshape(T, n_kv, hd)
            v = lin(h, p + "attn_v").reshape(T, n_kv, hd)
            if p + "attn_q_norm.weight" in W:
                q = norm(q, W[p + "attn_q_norm.weight"])
                k = norm(k, W[p + "attn_k_norm.weight"])
            if arch == "gemma3" and windowed[layer]:
                q, k = rope(q, local_base, 1.0), rope(k, local_base, 1.0)
            elif arch == "gemma2" and windowed[layer]:
                q, k = rope(q, local_base), rope(k, local_base)
            else:
                q, k = rope(q), rope(k)
            mask = local if windowed[layer] else causal
            att = np.empty((T, n_head, hd))
            for head in range(n_head):
                kv = head // (n_head // n_kv)
                sc = q[:, head] @ k[:, kv].T / np.sqrt(hd)
                if attn_cap:
                    sc = attn_cap * np.tanh(sc / attn_cap)
                sc = sc + mask
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                att[:, head] = (sc / sc.sum(-1, keepdims=True)) @ v[:, kv]
            o = att.reshape(T, -1) @ W[p + "attn_output.weight"].T
            x = x + (norm(o, W[p + "post_attention_norm.weight"]) if gemma else o)
            h = norm(x, W[p + "ffn_norm.weight"])
            gate = h @ W[p + "ffn_gate.weight"].T
            up = h @ W[p + "ffn_up.weight"].T
            act = gelu(gate) if gemma else gate / (1.0 + np.exp(-gate))
            o = (act * up) @ W[p + "ffn_down.weight"].T
            x = x + (norm(o, W[p + "post_ffw_norm.weight"]) if gemma else o)
        logits = norm(x, W["output_norm.weight"]) @ out_w.T
        if final_cap:
            logits = final_cap * np.tanh(logits / final_cap)
        results.append(logits)
    return results


def summary(rows, digits):
    """Per position: argmax (first on ties), top-1/top-2 margin, the PROBE_IDS logits."""
    out = {"argmax": [], "margin": [], "probe": []}
    for row in rows:
        tok, margin = top2(np.asarray(row))
        out["argmax"].append(tok)
        out["margin"].append(round(margin, 6))
        out["probe"].append([round(float(row[i]), digits) for i in PROBE_IDS])
    return out


def top2(logits):
    order = np.argsort(-logits, kind="stable")
    return int(order[0]), float(logits[order[0]] - logits[order[1]])


def run_model(path, setup=None, deltas=None):
    """llama.cpp's and the float64 pass's records of every prompt; `setup(llm)` runs first
    (gen_lora_goldens.py applies adapters there) and `deltas` go to f64_forward."""
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, logits_all=True,
        type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False, n_gpu_layers=0, seed=0,
        verbose=False,
    )
    if setup:
        setup(llm)
    eos = llm.token_eos()
    cases = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        llm.reset()
        llm.eval(ids)
        greedy, step_margin, finish = [], [], "length"
        for _ in range(GREEDY_TOKENS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok, margin = top2(logits)
            greedy.append(tok)
            step_margin.append(round(margin, 5))
            if tok == eos:
                finish = "stop"
                break
            llm.eval([tok])
        llm.reset()
        seq = ids + greedy
        llm.eval(seq)
        scores = np.array(llm.scores[: len(seq)], dtype=np.float32)
        cases.append({
            "prompt": prompt,
            "prompt_ids": ids,
            "greedy_ids": greedy,
            "greedy_finish": finish,
            "greedy_step_margin": step_margin,
            "llama": summary(scores, 4),
            "_scores": scores,
        })
    n_vocab = llm.n_vocab()
    del llm
    seqs = [c["prompt_ids"] + c["greedy_ids"] for c in cases]
    for c, ref in zip(cases, f64_forward(path, seqs, deltas)):
        c["f64"] = summary(ref, 6)
        llama = c.pop("_scores")
        # Over the whole vocabulary, every position.
        c["llama_vs_f64"] = round(float(np.abs(llama - ref).max()), 5)
        c["min_logit_range"] = round(float((ref.max(1) - ref.min(1)).min()), 4)
    return cases, n_vocab, eos


def write_golden(path, doc):
    """`doc` as JSON, a line per case (the goldens' layout)."""
    enc = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    body = ",\n  ".join(enc(x) for x in doc["cases"])
    head = ",\n ".join(f"{enc(k)}:{enc(v)}" for k, v in doc.items() if k != "cases")
    path.write_text("{\n " + head + ',\n "cases":[\n  ' + body + "\n ]\n}\n")


def sha256_file(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main():
    FIXTURES.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    llama_cpp.llama_backend_init()
    for arch, c in MODELS.items():
        path = FIXTURES / f"tiny-{arch}.gguf"
        write_model(arch, c, path)
        cases, n_vocab, eos = run_model(path)
        doc = {
            "generator": "tests/goldens/gen_arch_goldens.py",
            "llama_cpp_python": llama_cpp.__version__,
            "gguf": "0.19.0",
            "numpy": np.__version__,
            "file": f"tests/fixtures/arch/{path.name}",
            "file_sha256": sha256_file(path),
            "settings": {"n_ctx": N_CTX, "kv_cache": "F32", "flash_attn": False,
                         "backend": "CPU", "greedy_tokens": GREEDY_TOKENS},
            "config": c,
            "probe_ids": PROBE_IDS,
            "n_vocab": n_vocab,
            "eos": eos,
            "cases": cases,
        }
        write_golden(OUT / f"{arch}.json", doc)
        print(f"{arch}: {path.stat().st_size} bytes, {doc['file_sha256'][:16]}")
        for x in cases:
            print(f"  {x['prompt']!r}: ids {x['prompt_ids']} greedy {x['greedy_ids']} "
                  f"min margin {min(x['greedy_step_margin']):.3f} llama-f64 {x['llama_vs_f64']} "
                  f"range {x['min_logit_range']}")


if __name__ == "__main__":
    sys.exit(main())
