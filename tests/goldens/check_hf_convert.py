#!/usr/bin/env python3
"""Check `tritium convert <hf-checkpoint> --quantize ...` against checkpoints built here from
independent code, so neither side shares code with the converter:

1. BitNet, dense master weights (the form of microsoft/bitnet-b1.58-2B-4T-bf16): the float
   weights of tests/goldens/gen_bitnet_tiny.py's `make_weights` *before* ternarization (same
   PCG64 stream, re-run here), as an F32 safetensors checkpoint. `--quantize i2_s` must ternarize
   them as BitNet's converter does (s = mean|W|, round half to even, clamp) and give
   tests/fixtures/bitnet/tiny-i2s.gguf's tensors byte for byte.
2. Llama: SmolLM2-135M Q8_0 dequantized by gguf-py, Q/K rows put back into transformers' order
   with llama.cpp's own `reverse_hf_permute` (convert_llama_ggml_to_gguf.py), as F32.
   `--quantize q8_0` must give the Q8_0 GGUF's tensors byte for byte (read with gguf-py).

Safetensors files are written by hand (the format is an 8-byte header length, JSON, data).
The RDRR output is read with this script's own reader (manifest.json, tensors.json, spans).

    target/py-venv/bin/python tests/goldens/check_hf_convert.py [--tritium target/debug/tritium]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gen_bitnet_tiny as bt  # noqa: E402


def write_safetensors(path, tensors):
    """tensors: [(name, np.ndarray)] (float32 or uint8)."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        dtype = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("uint8"): "U8"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(len(text).to_bytes(8, "little") + text)
        for b in blobs:
            fh.write(b)


def rdrr_tensors(folder):
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    tensors = json.load(open(os.path.join(folder, manifest["tensorsFile"])))
    out = {}
    for name, t in tensors.items():
        spans = t.get("spans") or [{"shardIndex": t["shard"], "offset": t["offset"], "size": t["size"]}]
        data = bytearray()
        for s in spans:
            with open(os.path.join(folder, manifest["shards"][s["shardIndex"]]["fileName"]), "rb") as fh:
                fh.seek(s["offset"])
                data += fh.read(s["size"])
        out[name] = (t["dtype"], t["shape"], bytes(data))
    return out


