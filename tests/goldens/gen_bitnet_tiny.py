#!/usr/bin/env python3
"""A tiny BitNet b1.58 model (BitNet 2B4T's structure, random ternary weights) as GGUF fixtures,
and transformers' logits for it as goldens. tests/bitnet_reference.rs checks our engine against them.

Versions (pinned; the goldens record what actually ran):
  --write-gguf, --check (local, no torch):  Python 3.11, numpy==2.4.6, gguf==0.19.0
      python3 -m venv target/py-venv && target/py-venv/bin/pip install numpy==2.4.6 gguf==0.19.0
      target/py-venv/bin/python tests/goldens/gen_bitnet_tiny.py --write-gguf
  --goldens (on the GPU machine, where torch and transformers are installed; numpy only besides):
      python3 tests/goldens/gen_bitnet_tiny.py --goldens --out DIR
      the committed goldens were made with Python 3.12.3, torch==2.11.0 (+cu130), transformers==5.17.0,
      numpy==2.5.2 on an H200 machine (goldens.json records them); any transformers with
      BitNetForCausalLM and integrations.bitnet.BitLinear (4.52+) should reproduce them.
  --check (local): the numpy float64 forward against the committed goldens; --dry-run and
  --tolerance-study (local): the statistics behind the prompts and tests/bitnet_reference.rs's tolerance.

The model (`make_weights`): hidden 256, FFN 512, 2 layers, 4 heads / 2 KV heads (head_dim 64),
vocab 512, RoPE theta 500000 (NeoX / rotate-half order, Q and K rows not permuted), RMS eps 1e-5,
tied embeddings, attention and FFN sub-norms, ReLU^2 FFN. Every weight comes from numpy's PCG64
generator with a fixed seed (never torch's RNG), so both modes build bit-identical weights on any
machine; goldens.json and fixtures.json carry a SHA-256 of them and the Rust test compares the two.
- Linear weights: W ~ N(0, sigma^2) in f32, then as BitNet's converter (facts.md): s = mean(|W|)
  (f64 sum, stored f32), W_t = clamp(round_half_even(W / s), -1, 1). The model computes with W_t
  and the per-tensor scale s.
- Norm weights: uniform in [0.5, 1.5] (f32), so every norm matters.
- Embedding: N(0, 0.25^2) rounded to f16 (stored F16, used as f32 by transformers).
- sigma = gain / sqrt(cols), gain 2.5 for Q and K (sharper attention), 4 for attn_output and ffn_down
  (the layers, not the tied embedding, dominate the logits: otherwise greedy just repeats its input).

Files:
  tests/fixtures/bitnet/tiny-i2s.gguf    architecture `bitnet-b1.58` (BitNet fork): ternary tensors as
      I2_S (type 36; written by `write_gguf` below, since gguf-py no longer knows type 36), with the
      f32 weight scale inside the tensor at byte n/4; token_embd F16; norms F32; no output.weight.
  tests/fixtures/bitnet/tiny-tq2_0.gguf  architecture `bitnet` (upstream llama.cpp): ternary tensors
      as TQ2_0 quantized by gguf-py (values -1/0/+1, so every block's d is 1), each scale as a
      separate 1-element F32 tensor `blk.N.<name>.scale`; written by gguf-py's GGUFWriter.
  tests/fixtures/bitnet/fixtures.json    the weights' digest and what the files hold.
  tests/goldens/bitnet/goldens.json      versions, sequences, greedy continuation, cross-checks.
  tests/goldens/bitnet/<name>.bin        logits [len(ids), 512], little-endian f32, row-major (.bin:
      the repository ignores *.f32).

The reference (`--goldens`) is transformers' own BitLinear (integrations/bitnet.py, the class that
`BitNetQuantConfig(linear_class="bitlinear", quantization_mode="offline")` installs when BitNet 2B4T
is loaded): packed 2-bit weights, a `weight_scale` buffer, per-token int8 absmax activation
quantization (`activation_quant`), an integer-valued F.linear, then `/ (input_scale * weight_scale)`.
A plain `BitNetForCausalLM(config)` would use nn.Linear, with no activation quantization: not what
BitNet computes. So every projection of the plain model (except lm_head, as transformers leaves it)
is swapped for transformers' BitLinear, given pack_weights(W_t) and weight_scale = 1 / s
(transformers divides by its weight_scale; the GGUF stores s as a multiplier). torch.compile is
disabled (TORCHDYNAMO_DISABLE=1): the decorated functions then run eagerly, same arithmetic, and
need no compiler. The logits are computed in float32 on the CPU (deterministic); the same run also
computes them on CUDA (TF32 off) and with an independent numpy float64 forward (`forward_numpy`,
written from the definitions), and records the differences in goldens.json.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bitnet")
GOLDENS = os.path.join(HERE, "bitnet")

SEED = 0xB17E7  # weights
HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 256, 512, 2, 4, 2, 64
VOCAB, CTX, ROPE_THETA, RMS_EPS = 512, 512, 500000.0, 1e-5
BOS, EOS, EOT = 509, 510, 511
# Standard deviations of the float weights before ternarization (only s = mean|W| survives it, and
# the per-token activation scale cancels it again; the values keep each layer's output O(1)).
EMBED_STD = 0.25

# (GGUF name, transformers module path, rows (out), cols (in)) per layer.
LINEARS = [
    ("attn_q", "self_attn.q_proj", HEADS * HEAD_DIM, HIDDEN),
    ("attn_k", "self_attn.k_proj", KV_HEADS * HEAD_DIM, HIDDEN),
    ("attn_v", "self_attn.v_proj", KV_HEADS * HEAD_DIM, HIDDEN),
    ("attn_output", "self_attn.o_proj", HIDDEN, HEADS * HEAD_DIM),
    ("ffn_gate", "mlp.gate_proj", FFN, HIDDEN),
    ("ffn_up", "mlp.up_proj", FFN, HIDDEN),
    ("ffn_down", "mlp.down_proj", HIDDEN, FFN),
]
# (GGUF name, transformers module path, length) per layer.
NORMS = [
    ("attn_norm", "input_layernorm", HIDDEN),
    ("attn_sub_norm", "self_attn.attn_sub_norm", HEADS * HEAD_DIM),
    ("ffn_norm", "post_attention_layernorm", HIDDEN),
    ("ffn_sub_norm", "mlp.ffn_sub_norm", FFN),
]
# Larger Q/K weights sharpen attention (so RoPE and the causal mask matter); others give O(1) outputs.
SIGMA_GAIN = {"attn_q": 2.5, "attn_k": 2.5, "attn_output": 4.0, "ffn_down": 4.0}


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------
def ternarize(w):
    """BitNet's converter: s = mean|W| (f64 sum, f32 result), W_t = clamp(rint(W / s), -1, 1)."""
    s = np.float32(np.abs(w.astype(np.float64)).mean())
    t = np.clip(np.rint(w / s), -1, 1).astype(np.int8)  # rint: half to even, as torch.round
    return t, s


