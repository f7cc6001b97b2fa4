// Decode helpers shared by the K-quant formats (Q4_K, Q5_K, Q6_K: 256-weight super-blocks).
//
// Every K-quant kernel works in units: a unit is 32 weights of one super-block whose 4-bit low
// quants fill one vec4<u32> (16 bytes). The low nibbles are 16 consecutive weights (group A),
// the high nibbles 16 more (group B); a super-block has 8 units. Each format file after this one
// declares the weight planes (bindings 3..) and defines
//   kq_unit_offsets(u) -> vec2<u32>   first element of group A and of group B in the block
//   kq_load(b, u) -> KqRaw            the raw words unit u of chunk block b needs (one set of
//                                     loads, so callers can issue several rows' loads at once)
//   kq_decode(raw, u) -> KqUnit       the unit's 32 weights from its raw words, dequantized
//                                     with the f32 operations of crate::quant in the same
//                                     order, so bit-identical to the CPU (matmul, embedding)
//   kq_unit(b, u) -> KqUnit           kq_decode(kq_load(b, u), u)
//   kq_dot(raw, u, xa, xb, sx) -> f32 the unit's dot product with x (matvec), xa and xb
//                                     pre-scaled by KQ_XS: the per-group scale and min are
//                                     applied once per 16 products (sx = the sums of the
//                                     unscaled xa and xb, for the mins)

const KQ_BLOCK: u32 = 256u; // weights per super-block
const KQ_UNITS: u32 = 8u;   // units per super-block

