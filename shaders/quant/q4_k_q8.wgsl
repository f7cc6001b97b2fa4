// Q4_K against int8 activations (after quant/q4_k.wgsl and quant/q8.wgsl): unit u's low
// nibbles (group A) and high nibbles (group B) are 16 codes each, in the byte order of the
// activation words, so q8_dot16 takes them masked in place. Per group, with the integer sums
// exact: d8 * ((d*sc) * sum(q x_q) - (dmin*m) * sum(x_q)) (crate::quant::q8dot).
fn kq8_dot(w: KqRaw, u: u32, ga: Q8Group, gb: Q8Group) -> f32 {
    let s = k4_unit_scales(w.h, u);
    let m = vec4<u32>(0x0f0f0f0fu);
    let ia = q8_dot16(w.q & m, ga.a);
    let ib = q8_dot16((w.q >> vec4<u32>(4u)) & m, gb.a);
    return ga.d * (s.x * f32(ia) - s.y * f32(ga.s)) + gb.d * (s.z * f32(ib) - s.w * f32(gb.s));
}
