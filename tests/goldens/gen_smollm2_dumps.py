#!/usr/bin/env python3
"""SHA-256 of gguf-py's dequantization of a few tensors of the real SmolLM2-135M-Instruct GGUF, so
that tests/cli.rs can check `tritium dump` against an independent implementation on a real file.

Requires: gguf==0.19.0, numpy, and models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-models.sh).
Run from the repository root: python3 tests/goldens/gen_smollm2_dumps.py
"""
import hashlib
import json

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

r = GGUFReader("models/SmolLM2-135M-Instruct.Q4_1.gguf")
want = ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"]
out = {}
for t in r.tensors:
    if t.name in want:
        values = dequantize(t.data, t.tensor_type).astype("<f4", copy=False)
        out[t.name] = {
            "dtype": t.tensor_type.name,
            "n_elements": int(t.n_elements),
            "sha256": hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest(),
            "first": [float(x) for x in values.reshape(-1)[:4]],
        }
with open("tests/goldens/smollm2_dumps.json", "w") as fh:
    json.dump(out, fh, indent=1, sort_keys=True)
print(json.dumps(out, indent=1))
