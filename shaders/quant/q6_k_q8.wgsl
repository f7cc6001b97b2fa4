// Q6_K against int8 activations (after quant/q6_k.wgsl and quant/q8.wgsl): the 6-bit codes
// q (0..63, bytes below 128) go into q8_dot16 unbiased and the bias comes off the integer sum:
// sum((q - 32) x_q) = sum(q x_q) - 32 sum(x_q). Per group: d8 * (d*sc) * that (exact integer).
fn kq8_dot(w: KqRaw, u: u32, ga: Q8Group, gb: Q8Group) -> f32 {
    let s = q6k_unit_scales(w, u);
    let c = q6k_codes(w, u);
    let ia = q8_dot16(c.lo, ga.a) - 32i * ga.s;
    let ib = q8_dot16(c.hi, gb.a) - 32i * gb.s;
    return ga.d * (s.x * f32(ia)) + gb.d * (s.y * f32(ib));
}
