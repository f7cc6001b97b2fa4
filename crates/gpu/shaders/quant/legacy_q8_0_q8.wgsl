// Q8_0 against int8 activations (after quant/legacy_q8_0.wgsl and quant/q8.wgsl): the signed
// codes are already packed int8: (d * d8) * sum(q x_q).
fn block_dot_q8(row: u32, b: u32, cols: u32, rows: u32, a: Q8Block) -> f32 {
    let n = cols / 32u;
    let i = interleaved(row, b, n, rows);
    let q0 = wq[interleaved(row, 2u * b, 2u * n, rows)];
    let q1 = wq[interleaved(row, 2u * b + 1u, 2u * n, rows)];
    let d = half_at(wd[i >> 1u], i);
    return (d * a.d) * f32(q8_dot16(q0, a.lo) + q8_dot16(q1, a.hi));
}
