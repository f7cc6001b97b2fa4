// y = W x for one token, W in F32. One workgroup per output row: WG threads stride along the
// row, then reduce with workgroup_sum.
//
// Bindings:
//   0  uniform MatmulParams
//   1  x: (n_tokens, x_stride) f32
//   2  y: (n_tokens, y_stride) f32, rows row_offset .. row_offset + rows written
//   3  w: (rows, cols) f32, this chunk's rows

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = flat_workgroup(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var acc = 0.0;
    for (var c = lid; c < p.cols; c = c + WG) {
        acc = acc + w[base + c] * x[c];
    }
    let total = workgroup_sum(acc, lid);
    if (lid == 0u) {
        y[p.row_offset + row] = total;
    }
}
