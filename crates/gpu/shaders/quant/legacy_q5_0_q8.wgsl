// Q5_0 against int8 activations (after quant/legacy_q5_0.wgsl and quant/q8.wgsl): the 5-bit
// codes one per byte (q5_bytes), then (d * d8) * (sum(q x_q) - 16 sum(x_q)).
fn block_dot_q8(row: u32, b: u32, cols: u32, rows: u32, a: Q8Block) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let h = wqh[i];
    let d = half_at(wd[i >> 1u], i);
    let lo = vec4<u32>(q5_bytes(q.x, h, 0u, true), q5_bytes(q.y, h, 1u, true),
                       q5_bytes(q.z, h, 2u, true), q5_bytes(q.w, h, 3u, true));
    let hi = vec4<u32>(q5_bytes(q.x, h, 0u, false), q5_bytes(q.y, h, 1u, false),
                       q5_bytes(q.z, h, 2u, false), q5_bytes(q.w, h, 3u, false));
    let s = q8_dot16(lo, a.lo) + q8_dot16(hi, a.hi) - 16i * a.s;
    return (d * a.d) * f32(s);
}
