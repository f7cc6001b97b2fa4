// Q5_K: 176-byte super-blocks as stored but for the order of the scale bytes (176 = 11 * 16, so
// every block is vec4-aligned): vec4 0 = (d | dmin << 16, scales[12] permuted for
// k4_unit_scales); vec4 1..2 = qh[32]; vec4 3 + c2 = qs[16 c2 .. + 16].
// Unit u is qs vec4 u (as Q4_K) plus qh vec4 u % 2, whose bit s is the fifth bit of sub-block
// s. w = (d * sc) * q - dmin * m.

// (rows, cols/256) Q5_K blocks, 11 vec4 each
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>;

struct KqRaw {
    h: vec4<u32>,
    qh: vec4<u32>,
    q: vec4<u32>,
}

fn kq_unit_offsets(u: u32) -> vec2<u32> {
    let o = 64u * (u / 2u) + 16u * (u % 2u);
    return vec2<u32>(o, o + 32u);
}

fn kq_load(b: u32, u: u32) -> KqRaw {
    return KqRaw(wq[11u * b], wq[11u * b + 1u + u % 2u], wq[11u * b + 3u + u]);
}

// 5-bit quants: the nibbles with bit s (group A: s = 2 (u / 2)) or s + 1 (group B) of the qh
// bytes on top.
fn q5k_codes(w: KqRaw, u: u32) -> KqCodes {
    let s = 2u * (u / 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m1 = vec4<u32>(0x01010101u);
    return KqCodes(
        (w.q & m4) | (((w.qh >> vec4<u32>(s)) & m1) << vec4<u32>(4u)),
        ((w.q >> vec4<u32>(4u)) & m4) | (((w.qh >> vec4<u32>(s + 1u)) & m1) << vec4<u32>(4u)),
    );
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
