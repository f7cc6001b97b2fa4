// Q4_K: 144-byte super-blocks as stored but for the order of the scale bytes (144 = 9 * 16, so
// every block is vec4-aligned): vec4 0 = (d | dmin << 16, scales[12] permuted for
// k4_unit_scales); vec4 1 + c2 = qs[16 c2 .. 16 c2 + 16]. Unit u is qs
// vec4 u: sub-block 2 (u / 2) in the low nibbles, 2 (u / 2) + 1 in the high nibbles, elements
// 16 (u % 2) .. + 16 of each. w = (d * sc) * q - dmin * m.

// (rows, cols/256) Q4_K blocks, 9 vec4 each
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>;

struct KqRaw {
    h: vec4<u32>,
    q: vec4<u32>,
}

fn kq_unit_offsets(u: u32) -> vec2<u32> {
    let o = 64u * (u / 2u) + 16u * (u % 2u);
    return vec2<u32>(o, o + 32u);
}

fn kq_load(b: u32, u: u32) -> KqRaw {
    return KqRaw(wq[9u * b], wq[9u * b + 1u + u]);
}

fn q4k_codes(w: KqRaw) -> KqCodes {
    return KqCodes(w.q & vec4<u32>(0x0f0f0f0fu), (w.q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu));
}

fn kq_decode(w: KqRaw, u: u32) -> KqUnit {
    let s = k4_unit_scales(w.h, u);
    let c = q4k_codes(w);
    return KqUnit(kq_affine16(c.lo, s.x, s.y), kq_affine16(c.hi, s.z, s.w));
}

fn kq_unit(b: u32, u: u32) -> KqUnit {
    return kq_decode(kq_load(b, u), u);
}

fn kq_dot(w: KqRaw, u: u32, xa: V16, xb: V16, sx: vec2<f32>) -> f32 {
    let s = k4_unit_scales(w.h, u);
    return (s.x * kq_dot16(w.q, 0x0fu, xa, 0.0) - s.y * sx.x)
        + (s.z * kq_dot16(w.q >> vec4<u32>(4u), 0x0fu, xb, 0.0) - s.w * sx.y);
}
