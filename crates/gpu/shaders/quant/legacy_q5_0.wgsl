// Q5_0 weights, x = d * (q - 16) with q = low nibble | (bit j of qh) << 4, as three planes
// interleaved by groups of 32 rows.
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>; // (rows, cols/32) qs, 16 bytes per block
@group(0) @binding(4) var<storage, read> wd: array<u32>;       // (rows, cols/32) f16 d, two per word
@group(0) @binding(5) var<storage, read> wqh: array<u32>;      // (rows, cols/32) qh

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let h = wqh[i];
    let d = half_at(wd[i >> 1u], i);
    return array<vec4<f32>, 8>(
        d * (nibbles_lo(q.x) + q5_high(h, 0u) - 16.0),
        d * (nibbles_lo(q.y) + q5_high(h, 4u) - 16.0),
        d * (nibbles_lo(q.z) + q5_high(h, 8u) - 16.0),
        d * (nibbles_lo(q.w) + q5_high(h, 12u) - 16.0),
        d * (nibbles_hi(q.x) + q5_high(h, 16u) - 16.0),
        d * (nibbles_hi(q.y) + q5_high(h, 20u) - 16.0),
        d * (nibbles_hi(q.z) + q5_high(h, 24u) - 16.0),
        d * (nibbles_hi(q.w) + q5_high(h, 28u) - 16.0));
}

// sum over the block of w * x as d * sum (q - 16) * x (as for Q4_0).
fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let h = wqh[i];
    let d = half_at(wd[i >> 1u], i);
    // 2^23 + 16 * 2^p for the byte fields at p = 0, 8.
    let c = vec4<f32>(8388624.0, 8392704.0, 8388624.0, 8392704.0);
    var acc = vec4<f32>();
    acc = bytes_fma(q5_bytes(q.x, h, 0u, true), c, x[0], acc);
    acc = bytes_fma(q5_bytes(q.y, h, 1u, true), c, x[1], acc);
    acc = bytes_fma(q5_bytes(q.z, h, 2u, true), c, x[2], acc);
    acc = bytes_fma(q5_bytes(q.w, h, 3u, true), c, x[3], acc);
    acc = bytes_fma(q5_bytes(q.x, h, 0u, false), c, x[4], acc);
    acc = bytes_fma(q5_bytes(q.y, h, 1u, false), c, x[5], acc);
    acc = bytes_fma(q5_bytes(q.z, h, 2u, false), c, x[6], acc);
    acc = bytes_fma(q5_bytes(q.w, h, 3u, false), c, x[7], acc);
    return d * dot(acc, BYTE_SCALES);
}
