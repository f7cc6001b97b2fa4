// Q4_1 against int8 activations (after quant/legacy_q4_1.wgsl and quant/q8.wgsl), nibbles as
// Q4_0: (d * d8) * sum(q x_q) + (m * d8) * sum(x_q).
fn block_dot_q8(row: u32, b: u32, cols: u32, rows: u32, a: Q8Block) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let dm = unpack2x16float(wdm[i]);
    let m = vec4<u32>(0x0f0f0f0fu);
    let s = q8_dot16(q & m, a.lo) + q8_dot16((q >> vec4<u32>(4u)) & m, a.hi);
    return (dm.x * a.d) * f32(s) + (dm.y * a.d) * f32(a.s);
}
