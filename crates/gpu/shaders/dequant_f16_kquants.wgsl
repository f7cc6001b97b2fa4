// Weights in a K-quant format (its decode helpers are prepended) to f16 tiles (f16_tiles.wgsl),
// the weight operand of the cooperative-matrix matmul (matmul_f16_coop.wgsl): one invocation
// per unit (32 weights), decoded with kq_unit (the f32 weights of crate::quant) and rounded to
// f16 once. Each of the unit's two 16-weight groups is one row of a tile: two 16-byte stores.
// Invocations run row first within groups of 16 rows, so 16 neighbours write one tile's 512
// contiguous bytes (with a row's units side by side instead, each store covers half a sector
// and the conversions take about twice as long).
//
// Bindings:
//   0  uniform MatmulParams: rows to convert, cols, and row_offset: the chunk's first row
//      to convert (the output's row 0); invocations for rows rounded up to 16
//   1  out: (rows, cols) f16 in tiles, 8 halves a vec4<u32>
//   3.. the chunk's weight planes, declared by the format file

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<u32>>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let nb = p.cols / KQ_BLOCK;
    // Divisors at least 1 (the pipeline is compiled without division guards: max(.., 1u)
    // marks each as checked, tests/gpu_uniforms.rs); the host never passes 0 columns.
    let units = max(nb * KQ_UNITS, 1u);
    let i = flat_workgroup(wid, nwg) * WG + lid;
    let r = ((i / 16u) / units) * 16u + i % 16u;
    if (r >= p.rows) {
        return;
    }
    let unit = (i / 16u) % units;
    let blk = unit / KQ_UNITS;
    let u = unit % KQ_UNITS;
    let w = kq_unit((p.row_offset + r) * nb + blk, u);
    let o = kq_unit_offsets(u);
    let a = f16_tile(r, blk * KQ_BLOCK + o.x, p.cols) / 8u;
    let b = f16_tile(r, blk * KQ_BLOCK + o.y, p.cols) / 8u;
    out[a] = halves8(w.lo.a, w.lo.b);
    out[a + 1u] = halves8(w.lo.c, w.lo.d);
    out[b] = halves8(w.hi.a, w.hi.b);
    out[b + 1u] = halves8(w.hi.c, w.hi.d);
}
