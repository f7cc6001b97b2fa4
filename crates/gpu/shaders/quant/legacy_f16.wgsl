// F16 weights. Rows whose length is a multiple of 8: one plane of 16-byte slots (8 weights)
// interleaved by groups of 32 rows; other row lengths: the file's bytes, read element-wise.
@group(0) @binding(3) var<storage, read> wh: array<vec4<u32>>; // (rows, cols/8) slots, interleaved

// Slot `s` of `row`, 0 past the row's `per_row` slots.
fn f16_slot(row: u32, s: u32, per_row: u32, rows: u32) -> vec4<u32> {
    if (s >= per_row) {
        return vec4<u32>();
    }
    return wh[interleaved(row, s, per_row, rows)];
}

// The weight at column `col` of a row-major (uninterleaved) plane, 0 past `cols`.
fn f16_plain1(row: u32, col: u32, cols: u32) -> f32 {
    if (col >= cols) {
        return 0.0;
    }
    let e = row * cols + col;
    let word = e >> 1u;
    return half_at(wh[word >> 2u][word & 3u], e);
}

fn f16_plain(row: u32, col: u32, cols: u32) -> vec4<f32> {
    return vec4<f32>(f16_plain1(row, col, cols), f16_plain1(row, col + 1u, cols),
                     f16_plain1(row, col + 2u, cols), f16_plain1(row, col + 3u, cols));
}

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    if (cols % 8u != 0u) {
        let c = 32u * b;
        return array<vec4<f32>, 8>(
            f16_plain(row, c, cols), f16_plain(row, c + 4u, cols),
            f16_plain(row, c + 8u, cols), f16_plain(row, c + 12u, cols),
            f16_plain(row, c + 16u, cols), f16_plain(row, c + 20u, cols),
            f16_plain(row, c + 24u, cols), f16_plain(row, c + 28u, cols));
    }
    let n = cols / 8u;
    let s = 4u * b;
    let v0 = f16_slot(row, s, n, rows);
    let v1 = f16_slot(row, s + 1u, n, rows);
    let v2 = f16_slot(row, s + 2u, n, rows);
    let v3 = f16_slot(row, s + 3u, n, rows);
    return array<vec4<f32>, 8>(
        halves4(v0.x, v0.y), halves4(v0.z, v0.w), halves4(v1.x, v1.y), halves4(v1.z, v1.w),
        halves4(v2.x, v2.y), halves4(v2.z, v2.w), halves4(v3.x, v3.y), halves4(v3.z, v3.w));
}

fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    return dot8(decode_block(row, b, cols, rows), x);
}
