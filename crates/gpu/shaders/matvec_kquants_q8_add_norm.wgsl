// Kernel::MatvecQ8AddNorm for the K-quants: matvec_kquants_q8.wgsl's products added to the
// residual, 32 rows (one q8 block) a workgroup instead of ROWS, then q8_add_norm.wgsl's norm
// record block. The workgroup is 8 thread groups of WG / 8 invocations, group g taking rows
// 4g .. 4g + 3 with main's per-thread loop (q8_rows); each group's four sums are reduced in
// `group_sums` (a tree within the group), and invocation k < 4 takes groups 2k and 2k + 1.
// WG a power of two from 8 to 256.

var<workgroup> group_sums: array<vec4<f32>, WG>;

@compute @workgroup_size(WG)
fn main_add_norm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let block = flat_workgroup(wid, nwg);
    let row0 = 32u * block;
    if (row0 >= p.rows) {
        return;
    }
    let per_group = max(WG / 8u, 1u);
    let g = lid / per_group;
    let lane = lid % per_group;
    let nb = p.cols / KQ_BLOCK;
    let r = vec4<u32>(row0 + 4u * g) + vec4<u32>(0u, 1u, 2u, 3u);
    let l = Q8Layout(g, 4u, lane, per_group, nb * (KQ_UNITS / SPAN), vec4<bool>(true), r * nb);
    group_sums[lid] = q8_rows(l);
    workgroupBarrier();
    for (var s = per_group / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            group_sums[lid] = group_sums[lid] + group_sums[lid + s];
        }
        workgroupBarrier();
    }
    let k = min(lid, 3u);
    add_norm_block(block, lid, group_sums[2u * k * per_group], group_sums[(2u * k + 1u) * per_group]);
}
