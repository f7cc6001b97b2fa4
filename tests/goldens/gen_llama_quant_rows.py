#!/usr/bin/env python3
"""ggml's own reference quantizers on small rows, for tests/llama_quant.rs.

Pinned versions: llama-cpp-python==0.3.36 (built from source; its vendored llama.cpp's
libggml-base), numpy. Set-up as in gen_llama_goldens.py; run from the repository root:
    target/llama-venv/bin/python tests/goldens/gen_llama_quant_rows.py

The quantizers are called through ctypes in the libggml-base shared library that
llama-cpp-python ships: `ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, NULL)`,
which without an importance matrix runs `quantize_row_<type>_ref` (the code llama-quantize uses
for every tensor when there is no imatrix). libggml-base is compiled without -march flags
(x86-64 baseline), so nothing is fused or vectorized across elements: results are the C
semantics of ggml-quants.c, the same on every x86-64 machine.

Output (tests/goldens/llama/quant_rows/, all little-endian, no headers):
    input.f32.bin    N_ROWS x 256 f32, seeded (numpy PCG64, seed 20240611) plus hand-made rows
                     that reach the corner cases (all zero, constant, positive-only, tiny,
                     huge, ties, zero sub-blocks, outliers)
    <type>.bin       ggml's bytes for the whole input, for Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
    index.json       {"n_rows", "n_per_row", "types": {name: {"id", "bytes", "sha256"}},
                      "rows": [description per row], versions}
"""
import ctypes
import hashlib
import json
from pathlib import Path

import numpy as np
import llama_cpp

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "goldens" / "llama" / "quant_rows"
N = 256

# ggml_type ids (ggml.h) and bytes per 256 elements.
TYPES = {
    "Q4_0": (2, 8 * 18),
    "Q4_1": (3, 8 * 20),
    "Q5_0": (6, 8 * 22),
    "Q5_1": (7, 8 * 24),
    "Q8_0": (8, 8 * 34),
    "Q4_K": (12, 144),
    "Q5_K": (13, 176),
    "Q6_K": (14, 210),
}


def rows():
    rng = np.random.Generator(np.random.PCG64(20240611))
    out = []

    def add(desc, x):
        x = np.asarray(x, dtype=np.float32).reshape(N)
        out.append((desc, x))

    add("normal(0, 1)", rng.standard_normal(N))
    add("normal(0, 0.02), weight-like", rng.standard_normal(N) * 0.02)
    add("normal(0, 0.02), weight-like", rng.standard_normal(N) * 0.02)
    add("uniform(0.5, 1.5), positive only (K-quant min clamps to 0)", rng.uniform(0.5, 1.5, N))
    add("uniform(-1.5, -0.5), negative only", rng.uniform(-1.5, -0.5, N))
    add("all zeros", np.zeros(N))
    add("constant 0.75 (max == min)", np.full(N, 0.75))
    z = rng.standard_normal(N) * 0.1
    z[32:64] = 0.0  # a zero 32-block / Q4_K sub-block
    z[128:144] = 0.0  # a zero Q6_K 16-group
    z[200] = 0.0
    add("normal(0, 0.1) with zero sub-blocks", z)
    t = rng.standard_t(2.0, N) * 0.05
    t[[3, 77, 190]] = [4.0, -6.0, 5.5]
    add("heavy tails with outliers", t)
    add("tiny values (1e-20 .. 1e-17, below GROUP_MAX_EPS = 1e-15)", rng.standard_normal(N) * 1e-18)
    add("large values, normal(0, 3e4)", rng.standard_normal(N) * 3e4)
    add("multiples of 1/8 in [-2, 2] (rounding ties)", rng.integers(-16, 17, N) / 8.0)
    s = rng.standard_normal(N) * 0.02
    s[::32] = 1.0  # one large value per 32-block
    add("normal(0, 0.02) with one 1.0 per 32-block", s)
    sc = rng.standard_normal(N)
    for j in range(8):
        sc[32 * j : 32 * j + 32] *= 10.0 ** (j - 4)  # sub-block scales spanning 8 decades
    add("sub-blocks scaled 1e-4 .. 1e3", sc)
    add("normal(0.3, 0.05), offset", rng.normal(0.3, 0.05, N))
    add("uniform(-1, 1)", rng.uniform(-1.0, 1.0, N))
    return out


def main():
    libdir = Path(llama_cpp.__file__).parent / "lib"
    ggml = ctypes.CDLL(str(libdir / "libggml-base.so"))
    ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
    ggml.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_float),
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_float),
    ]
    ggml.ggml_quantize_init.argtypes = [ctypes.c_int]

    data = rows()
    x = np.ascontiguousarray(np.stack([r for _, r in data]).astype("<f4"))
    n_rows = x.shape[0]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "input.f32.bin").write_bytes(x.tobytes())
    index = {
        "generator": "tests/goldens/gen_llama_quant_rows.py",
        "llama_cpp_python": llama_cpp.__version__,
        "numpy": np.__version__,
        "n_rows": n_rows,
        "n_per_row": N,
        "rows": [d for d, _ in data],
        "types": {},
    }
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    for name, (tid, row_bytes) in TYPES.items():
        ggml.ggml_quantize_init(tid)
        buf = ctypes.create_string_buffer(row_bytes * n_rows)
        size = ggml.ggml_quantize_chunk(tid, src, buf, 0, n_rows, N, None)
        assert size == row_bytes * n_rows, (name, size)
        raw = buf.raw[:size]
        (OUT / f"{name.lower()}.bin").write_bytes(raw)
        index["types"][name] = {
            "id": tid,
            "bytes": size,
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        print(f"{name}: {size} bytes")
    with open(OUT / "index.json", "w") as fh:
        json.dump(index, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
