// IQ4_XS: 136-byte super-blocks (d f16, scales_h u16, scales_l[4], qs[128]), repacked
// losslessly into two planes because 136 is not a multiple of 16: plane 3 holds each block's
// qs (8 vec4), plane 4 its 8-byte header (d | scales_h << 16, scales_l) as two words. Unit u is
// sub-block u, qs vec4 u, laid out as an IQ4_NL block: its low nibbles are elements 32 u .. + 16
// (group A), its high nibbles 32 u + 16 .. + 16 (group B), both with the 6-bit scale
// ls = (scales_l[u / 2] >> 4 (u % 2)) & 15 | ((scales_h >> 2 u) & 3) << 4.
// w = (d * (ls - 32)) * KVALUES[q], KVALUES ggml's kvalues_iq4nl.

// (rows, cols/256) IQ4_XS qs, 8 vec4 each
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>;
// (rows, cols/256) IQ4_XS headers, two words each: d | scales_h << 16, scales_l
@group(0) @binding(4) var<storage, read> wh: array<u32>;

// The table's bytes (the int8 values' bits) for four codes n (each < 16), picked by selects
// rather than an indexed array (a dynamic index would put the table in memory). The table is
// kvalues_iq4nl as int8 bytes, four per word (as in quant/legacy_iq4_nl.wgsl, which a K-quant
// kernel does not include): the value of code 4k + c is byte c of component k. It is a
// function-scope constant: a module-scope one made naga's override processing fail on the
// matvec kernels ("depends on [9] of kind naga::ir::Type, which has not been processed yet").
fn iq4nl_lookup(n: vec4<u32>) -> vec4<u32> {
    const IQ4NL_TABLE = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
    let bit2 = (n & vec4<u32>(4u)) != vec4<u32>(0u);
    let lo = select(vec4<u32>(IQ4NL_TABLE.x), vec4<u32>(IQ4NL_TABLE.y), bit2);
    let hi = select(vec4<u32>(IQ4NL_TABLE.z), vec4<u32>(IQ4NL_TABLE.w), bit2);
    let w = select(lo, hi, (n & vec4<u32>(8u)) != vec4<u32>(0u));
    return (w >> ((n & vec4<u32>(3u)) * 8u)) & vec4<u32>(0xffu);
}

// The int8 values of the low (shift 0) or high (shift 4) nibbles of the four bytes of w,
// packed one per byte in the same order.
fn iq4nl_word(w: u32, shift: u32) -> u32 {
    let n = (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(shift))) & vec4<u32>(0xfu);
    let b = iq4nl_lookup(n);
    return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}

// A unit's 32 values as int8 bytes: group A (the low nibbles) and group B (the high nibbles).
fn iq4xs_codes(q: vec4<u32>) -> KqCodes {
    return KqCodes(
        vec4<u32>(iq4nl_word(q.x, 0u), iq4nl_word(q.y, 0u), iq4nl_word(q.z, 0u), iq4nl_word(q.w, 0u)),
        vec4<u32>(iq4nl_word(q.x, 4u), iq4nl_word(q.y, 4u), iq4nl_word(q.z, 4u), iq4nl_word(q.w, 4u)));
}

struct KqRaw {
    h: vec2<u32>,
    q: vec4<u32>,
}

fn kq_unit_offsets(u: u32) -> vec2<u32> {
    return vec2<u32>(32u * u, 32u * u + 16u);
}

fn kq_load(b: u32, u: u32) -> KqRaw {
    return KqRaw(vec2<u32>(wh[2u * b], wh[2u * b + 1u]), wq[8u * b + u]);
}

// Unit u's d * (ls - 32): exact (an f16 times an integer of at most 6 bits), the CPU's value.
fn iq4xs_unit_scale(h: vec2<u32>, u: u32) -> f32 {
    let lo = (h.y >> (4u * u)) & 0xfu;
    let hi = (h.x >> (16u + 2u * u)) & 3u;
    let d = unpack2x16float(h.x).x;
    return d * (f32(lo | (hi << 4u)) - 32.0);
}

// (d * (ls - 32)) * KVALUES[q] is exact in f32 (at most 17 bits times 7 bits), so the weights
// are the CPU's bit for bit. The int8 bytes are biased to v + 128 (an xor) for kq_scaled16.
fn kq_decode(w: KqRaw, u: u32) -> KqUnit {
    let s = iq4xs_unit_scale(w.h, u);
    let c = iq4xs_codes(w.q);
    let m = vec4<u32>(0x80808080u);
    return KqUnit(kq_scaled16(c.lo ^ m, s, 128.0), kq_scaled16(c.hi ^ m, s, 128.0));
}

fn kq_unit(b: u32, u: u32) -> KqUnit {
    return kq_decode(kq_load(b, u), u);
}

// The four biased bytes (v + 128) of word c, each minus 128, as exact f32 scaled by KQ_XS's
// inverse (1, 2^8, 2^16, 2^16): bytes 0 and 1 are masked in place into the mantissa of 2^23,
// bytes 2 and 3 shifted to bits 8..15 of the mantissa of 2^31 (whose unit there is 2^16), and
// the magic plus the bias (scaled) is subtracted. A full byte does not fit kq_lanes' 7 bits.
fn iq4xs_lanes(c: u32) -> vec4<f32> {
    let m = vec4<u32>(c, c, c >> 8u, c >> 16u) & vec4<u32>(0xffu, 0xff00u, 0xff00u, 0xff00u);
    let magic = vec4<u32>(0x4b000000u, 0x4b000000u, 0x4f000000u, 0x4f000000u);
    // 2^23 + 128 * (1, 2^8) and 2^31 + 128 * 2^16.
    return bitcast<vec4<f32>>(m | magic)
        - vec4<f32>(8388736.0, 8421376.0, 2155872256.0, 2155872256.0);
}

// sum over 16 biased codes of KVALUES[q] * x, for x pre-scaled by KQ_XS.
fn iq4xs_dot16(c: vec4<u32>, x: V16) -> f32 {
    return (dot(iq4xs_lanes(c.x), x.a) + dot(iq4xs_lanes(c.y), x.b))
        + (dot(iq4xs_lanes(c.z), x.c) + dot(iq4xs_lanes(c.w), x.d));
}

// Both groups share the unit's scale: (d * (ls - 32)) * (sum A + sum B).
fn kq_dot(w: KqRaw, u: u32, xa: V16, xb: V16, sx: vec2<f32>) -> f32 {
    let s = iq4xs_unit_scale(w.h, u);
    let c = iq4xs_codes(w.q);
    let m = vec4<u32>(0x80808080u);
    return s * (iq4xs_dot16(c.lo ^ m, xa) + iq4xs_dot16(c.hi ^ m, xb));
}
