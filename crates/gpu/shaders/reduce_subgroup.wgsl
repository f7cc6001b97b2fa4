// workgroup_sum / workgroup_max with subgroup operations: reduce within each subgroup, then
// across the (at most 256 / subgroup size) subgroup partials in workgroup memory.

// Sized by the workgroup (WebGPU zero-initializes workgroup memory at the start of every
// workgroup; on CPU adapters that costs as much as a small kernel's work); native pipelines,
// which skip that, set 256 (`Kernel::constants`). An override of its own: wgpu 30 rejects a
// pipeline where an unused array type shares a used one's size override ("... depends on ...
// which has not been processed yet").
override REDUCE_N: u32 = WG;

var<workgroup> reduce_scratch: array<f32, REDUCE_N>;

fn workgroup_sum(v: f32, lid: u32) -> f32 {
    let s = subgroupAdd(v);
    let size = max(subgroupAdd(1u), 1u); // at least 1: the invocation itself
    let first = subgroupBroadcastFirst(lid);
    if (lid == first) {
        reduce_scratch[first / size] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    let n = (WG + size - 1u) / size;
    for (var i = 0u; i < n; i = i + 1u) {
        total = total + reduce_scratch[i];
    }
    workgroupBarrier();
    return total;
}

fn workgroup_max(v: f32, lid: u32) -> f32 {
    let s = subgroupMax(v);
    let size = max(subgroupAdd(1u), 1u); // at least 1: the invocation itself
    let first = subgroupBroadcastFirst(lid);
    if (lid == first) {
        reduce_scratch[first / size] = s;
    }
    workgroupBarrier();
    var m = reduce_scratch[0];
    let n = (WG + size - 1u) / size;
    for (var i = 1u; i < n; i = i + 1u) {
        m = max(m, reduce_scratch[i]);
    }
    workgroupBarrier();
    return m;
}

var<workgroup> reduce_scratch4: array<vec4<f32>, REDUCE_N>;

// workgroup_sum of four values at once: one vec4 subgroupAdd (no barrier), then one barrier
// for the subgroup partials.
fn workgroup_sum4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    let s = subgroupAdd(v);
    let size = max(subgroupAdd(1u), 1u); // at least 1: the invocation itself
    let first = subgroupBroadcastFirst(lid);
    if (lid == first) {
        reduce_scratch4[first / size] = s;
    }
    workgroupBarrier();
    var total = vec4<f32>(0.0);
    let n = (WG + size - 1u) / size;
    for (var i = 0u; i < n; i = i + 1u) {
        total = total + reduce_scratch4[i];
    }
    workgroupBarrier();
    return total;
}

// workgroup_max of four values at once, as workgroup_sum4.
fn workgroup_max4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    let s = subgroupMax(v);
    let size = max(subgroupAdd(1u), 1u); // at least 1: the invocation itself
    let first = subgroupBroadcastFirst(lid);
    if (lid == first) {
        reduce_scratch4[first / size] = s;
    }
    workgroupBarrier();
    var m = reduce_scratch4[0];
    let n = (WG + size - 1u) / size;
    for (var i = 1u; i < n; i = i + 1u) {
        m = max(m, reduce_scratch4[i]);
    }
    workgroupBarrier();
    return m;
}

// workgroup_sum of v.x and workgroup_max of v.y in one round (one barrier for the partials).
fn workgroup_sum_max(v: vec2<f32>, lid: u32) -> vec2<f32> {
    let s = vec2<f32>(subgroupAdd(v.x), subgroupMax(v.y));
    let size = max(subgroupAdd(1u), 1u); // at least 1: the invocation itself
    let first = subgroupBroadcastFirst(lid);
    if (lid == first) {
        reduce_scratch4[first / size] = vec4<f32>(s, 0.0, 0.0);
    }
    workgroupBarrier();
    var r = reduce_scratch4[0].xy;
    let n = (WG + size - 1u) / size;
    for (var i = 1u; i < n; i = i + 1u) {
        let q = reduce_scratch4[i].xy;
        r = vec2<f32>(r.x + q.x, max(r.y, q.y));
    }
    workgroupBarrier();
    return r;
}

// Segmented sums, for kernels where runs of `seg` invocations (a power of two) share one
// result (the threads of one matrix row), without workgroup memory or barriers. Each subgroup
// takes `size` consecutive indices from a counter, its invocations in the order of their
// subgroup invocation ids (one barrier first, for the counter), so an aligned run of `seg`
// indices lies within one subgroup whenever every subgroup has the same size, at least `seg`
// (the host compiles this variant only when the adapter's smallest subgroup size is; WG is a
// multiple of it).
var<workgroup> segment_next: atomic<u32>;

// Called once by every invocation, at the top of the entry point (a barrier).
fn segment_index(lid: u32) -> u32 {
    // Native pipelines skip WebGPU's zeroing of workgroup memory (src/gpu/kernels/mod.rs).
    if (lid == 0u) {
        atomicStore(&segment_next, 0u);
    }
    workgroupBarrier();
    let size = max(subgroupAdd(1u), 1u); // at least 1: the invocation itself
    let inv = subgroupExclusiveAdd(1u);
    var first = 0u;
    if (inv == 0u) {
        first = atomicAdd(&segment_next, size);
    }
    return subgroupBroadcastFirst(first) + inv;
}

// The sum over the run, on every index of it (a butterfly of shuffles).
fn segment_sum4i(v: vec4<i32>, t: u32, seg: u32) -> vec4<i32> {
    var total = v;
    for (var o = seg / 2u; o > 0u; o = o >> 1u) {
        total = total + subgroupShuffleXor(total, o);
    }
    return total;
}
