#!/usr/bin/env python3
"""Regenerate the committed quantization goldens in tests/goldens/quant/.

Requires: Python 3.9+, gguf==0.19.0 (the `gguf` package from PyPI, i.e. gguf-py from
llama.cpp) and numpy. Run from anywhere:

    pip install gguf==0.19.0 numpy
    python3 tests/goldens/gen_quant_goldens.py

It overwrites tests/goldens/quant/ with deterministic output (fixed seeds). The Rust test
tests/quant_goldens.rs only reads these committed files; it never runs Python.

Container format (self-describing, all binaries little-endian, no headers):

  quant/index.json   {"generator", "gguf_version", "numpy_version", "cases": [case, ...]}
      case = {"name", "dtype" (GGMLQuantizationType name), "type_id", "n_elements",
              "input":       file of n_elements f32, or null (dequant-only types),
              "quantized":   file of tensor bytes (gguf-py's quantize output, or the random
                             blocks fed to gguf-py for dequant-only types),
              "dequantized": file of n_elements f32 = gguf.quants.dequantize(quantized)}
  quant/dtypes.json  {"gguf_version", "types": [{"name", "id", "block_elems", "block_bytes"}]}
                     = gguf.GGMLQuantizationType and gguf.GGML_QUANT_SIZES, verbatim.

Quantizable in gguf-py (input + gguf-py bytes + gguf-py dequant): F32, F16, BF16, Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0. Dequant-only (random blocks + gguf-py dequant): Q4_K, Q5_K,
Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M and MXFP4,
with finite f16 scales of sane magnitude plus a few extreme blocks (MXFP4: E8M0 scales), and for
the IQ types grid indices that use every row of the type's grid. I2_S is not in gguf-py
and is tested from hand-built blocks in Rust.
"""

import json
import os
import sys

import numpy as np

import gguf
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

EXPECTED_GGUF = "0.19.0"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quant")


def gguf_version():
    try:
        from importlib.metadata import version

        return version("gguf")
    except Exception:  # pragma: no cover
        return "unknown"


# --------------------------------------------------------------------------------------------
# Inputs for the quantizable block types.


