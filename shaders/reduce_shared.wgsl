// workgroup_sum / workgroup_max through workgroup memory (any device). WG must be a power of
// two no larger than 256.

var<workgroup> reduce_scratch: array<f32, 256>;

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

var<workgroup> reduce_scratch4: array<vec4<f32>, 256>;

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
