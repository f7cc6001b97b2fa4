#!/usr/bin/env python3
"""A tiny runnable Trellis v3 Llama and its float64 reference logits (tests/trellis_run.rs).

Pinned versions: the venv of gen_arch_goldens.py (numpy, gguf==0.19.0; llama_cpp is imported by
gen_arch_goldens.py, whose vocabulary this reuses). safetensors files are written here by hand
(the format is an 8-byte header length, a JSON header, the data), so safetensors is not needed.
Run from the repository root:
    target/llama-venv/bin/python tests/goldens/gen_trellis_model.py

Deterministic output:
1. tests/fixtures/trellis/run/: a Trellis v3 folder as the reference quantizer writes one
   (shared rules: tests/fixtures/trellis/gen_fixture.py's numpy quantizer and packer, imported):
   config.json (LlamaForCausalLM: 128 wide, 2 blocks, 4 query heads over 2 KV heads of 32,
   FFN 256, vocabulary 320, RoPE base 10000, RMS eps 1e-5, tied embeddings),
   model.safetensors.index.json, quantization_config.json, one model-00001-of-00001.safetensors
   (the embedding F16, the norms F32, the 14 linear weights Trellis-quantized at 2 to 8 bits,
   `in` a multiple of 128 with G = in/128 scale groups), tokenizer.json (gen_foreign_rdrr.py's,
   the 320-token byte-level BPE in Hugging Face's format).
2. tests/goldens/trellis_run.json: for PROMPT_IDS, a float64 forward pass written from
   transformers' Llama (rotate-half RoPE over Hugging Face's q/k row order, grouped KV heads,
   SiLU-gated FFN, RMSNorm, tied head) over the weights as the reference runtime decodes them
   (f32 arithmetic rounded to f16: gen_fixture.decode): greedy continuation ids with each
   step's top-1/top-2 margin, and the logits of every position of prompt + continuation.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "trellis"))
from gen_arch_goldens import vocabulary  # noqa: E402
from gen_foreign_rdrr import tokenizer_json  # noqa: E402
from gen_fixture import decode, pack, quantize  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "trellis" / "run"
GOLDEN = ROOT / "tests" / "goldens" / "trellis_run.json"
C = dict(dim=128, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=256, theta=10000.0, eps=1e-5,
         ctx=512, seed=23)
PROMPT_IDS = [257, 316, 108, 277, 102, 259, 282, 283, 263, 115]
GREEDY = 12
SHARD = "model-00001-of-00001.safetensors"
# Bits per linear weight, cycling: every width 2..8 appears.
BITS = [4, 3, 5, 6, 2, 7, 8]


def write_safetensors(path, tensors):
    header, data = {}, bytearray()
    for name, arr in tensors.items():
        dtype = {np.float16: "F16", np.float32: "F32", np.uint8: "U8"}[arr.dtype.type]
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data.extend(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + bytes(data))


def make_model(n_vocab):
    rng = np.random.default_rng(C["seed"])
    dim, hd = C["dim"], C["head_dim"]
    f16 = lambda a: a.astype(np.float16)
    mat = lambda rows, cols, gain=1.0: (rng.standard_normal((rows, cols)) * gain /
                                         np.sqrt(cols)).astype(np.float32)
    vec = lambda n: (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    plain = {"model.embed_tokens.weight": f16(mat(n_vocab, dim, 8.0))}
    linear = {}
    for i in range(C["layers"]):
        p = f"model.layers.{i}."
        plain[p + "input_layernorm.weight"] = vec(dim)
        plain[p + "post_attention_layernorm.weight"] = vec(dim)
        linear[p + "self_attn.q_proj.weight"] = mat(C["heads"] * hd, dim, 2.0)
        linear[p + "self_attn.k_proj.weight"] = mat(C["kv_heads"] * hd, dim, 2.0)
        linear[p + "self_attn.v_proj.weight"] = mat(C["kv_heads"] * hd, dim)
        linear[p + "self_attn.o_proj.weight"] = mat(dim, C["heads"] * hd, 2.0)
        linear[p + "mlp.gate_proj.weight"] = mat(C["ffn"], dim, 2.0)
        linear[p + "mlp.up_proj.weight"] = mat(C["ffn"], dim)
        linear[p + "mlp.down_proj.weight"] = mat(dim, C["ffn"], 2.0)
    plain["model.norm.weight"] = vec(dim)

    tensors, decoded, meta = dict(plain), {}, {}
    for k, (name, w) in enumerate(linear.items()):
        b = BITS[k % len(BITS)]
        out, inn = w.shape
        su = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), inn)
        sv = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), out)
        groups = -(-inn // 128)
        idx, scales = quantize(w, b, groups, su, sv)
        for part, arr in (("indices", pack(idx, b)), ("scales", scales), ("su", su), ("sv", sv)):
            tensors[f"{name}.{part}"] = arr
        decoded[name] = decode(idx, scales, su, sv, b)
        meta[name] = {"bits": b, "shape": [out, inn],
                      "mse": float(np.mean((decoded[name].astype(np.float32) - w) ** 2))}
    return plain, tensors, decoded, meta


def rms(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + C["eps"]) * w


def rope(x, pos):
    """transformers' rotate-half RoPE: x [T, heads, hd]."""
    hd = x.shape[-1]
    inv = C["theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.outer(pos, inv)
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
    half = hd // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def forward(w, ids):
    """float64 logits [T, vocab] of `ids`, from position 0."""
    f = lambda n: w[n].astype(np.float64)
    x = f("model.embed_tokens.weight")[ids]
    t = len(ids)
    pos = np.arange(t, dtype=np.float64)
    hd, nh, nkv = C["head_dim"], C["heads"], C["kv_heads"]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for i in range(C["layers"]):
        p = f"model.layers.{i}."
        h = rms(x, f(p + "input_layernorm.weight"))
        q = rope((h @ f(p + "self_attn.q_proj.weight").T).reshape(t, nh, hd), pos)
        k = rope((h @ f(p + "self_attn.k_proj.weight").T).reshape(t, nkv, hd), pos)
        v = (h @ f(p + "self_attn.v_proj.weight").T).reshape(t, nkv, hd)
        att = np.empty((t, nh, hd))
        for head in range(nh):
            kv = head // (nh // nkv)
            s = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att[:, head] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv]
        x = x + att.reshape(t, nh * hd) @ f(p + "self_attn.o_proj.weight").T
        h = rms(x, f(p + "post_attention_layernorm.weight"))
        g = h @ f(p + "mlp.gate_proj.weight").T
        u = h @ f(p + "mlp.up_proj.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ f(p + "mlp.down_proj.weight").T
    x = rms(x, f("model.norm.weight"))
    return x @ f("model.embed_tokens.weight").T


def main():
    tokens, types, merges = vocabulary()
    n_vocab = len(tokens)
    plain, tensors, decoded, meta = make_model(n_vocab)
    OUT.mkdir(parents=True, exist_ok=True)
    write_safetensors(OUT / SHARD, tensors)
    total = sum(a.nbytes for a in tensors.values())
    write_json = lambda name, v: (OUT / name).write_text(json.dumps(v, indent=2) + "\n")
    write_json("model.safetensors.index.json", {
        "metadata": {"total_size": total, "format": "trellis_v3",
                     "quantization": {"method": "trellis_ldlq", "hadamard_transform": True}},
        "weight_map": {k: SHARD for k in sorted(tensors)},
    })
    write_json("quantization_config.json", {
        "quantization_version": "trellis_v3",
        "quantization_method": "trellis_ldlq",
        "global_config": {"hadamard_transform": True, "tile_size": 16,
                          "scale_groups": "per_128_inputs"},
        "tensor_metadata": meta,
    })
    write_json("config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": C["dim"], "intermediate_size": C["ffn"],
        "num_hidden_layers": C["layers"], "num_attention_heads": C["heads"],
        "num_key_value_heads": C["kv_heads"], "vocab_size": n_vocab,
        "max_position_embeddings": C["ctx"], "rms_norm_eps": C["eps"],
        "rope_theta": C["theta"], "hidden_act": "silu", "tie_word_embeddings": True,
        "bos_token_id": tokens.index("<|endoftext|>"), "eos_token_id": tokens.index("<|im_end|>"),
    })
    (OUT / "tokenizer.json").write_text(json.dumps(
        tokenizer_json(tokens, [int(t) for t in types], merges), ensure_ascii=False,
        indent=1) + "\n")

    weights = dict(plain)
    weights.update(decoded)
    ids = list(PROMPT_IDS)
    margins = []
    for _ in range(GREEDY):
        last = forward(weights, ids)[-1]
        top = np.sort(last)[::-1]
        margins.append(float(top[0] - top[1]))
        ids.append(int(np.argmax(last)))
    logits = forward(weights, ids)
    GOLDEN.write_text(json.dumps({
        "prompt_ids": PROMPT_IDS,
        "greedy_ids": ids[len(PROMPT_IDS):],
        "greedy_step_margin": [round(m, 6) for m in margins],
        "sequence": ids,
        "logits": [[round(float(v), 6) for v in row] for row in logits],
    }) + "\n")
    print(f"{OUT}: {total} tensor bytes; greedy {ids[len(PROMPT_IDS):]}, "
          f"smallest margin {min(margins):.4f}")


if __name__ == "__main__":
    main()
