// The f16 tile layout of the cooperative-matrix matmul's operands (matmul_f16_coop.wgsl): a
// (rows, cols) matrix is cut into 16x16 tiles, stored tile row by tile row (the tiles of rows
// 16 i .. 16 i + 16 for columns 0, 16, 32, ..., then those of the next 16 rows), each tile's
// 256 halves contiguous and row-major. A cooperative load of one tile then reads 512
// consecutive bytes (four whole cache lines) instead of 32 bytes from each of 16 rows.

// Eight f32 values rounded to f16, packed two per word (low half first).
fn halves8(a: vec4<f32>, b: vec4<f32>) -> vec4<u32> {
    return vec4<u32>(pack2x16float(a.xy), pack2x16float(a.zw),
                     pack2x16float(b.xy), pack2x16float(b.zw));
}

// The index, in halves, of element (r, c) of a matrix with `cols` columns (a multiple of 16).
fn f16_tile(r: u32, c: u32, cols: u32) -> u32 {
    return (((r / 16u) * (cols / 16u) + c / 16u) * 256u) + (r % 16u) * 16u + c % 16u;
}