def edge_blocks(block, rng):
    """Hand-picked blocks, each `block` long: zeros, signs, magnitudes, exact ties."""
    z = np.zeros(block, np.float32)
    blocks = []
    blocks.append(z.copy())  # all +0.0
    blocks.append(np.full(block, -0.0, np.float32))  # all -0.0
    one = z.copy()
    one[block // 3] = 0.75  # a single nonzero
    blocks.append(one)
    blocks.append(-np.abs(rng.standard_normal(block)).astype(np.float32) - 0.1)  # negative only
    blocks.append(np.abs(rng.standard_normal(block)).astype(np.float32) + 2.0)  # positive only
    blocks.append(rng.uniform(-3e4, 3e4, block).astype(np.float32))  # large
    blocks.append((rng.standard_normal(block) * 1e-6).astype(np.float32))  # tiny: d underflows f16
    # (No block of f32 subnormals: there 1/d overflows to inf and gguf-py's result depends on
    # numpy's float->int cast of inf/NaN, which is undefined; ggml's C is undefined there too.)
    sub = rng.standard_normal(block).astype(np.float32)
    sub[::2] = (rng.standard_normal(block // 2) * 1e-40).astype(np.float32)  # some subnormals
    blocks.append(sub)
    ties = (rng.integers(-127, 127, block) + 0.5).astype(np.float32)
    ties[0] = 127.0  # Q8_0: d = 1 exactly, so every x*id is an exact .5 tie
    blocks.append(ties)
    tern = rng.choice(np.array([-2, -1, -0.5, 0, 0.5, 1, 2], np.float32), block)
    tern[1] = 2.0  # TQ*: d = 2, so +-1 gives exact +-0.5 ties
    blocks.append(tern.astype(np.float32))
    signed_zero = rng.standard_normal(block).astype(np.float32)
    signed_zero[::3] = -0.0
    blocks.append(signed_zero)
    blocks.append(np.full(block, 1.25, np.float32))  # constant: Q4_1/Q5_1 get d = 0
    return blocks


def block_input(block, n_blocks, seed):
    rng = np.random.default_rng(seed)
    blocks = edge_blocks(block, rng)
    while len(blocks) < n_blocks:
        scale = np.float32(10.0 ** rng.uniform(-3, 2))
        offset = np.float32(rng.choice([0.0, 0.0, 1.0, -3.0]) * scale)
        blocks.append((rng.standard_normal(block) * scale + offset).astype(np.float32))
    return np.concatenate(blocks[:n_blocks]).astype(np.float32)


def float_input(n, seed):
    rng = np.random.default_rng(seed)
    bits = [
        0x00000000, 0x80000000,  # +-0
        0x7F800000, 0xFF800000,  # +-inf
        0x7FC00000, 0xFFC00000,  # quiet NaNs
        0x7F800001, 0x7FA00000, 0xFF812345,  # signalling NaNs with payloads
        0x00000001, 0x80000001, 0x007FFFFF,  # f32 subnormals
        0x7F7FFFFF, 0xFF7FFFFF,  # f32 max
        0x3F808000, 0x3F818000, 0x3F80C000, 0xBF808000,  # bf16 ties / above-ties
        0x3F801000, 0x3F803000,  # f16 ties (1 + 2^-11, 1 + 3*2^-11)
        0x477FE000, 0x477FF000, 0x47800000,  # 65504, 65520 (rounds to inf in f16), 65536
        0x33800000, 0x33000000, 0x337FFFFF,  # around the smallest f16 subnormal
        0x38800000, 0x387FC000,  # smallest normal f16, largest subnormal f16
    ]
    special = np.array(bits, np.uint32).view(np.float32)
    mags = 10.0 ** rng.uniform(-9, 6, n)
    x = (rng.standard_normal(n) * mags).astype(np.float32)
    x[: len(special)] = special
    return x


# --------------------------------------------------------------------------------------------
# Random blocks for the dequant-only K-quants.


def f16_bytes(v):
    return np.array([v], np.float16).view(np.uint8)


def random_kquant_blocks(qtype, n_blocks, seed):
    rng = np.random.default_rng(seed)
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype == T.Q6_K:
        d_fields = [208]
        scale_range = (192, 208)
    else:
        d_fields = [0, 2]  # d, dmin
        scale_range = (4, 16)
    for b in range(n_blocks):
        for off in d_fields:
            mag = 10.0 ** rng.uniform(-6, 0)  # includes f16 subnormals (< 6.1e-5)
            sign = -1.0 if rng.random() < 0.1 else 1.0
            raw[b, off : off + 2] = f16_bytes(sign * mag)
    s0, s1 = scale_range
    # Extreme blocks.
    raw[0, s0:s1] = 0xFF  # all scale/min bits set (Q6_K: scales -1)
    raw[1, s0:s1] = 0x00  # all scales zero
    for off in d_fields:
        raw[2, off : off + 2] = f16_bytes(0.0)  # zero d / dmin
        raw[3, off : off + 2] = f16_bytes(65504.0)  # largest finite f16
        raw[4, off : off + 2] = np.array([1], np.uint16).view(np.uint8)  # smallest subnormal
        raw[5, off : off + 2] = f16_bytes(-0.0)
    raw[3, s0:s1] = 0xFF
    raw[6, :] = 0xFF
    for off in d_fields:
        raw[6, off : off + 2] = f16_bytes(0.5)
    if qtype == T.Q6_K:
        raw[7, s0:s1] = np.array([-128, 127] * 8, np.int8).view(np.uint8)  # int8 extremes
        raw[8, s0:s1] = 0x80
    else:
        raw[7, s0:s1] = np.array([0x3F, 0x3F, 0x3F, 0x3F, 0xC0, 0xC0, 0xC0, 0xC0,
                                  0x0F, 0xF0, 0x0F, 0xF0], np.uint8)  # only some bit fields set
        raw[8, s0:s1] = 0xC0  # only the top two bits of bytes 0..8, 0xC0 nibbles in 8..12
    return raw.reshape(-1)


# --------------------------------------------------------------------------------------------
# Random blocks for the other dequant-only types: Q2_K, Q3_K, the IQ types and MXFP4.

# Byte offsets of each type's f16 scale fields (IQ1_M's scale is spread over four nibbles and
# MXFP4's is an E8M0 byte; both are set apart below).
F16_FIELDS = {
    T.Q2_K: [80, 82],  # d, dmin
    T.Q3_K: [108],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0],
    T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0],
}


def set_iq1m_scale(block, bits):
    """IQ1_M: the f16 scale's 4 nibbles are the top nibbles of the 4 u16 at bytes 48..56."""
    sc = block[48:56].copy().view(np.uint16)
    for i in range(4):
        sc[i] = (int(sc[i]) & 0x0FFF) | (((int(bits) >> (4 * i)) & 0xF) << 12)
    block[48:56] = sc.view(np.uint8)


def set_grid_index(qtype, block, k, idx):
    """Make the k-th grid lookup of an IQ block use grid row idx (all other bits kept)."""
    if qtype == T.IQ2_XXS:  # 8 x (4 index bytes, u32 signs/scale), 32 lookups
        block[2 + 8 * (k // 4) + k % 4] = idx
    elif qtype == T.IQ2_XS:  # 32 u16: 9-bit index, 7-bit sign index
        v = block[2 + 2 * k : 4 + 2 * k].copy().view(np.uint16)
        v[0] = (int(v[0]) & 0xFE00) | idx
        block[2 + 2 * k : 4 + 2 * k] = v.view(np.uint8)
    elif qtype == T.IQ2_S:  # qs[32] low 8 bits, qh[8] 2 bits each (after 32 sign bytes)
        block[2 + k] = idx & 0xFF
        at, sh = 66 + k // 4, 2 * (k % 4)
        block[at] = (int(block[at]) & ~(3 << sh) & 0xFF) | ((idx >> 8) << sh)
    elif qtype == T.IQ3_XXS:  # qs[64], 64 lookups
        block[2 + k] = idx
    elif qtype == T.IQ3_S:  # qs[64] low 8 bits, qh[8] 1 bit each
        block[2 + k] = idx & 0xFF
        at, sh = 66 + k // 8, k % 8
        block[at] = (int(block[at]) & ~(1 << sh) & 0xFF) | ((idx >> 8) << sh)
    elif qtype == T.IQ1_S:  # qs[32] low 8 bits, qh u16[8] 3 bits each
        block[2 + k] = idx & 0xFF
        v = block[34 + 2 * (k // 4) : 36 + 2 * (k // 4)].copy().view(np.uint16)
        sh = 3 * (k % 4)
        v[0] = (int(v[0]) & ~(7 << sh) & 0xFFFF) | ((idx >> 8) << sh)
        block[34 + 2 * (k // 4) : 36 + 2 * (k // 4)] = v.view(np.uint8)
    elif qtype == T.IQ1_M:  # qs[32] low 8 bits, qh[16] 3 bits per nibble
        block[k] = idx & 0xFF
        at, sh = 32 + k // 2, 4 * (k % 2)
        block[at] = (int(block[at]) & ~(7 << sh) & 0xFF) | ((idx >> 8) << sh)
    else:
        raise ValueError(qtype)


# (grid rows, lookups per block) of the IQ types: the goldens cycle through every row.
GRIDS = {
    T.IQ2_XXS: (256, 32), T.IQ2_XS: (512, 32), T.IQ2_S: (1024, 32),
    T.IQ3_XXS: (256, 64), T.IQ3_S: (512, 64),
    T.IQ1_S: (2048, 32), T.IQ1_M: (2048, 32),
}


def random_blocks(qtype, n_blocks, seed):
    """Random bytes, with finite f16 scales of sane magnitude (10^-6..1, a tenth negative) and a
    few extreme ones (0, -0, 65504, the smallest subnormal) in blocks 0..4; the IQ types' grid
    indices cycle through every grid row, so the goldens check each row of our grid tables."""
    rng = np.random.default_rng(seed)
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    extremes = [0.0, -0.0, 65504.0, None]  # None: the smallest subnormal
    for b in range(n_blocks):
        if qtype == T.MXFP4:
            # E8M0: mostly 2^-20..2^10; the first blocks take 0, 1, 2 (the sub-normal
            # halves), 127 and 254 (2^126: 12 * 2^126 is still finite).
            raw[b, 0] = [0, 1, 2, 127, 254][b] if b < 5 else rng.integers(107, 138)
            continue
        scales = []
        for _ in F16_FIELDS.get(qtype, [None]):
            if b < len(extremes):
                v = extremes[b]
                bits = 1 if v is None else int(np.array([v], np.float16).view(np.uint16)[0])
            else:
                mag = 10.0 ** rng.uniform(-6, 0)
                sign = -1.0 if rng.random() < 0.1 else 1.0
                bits = int(np.array([sign * mag], np.float16).view(np.uint16)[0])
            scales.append(bits)
        if qtype == T.IQ1_M:
            set_iq1m_scale(raw[b], scales[0])
        else:
            for off, bits in zip(F16_FIELDS[qtype], scales):
                raw[b, off : off + 2] = np.array([bits], np.uint16).view(np.uint8)
        if qtype in GRIDS:
            rows, per_block = GRIDS[qtype]
            for k in range(per_block):
                # Blocks 0 and 1 (scale +-0: all zeros) take the last rows, which later
                # blocks use again.
                set_grid_index(qtype, raw[b], k, ((b - 2) * per_block + k) % rows)
    return raw.reshape(-1)


# --------------------------------------------------------------------------------------------


def write_f32(path, arr):
    np.asarray(arr, np.float32).astype("<f4").tofile(path)


def main():
    have = gguf_version()
    if have != EXPECTED_GGUF:
        print(f"warning: gguf {have} installed, goldens are meant for {EXPECTED_GGUF}",
              file=sys.stderr)
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".bin") or f.endswith(".json"):
            os.remove(os.path.join(OUT, f))

    cases = []

    def add(name, qtype, x, q):
        """x: f32 input or None; q: uint8 tensor bytes."""
        q = np.ascontiguousarray(q).view(np.uint8).reshape(-1)
        block, type_size = GGML_QUANT_SIZES[qtype]
        n = q.size // type_size * block
        y = quants.dequantize(q, qtype).astype(np.float32).reshape(-1)
        assert y.size == n, (name, y.size, n)
        entry = {"name": name, "dtype": qtype.name, "type_id": int(qtype), "n_elements": int(n)}
        if x is not None:
            entry["input"] = f"{name}.input.f32.bin"
            write_f32(os.path.join(OUT, entry["input"]), x)
        else:
            entry["input"] = None
        entry["quantized"] = f"{name}.quant.bin"
        q.tofile(os.path.join(OUT, entry["quantized"]))
        entry["dequantized"] = f"{name}.dequant.f32.bin"
        write_f32(os.path.join(OUT, entry["dequantized"]), y)
        cases.append(entry)

    # Float types: 2049 elements each (odd).
    for seed, qtype in [(10, T.F32), (11, T.F16), (12, T.BF16)]:
        x = float_input(2049, seed)
        add(qtype.name.lower(), qtype, x, quants.quantize(x, qtype))

    # Quantizable block types: odd block counts.
    plan = [
        (20, T.Q4_0, 129), (21, T.Q4_1, 129), (22, T.Q5_0, 129), (23, T.Q5_1, 129),
        (24, T.Q8_0, 129), (25, T.TQ1_0, 33), (26, T.TQ2_0, 33),
    ]
    for seed, qtype, n_blocks in plan:
        block, _ = GGML_QUANT_SIZES[qtype]
        x = block_input(block, n_blocks, seed)
        add(qtype.name.lower(), qtype, x, quants.quantize(x, qtype))

    # Dequant-only K-quants: random blocks.
    for seed, qtype, n_blocks in [(30, T.Q4_K, 49), (31, T.Q5_K, 49), (32, T.Q6_K, 49)]:
        add(qtype.name.lower(), qtype, None, random_kquant_blocks(qtype, n_blocks, seed))

    # The other dequant-only types: random blocks. The IQ types take enough blocks to use every
    # grid row at least once.
    more = [
        (40, T.Q2_K, 33), (41, T.Q3_K, 33), (42, T.IQ4_NL, 65), (43, T.IQ4_XS, 33),
        (44, T.IQ3_XXS, 9), (45, T.IQ3_S, 17), (46, T.IQ2_XXS, 17), (47, T.IQ2_XS, 19),
        (48, T.IQ2_S, 35), (49, T.IQ1_S, 67), (50, T.IQ1_M, 67), (51, T.MXFP4, 65),
    ]
    for seed, qtype, n_blocks in more:
        if qtype in GRIDS:
            rows, per_block = GRIDS[qtype]
            # Every row at least once in a block with a nonzero scale (not blocks 0 and 1).
            assert (n_blocks - 2) * per_block >= rows, qtype
        add(qtype.name.lower(), qtype, None, random_blocks(qtype, n_blocks, seed))

    index = {
        "generator": "tests/goldens/gen_quant_goldens.py",
        "gguf_version": have,
        "numpy_version": np.__version__,
        "cases": cases,
    }
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")

    types = [
        {"name": t.name, "id": int(t), "block_elems": GGML_QUANT_SIZES[t][0],
         "block_bytes": GGML_QUANT_SIZES[t][1]}
        for t in T
    ]
    with open(os.path.join(OUT, "dtypes.json"), "w") as f:
        json.dump({"gguf_version": have, "types": types}, f, indent=1)
        f.write("\n")

    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {len(cases)} cases, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
