// Embedding gather, table in a legacy format (the format's decode_block is prepended from
// quant/legacy_<format>.wgsl): out[t, :] = table[ids[t], :] as f32, exactly the values the
// CPU dequantizes. One workgroup per token (see embedding_params.wgsl); its invocations
// stride along the row one 32-column block at a time.
//
// Bindings:
//   0  uniform EmbeddingParams
//   1  ids: (n_tokens) u32 token ids
//   2  out: (n_tokens, cols) f32; a token's row written by the dispatch whose chunk holds it
//   3.. the table planes of this chunk's rows (see the format file)

@group(0) @binding(0) var<uniform> p: EmbeddingParams;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// out[base + c .. base + c + 4] = v, only the columns below `cols`.
fn put4(base: u32, c: u32, v: vec4<f32>) {
    if (c < p.cols) { out[base + c] = v.x; }
    if (c + 1u < p.cols) { out[base + c + 1u] = v.y; }
    if (c + 2u < p.cols) { out[base + c + 2u] = v.z; }
    if (c + 3u < p.cols) { out[base + c + 3u] = v.w; }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = flat_workgroup(wid, nwg);
    if (t >= p.n_tokens) {
        return;
    }
    let id = ids[t];
    if (id < p.row_offset || id - p.row_offset >= p.rows) {
        return;
    }
    let row = id - p.row_offset;
    let base = t * p.cols;
    let blocks = (p.cols + 31u) / 32u;
    for (var b = lid; b < blocks; b = b + WG) {
        let w = decode_block(row, b, p.cols, p.rows);
        let c = 32u * b;
        put4(base, c, w[0]);
        put4(base, c + 4u, w[1]);
        put4(base, c + 8u, w[2]);
        put4(base, c + 12u, w[3]);
        put4(base, c + 16u, w[4]);
        put4(base, c + 20u, w[5]);
        put4(base, c + 24u, w[6]);
        put4(base, c + 28u, w[7]);
    }
}
