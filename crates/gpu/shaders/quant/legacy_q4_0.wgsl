// Q4_0 weights, x = d * (q - 8), as two planes interleaved by groups of 32 rows.
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>; // (rows, cols/32) qs, 16 bytes per block
@group(0) @binding(4) var<storage, read> wd: array<u32>;       // (rows, cols/32) f16 d, two per word

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let d = half_at(wd[i >> 1u], i);
    return array<vec4<f32>, 8>(
        d * (nibbles_lo(q.x) - 8.0), d * (nibbles_lo(q.y) - 8.0),
        d * (nibbles_lo(q.z) - 8.0), d * (nibbles_lo(q.w) - 8.0),
        d * (nibbles_hi(q.x) - 8.0), d * (nibbles_hi(q.y) - 8.0),
        d * (nibbles_hi(q.z) - 8.0), d * (nibbles_hi(q.w) - 8.0));
}

// sum over the block of w * x as d * sum (q - 8) * x: (q - 8) * x is the weight's product up
// to the exact factor d, so the f32 summation bound holds as for decoded weights.
fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let d = half_at(wd[i >> 1u], i);
    // 2^23 + 8 * 2^p for the nibble fields at p = 0, 4, 8, 12.
    let c = vec4<f32>(8388616.0, 8388736.0, 8390656.0, 8421376.0);
    var acc = vec4<f32>();
    acc = fma(magic4(q.x, NIBBLE_MASKS) - c, nibble_x_low(x[0], x[4]), acc);
    acc = fma(magic4(q.x >> 16u, NIBBLE_MASKS) - c, nibble_x_high(x[0], x[4]), acc);
    acc = fma(magic4(q.y, NIBBLE_MASKS) - c, nibble_x_low(x[1], x[5]), acc);
    acc = fma(magic4(q.y >> 16u, NIBBLE_MASKS) - c, nibble_x_high(x[1], x[5]), acc);
    acc = fma(magic4(q.z, NIBBLE_MASKS) - c, nibble_x_low(x[2], x[6]), acc);
    acc = fma(magic4(q.z >> 16u, NIBBLE_MASKS) - c, nibble_x_high(x[2], x[6]), acc);
    acc = fma(magic4(q.w, NIBBLE_MASKS) - c, nibble_x_low(x[3], x[7]), acc);
    acc = fma(magic4(q.w >> 16u, NIBBLE_MASKS) - c, nibble_x_high(x[3], x[7]), acc);
    return d * dot(acc, NIBBLE_SCALES);
}
