// Q5_K against int8 activations (after quant/q5_k.wgsl and quant/q8.wgsl): the 5-bit codes
// of group A and B (bytes below 32, in the activation words' order) into q8_dot16; per group,
// with the integer sums exact: d8 * ((d*sc) * sum(q x_q) - (dmin*m) * sum(x_q)).
fn kq8_dot(w: KqRaw, u: u32, ga: Q8Group, gb: Q8Group) -> f32 {
    let s = k4_unit_scales(w.h, u);
    let c = q5k_codes(w, u);
    let ia = q8_dot16(c.lo, ga.a);
    let ib = q8_dot16(c.hi, gb.a);
    return ga.d * (s.x * f32(ia) - s.y * f32(ga.s)) + gb.d * (s.z * f32(ib) - s.w * f32(gb.s));
}
