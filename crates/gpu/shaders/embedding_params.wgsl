// Parameters of every embedding kernel (mirrors EmbeddingParams in src/gpu/embedding.rs).
// Bindings of every embedding kernel:
//   0  uniform EmbeddingParams
//   1  ids: (n_tokens) u32 token ids
//   2  out: (n_tokens, cols) f32
//   3..  the table chunk's planes, rows row_offset .. row_offset + rows
// One workgroup per token (flat_workgroup); it returns at once unless
// row_offset <= ids[t] < row_offset + rows.
struct EmbeddingParams {
    n_tokens: u32,
    cols: u32,
    rows: u32,
    row_offset: u32,
}
