// IQ4_NL against int8 activations (after quant/legacy_iq4_nl.wgsl and quant/q8.wgsl): the
// codes mapped through the table are packed int8 (iq4nl_codes), so the block is Q8_0's:
// (d * d8) * sum(KVALUES[q] x_q).
fn block_dot_q8(row: u32, b: u32, cols: u32, rows: u32, a: Q8Block) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let c = iq4nl_codes(wq[i]);
    let d = half_at(wd[i >> 1u], i);
    return (d * a.d) * f32(q8_dot16(c.lo, a.lo) + q8_dot16(c.hi, a.hi));
}
