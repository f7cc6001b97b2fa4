// Q6_K, repacked losslessly into two planes because the 210-byte block is not even 4-byte
// aligned: plane 3 holds each block's first 208 bytes (13 vec4: ql[128] in vec4 0..7, qh[64]
// in vec4 8..11, i8 scales[16] in vec4 12), plane 4 the f16 d of each block, two per word.
// Unit u (h = u / 4, t = (u / 2) % 2, j = u % 2) is ql vec4 u: its low nibbles are elements
// 128 h + 32 t + 16 j + k (k < 16), its high nibbles the same + 64, with their top two bits at
// bits 2 t and 2 t + 4 of qh[32 h + 16 j + k] (qh vec4 2 h + j). w = (d * sc) * (q - 32).

// (rows, cols/256) Q6_K blocks without d, 13 vec4 each
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>;
// (rows, cols/256) f16 d, block b in half b % 2 of word b / 2
@group(0) @binding(4) var<storage, read> wd: array<u32>;

struct KqRaw {
    ql: vec4<u32>,
    qh: vec4<u32>,
    sc: vec4<u32>,
    d: u32, // the block's f16 d in the low half
}

fn kq_unit_offsets(u: u32) -> vec2<u32> {
    let o = 128u * (u / 4u) + 32u * ((u / 2u) % 2u) + 16u * (u % 2u);
    return vec2<u32>(o, o + 64u);
}

fn kq_load(b: u32, u: u32) -> KqRaw {
    return KqRaw(
        wq[13u * b + u],
        wq[13u * b + 8u + 2u * (u / 4u) + u % 2u],
        wq[13u * b + 12u],
        wd[b / 2u] >> (16u * (b % 2u)),
    );
}

// 6-bit quants (0..63, the weight is q - 32): the nibbles with two qh bits on top.
fn q6k_codes(w: KqRaw, u: u32) -> KqCodes {
    let s = 2u * ((u / 2u) % 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m2 = vec4<u32>(0x03030303u);
    return KqCodes(
        (w.ql & m4) | (((w.qh >> vec4<u32>(s)) & m2) << vec4<u32>(4u)),
        ((w.ql >> vec4<u32>(4u)) & m4) | (((w.qh >> vec4<u32>(s + 4u)) & m2) << vec4<u32>(4u)),
    );
}

// d * scale for group A, group B (scales 8 h + 2 t + j and that + 4, i.e. byte u % 4 of
// scale word 2 h and 2 h + 1): exact products. The i8 is read through the mantissa of 2^23
// (byte ^ 0x80 = scale + 128) and the words are picked by select, without dynamic indexing.
fn q6k_unit_scales(w: KqRaw, u: u32) -> vec2<f32> {
    let d = unpack2x16float(w.d).x;
    let words = select(w.sc.xy, w.sc.zw, u >= 4u);
    let b = ((words >> vec2<u32>(8u * (u % 4u))) & vec2<u32>(0xffu)) ^ vec2<u32>(0x80u);
    return d * (bitcast<vec2<f32>>(b | vec2<u32>(0x4b000000u)) - vec2<f32>(8388736.0));
}

fn kq_decode(w: KqRaw, u: u32) -> KqUnit {
    let s = q6k_unit_scales(w, u);
    let c = q6k_codes(w, u);
    return KqUnit(kq_scaled16(c.lo, s.x, 32.0), kq_scaled16(c.hi, s.y, 32.0));
}

fn kq_unit(b: u32, u: u32) -> KqUnit {
    return kq_decode(kq_load(b, u), u);
}

fn kq_dot(w: KqRaw, u: u32, xa: V16, xb: V16, sx: vec2<f32>) -> f32 {
    let s = q6k_unit_scales(w, u);
    let c = q6k_codes(w, u);
    return s.x * kq_dot16(c.lo, 0x3fu, xa, 32.0) + s.y * kq_dot16(c.hi, 0x3fu, xb, 32.0);
}
