// Y = X W^T for several tokens (prefill), W in a ternary block format (TQ1_0 or TQ2_0: the
// format file before this one supplies TQ_WORDS, tq_word, tq_scale, tq_word_dot and the
// weight bindings 3..), X in f32, Y times the per-tensor weight_scale (1 unless the model
// gives one, as upstream BitNet GGUFs do in a separate tensor). One thread per row, WG rows
// by TT tokens per workgroup: each weight word is loaded once and used for the TT tokens of
// the tile (the activation loads are the same address across the workgroup: broadcasts). The
// word is decoded again per token: straight-line decoding is faster than decoding once into
// a dynamically indexed array.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride / 4) vec4<f32>
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3..  the chunk's weight planes (see the format file)
// Workgroups: ceil(rows / WG) * ceil(n_tokens / TT), token tile fastest (flat_workgroup).

// Tokens per tile (src/gpu/kernels/ternary.rs mirrors it to size the dispatch).
const TT: u32 = 8u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let tiles = max((p.n_tokens + TT - 1u) / TT, 1u);
    let g = flat_workgroup(wid, nwg);
    let row = (g / tiles) * WG + lid;
    let t0 = (g % tiles) * TT;
    if (row >= p.rows) {
        return;
    }
    // First x vec4 of each token of the tile (tokens past the end repeat the last one).
    var xr: array<u32, TT>;
    for (var t = 0u; t < TT; t = t + 1u) {
        xr[t] = min(t0 + t, p.n_tokens - 1u) * (p.x_stride / 4u);
    }
    var acc: array<f32, TT>;
    let blocks = p.cols / 256u;
    for (var b = 0u; b < blocks; b = b + 1u) {
        let block = row * blocks + b;
        let d = tq_scale(block);
        for (var j = 0u; j < TQ_WORDS; j = j + 1u) {
            let w = tq_word(block, j);
            for (var t = 0u; t < TT; t = t + 1u) {
                acc[t] = acc[t] + d * tq_word_dot(w, j, xr[t] + b * 64u);
            }
        }
    }
    for (var t = 0u; t < TT; t = t + 1u) {
        if (t0 + t < p.n_tokens) {
            y[(t0 + t) * p.y_stride + p.row_offset + row] = acc[t] * p.weight_scale;
        }
    }
}
