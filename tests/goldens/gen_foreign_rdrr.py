#!/usr/bin/env python3
"""A tiny Llama model as a GGUF and as the RDRR folder the seed's converter writes from it
(tests/rdrr_foreign.rs).

Pinned versions (the venv of gen_arch_goldens.py): gguf==0.19.0, numpy; llama_cpp is imported
by gen_arch_goldens.py, whose vocabulary this reuses.
Run from the repository root:
    target/llama-venv/bin/python tests/goldens/gen_foreign_rdrr.py

Deterministic output in tests/fixtures/foreign_rdrr/:

1. tiny-llama.gguf, written with gguf-py as llama.cpp's convert_hf_to_gguf.py writes a Llama:
   seeded random weights made in Hugging Face's layout, q and k rows permuted for GGUF's
   interleaved-pair RoPE (`LlamaModel.permute`), the linear weights Q8_0, the embedding and the
   output matrix F16, the norms F32; 64 wide, 2 blocks, 4 query heads over 2 KV heads of 16, FFN
   128, its own output matrix, RoPE base 10000, RMS eps 1e-5; gen_arch_goldens.py's 320-token
   byte-level BPE vocabulary (pre-tokenizer `qwen2`) and ChatML template.
2. tiny-llama-rdrr/: that GGUF converted the way the seed document (the RDRR format
   specification) describes a converter's output, written here from the GGUF read back with
   gguf-py's GGUFReader and nothing of tritium:
   - tensors under their Hugging Face names (model.embed_tokens.weight,
     model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight), with q and
     k rows back in Hugging Face's order (the inverse of llama.cpp's permutation; checked
     against the weights as made), bytes otherwise as in the GGUF (Q8_0 rows are whole blocks);
   - manifest.json v1: modelId, modelType "transformer", quantization, quantizationInfo,
     hashAlgorithm sha256, the `architecture` block (numLayers, hiddenSize, intermediateSize,
     numAttentionHeads, numKeyValueHeads, headDim, vocabSize, maxSeqLen, ropeTheta: the
     seed's fields; no rmsNormEps, which the seed does not list: readers assume Llama's 1e-5),
     groups embed / layer.N / head with SHA-256 over the group's tensors in order, shards
     with sizes and SHA-256, tensorsFile, tensorCount, totalSize, tokenizer;
   - tensors.json: group, shard, offset, size, shape (outermost first), dtype, and `spans`
     for tensors that cross shards (4 KiB-aligned tensors in 16 KiB shards: several do);
   - tokenizer.json in Hugging Face's format (BPE model with the GGUF's vocabulary and merges,
     the qwen2 pre-tokenizer regex, byte-level decoder, the control tokens as special added
     tokens);
   - no gguf_metadata.json and no config.json.
"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType
from gguf.quants import quantize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_arch_goldens import CHAT_TEMPLATE, vocabulary  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "foreign_rdrr"
GGUF = OUT / "tiny-llama.gguf"
RDRR = OUT / "tiny-llama-rdrr"

C = dict(dim=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, theta=10000.0, eps=1e-5,
         ctx=2048, seed=11)
SHARD_SIZE = 16 << 10
ALIGN = 4096
# llama.cpp's qwen2 pre-tokenizer, as Qwen2's tokenizer.json writes it.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# GGUF name -> Hugging Face name, per layer and outside the layers.
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name):
    if gguf_name in TOP_NAMES:
        return TOP_NAMES[gguf_name]
    _, i, part, kind = gguf_name.split(".")
    return f"model.layers.{i}.{LAYER_NAMES[part]}.{kind}"


def permute(w, n_head):
    """llama.cpp's LlamaModel.permute (rows of a [rows, ...] array)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, n_head):
    """The inverse of `permute`: GGUF's interleaved rows back to Hugging Face's order."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def hf_weights(n_vocab):
    """Hugging Face layout: name -> (array, GGML type it is stored as)."""
    rng = np.random.default_rng(C["seed"])
    dim, hd = C["dim"], C["head_dim"]
    mat = lambda rows, cols, gain=1.0: (rng.standard_normal((rows, cols)) * gain /
                                         np.sqrt(cols)).astype(np.float32)
    vec = lambda n: (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    q8, f16, f32 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.F16, GGMLQuantizationType.F32
    w = {"model.embed_tokens.weight": (mat(n_vocab, dim, 8.0), f16)}
    for i in range(C["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (vec(dim), f32)
        w[p + "self_attn.q_proj.weight"] = (mat(C["heads"] * hd, dim, 2.0), q8)
        w[p + "self_attn.k_proj.weight"] = (mat(C["kv_heads"] * hd, dim, 2.0), q8)
        w[p + "self_attn.v_proj.weight"] = (mat(C["kv_heads"] * hd, dim), q8)
        w[p + "self_attn.o_proj.weight"] = (mat(dim, C["heads"] * hd, 2.0), q8)
        w[p + "post_attention_layernorm.weight"] = (vec(dim), f32)
        w[p + "mlp.gate_proj.weight"] = (mat(C["ffn"], dim, 2.0), q8)
        w[p + "mlp.up_proj.weight"] = (mat(C["ffn"], dim), q8)
        w[p + "mlp.down_proj.weight"] = (mat(dim, C["ffn"], 2.0), q8)
    w["model.norm.weight"] = (vec(dim), f32)
    w["lm_head.weight"] = (mat(n_vocab, dim, 4.0), f16)
    return w


def encode(values, qtype):
    if qtype == GGMLQuantizationType.F32:
        return values.astype(np.float32)
    if qtype == GGMLQuantizationType.F16:
        return values.astype(np.float16)
    return quantize(values, qtype)


def write_gguf(tokens, types, merges, weights):
    """As convert_hf_to_gguf.py writes a Llama (q/k permuted)."""
    w = GGUFWriter(str(GGUF), "llama")
    w.add_name("tiny llama")
    w.add_context_length(C["ctx"])
    w.add_embedding_length(C["dim"])
    w.add_block_count(C["layers"])
    w.add_feed_forward_length(C["ffn"])
    w.add_rope_dimension_count(C["head_dim"])
    w.add_head_count(C["heads"])
    w.add_head_count_kv(C["kv_heads"])
    w.add_rope_freq_base(C["theta"])
    w.add_layer_norm_rms_eps(C["eps"])
    w.add_file_type(7)  # MOSTLY_Q8_0
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    gguf_of = {v: k for k, v in TOP_NAMES.items()}
    for name, (values, qtype) in weights.items():
        if name.startswith("model.layers."):
            _, _, i, *rest = name.split(".")
            part = ".".join(rest[:-1])
            g = next(k for k, v in LAYER_NAMES.items() if v == part)
            gname = f"blk.{i}.{g}.{rest[-1]}"
        else:
            gname = gguf_of[name]
        if g_is(gname, "attn_q"):
            values = permute(values, C["heads"])
        elif g_is(gname, "attn_k"):
            values = permute(values, C["kv_heads"])
        w.add_tensor(gname, encode(values, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def g_is(gguf_name, part):
    return gguf_name.startswith("blk.") and gguf_name.split(".")[2] == part


def tokenizer_json(tokens, types, merges):
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (t, ty) in enumerate(zip(tokens, types)) if int(ty) == 3  # CONTROL
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
             "invert": False},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ") for m in merges]},
    }


def write_rdrr(weights):
    """The seed's RDRR folder from the GGUF, read back with gguf-py."""
    reader = GGUFReader(str(GGUF))
    field = lambda key: reader.fields[key]
    tokens = [bytes(field("tokenizer.ggml.tokens").parts[i]).decode()
              for i in field("tokenizer.ggml.tokens").data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0])
             for i in field("tokenizer.ggml.token_type").data]
    merges = [bytes(field("tokenizer.ggml.merges").parts[i]).decode()
              for i in field("tokenizer.ggml.merges").data]

    stream = bytearray()
    entries = {}
    order = []
    for t in reader.tensors:
        name = hf_name(t.name)
        # Outermost first; gguf-py's shape is GGUF's, innermost first.
        shape = [int(d) for d in reversed(t.shape)]
        data = np.ascontiguousarray(t.data).view(np.uint8).reshape(shape[0], -1)
        if g_is(t.name, "attn_q"):
            data = unpermute(data, C["heads"])
        elif g_is(t.name, "attn_k"):
            data = unpermute(data, C["kv_heads"])
        raw = data.tobytes()
        made, qtype = weights[name]
        assert raw == encode(made, qtype).tobytes(), f"{name}: not the weights as made"
        start = -(-len(stream) // ALIGN) * ALIGN
        stream.extend(b"\0" * (start - len(stream)))
        stream.extend(raw)
        entries[name] = dict(start=start, raw=raw, shape=shape, dtype=t.tensor_type.name)
        order.append(name)

    shards = [bytes(stream[i:i + SHARD_SIZE]) for i in range(0, len(stream), SHARD_SIZE)]
    group_of = lambda n: ("embed" if n == "model.embed_tokens.weight" else
                          f"layer.{n.split('.')[2]}" if n.startswith("model.layers.") else "head")
    tensors = {}
    for name in order:
        e = entries[name]
        spans, pos, end = [], e["start"], e["start"] + len(e["raw"])
        while pos < end:
            shard, off = divmod(pos, SHARD_SIZE)
            size = min(end, (shard + 1) * SHARD_SIZE) - pos
            spans.append({"shardIndex": shard, "offset": off, "size": size})
            pos += size
        loc = {"group": group_of(name), "shard": spans[0]["shardIndex"],
               "offset": spans[0]["offset"], "size": len(e["raw"]), "shape": e["shape"],
               "dtype": e["dtype"]}
        if len(spans) > 1:
            loc["spans"] = spans
        tensors[name] = loc

    groups = {}
    for name in order:
        g = group_of(name)
        groups.setdefault(g, {"type": g.split(".")[0], "version": "1.0.0", "shards": [],
                              "tensors": []})
        groups[g]["tensors"].append(name)
        for s in ([tensors[name]["shard"]] +
                  [sp["shardIndex"] for sp in tensors[name].get("spans", [])]):
            if s not in groups[g]["shards"]:
                groups[g]["shards"].append(s)
    for g, body in groups.items():
        body["hash"] = hashlib.sha256(
            b"".join(entries[n]["raw"] for n in body["tensors"])).hexdigest()
        if g.startswith("layer."):
            body["layerIndex"] = int(g.split(".")[1])

    manifest = {
        "version": 1,
        "modelId": "tiny-llama-q8_0",
        "modelType": "transformer",
        "quantization": "Q8_0",
        "quantizationInfo": {"weights": "q8_0", "embeddings": "f16", "lmHead": "f16",
                             "variantTag": "wq8_0-embf16"},
        "hashAlgorithm": "sha256",
        "architecture": {
            "numLayers": C["layers"], "hiddenSize": C["dim"], "intermediateSize": C["ffn"],
            "numAttentionHeads": C["heads"], "numKeyValueHeads": C["kv_heads"],
            "headDim": C["head_dim"], "vocabSize": len(tokens), "maxSeqLen": C["ctx"],
            "ropeTheta": C["theta"],
        },
        "groups": groups,
        "shards": [{"index": i, "fileName": f"shard_{i:05d}.bin", "size": len(s),
                    "hash": hashlib.sha256(s).hexdigest(), "hashAlgorithm": "sha256"}
                   for i, s in enumerate(shards)],
        "tensorsFile": "tensors.json",
        "tensorCount": len(tensors),
        "totalSize": sum(len(s) for s in shards),
        "tokenizer": {"type": "bpe", "file": "tokenizer.json", "vocabSize": len(tokens)},
    }
    if RDRR.exists():
        shutil.rmtree(RDRR)
    RDRR.mkdir(parents=True)
    for i, s in enumerate(shards):
        (RDRR / f"shard_{i:05d}.bin").write_bytes(s)
    (RDRR / "tensors.json").write_text(json.dumps(tensors, indent=2) + "\n")
    (RDRR / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (RDRR / "tokenizer.json").write_text(
        json.dumps(tokenizer_json(tokens, types, merges), ensure_ascii=False, indent=1) + "\n")
    return manifest


def main():
    tokens, types, merges = vocabulary()
    weights = hf_weights(len(tokens))
    OUT.mkdir(parents=True, exist_ok=True)
    write_gguf(tokens, [int(t) for t in types], merges, weights)
    m = write_rdrr(weights)
    spanning = sum(1 for t in json.loads((RDRR / "tensors.json").read_text()).values()
                   if "spans" in t)
    print(f"{GGUF}: {GGUF.stat().st_size} bytes; {RDRR}: {len(m['shards'])} shards, "
          f"{m['tensorCount']} tensors, {spanning} across shards")


if __name__ == "__main__":
    main()
