// Argmax of each row (ties: lowest index; NaN never wins). One level of the reduction in
// select_common.wgsl with k = 1: each thread keeps its best candidate while striding through
// the workgroup's chunk, then a tree in workgroup memory picks the workgroup's best. Dispatch
// (workgroups per row, n_rows).

// One candidate per invocation (sized by WG, natively 256: see REDUCE_N in the reduce files).
override BEST_N: u32 = WG;
var<workgroup> best_v: array<f32, BEST_N>;
var<workgroup> best_i: array<u32, BEST_N>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y;
    let begin = wid.x * p.chunk;
    let end = min(p.n_in, begin + p.chunk);
    var best = padding();
    for (var i = begin + lid; i < end; i = i + WG) {
        let c = candidate(row, i);
        if (before(c.v, c.i, best.v, best.i)) {
            best = c;
        }
    }
    best_v[lid] = best.v;
    best_i[lid] = best.i;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s && before(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid])) {
            best_v[lid] = best_v[lid + s];
            best_i[lid] = best_i[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        if (p.last == 1u) {
            dst[row] = select(best_i[0], NO_INDEX, is_nan_f32(best_v[0]));
        } else {
            let o = 2u * (row * nwg.x + wid.x);
            dst[o] = best_i[0];
            dst[o + 1u] = bitcast<u32>(best_v[0]);
        }
    }
}