def run(tritium, *args):
    r = subprocess.run([tritium, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"tritium {' '.join(args)} failed:\n{r.stderr}")
    return r.stderr.strip()


def dense_bitnet_weights():
    """gen_bitnet_tiny.make_weights with the float weights kept (same RNG calls in order)."""
    rng = np.random.Generator(np.random.PCG64(bt.SEED))
    w = {"token_embd": (rng.standard_normal((bt.VOCAB, bt.HIDDEN)) * bt.EMBED_STD).astype(np.float16).astype(np.float32)}
    for layer in range(bt.LAYERS):
        for name, _, n in bt.NORMS:
            w[f"blk.{layer}.{name}"] = rng.uniform(0.5, 1.5, n).astype(np.float32)
        for name, _, rows, cols in bt.LINEARS:
            sigma = bt.SIGMA_GAIN.get(name, 1.0) / np.sqrt(cols)
            w[f"blk.{layer}.{name}"] = (rng.standard_normal((rows, cols)) * sigma).astype(np.float32)
    w["output_norm"] = rng.uniform(0.5, 1.5, bt.HIDDEN).astype(np.float32)
    return w


def check_bitnet(tritium, tmp):
    w = dense_bitnet_weights()
    ck = os.path.join(tmp, "bitnet-dense")
    os.makedirs(ck)
    tensors = [("model.embed_tokens.weight", w["token_embd"]), ("model.norm.weight", w["output_norm"])]
    for layer in range(bt.LAYERS):
        for name, path, _ in bt.NORMS:
            tensors.append((f"model.layers.{layer}.{path}.weight", w[f"blk.{layer}.{name}"]))
        for name, path, _, _ in bt.LINEARS:
            tensors.append((f"model.layers.{layer}.{path}.weight", w[f"blk.{layer}.{name}"]))
    write_safetensors(os.path.join(ck, "model.safetensors"), tensors)
    json.dump({"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_size": bt.HIDDEN,
               "intermediate_size": bt.FFN, "num_hidden_layers": bt.LAYERS, "num_attention_heads": bt.HEADS,
               "num_key_value_heads": bt.KV_HEADS, "vocab_size": bt.VOCAB, "max_position_embeddings": bt.CTX,
               "rope_theta": bt.ROPE_THETA, "rms_norm_eps": bt.RMS_EPS, "tie_word_embeddings": True,
               "hidden_act": "relu2", "bos_token_id": bt.BOS, "eos_token_id": bt.EOS},
              open(os.path.join(ck, "config.json"), "w"))
    fixture = os.path.join(ROOT, "tests/fixtures/bitnet/tiny-i2s.gguf")
    ref = os.path.join(tmp, "bitnet-ref")
    run(tritium, "convert", fixture, ref)  # GGUF -> RDRR is byte-exact (tests/convert_rdrr.rs)
    out = os.path.join(tmp, "bitnet-out")
    print(run(tritium, "convert", ck, out, "--quantize", "i2_s"))
    got, want = rdrr_tensors(out), rdrr_tensors(ref)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for name in want:
        assert got[name] == want[name], name
    print(f"BitNet dense F32 checkpoint -> i2_s: {len(want)} tensors equal to tiny-i2s.gguf's")


def reverse_hf_permute(weights, n_head, n_kv_head=None):
    """llama.cpp convert_llama_ggml_to_gguf.py / convert.py's inverse of `permute`."""
    if n_kv_head is not None and n_head != n_kv_head:
        n_head //= n_kv_head
    return (weights.reshape(n_head, weights.shape[0] // n_head // 2, 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


HF = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
      "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
      "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def check_llama(tritium, tmp):
    src = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q8_0.gguf")
    r = gguf.GGUFReader(src)
    n_head = int(r.fields["llama.attention.head_count"].contents())
    n_kv = int(r.fields["llama.attention.head_count_kv"].contents())
    ck = os.path.join(tmp, "smollm2-hf")
    os.makedirs(ck)
    tensors = []
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape.tolist())]
        v = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        else:
            _, layer, base, _ = t.name.split(".")
            name = f"model.layers.{layer}.{HF[base]}.weight"
            # llama.cpp permutes Q over n_head heads and K over n_kv_head heads.
            if base == "attn_q":
                v = reverse_hf_permute(v, n_head)
            elif base == "attn_k":
                v = reverse_hf_permute(v, n_kv)
        tensors.append((name, v))
    write_safetensors(os.path.join(ck, "model.safetensors"), tensors)
    json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "intermediate_size": 1536,
               "num_hidden_layers": 30, "num_attention_heads": n_head, "num_key_value_heads": n_kv,
               "vocab_size": 49152, "max_position_embeddings": 8192, "rope_theta": 100000.0,
               "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu"},
              open(os.path.join(ck, "config.json"), "w"))
    out = os.path.join(tmp, "smollm2-q8")
    print(run(tritium, "convert", ck, out, "--quantize", "q8_0"))
    got = rdrr_tensors(out)
    assert sorted(got) == sorted(t.name for t in r.tensors)
    for t in r.tensors:
        dtype, shape, data = got[t.name]
        assert dtype == t.tensor_type.name, (t.name, dtype)
        assert shape == [int(d) for d in reversed(t.shape.tolist())], t.name
        assert data == bytes(np.asarray(t.data).reshape(-1).view(np.uint8)), t.name
    print(f"SmolLM2 F32 checkpoint (gguf-py dequant, llama.cpp reverse permute) -> q8_0: "
          f"{len(got)} tensors equal to the Q8_0 GGUF's (gguf-py)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tritium", default=os.path.join(ROOT, "target/debug/tritium"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        check_bitnet(a.tritium, tmp)
        check_llama(a.tritium, tmp)
