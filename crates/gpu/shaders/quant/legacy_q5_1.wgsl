// Q5_1 weights, x = d * q + m with q = low nibble | (bit j of qh) << 4, as three planes
// interleaved by groups of 32 rows.
@group(0) @binding(3) var<storage, read> wq: array<vec4<u32>>; // (rows, cols/32) qs, 16 bytes per block
@group(0) @binding(4) var<storage, read> wdm: array<u32>;      // (rows, cols/32) f16 d (low), f16 m (high)
@group(0) @binding(5) var<storage, read> wqh: array<u32>;      // (rows, cols/32) qh

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let h = wqh[i];
    let dm = unpack2x16float(wdm[i]);
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    return array<vec4<f32>, 8>(
        fma(d, nibbles_lo(q.x) + q5_high(h, 0u), m),
        fma(d, nibbles_lo(q.y) + q5_high(h, 4u), m),
        fma(d, nibbles_lo(q.z) + q5_high(h, 8u), m),
        fma(d, nibbles_lo(q.w) + q5_high(h, 12u), m),
        fma(d, nibbles_hi(q.x) + q5_high(h, 16u), m),
        fma(d, nibbles_hi(q.y) + q5_high(h, 20u), m),
        fma(d, nibbles_hi(q.z) + q5_high(h, 24u), m),
        fma(d, nibbles_hi(q.w) + q5_high(h, 28u), m));
}

// The weights d * q + m of four 5-bit codes (one per byte, at bit positions 0, 8, 0, 8).
fn q5_1_weights(bytes: u32, d4: vec4<f32>, m: vec4<f32>) -> vec4<f32> {
    let fields = vec4<u32>(bytes, bytes, bytes >> 16u, bytes >> 16u) & BYTE_MASKS;
    return fma(d4, bitcast<vec4<f32>>(fields | vec4<u32>(MAGIC)) - 8388608.0, m);
}

// sum over the block of w * x with each weight decoded exactly (see Q4_1).
fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    let i = interleaved(row, b, cols / 32u, rows);
    let q = wq[i];
    let h = wqh[i];
    let dm = unpack2x16float(wdm[i]);
    let d4 = dm.x * BYTE_SCALES;
    let m = vec4<f32>(dm.y);
    var acc = vec4<f32>();
    acc = fma(q5_1_weights(q5_bytes(q.x, h, 0u, true), d4, m), x[0], acc);
    acc = fma(q5_1_weights(q5_bytes(q.y, h, 1u, true), d4, m), x[1], acc);
    acc = fma(q5_1_weights(q5_bytes(q.z, h, 2u, true), d4, m), x[2], acc);
    acc = fma(q5_1_weights(q5_bytes(q.w, h, 3u, true), d4, m), x[3], acc);
    acc = fma(q5_1_weights(q5_bytes(q.x, h, 0u, false), d4, m), x[4], acc);
    acc = fma(q5_1_weights(q5_bytes(q.y, h, 1u, false), d4, m), x[5], acc);
    acc = fma(q5_1_weights(q5_bytes(q.z, h, 2u, false), d4, m), x[6], acc);
    acc = fma(q5_1_weights(q5_bytes(q.w, h, 3u, false), d4, m), x[7], acc);
    return (acc.x + acc.y) + (acc.z + acc.w);
}
