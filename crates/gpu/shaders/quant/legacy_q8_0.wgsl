// Q8_0 weights, x = q * d with signed 8-bit q, as two planes interleaved by groups of 32
// rows; a block's 32 code bytes are two 16-byte slots.
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>; // (rows, cols/16) qs slots
@group(0) @binding(4) var<storage, read> wd: array<u32>;       // (rows, cols/32) f16 d, two per word

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    let n = cols / 32u;
    let i = interleaved(row, b, n, rows);
    let q0 = wq[interleaved(row, 2u * b, 2u * n, rows)];
    let q1 = wq[interleaved(row, 2u * b + 1u, 2u * n, rows)];
    let d = half_at(wd[i >> 1u], i);
    return array<vec4<f32>, 8>(
        bytes_i8(q0.x) * d, bytes_i8(q0.y) * d, bytes_i8(q0.z) * d, bytes_i8(q0.w) * d,
        bytes_i8(q1.x) * d, bytes_i8(q1.y) * d, bytes_i8(q1.z) * d, bytes_i8(q1.w) * d);
}

// sum over the block of w * x as d * sum q * x (q * x is the weight's product up to the exact
// factor d). Codes are biased to q + 128 (an xor) for the float trick of legacy_blocks.wgsl.
fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    let n = cols / 32u;
    let i = interleaved(row, b, n, rows);
    let q0 = wq[interleaved(row, 2u * b, 2u * n, rows)] ^ vec4<u32>(0x80808080u);
    let q1 = wq[interleaved(row, 2u * b + 1u, 2u * n, rows)] ^ vec4<u32>(0x80808080u);
    let d = half_at(wd[i >> 1u], i);
    // 2^23 + 128 * 2^p for the byte fields at p = 0, 8.
    let c = vec4<f32>(8388736.0, 8421376.0, 8388736.0, 8421376.0);
    var acc = vec4<f32>();
    acc = bytes_fma(q0.x, c, x[0], acc);
    acc = bytes_fma(q0.y, c, x[1], acc);
    acc = bytes_fma(q0.z, c, x[2], acc);
    acc = bytes_fma(q0.w, c, x[3], acc);
    acc = bytes_fma(q1.x, c, x[4], acc);
    acc = bytes_fma(q1.y, c, x[5], acc);
    acc = bytes_fma(q1.z, c, x[6], acc);
    acc = bytes_fma(q1.w, c, x[7], acc);
    return d * dot(acc, BYTE_SCALES);
}
