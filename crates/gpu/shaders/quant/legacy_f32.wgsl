// F32 weights. Rows whose length is a multiple of 4: one plane of 16-byte slots (4 weights)
// interleaved by groups of 32 rows; other row lengths: the file's bytes, read element-wise.
@group(0) @binding(3) var<storage, read> wf: array<vec4<f32>>; // (rows, cols/4) slots, interleaved

// Slot `s` of `row`, 0 past the row's `per_row` slots.
fn f32_slot(row: u32, s: u32, per_row: u32, rows: u32) -> vec4<f32> {
    if (s >= per_row) {
        return vec4<f32>();
    }
    return wf[interleaved(row, s, per_row, rows)];
}

// Four weights from column `col` of a row-major (uninterleaved) plane, 0 past `cols`.
fn f32_plain(row: u32, col: u32, cols: u32) -> vec4<f32> {
    var v = vec4<f32>();
    let e = row * cols + col;
    if (col < cols) { v.x = wf[e >> 2u][e & 3u]; }
    if (col + 1u < cols) { v.y = wf[(e + 1u) >> 2u][(e + 1u) & 3u]; }
    if (col + 2u < cols) { v.z = wf[(e + 2u) >> 2u][(e + 2u) & 3u]; }
    if (col + 3u < cols) { v.w = wf[(e + 3u) >> 2u][(e + 3u) & 3u]; }
    return v;
}

fn decode_block(row: u32, b: u32, cols: u32, rows: u32) -> array<vec4<f32>, 8> {
    if (cols % 4u != 0u) {
        let c = 32u * b;
        return array<vec4<f32>, 8>(
            f32_plain(row, c, cols), f32_plain(row, c + 4u, cols),
            f32_plain(row, c + 8u, cols), f32_plain(row, c + 12u, cols),
            f32_plain(row, c + 16u, cols), f32_plain(row, c + 20u, cols),
            f32_plain(row, c + 24u, cols), f32_plain(row, c + 28u, cols));
    }
    let n = cols / 4u;
    let s = 8u * b;
    return array<vec4<f32>, 8>(
        f32_slot(row, s, n, rows), f32_slot(row, s + 1u, n, rows),
        f32_slot(row, s + 2u, n, rows), f32_slot(row, s + 3u, n, rows),
        f32_slot(row, s + 4u, n, rows), f32_slot(row, s + 5u, n, rows),
        f32_slot(row, s + 6u, n, rows), f32_slot(row, s + 7u, n, rows));
}

fn block_dot(row: u32, b: u32, cols: u32, rows: u32, x: array<vec4<f32>, 8>) -> f32 {
    return dot8(decode_block(row, b, cols, rows), x);
}