def make_weights():
    rng = np.random.Generator(np.random.PCG64(SEED))
    w = {"token_embd": (rng.standard_normal((VOCAB, HIDDEN)) * EMBED_STD).astype(np.float16).astype(np.float32)}
    for layer in range(LAYERS):
        for name, _, n in NORMS:
            w[f"blk.{layer}.{name}"] = rng.uniform(0.5, 1.5, n).astype(np.float32)
        for name, _, rows, cols in LINEARS:
            sigma = SIGMA_GAIN.get(name, 1.0) / np.sqrt(cols)
            dense = (rng.standard_normal((rows, cols)) * sigma).astype(np.float32)
            w[f"blk.{layer}.{name}"], w[f"blk.{layer}.{name}.scale"] = ternarize(dense)
    w["output_norm"] = rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32)
    return w


def weights_digest(w):
    h = hashlib.sha256()
    for k in sorted(w):
        a = np.ascontiguousarray(w[k])
        h.update(k.encode())
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def sequences():
    """Fixed token sequences (ids < 509: no special token except a leading BOS)."""
    rng = np.random.Generator(np.random.PCG64(SEED + 1))
    r = lambda n: [int(x) for x in rng.integers(0, BOS, n)]
    motif = r(5)
    return {
        "bos8": [BOS] + r(7),
        "plain13": r(13),
        "repeat17": [BOS] + motif + motif + motif[:4] + r(2),
        "long24": [BOS] + r(23),
    }


GREEDY_NEW = 16


# The greedy prompt: candidates are BOS + 5 ids from PCG64(SEED + 2 + k), k = 0, 1, ...; k = 13 is
# the first of 40 whose numpy greedy path of 16 tokens keeps every top-1/top-2 margin above 0.3
# (0.34), far above the f32 differences between implementations (--tolerance-study), so the
# continuation is a fair exact-match test.
GREEDY_PROMPT_SEED = SEED + 2 + 13


def greedy_prompt():
    rng = np.random.Generator(np.random.PCG64(GREEDY_PROMPT_SEED))
    return [BOS] + [int(x) for x in rng.integers(0, BOS, 5)]


# ---------------------------------------------------------------------------------------------
# An independent forward pass in float64 (from the definitions, not from transformers' code)
# ---------------------------------------------------------------------------------------------
def rms_norm(x, g):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * g


def bitlinear(x, t, s):
    """Per-token int8 absmax quantization, exact integer product, then * s / x_scale (in x's dtype)."""
    dt = x.dtype.type
    xs = dt(127.0) / np.maximum(np.abs(x).max(axis=-1, keepdims=True), dt(1e-5))
    xq = np.clip(np.rint(x * xs), -128, 127)
    return (xq @ t.T.astype(x.dtype)) * dt(s) / xs


