// Kernel::MatvecQ8AddNorm for the legacy formats: matvec_legacy_q8.wgsl's products of one
// workgroup's 32 rows (one q8 block: ROW_LANES is 32) added to the residual, then
// q8_add_norm.wgsl's norm record block. The 32 sums go from slice 0 through `partial` to the
// four invocations that take 8 rows each (slice 0's invocation `lane` overwrites entry `lane`,
// which no other invocation reads in q8_block_rows' sum, so no barrier is needed before).

@compute @workgroup_size(WG)
fn main_add_norm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let block = flat_workgroup(wid, nwg);
    if (block * ROW_LANES >= p.rows) {
        return;
    }
    let total = q8_block_rows(block * ROW_LANES, lid);
    if (lid < ROW_LANES) {
        partial[lid] = total;
    }
    workgroupBarrier();
    let e = 8u * min(lid, 3u);
    let t0 = vec4<f32>(partial[e], partial[e + 1u], partial[e + 2u], partial[e + 3u]);
    let t1 = vec4<f32>(partial[e + 4u], partial[e + 5u], partial[e + 6u], partial[e + 7u]);
    add_norm_block(block, lid, t0, t1);
}
