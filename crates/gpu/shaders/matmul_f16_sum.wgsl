// The sums of a split matmul_f16 product (each slice of the row's columns written to `part`)
// added into y.
//
// Bindings:
//   0  uniform MatmulParams (rows, n_tokens, row_offset, y_stride; split: the slices)
//   1  part: (split, n_tokens, rows) f32
//   2  y: (n_tokens, y_stride) f32

// 1: the sum is added to what y holds (Kernel::SplitSum(true)), 0: it replaces it.
override ACCUMULATE: u32 = 0u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = flat_workgroup(wid, nwg) * WG + lid;
    if (i >= p.n_tokens * p.rows) {
        return;
    }
    // p.rows is not 0 here (i < n_tokens * rows); max(.., 1u) marks the divisor as checked
    // (the pipeline is compiled without division guards, tests/gpu_uniforms.rs).
    let rows = max(p.rows, 1u);
    let t = i / rows;
    let r = i % rows;
    var s = 0.0;
    for (var k = 0u; k < p.split; k = k + 1u) {
        s = s + part[(k * p.n_tokens + t) * p.rows + r];
    }
    let at = t * p.y_stride + p.row_offset + r;
    if (ACCUMULATE == 1u) {
        y[at] = y[at] + s;
    } else {
        y[at] = s;
    }
}
