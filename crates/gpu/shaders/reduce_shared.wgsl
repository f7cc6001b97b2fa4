// workgroup_sum / workgroup_max through workgroup memory (any device). WG must be a power of
// two no larger than 256.

// Sized by the workgroup (WebGPU zero-initializes workgroup memory at the start of every
// workgroup; on CPU adapters that costs as much as a small kernel's work); native pipelines,
// which skip that, set 256 (`Kernel::constants`). An override of its own: wgpu 30 rejects a
// pipeline where an unused array type shares a used one's size override ("... depends on ...
// which has not been processed yet").
override REDUCE_N: u32 = WG;

var<workgroup> reduce_scratch: array<f32, REDUCE_N>;

fn workgroup_sum(v: f32, lid: u32) -> f32 {
    reduce_scratch[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            reduce_scratch[lid] = reduce_scratch[lid] + reduce_scratch[lid + s];
        }
        workgroupBarrier();
    }
    let r = reduce_scratch[0];
    workgroupBarrier();
    return r;
}

fn workgroup_max(v: f32, lid: u32) -> f32 {
    reduce_scratch[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            reduce_scratch[lid] = max(reduce_scratch[lid], reduce_scratch[lid + s]);
        }
        workgroupBarrier();
    }
    let r = reduce_scratch[0];
    workgroupBarrier();
    return r;
}

var<workgroup> reduce_scratch4: array<vec4<f32>, REDUCE_N>;

// workgroup_sum of four values at once (one tree for the four lanes).
fn workgroup_sum4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    reduce_scratch4[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            reduce_scratch4[lid] = reduce_scratch4[lid] + reduce_scratch4[lid + s];
        }
        workgroupBarrier();
    }
    let r = reduce_scratch4[0];
    workgroupBarrier();
    return r;
}

// workgroup_max of four values at once.
fn workgroup_max4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    reduce_scratch4[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            reduce_scratch4[lid] = max(reduce_scratch4[lid], reduce_scratch4[lid + s]);
        }
        workgroupBarrier();
    }
    let r = reduce_scratch4[0];
    workgroupBarrier();
    return r;
}

// workgroup_sum of v.x and workgroup_max of v.y in one tree.
fn workgroup_sum_max(v: vec2<f32>, lid: u32) -> vec2<f32> {
    reduce_scratch4[lid] = vec4<f32>(v, 0.0, 0.0);
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let a = reduce_scratch4[lid];
            let b = reduce_scratch4[lid + s];
            reduce_scratch4[lid] = vec4<f32>(a.x + b.x, max(a.y, b.y), 0.0, 0.0);
        }
        workgroupBarrier();
    }
    let r = reduce_scratch4[0].xy;
    workgroupBarrier();
    return r;
}

// Segmented sums, for kernels where runs of `seg` invocations (a power of two) share one
// result (the threads of one matrix row). segment_index numbers the invocations 0..WG: here
// the local index itself. segment_sum4i sums v over the aligned run of `seg` indices that `t`
// lies in, valid on the run's first index; every invocation calls it (barriers).
fn segment_index(lid: u32) -> u32 {
    return lid;
}

fn segment_sum4i(v: vec4<i32>, t: u32, seg: u32) -> vec4<i32> {
    reduce_scratch4[t] = bitcast<vec4<f32>>(v);
    workgroupBarrier();
    var total = vec4<i32>();
    if (t % max(seg, 1u) == 0u) {
        for (var i = 0u; i < seg; i = i + 1u) {
            total = total + bitcast<vec4<i32>>(reduce_scratch4[t + i]);
        }
    }
    workgroupBarrier();
    return total;
}
