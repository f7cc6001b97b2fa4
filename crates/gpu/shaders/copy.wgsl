// A plain copy, 16 bytes per invocation per step, grid-stride: benchmarks use it to measure the
// bandwidth a compute kernel can reach (bytes read + written per second).
// Bindings: 0 (n) vec4<u32> source, 1 (n) vec4<u32> destination.

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&src);
    let stride = nwg.x * WG;
    for (var i = gid.x; i < n; i = i + stride) {
        dst[i] = src[i];
    }
}
