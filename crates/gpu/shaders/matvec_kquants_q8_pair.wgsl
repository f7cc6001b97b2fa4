// Two products of one input in one dispatch (q and k, gate and up: one dispatch and one
// barrier fewer each). The dispatch's rows 0 .. p.split are the first weight's (its planes at
// bindings 3.., the format file's), written to y; rows p.split .. p.rows the second's, written
// to y2 at row - p.split. The second weight's planes sit at bindings 8.. as `<plane>_b`, read
// by `kq_load_b` and summed by `q8_rows_b`: copies of the format file's declarations,
// `kq_load` and `q8_rows` that the host appends (src/gpu/kernels/kquants.rs, pair_wgsl).
// p.split is a multiple of ROWS, so a workgroup's rows all belong to one weight, and both
// weights are single chunks (row_offset 0). Each row's arithmetic is main's.
//
// Bindings: as matvec_kquants_q8.wgsl's, plus
//   7  y2: the second product, f32
//   8.. the second weight's planes

@group(0) @binding(7) var<storage, read_write> y2: array<f32>;

@compute @workgroup_size(WG)
fn main_pair(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let at = flat_workgroup(wid, nwg) * ROWS;
    if (at >= p.rows) {
        return;
    }
    // Uniform over the workgroup: which weight its rows belong to.
    let second = at >= p.split;
    let row0 = select(at, at - p.split, second);
    let rows = select(p.split, p.rows - p.split, second);
    let l = q8_layout(row0, rows, lid);
    var acc: vec4<f32>;
    if (second) {
        acc = q8_rows_b(l);
    } else {
        acc = q8_rows(l);
    }
    let total = q8_total(l, acc, lid);
    if (lid == 0u) {
        for (var k = 0u; k < ROWS; k = k + 1u) {
            if (row0 + k < rows) {
                let v = pick(total, k);
                if (second) {
                    y2[row0 + k] = v;
                } else {
                    y[row0 + k] = v;
                }
            }
        }
    }
}
