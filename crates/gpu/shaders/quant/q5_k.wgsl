// Q5_K: 176-byte super-blocks as stored but for the order of the scale bytes and of the qh
// bytes (176 = 11 * 16, so every block is vec4-aligned): vec4 0 = (d | dmin << 16, scales[12]
// permuted for k4_unit_scales); vec4 1..2 = the 32 qh bytes as one word per unit (word u is
// component u % 4 of vec4 1 + u / 4: src/gpu/kernels/kquants.rs, permute_q5k_qh); vec4 3 + c2
// = qs[16 c2 .. + 16]. Unit u is qs vec4 u (as Q4_K) plus its qh word. w = (d * sc) * q -
// dmin * m.

// (rows, cols/256) Q5_K blocks, 11 vec4 each
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>;

struct KqRaw {
    h: vec4<u32>,
    qh: u32,
    q: vec4<u32>,
}

fn kq_unit_offsets(u: u32) -> vec2<u32> {
    let o = 64u * (u / 2u) + 16u * (u % 2u);
    return vec2<u32>(o, o + 32u);
}

fn kq_load(b: u32, u: u32) -> KqRaw {
    return KqRaw(wq[11u * b], wq[11u * b + 1u + u / 4u][u % 4u], wq[11u * b + 3u + u]);
}

// The fifth bits of a unit's 16 codes of group A and of group B from its qh word, each at bit
// 4 of its code's byte: code word m's are bits 2m (A) and 2m + 1 (B) of each byte of the word
// (every shift takes the bit from within its own byte).
fn q5k_high(qh: u32) -> KqCodes {
    let m = vec4<u32>(0x10101010u);
    return KqCodes(
        vec4<u32>(qh << 4u, qh << 2u, qh, qh >> 2u) & m,
        vec4<u32>(qh << 3u, qh << 1u, qh >> 1u, qh >> 3u) & m,
    );
}

// 5-bit quants: the nibbles with the fifth bits on top.
fn q5k_codes(w: KqRaw, u: u32) -> KqCodes {
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let h = q5k_high(w.qh);
    return KqCodes((w.q & m4) | h.lo, ((w.q >> vec4<u32>(4u)) & m4) | h.hi);
}

fn kq_decode(w: KqRaw, u: u32) -> KqUnit {
    let s = k4_unit_scales(w.h, u);
    let c = q5k_codes(w, u);
    return KqUnit(kq_affine16(c.lo, s.x, s.y), kq_affine16(c.hi, s.z, s.w));
}

fn kq_unit(b: u32, u: u32) -> KqUnit {
    return kq_decode(kq_load(b, u), u);
}

fn kq_dot(w: KqRaw, u: u32, xa: V16, xb: V16, sx: vec2<f32>) -> f32 {
    let s = k4_unit_scales(w.h, u);
    let c = q5k_codes(w, u);
    return (s.x * kq_dot16(c.lo, 0x1fu, xa, 0.0) - s.y * sx.x)
        + (s.z * kq_dot16(c.hi, 0x1fu, xb, 0.0) - s.w * sx.y);
}
