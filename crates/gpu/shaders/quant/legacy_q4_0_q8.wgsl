// Q4_0 against int8 activations (after quant/legacy_q4_0.wgsl and quant/q8.wgsl): the low
// nibbles are elements 0..15 and the high nibbles 16..31, each in the activation words' byte
// order, so both go into q8_dot16 masked in place; (d * d8) * (sum(q x_q) - 8 sum(x_q)).
fn block_dot_q8(row: u32, b: u32, cols: u32, rows: u32, a: Q8Block) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let d = half_at(wd[i >> 1u], i);
    let m = vec4<u32>(0x0f0f0f0fu);
    let s = q8_dot16(q & m, a.lo) + q8_dot16((q >> vec4<u32>(4u)) & m, a.hi) - 8i * a.s;
    return (d * a.d) * f32(s);
}
