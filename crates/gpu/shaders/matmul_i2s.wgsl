// Y = BitLinear(W, X) for several tokens (prefill), W in I2_S, X int8 activation records
// (quant/i2s.wgsl). One thread per row, WG rows by TT tokens per workgroup: each 16-byte
// weight load is split into its four code groups once and reused for the TT tokens of the
// tile (the activation loads are the same address across the workgroup: broadcasts).
// Integer accumulation, the scale applied once per output.
//
// Bindings:
//   0  uniform MatmulParams (x_stride = cols)
//   1  x: (n_tokens, 1 + cols/16) vec4<u32> activation records
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3  w: (rows, cols/64) vec4<u32> I2_S codes of this chunk's rows
// Workgroups: ceil(rows / WG) * ceil(n_tokens / TT), token tile fastest (flat_workgroup).

// Tokens per tile (src/gpu/kernels/ternary.rs mirrors it to size the dispatch).
const TT: u32 = 8u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<vec4<u32>>;

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
    let rec = act_record_vec4s(p.x_stride);
    // Record start of each token of the tile (tokens past the end repeat the last one).
    var xr: array<u32, TT>;
    for (var t = 0u; t < TT; t = t + 1u) {
        xr[t] = min(t0 + t, p.n_tokens - 1u) * rec;
    }
    var acc: array<i32, TT>;
    let per_row = p.cols / 64u;
    let wrow = row * per_row;
    let m = vec4<u32>(0x03030303u);
    for (var v = 0u; v < per_row; v = v + 1u) {
        let wv = w[wrow + v];
        let c0 = (wv >> vec4<u32>(6u)) & m;
        let c1 = (wv >> vec4<u32>(4u)) & m;
        let c2 = (wv >> vec4<u32>(2u)) & m;
        let c3 = wv & m;
        let o = 1u + i2s_act_offset(v);
        for (var t = 0u; t < TT; t = t + 1u) {
            let b = xr[t] + o;
            acc[t] = acc[t] + dot4x4(c0, x[b]) + dot4x4(c1, x[b + 2u]) + dot4x4(c2, x[b + 4u])
                + dot4x4(c3, x[b + 6u]);
        }
    }
    for (var t = 0u; t < TT; t = t + 1u) {
        if (t0 + t < p.n_tokens) {
            y[(t0 + t) * p.y_stride + p.row_offset + row] =
                i2s_output(acc[t], x[xr[t]], p.weight_scale);
        }
    }
}

