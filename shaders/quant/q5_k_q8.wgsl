// Q5_K against int8 activations (after quant/q5_k.wgsl and quant/q8.wgsl). A code is its
// nibble plus 16 times its fifth bit, so sum(q x_q) = sum(nibble x_q) + 16 sum(bit x_q): the
// nibbles go into q8_dot16 masked as Q4_K's, and the fifth bits masked in place in the qh
// bytes (bit t = 2 (u / 2) for group A, t + 1 for group B), so each qh byte is 0 or 2^t. That
// dot product is 2^t sum(bit x_q), a multiple of 2^t, so 16 sum(bit x_q) comes back exactly by
// shifts; for bit 7 the byte 0x80 is -128 to dot4I8Packed and the sum is negated. Per group,
// with the integer sums exact: d8 * ((d*sc) * sum(q x_q) - (dmin*m) * sum(x_q)).
fn kq8_dot(w: KqRaw, u: u32, ga: Q8Group, gb: Q8Group) -> f32 {
    let s = k4_unit_scales(w.h, u);
    let t = 2u * (u / 2u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let ha = q8_dot16(w.qh & vec4<u32>(0x01010101u << t), ga.a);
    let hb = q8_dot16(w.qh & vec4<u32>(0x02020202u << t), gb.a);
    let fa = (ha << 4u) >> t;
    let fb = select(hb << 4u, -(hb << 4u), t == 6u) >> (t + 1u);
    let ia = q8_dot16(w.q & m4, ga.a) + fa;
    let ib = q8_dot16((w.q >> vec4<u32>(4u)) & m4, gb.a) + fb;
    // |sums| < 2^18: exact_f32 is exact (and cheaper than f32() on NVIDIA).
    let i = exact_f32(vec4<i32>(ia, ib, ga.s, gb.s));
    return ga.d * (s.x * i.x - s.y * i.z) + gb.d * (s.z * i.y - s.w * i.w);
}