def rope(x, pos):
    """NeoX / rotate-half RoPE on [T, H, D] (angles in f64, applied in x's dtype)."""
    inv = 1.0 / ROPE_THETA ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :].astype(x.dtype)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :].astype(x.dtype)
    half = HEAD_DIM // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def forward_numpy(w, ids, stats=None, dtype=np.float64):
    """Logits [T, VOCAB] (float64 by default; float32 to see what f32 rounding alone does).
    `stats`, if a dict, counts activations near a rounding tie."""
    f = lambda k: w[k].astype(dtype)
    T = len(ids)
    h = f("token_embd")[ids]
    pos = np.arange(T)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    rep = HEADS // KV_HEADS

    def bl(x, key):
        if stats is not None:
            xs = 127.0 / np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-5)
            frac = np.abs((x * xs) - np.floor(x * xs) - 0.5)
            stats["n"] = stats.get("n", 0) + x.size
            stats["near_1e-3"] = stats.get("near_1e-3", 0) + int((frac < 1e-3).sum())
            stats["near_1e-4"] = stats.get("near_1e-4", 0) + int((frac < 1e-4).sum())
        return bitlinear(x, w[key], w[key + ".scale"])

    for layer in range(LAYERS):
        p = f"blk.{layer}."
        x = rms_norm(h, f(p + "attn_norm"))
        q = rope(bl(x, p + "attn_q").reshape(T, HEADS, HEAD_DIM), pos)
        k = rope(bl(x, p + "attn_k").reshape(T, KV_HEADS, HEAD_DIM), pos)
        v = bl(x, p + "attn_v").reshape(T, KV_HEADS, HEAD_DIM)
        out = np.empty((T, HEADS, HEAD_DIM), dtype=dtype)
        for hd in range(HEADS):
            sc = q[:, hd, :] @ k[:, hd // rep, :].T / dtype(np.sqrt(HEAD_DIM)) + mask.astype(dtype)
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            out[:, hd, :] = (sc / sc.sum(axis=-1, keepdims=True)) @ v[:, hd // rep, :]
        a = rms_norm(out.reshape(T, HEADS * HEAD_DIM), f(p + "attn_sub_norm"))
        h = h + bl(a, p + "attn_output")
        x = rms_norm(h, f(p + "ffn_norm"))
        g = np.maximum(bl(x, p + "ffn_gate"), 0.0)
        m = rms_norm(g * g * bl(x, p + "ffn_up"), f(p + "ffn_sub_norm"))
        h = h + bl(m, p + "ffn_down")
    return rms_norm(h, f("output_norm")) @ f("token_embd").T


def greedy_numpy(w, prompt, n):
    ids, margins = list(prompt), []
    for _ in range(n):
        lg = forward_numpy(w, ids)[-1]
        top = np.argsort(-lg)[:2]
        margins.append(float(lg[top[0]] - lg[top[1]]))
        ids.append(int(top[0]))
    return ids[len(prompt):], margins


# ---------------------------------------------------------------------------------------------
# Tokenizer (a real byte-level BPE, trained here on a fixed text, so the files load as models)
# ---------------------------------------------------------------------------------------------
TRAIN_TEXT = (
    "The quick brown fox jumps over the lazy dog. A tiny model with ternary weights still has to "
    "compute the same numbers as the reference: every projection quantizes its input to eight bits "
    "per token, multiplies by minus one, zero or plus one, and scales the result back. Attention "
    "rotates queries and keys by position, compares them, and mixes the values; the feed forward "
    "block squares a rectified gate and normalizes before projecting down again. Numbers like 42, "
    "2025 and 3.14159 appear in text; so do questions? Yes! Words such as bitnet, transformer, "
    "embedding, vocabulary, generation, temperature, sampling, greedy, logits and softmax are "
    "common in this domain. Paris is the capital of France; Berlin, Madrid, Rome and Vienna are "
    "capitals too. Hello world, hello again, goodbye for now.\n"
)
PRE_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(
        range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


def make_tokenizer():
    import re
    bs, cs = bytes_to_unicode()
    b2u = dict(zip(bs, cs))
    tokens = list(cs)  # ids 0..255: single bytes, in GPT-2's order
    counts = {}
    for piece in re.findall(PRE_SPLIT, TRAIN_TEXT):
        word = tuple(b2u[b] for b in piece.encode("utf-8"))
        counts[word] = counts.get(word, 0) + 1
    merges = []
    while len(tokens) < BOS:
        pairs = {}
        for word, c in counts.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            raise SystemExit("TRAIN_TEXT too short for the vocabulary")
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        tokens.append(best[0] + best[1])
        new = {}
        for word, c in counts.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        counts = new
    assert len(set(tokens)) == len(tokens), "duplicate token"
    tokens += ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    types = [1] * BOS + [3, 3, 3]  # normal, then control
    assert len(tokens) == VOCAB
    return tokens, types, merges


# ---------------------------------------------------------------------------------------------
# GGUF files
# ---------------------------------------------------------------------------------------------
def pack_i2s(t):
    """I2_S bytes of a ternary [rows, cols] tensor (facts.md): code = w + 1, 128 weights per 32
    bytes, byte j of a block holding weights j, 32+j, 64+j, 96+j at bits [7:6], [5:4], [3:2],
    [1:0]; then 32 bytes: the f32 scale at byte n/4, zeros after it."""
    codes = (t.reshape(-1).astype(np.int16) + 1).astype(np.uint8)
    assert codes.size % 128 == 0
    blocks = codes.reshape(-1, 4, 32)  # [block, group g (weights 32g..32g+31), j]
    packed = (blocks[:, 0] << 6) | (blocks[:, 1] << 4) | (blocks[:, 2] << 2) | blocks[:, 3]
    return packed.astype(np.uint8).reshape(-1).tobytes()


def unpack_i2s(data, n):
    """The inverse of pack_i2s (used to check the written file)."""
    b = np.frombuffer(data[: n // 4], dtype=np.uint8).reshape(-1, 32)
    groups = [(b >> (6 - 2 * g)) & 3 for g in range(4)]
    codes = np.stack(groups, axis=1).reshape(-1)
    return codes.astype(np.int8) - 1


GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
TYPE_F32, TYPE_F16, TYPE_I2_S = 0, 1, 36
ALIGN = 32


def _gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _gguf_value(vtype, v):
    if vtype == GGUF_U32:
        return struct.pack("<I", v)
    if vtype == GGUF_I32:
        return struct.pack("<i", v)
    if vtype == GGUF_F32:
        return struct.pack("<f", v)
    if vtype == GGUF_BOOL:
        return struct.pack("<?", v)
    if vtype == GGUF_STRING:
        return _gguf_str(v)
    raise ValueError(vtype)


def write_gguf(path, kvs, tensors):
    """A minimal GGUF v3 writer (spec: ggml/docs/gguf.md). kvs: [(key, vtype, value)] where an
    array is (key, (GGUF_ARRAY, elem_type), list). tensors: [(name, ggml_type, dims innermost
    first, bytes)]. Data alignment 32 (the default; no general.alignment key)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, vtype, value in kvs:
        out += _gguf_str(key)
        if isinstance(vtype, tuple):
            out += struct.pack("<IIQ", GGUF_ARRAY, vtype[1], len(value))
            for v in value:
                out += _gguf_value(vtype[1], v)
        else:
            out += struct.pack("<I", vtype) + _gguf_value(vtype, value)
    offset = 0
    for name, ttype, dims, data in tensors:
        out += _gguf_str(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
        offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    out += b"\0" * (-len(out) % ALIGN)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % ALIGN)
    with open(path, "wb") as fh:
        fh.write(out)


def hparams(arch):
    return [
        (f"{arch}.vocab_size", GGUF_U32, VOCAB),
        (f"{arch}.context_length", GGUF_U32, CTX),
        (f"{arch}.embedding_length", GGUF_U32, HIDDEN),
        (f"{arch}.block_count", GGUF_U32, LAYERS),
        (f"{arch}.feed_forward_length", GGUF_U32, FFN),
        (f"{arch}.rope.dimension_count", GGUF_U32, HEAD_DIM),
        (f"{arch}.attention.head_count", GGUF_U32, HEADS),
        (f"{arch}.attention.head_count_kv", GGUF_U32, KV_HEADS),
        (f"{arch}.attention.layer_norm_rms_epsilon", GGUF_F32, RMS_EPS),
        (f"{arch}.rope.freq_base", GGUF_F32, ROPE_THETA),
    ]


def tokenizer_kvs(tok):
    tokens, types, merges = tok
    return [
        ("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
        ("tokenizer.ggml.pre", GGUF_STRING, "llama-bpe"),
        ("tokenizer.ggml.tokens", (GGUF_ARRAY, GGUF_STRING), tokens),
        ("tokenizer.ggml.token_type", (GGUF_ARRAY, GGUF_I32), types),
        ("tokenizer.ggml.merges", (GGUF_ARRAY, GGUF_STRING), merges),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, BOS),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, EOS),
        ("tokenizer.ggml.eot_token_id", GGUF_U32, EOT),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
        ("tokenizer.ggml.add_eos_token", GGUF_BOOL, False),
    ]


def write_i2s(w, tok, path):
    kvs = [("general.architecture", GGUF_STRING, "bitnet-b1.58"),
           ("general.name", GGUF_STRING, "tritium tiny BitNet b1.58 (random ternary test model)")]
    kvs += hparams("bitnet-b1.58") + tokenizer_kvs(tok)
    f32 = lambda name, a: (name + ".weight", TYPE_F32, [a.size], a.astype("<f4").tobytes())
    tensors = [("token_embd.weight", TYPE_F16, [HIDDEN, VOCAB], w["token_embd"].astype("<f2").tobytes()),
               f32("output_norm", w["output_norm"])]
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        for name, _, _ in NORMS:
            tensors.append(f32(p + name, w[p + name]))
        for name, _, rows, cols in LINEARS:
            t, s = w[p + name], w[p + name + ".scale"]
            data = pack_i2s(t) + struct.pack("<f", s) + b"\0" * 28
            assert len(data) == rows * cols // 4 + 32
            tensors.append((p + name + ".weight", TYPE_I2_S, [cols, rows], data))
    write_gguf(path, kvs, tensors)
    return tensors


def write_tq2(w, tok, path):
    import gguf
    wr = gguf.GGUFWriter(path, "bitnet")
    wr.add_name("tritium tiny BitNet b1.58 (random ternary test model, TQ2_0)")
    for key, vtype, value in hparams("bitnet") + tokenizer_kvs(tok):
        if isinstance(vtype, tuple):
            wr.add_array(key, value)  # gguf-py infers the element type (str / int -> INT32)
        elif vtype == GGUF_U32:
            wr.add_uint32(key, value)
        elif vtype == GGUF_F32:
            wr.add_float32(key, value)
        elif vtype == GGUF_BOOL:
            wr.add_bool(key, value)
        else:
            wr.add_string(key, value)
    wr.add_file_type(gguf.LlamaFileType.MOSTLY_TQ2_0)
    wr.add_tensor("token_embd.weight", w["token_embd"].astype(np.float16))
    wr.add_tensor("output_norm.weight", w["output_norm"])
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        for name, _, _ in NORMS:
            wr.add_tensor(p + name + ".weight", w[p + name])
        for name, _, _, _ in LINEARS:
            q = gguf.quants.quantize(w[p + name].astype(np.float32), gguf.GGMLQuantizationType.TQ2_0)
            wr.add_tensor(p + name + ".weight", q, raw_dtype=gguf.GGMLQuantizationType.TQ2_0)
            wr.add_tensor(p + name + ".scale", np.array([w[p + name + ".scale"]], dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def check_files(w, tok):
    """Read both files back (gguf-py for TQ2_0 and for our writer's structure, our own I2_S
    decoder for the ternary payload) and compare every tensor with the weights."""
    import gguf
    r = gguf.GGUFReader(os.path.join(FIXTURES, "tiny-tq2_0.gguf"))
    got = {t.name: t for t in r.tensors}
    assert str(r.fields["general.architecture"].contents()) == "bitnet"
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        for name, _, rows, cols in LINEARS:
            t = got[p + name + ".weight"]
            assert list(t.shape) == [cols, rows] and t.tensor_type == gguf.GGMLQuantizationType.TQ2_0
            d = gguf.quants.dequantize(t.data, gguf.GGMLQuantizationType.TQ2_0)
            assert np.array_equal(d.reshape(rows, cols), w[p + name].astype(np.float32)), p + name
            assert got[p + name + ".scale"].data[0] == w[p + name + ".scale"]
        for name, _, _ in NORMS:
            assert np.array_equal(got[p + name + ".weight"].data, w[p + name])
    assert np.array_equal(got["token_embd.weight"].data.astype(np.float32), w["token_embd"])

    # Our writer's structure, checked by gguf-py: the same writer with type 36 renamed to I8
    # (one byte per "element", n/4 + 32 of them) must read back with every key and tensor intact.
    path = os.path.join(FIXTURES, "tiny-i2s.gguf")
    with open(path, "rb") as fh:
        raw = bytearray(fh.read())
    tensors = write_i2s(w, tok, os.devnull)
    shadow = os.path.join(FIXTURES, ".shadow-check.gguf")
    kvs = [("general.architecture", GGUF_STRING, "bitnet-b1.58")] + hparams("bitnet-b1.58") + tokenizer_kvs(tok)
    write_gguf(shadow, kvs, [(n, 24 if ty == TYPE_I2_S else ty, [len(d)] if ty == TYPE_I2_S else dims, d)
                             for n, ty, dims, d in tensors])
    try:
        rs = gguf.GGUFReader(shadow)
        assert rs.fields["tokenizer.ggml.tokens"].contents() == tok[0]
        assert rs.fields["tokenizer.ggml.merges"].contents() == tok[2]
        assert abs(rs.fields["bitnet-b1.58.rope.freq_base"].contents() - ROPE_THETA) < 1e-3
        for t in rs.tensors:
            data = bytes(np.asarray(t.data).reshape(-1).view(np.uint8))
            assert data in raw, t.name  # the bytes are in the real file too
            name = t.name[: -len(".weight")]
            if t.tensor_type == gguf.GGMLQuantizationType.I8:
                n = w[name].size
                assert np.array_equal(unpack_i2s(data, n).reshape(w[name].shape), w[name]), name
                assert struct.unpack_from("<f", data, n // 4)[0] == w[name + ".scale"], name
    finally:
        os.remove(shadow)
    # The real file differs from the shadow only in each I2_S tensor info (type and dims).
    print("files check: TQ2_0 via gguf-py and I2_S via the shadow file read back exactly")


def mode_write_gguf():
    import gguf  # noqa: F401  (fail early)
    os.makedirs(FIXTURES, exist_ok=True)
    w, tok = make_weights(), make_tokenizer()
    write_i2s(w, tok, os.path.join(FIXTURES, "tiny-i2s.gguf"))
    write_tq2(w, tok, os.path.join(FIXTURES, "tiny-tq2_0.gguf"))
    check_files(w, tok)
    desc = {
        "generator": "tests/goldens/gen_bitnet_tiny.py --write-gguf",
        "numpy": np.__version__,
        "gguf": _version("gguf"),
        "weights_sha256": weights_digest(w),
        "files": {
            f: hashlib.sha256(open(os.path.join(FIXTURES, f), "rb").read()).hexdigest()
            for f in ("tiny-i2s.gguf", "tiny-tq2_0.gguf")
        },
        "scales": {k: float(v) for k, v in sorted(w.items()) if k.endswith(".scale")},
    }
    with open(os.path.join(FIXTURES, "fixtures.json"), "w") as fh:
        json.dump(desc, fh, indent=1)
        fh.write("\n")
    print(json.dumps({k: v for k, v in desc.items() if k != "scales"}, indent=1))


def _version(pkg):
    try:
        import importlib.metadata as md
        return md.version(pkg)
    except Exception:  # noqa: BLE001
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Goldens with transformers
# ---------------------------------------------------------------------------------------------
def build_transformers_model(w, torch, transformers):
    import inspect
    from transformers import BitNetConfig, BitNetForCausalLM
    from transformers.integrations import bitnet as tb

    kw = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, hidden_act="relu2",
              max_position_embeddings=CTX, rms_norm_eps=RMS_EPS, tie_word_embeddings=True,
              attention_bias=False, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None,
              attn_implementation="eager")
    # transformers 5 (a strict dataclass) keeps RoPE settings in `rope_parameters`; 4.x takes rope_theta.
    if "rope_parameters" in getattr(BitNetConfig, "__dataclass_fields__", {}):
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    else:
        kw["rope_theta"] = ROPE_THETA
    cfg = BitNetConfig(**kw)
    cfg._attn_implementation = "eager"
    assert cfg.hidden_size // cfg.num_attention_heads == HEAD_DIM
    model = BitNetForCausalLM(cfg).to(torch.float32).eval()
    assert model.config.hidden_act == "relu2"
    inv = model.model.rotary_emb.inv_freq.double().cpu().numpy()
    want = 1.0 / ROPE_THETA ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    assert np.allclose(inv, want, rtol=1e-6), ("rope theta not applied", inv[:4], want[:4])

    sig = inspect.signature(tb.BitLinear.__init__).parameters
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(t(w["token_embd"]))
        model.lm_head.weight = model.model.embed_tokens.weight  # tied
        model.model.norm.weight.copy_(t(w["output_norm"]))
        for layer in range(LAYERS):
            blk = model.model.layers[layer]
            p = f"blk.{layer}."
            for name, path, _ in NORMS:
                blk.get_submodule(path).weight.copy_(t(w[p + name]))
            for name, path, rows, cols in LINEARS:
                parent_path, attr = path.rsplit(".", 1)
                parent = blk.get_submodule(parent_path)
                extra = {"use_rms_norm": False} if "use_rms_norm" in sig else {}
                bl = tb.BitLinear(cols, rows, bias=False, device="cpu", dtype=torch.float32, **extra)
                packed = tb.pack_weights(t(w[p + name].astype(np.int32)).clone())
                assert packed.dtype == torch.uint8 and tuple(packed.shape) == (rows // 4, cols)
                unpacked = tb.unpack_weights(packed, dtype=torch.float32)
                assert np.array_equal(unpacked.numpy(), w[p + name].astype(np.float32)), "pack round trip"
                bl.weight = packed
                bl.weight_scale = torch.tensor([1.0 / w[p + name + ".scale"]], dtype=torch.float32)
                setattr(parent, attr, bl)
    assert type(model.lm_head) is torch.nn.Linear  # transformers keeps lm_head in full precision
    n_bitlinear = sum(isinstance(m, tb.BitLinear) for m in model.modules())
    assert n_bitlinear == LAYERS * len(LINEARS), n_bitlinear
    return model


def mode_goldens(out_dir, also_cuda):
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    import inspect
    import platform

    import torch
    import transformers
    from transformers.integrations import bitnet as tb

    torch.set_float32_matmul_precision("highest")  # no TF32 on CUDA (the default, made explicit)
    os.makedirs(out_dir, exist_ok=True)
    # Keep the sources that ran (read them: they are what the goldens mean), even if a step fails.
    from transformers.models.bitnet import modeling_bitnet
    src = os.path.join(out_dir, "src")
    os.makedirs(src, exist_ok=True)
    for mod, fname in ((tb, "integrations_bitnet.py"), (modeling_bitnet, "modeling_bitnet.py")):
        with open(os.path.join(src, fname), "w") as fh:
            fh.write(inspect.getsource(mod))
    print("torch", torch.__version__, "transformers", transformers.__version__, "numpy", np.__version__,
          "dynamo disabled:", os.environ.get("TORCHDYNAMO_DISABLE"))
    w = make_weights()
    with open(os.path.join(FIXTURES, "fixtures.json")) as fh:
        want = json.load(fh)["weights_sha256"]
    assert weights_digest(w) == want, "numpy built other weights than the fixtures': numpy version?"
    model = build_transformers_model(w, torch, transformers)

    # The module really quantizes activations: BitLinear on a random input equals the formula,
    # and differs from the unquantized product.
    bl = model.model.layers[0].self_attn.q_proj
    x = torch.from_numpy(np.random.Generator(np.random.PCG64(7)).standard_normal((3, HIDDEN)).astype(np.float32))
    with torch.no_grad():
        y = bl(x).double().numpy()
    y_ref = bitlinear(x.double().numpy(), w["blk.0.attn_q"], w["blk.0.attn_q.scale"])
    y_dense = x.double().numpy() @ (w["blk.0.attn_q"].astype(np.float64) * float(w["blk.0.attn_q.scale"])).T
    bitlinear_check = {"max_abs_vs_formula": float(np.abs(y - y_ref).max()),
                       "max_abs_vs_unquantized": float(np.abs(y - y_dense).max())}
    assert bitlinear_check["max_abs_vs_formula"] < 1e-4 < bitlinear_check["max_abs_vs_unquantized"], bitlinear_check

    def logits(m, ids, device):
        with torch.no_grad():
            inp = torch.tensor([ids], dtype=torch.long, device=device)
            return m(input_ids=inp, use_cache=False).logits[0].double().cpu().numpy()

    seqs = sequences()
    info = {
        "generator": "tests/goldens/gen_bitnet_tiny.py --goldens",
        "reference": "transformers BitNetForCausalLM (eager attention), every projection replaced by "
                     "transformers.integrations.bitnet.BitLinear (offline packed ternary weights, "
                     "weight_scale = 1/s, per-token int8 absmax activation quantization); lm_head "
                     "tied to the embedding, not quantized; float32 on the CPU; torch.compile disabled",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "weights_sha256": weights_digest(w),
        "config": {"vocab": VOCAB, "hidden": HIDDEN, "ffn": FFN, "layers": LAYERS, "heads": HEADS,
                   "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "rope_theta": ROPE_THETA,
                   "rms_eps": RMS_EPS, "bos": BOS, "eos": EOS, "eot": EOT},
        "attn_implementation": str(getattr(model.config, "_attn_implementation", "?")),
        "bitlinear_check": bitlinear_check,
        "sequences": [],
    }
    cuda = also_cuda and torch.cuda.is_available()
    model_cuda = None
    if cuda:
        model_cuda = build_transformers_model(w, torch, transformers).to("cuda")
        info["cuda_device"] = torch.cuda.get_device_name(0)
    for name, ids in seqs.items():
        lg = logits(model, ids, "cpu")
        ref = forward_numpy(w, ids)
        entry = {"name": name, "ids": ids, "file": f"{name}.bin", "shape": [len(ids), VOCAB],
                 "max_abs_vs_numpy_f64": float(np.abs(lg - ref).max()),
                 "argmax_equal_numpy_f64": bool((lg.argmax(-1) == ref.argmax(-1)).all()),
                 "logit_std": float(lg.std()), "logit_max_abs": float(np.abs(lg).max())}
        if cuda:
            entry["max_abs_cuda_vs_cpu"] = float(np.abs(logits(model_cuda, ids, "cuda") - lg).max())
        lg.astype("<f4").tofile(os.path.join(out_dir, entry["file"]))
        info["sequences"].append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "ids"}))

    prompt = greedy_prompt()
    ids, margins = list(prompt), []
    for _ in range(GREEDY_NEW):
        lg = logits(model, ids, "cpu")[-1]
        top = np.argsort(-lg, kind="stable")[:2]
        margins.append(float(lg[top[0]] - lg[top[1]]))
        ids.append(int(top[0]))
    gen = ids[len(prompt):]
    assert not set(gen) & {EOS, EOT}, "greedy continuation hits a stop token: pick another prompt"
    np_gen, _ = greedy_numpy(w, prompt, GREEDY_NEW)
    info["greedy"] = {"prompt_ids": prompt, "generated_ids": gen, "top1_top2_margins": margins,
                      "numpy_f64_generated_ids": np_gen}
    # Teacher-forced logits of prompt + continuation (exercises every position the decode visits).
    lg = logits(model, ids, "cpu")
    lg.astype("<f4").tofile(os.path.join(out_dir, "greedy_full.bin"))
    info["sequences"].append({"name": "greedy_full", "ids": ids, "file": "greedy_full.bin",
                              "shape": [len(ids), VOCAB],
                              "max_abs_vs_numpy_f64": float(np.abs(lg - forward_numpy(w, ids)).max())})
    with open(os.path.join(out_dir, "goldens.json"), "w") as fh:
        json.dump(info, fh, indent=1)
        fh.write("\n")
    print(json.dumps(info["greedy"]))
    print("versions", info["versions"], "bitlinear", bitlinear_check)


def mode_check():
    """Local: the numpy float64 forward against the committed goldens (no torch needed)."""
    w = make_weights()
    info = json.load(open(os.path.join(GOLDENS, "goldens.json")))
    fx = json.load(open(os.path.join(FIXTURES, "fixtures.json")))
    assert info["weights_sha256"] == weights_digest(w) == fx["weights_sha256"], "weights differ"
    for s in info["sequences"]:
        lg = np.fromfile(os.path.join(GOLDENS, s["file"]), dtype="<f4").reshape(s["shape"])
        ref = forward_numpy(w, s["ids"])
        print(f"{s['name']:12} max |torch - numpy f64| = {np.abs(lg - ref).max():.3e}")
    gen, _ = greedy_numpy(w, info["greedy"]["prompt_ids"], GREEDY_NEW)
    assert gen == info["greedy"]["generated_ids"], (gen, info["greedy"]["generated_ids"])
    print("greedy continuation identical")


def mode_dry_run():
    """Local: what the numpy forward says about the sequences and the greedy prompt."""
    w = make_weights()
    print("weights", weights_digest(w))
    for name, ids in sequences().items():
        st = {}
        lg = forward_numpy(w, ids, st)
        srt = -np.sort(-lg, axis=-1)
        print(f"{name:10} len {len(ids):2} std {lg.std():.2f} max {np.abs(lg).max():.2f} "
              f"min top1-top2 {np.min(srt[:, 0] - srt[:, 1]):.3f} argmax {lg.argmax(-1).tolist()} "
              f"near-tie activations {st['near_1e-4']}/{st['near_1e-3']}/{st['n']}")
    gen, margins = greedy_numpy(w, greedy_prompt(), GREEDY_NEW)
    print("greedy", greedy_prompt(), "->", gen, "min margin", min(margins))


def mode_tolerance_study():
    """How far two correct f32 implementations can drift apart, and how far a wrong one lands.

    int8 activation quantization makes the model discontinuous: where x * s sits near a .5 tie,
    the last-bit differences between two f32 implementations can round it the other way (a flip),
    which moves that token's outputs by a whole code step and shifts later layers, so later
    activations flip as well (a cascade). Simulate implementation differences as relative noise
    eps on every BitLinear input of the float64 forward, 10 trials per eps over all sequences, and
    compare with a plain float forward and with an engine that skips activation quantization."""
    w = make_weights()
    seqs = dict(sequences())
    seqs["greedy_full"] = greedy_prompt() + greedy_numpy(w, greedy_prompt(), GREEDY_NEW)[0]
    base = {n: forward_numpy(w, ids) for n, ids in seqs.items()}
    d32 = [np.abs(forward_numpy(w, ids, dtype=np.float32) - base[n]) for n, ids in seqs.items()]
    print(f"all-f32 numpy forward vs f64: max {max(d.max() for d in d32):.2e}, "
          f"rows off by > 1e-3: {sum(int((d.max(-1) > 1e-3).sum()) for d in d32)}")
    global bitlinear
    exact = bitlinear
    rng = np.random.Generator(np.random.PCG64(99))
    try:
        for eps in (1e-7, 1e-6, 1e-5):
            bitlinear = lambda x, t, s: exact(x * (1 + eps * rng.standard_normal(x.shape)), t, s)
            d = [np.abs(forward_numpy(w, ids) - base[n]) for _ in range(10) for n, ids in seqs.items()]
            print(f"noise eps {eps:.0e}: worst max {max(x.max() for x in d):.3f}, "
                  f"worst per-sequence mean {max(x.mean() for x in d):.4f}")
        bitlinear = lambda x, t, s: (x @ t.T.astype(np.float64)) * np.float64(s)
        d = [np.abs(forward_numpy(w, ids) - base[n]) for n, ids in seqs.items()]
        print(f"no activation quantization: max {min(x.max() for x in d):.3f}..{max(x.max() for x in d):.3f}, "
              f"per-sequence mean {min(x.mean() for x in d):.4f}..{max(x.mean() for x in d):.4f}")
    finally:
        bitlinear = exact


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write-gguf", action="store_true", help="write tests/fixtures/bitnet/*.gguf")
    g.add_argument("--goldens", action="store_true", help="transformers logits (needs torch)")
    g.add_argument("--check", action="store_true", help="numpy forward vs the committed goldens")
    g.add_argument("--dry-run", action="store_true", help="numpy forward statistics only")
    g.add_argument("--tolerance-study", action="store_true", help="how far correct f32 engines drift")
    ap.add_argument("--out", default=GOLDENS, help="output folder for --goldens")
    ap.add_argument("--no-cuda", action="store_true", help="skip the CUDA cross-check")
    a = ap.parse_args()
    if a.write_gguf:
        mode_write_gguf()
    elif a.goldens:
        mode_goldens(a.out, not a.no_cuda)
    elif a.check:
        mode_check()
    elif a.tolerance_study:
        mode_tolerance_study()
    else:
        mode_dry_run()


if __name__ == "__main__":
    sys.exit(main())