// 16 consecutive values.
struct V16 {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

// One unit's weights: group A (low nibbles) and group B (high nibbles).
struct KqUnit {
    lo: V16,
    hi: V16,
}

// One unit's quants, one per byte (0 .. 63): group A and group B.
struct KqCodes {
    lo: vec4<u32>,
    hi: vec4<u32>,
}

fn sum16(v: V16) -> f32 {
    return dot((v.a + v.b) + (v.c + v.d), vec4<f32>(1.0));
}

// The four bytes of a word, least significant first.
fn kq_bytes(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
}

// q - bias as f32, exactly, for integers 0 <= q < 2^22 and 0 <= bias <= 64: the bits of q are
// placed in the mantissa of 2^23 and 2^23 + bias is subtracted (cheaper than an int-to-float
// conversion, which runs at a fraction of the FMA rate on some GPUs).
fn kq_f32(q: vec4<u32>, bias: f32) -> vec4<f32> {
    return bitcast<vec4<f32>>(q | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0 + bias);
}

// d * c - m for the 16 codes in the bytes of `c`. d * c is exact for d = f16 * 6-bit scale
// and c < 32, so the one rounding is the subtraction's, as in crate::quant (and the same if
// the compiler fuses it).
fn kq_affine16(c: vec4<u32>, d: f32, m: f32) -> V16 {
    return V16(d * kq_f32(kq_bytes(c.x), 0.0) - vec4<f32>(m),
               d * kq_f32(kq_bytes(c.y), 0.0) - vec4<f32>(m),
               d * kq_f32(kq_bytes(c.z), 0.0) - vec4<f32>(m),
               d * kq_f32(kq_bytes(c.w), 0.0) - vec4<f32>(m));
}

// d * (c - bias) for the 16 codes in the bytes of `c`.
fn kq_scaled16(c: vec4<u32>, d: f32, bias: f32) -> V16 {
    return V16(d * kq_f32(kq_bytes(c.x), bias), d * kq_f32(kq_bytes(c.y), bias),
               d * kq_f32(kq_bytes(c.z), bias), d * kq_f32(kq_bytes(c.w), bias));
}

// Factors by which matvec pre-scales each vec4 of x (exact powers of two), so that kq_lanes
// needs no shift per code: x * (1, 2^-8, 2^-16, 2^-16).
const KQ_XS: vec4<f32> = vec4<f32>(1.0, 0.00390625, 0.0000152587890625, 0.0000152587890625);

// The codes (c & mask) of the four bytes of word `c`, each minus `bias`, as exact f32 scaled by
// (1, 2^8, 2^16, 2^16): every code is masked in place (byte 3 moved down to byte 2 by one
// shift) into the mantissa of 2^23, and 2^23 + bias (scaled) is subtracted. One AND-OR and one
// subtraction per code, no shift or int-to-float conversion. The mask must fit in 7 bits
// (byte 2's code lands in bits 16..22, below the exponent).
fn kq_lanes(c: u32, mask: u32, bias: f32) -> vec4<f32> {
    let m = vec4<u32>(c, c, c, c >> 8u) & (vec4<u32>(mask) << vec4<u32>(0u, 8u, 16u, 16u));
    return bitcast<vec4<f32>>(m | vec4<u32>(0x4b000000u))
        - (vec4<f32>(8388608.0) + bias * vec4<f32>(1.0, 256.0, 65536.0, 65536.0));
}

// sum over the 16 codes (c & mask) in the bytes of `c` of (code - bias) * x, for x pre-scaled
// by KQ_XS (so each product is the unscaled one, exactly).
fn kq_dot16(c: vec4<u32>, mask: u32, x: V16, bias: f32) -> f32 {
    return (dot(kq_lanes(c.x, mask, bias), x.a) + dot(kq_lanes(c.y, mask, bias), x.b))
        + (dot(kq_lanes(c.z, mask, bias), x.c) + dot(kq_lanes(c.w, mask, bias), x.d));
}

// Unit u's four 6-bit values (scale A, min A, scale B, min B) from a Q4_K/Q5_K header
// h = (d | dmin << 16, scale words) whose 12 scale bytes were permuted at upload
// (permute_k4_scales in src/gpu/kernels/kquants.rs): the unit's sub-blocks 2p and 2p + 1
// (pair p = u / 2) have their four 6-bit values (scale 2p, scale 2p + 1, min 2p, min 2p + 1)
// in the low 6 bits of the bytes of word p for p < 3, and in the top two bits of the bytes of
// all three words for p = 3. Both are decoded without branches and the pair's word selected.
fn k4_unit_values(h: vec4<u32>, u: u32) -> vec4<u32> {
    let pair = u / 2u;
    let last = ((h.y >> 6u) & 0x03030303u) | ((h.z >> 4u) & 0x0c0c0c0cu)
        | ((h.w >> 2u) & 0x30303030u);
    let low = select(select(h.y, h.z, pair == 1u), h.w, pair == 2u) & 0x3f3f3f3fu;
    let v = select(low, last, pair == 3u);
    return (vec4<u32>(v) >> vec4<u32>(0u, 16u, 8u, 24u)) & vec4<u32>(0xffu);
}

// Unit u's (d * scale, dmin * min) for group A, then group B (k4_unit_values times the
// header's d and dmin). Each value becomes an f32 exactly (or-ed into the mantissa of 2^23,
// which is subtracted), so each product is exact.
fn k4_unit_scales(h: vec4<u32>, u: u32) -> vec4<f32> {
    let dm = unpack2x16float(h.x);
    let q = k4_unit_values(h, u);
    let s = bitcast<vec4<f32>>(q | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
    return vec4<f32>(dm.x, dm.y, dm.x, dm.y) * s;
}

// k4_unit_scales, the same bits, with the values made f32 by conversions (exact: they are
// below 64) instead of integer operations. That takes integer work off Q5_K's integer-dot
// matvec, which is faster this way; Q4_K's (whose steps are unit pairs) and the f32 matvecs
// are slower, so only quant/q5_k_q8.wgsl takes it.
fn k4_unit_scales_cvt(h: vec4<u32>, u: u32) -> vec4<f32> {
    let dm = unpack2x16float(h.x);
    return vec4<f32>(dm.x, dm.y, dm.x, dm.y) * vec4<f32>(k4_unit_values(h, u));
}
