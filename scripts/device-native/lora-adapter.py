#!/usr/bin/env python3
"""A random LoRA adapter of rank RANK on the attention projections (q, k, v, o) of every block
of the GGUF model BASE, in llama.cpp's GGUF adapter layout (F32, lora_alpha = RANK): what
scripts/device-native/lora.sh measures the cost of.
    python3 lora-adapter.py BASE OUT RANK"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter

base, out, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = GGUFReader(base)
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
w = GGUFWriter(out, arch)
w.add_string("general.type", "adapter")
w.add_string("adapter.type", "lora")
w.add_float32("adapter.lora.alpha", float(rank))
rng = np.random.default_rng(0)
n = 0
for t in r.tensors:
    parts = t.name.split(".")
    if len(parts) == 4 and parts[2] in ("attn_q", "attn_k", "attn_v", "attn_output"):
        cols, rows = int(t.shape[0]), int(t.shape[1])
        w.add_tensor(t.name + ".lora_a",
                     (rng.standard_normal((rank, cols)) / np.sqrt(cols)).astype(np.float32))
        w.add_tensor(t.name + ".lora_b",
                     (rng.standard_normal((rows, rank)) * 0.01).astype(np.float32))
        n += 1
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"{out}: {n} pairs of rank {rank} for {arch}")
