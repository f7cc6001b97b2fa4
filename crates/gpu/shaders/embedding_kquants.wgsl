// Embedding gather from a K-quant table (its decode helpers are prepended): one workgroup per
// token; its threads decode the token's row one unit (32 weights) at a time and write them
// as f32, bit-identical to crate::quant::dequantize. See embedding_params.wgsl for the
// chunking convention.
//
// Bindings:
//   0  uniform EmbeddingParams
//   1  ids: (n_tokens) u32 token ids
//   2  out: (n_tokens, cols) f32 as vec4 (cols is a multiple of 256)
//   3.. the table chunk's planes, declared by the format file

@group(0) @binding(0) var<uniform> p: EmbeddingParams;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;

fn store16(i: u32, v: V16) {
    out[i] = v.a;
    out[i + 1u] = v.b;
    out[i + 2u] = v.c;
    out[i + 3u] = v.d;
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
    let nb = p.cols / KQ_BLOCK;
    for (var u = lid; u < nb * KQ_UNITS; u = u + WG) {
        let blk = u / KQ_UNITS;
        let uu = u % KQ_UNITS;
        let w = kq_unit(row * nb + blk, uu);
        let o = kq_unit_offsets(uu);
        let base = (t * p.cols + blk * KQ_BLOCK) / 4u;
        store16(base + o.x / 4u, w.lo);
        store16(base + o.y / 4u, w.hi);
    }
}
