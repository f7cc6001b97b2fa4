// An empty kernel: benchmarks dispatch it to measure the per-dispatch overhead floor.
// Binding 0: (1) u32, written by invocation 0 of workgroup 0 so the dispatch cannot be elided.

@group(0) @binding(0) var<storage, read_write> sink: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x == 0u) {
        sink[0] = 1u;
    }
}
