// Q4_1 weights, x = d * q + m, as two planes interleaved by groups of 32 rows.
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>; // (rows, cols/32) qs, 16 bytes per block
@group(0) @binding(4) var<storage, read> wdm: array<u32>;      // (rows, cols/32) f16 d (low), f16 m (high)

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let dm = unpack2x16float(wdm[i]);
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    return array<vec4<f32>, 8>(
        fma(d, nibbles_lo(q.x), m), fma(d, nibbles_lo(q.y), m),
        fma(d, nibbles_lo(q.z), m), fma(d, nibbles_lo(q.w), m),
        fma(d, nibbles_hi(q.x), m), fma(d, nibbles_hi(q.y), m),
        fma(d, nibbles_hi(q.z), m), fma(d, nibbles_hi(q.w), m));
}

// The weights d * q + m of four nibble fields (codes at 2^p, d4 = d * 2^-p).
fn q4_1_weights(w: u32, d4: vec4<f32>, m: vec4<f32>) -> vec4<f32> {
    return fma(d4, magic4(w, NIBBLE_MASKS) - 8388608.0, m);
}

// sum over the block of w * x with each weight decoded exactly (d * q + m is not factored:
// with m the terms could cancel, and the error would no longer be bounded by sum |w x|).
fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let dm = unpack2x16float(wdm[i]);
    let d4 = dm.x * NIBBLE_SCALES;
    let m = vec4<f32>(dm.y);
    var acc = vec4<f32>();
    acc = fma(q4_1_weights(q.x, d4, m), nibble_x_low(x[0], x[4]), acc);
    acc = fma(q4_1_weights(q.x >> 16u, d4, m), nibble_x_high(x[0], x[4]), acc);
    acc = fma(q4_1_weights(q.y, d4, m), nibble_x_low(x[1], x[5]), acc);
    acc = fma(q4_1_weights(q.y >> 16u, d4, m), nibble_x_high(x[1], x[5]), acc);
    acc = fma(q4_1_weights(q.z, d4, m), nibble_x_low(x[2], x[6]), acc);
    acc = fma(q4_1_weights(q.z >> 16u, d4, m), nibble_x_high(x[2], x[6]), acc);
    acc = fma(q4_1_weights(q.w, d4, m), nibble_x_low(x[3], x[7]), acc);
    acc = fma(q4_1_weights(q.w >> 16u, d4, m), nibble_x_high(x[3], x[7]), acc);
    return (acc.x + acc.y) + (acc.z + acc.w);
}
