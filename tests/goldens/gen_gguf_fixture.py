#!/usr/bin/env python3
"""Write a small GGUF file with gguf-py (the reference implementation) and a JSON description
of what it contains, so that tests/gguf_reference.rs can check our reader and writer against an
independent implementation without needing Python at test time.

Requires: gguf==0.19.0, numpy. Run from the repository root:
    pip install gguf==0.19.0 numpy && python3 tests/goldens/gen_gguf_fixture.py
It regenerates tests/goldens/gguf/pywritten.gguf and pywritten.json (deterministic).
"""
import json
import os

import numpy as np
import gguf

assert gguf.__version__ if hasattr(gguf, "__version__") else True
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf")
os.makedirs(OUT, exist_ok=True)
path = os.path.join(OUT, "pywritten.gguf")

rng = np.random.default_rng(1234)
w = gguf.GGUFWriter(path, "llama")
w.add_uint8("t.u8", 200)
w.add_int8("t.i8", -100)
w.add_uint16("t.u16", 60000)
w.add_int16("t.i16", -30000)
w.add_uint32("t.u32", 4000000000)
w.add_int32("t.i32", -2000000000)
w.add_float32("t.f32", 0.1)
w.add_uint64("t.u64", 2**63 + 5)
w.add_int64("t.i64", -(2**62))
w.add_float64("t.f64", 1.0 / 3.0)
w.add_bool("t.bool", True)
w.add_string("t.str", "ünïcödé ✓ 日本")
w.add_array("t.arr_i32", [1, -2, 3])
w.add_array("t.arr_str", ["a", "bb", ""])
w.add_array("t.arr_f32", [0.5, -1.25])
w.add_array("t.arr_nested", [[1, 2], [3, 4, 5]])
w.add_context_length(2048)
w.add_embedding_length(64)

tensors = {}
def add(name, arr, raw_dtype=None):
    w.add_tensor(name, arr, raw_dtype=raw_dtype)
    tensors[name] = arr

add("f32.weight", rng.standard_normal((3, 5)).astype(np.float32))
add("f16.weight", rng.standard_normal((2, 7)).astype(np.float16))
# Quantized tensors: gguf-py quantizes, the bytes go in as raw data of the given type.
x = rng.standard_normal((2, 64)).astype(np.float32)
q8 = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
add("q8.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
q40 = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q4_0)
add("q4_0.weight", q40, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
x3 = rng.standard_normal((4, 3, 32)).astype(np.float32)
add("bf16.3d", gguf.quants.quantize(x3, gguf.GGMLQuantizationType.BF16), raw_dtype=gguf.GGMLQuantizationType.BF16)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# Describe the file as gguf-py's reader sees it.
r = gguf.GGUFReader(path)
desc = {"tensors": [], "scalars": {}}
for t in r.tensors:
    desc["tensors"].append({
        "name": t.name,
        "type_id": int(t.tensor_type),
        "dims": [int(d) for d in t.shape],  # gguf-py: innermost first, as stored
        "n_bytes": int(t.n_bytes),
        "data_offset": int(t.data_offset),  # absolute
    })
for f in r.fields.values():
    if f.name.startswith("GGUF."):
        continue
    desc["scalars"][f.name] = {"types": [int(x) for x in f.types]}
    if len(f.types) == 1 and f.types[0] != gguf.GGUFValueType.ARRAY:
        v = f.parts[f.data[0]]
        if f.types[0] == gguf.GGUFValueType.STRING:
            desc["scalars"][f.name]["value"] = bytes(v).decode("utf-8")
        else:
            desc["scalars"][f.name]["value"] = v.tolist()[0]
desc["n_kv"] = len([f for f in r.fields.values() if not f.name.startswith("GGUF.")])
desc["alignment"] = r.alignment
desc["data_offset"] = int(r.data_offset)
with open(os.path.join(OUT, "pywritten.json"), "w") as fh:
    json.dump(desc, fh, indent=1, sort_keys=True)
print("wrote", path, os.path.getsize(path), "bytes")
