// Int8 activations for the integer-dot decode kernels (crate::quant::q8dot::quantize_q8), per
// block of 32 values: iscale = 127 / amax by exact long division (scale_for_absmax from
// activation_quant.wgsl, prepended: bit-equal to the CPU's f32 division), q = clamp(round(x *
// iscale), -127, 127) (`round` is half to even, one correctly rounded multiply, as on the CPU),
// d = 1 / iscale; a block with amax < 1e-30 (or not finite) is all zeros with d = 0.
// One invocation per block: it reads its 8 vec4 of x, writes 2 vec4 of values and one scale.
// Record layout: quant/q8.wgsl.
//
// Bindings:
//   0  uniform Q8Params
//   1  x: (n_tokens, x_stride) f32 as vec4, cols values used per token
//   2  out: (n_tokens, record_words) u32 records

struct Q8Params {
    n_tokens: u32,     // tokens
    cols: u32,         // values per token (a multiple of 32)
    x_stride: u32,     // input row length (a multiple of 4)
    record_words: u32, // u32 words per record: cols / 4 + 4 * ceil(cols / 128)
}

@group(0) @binding(0) var<uniform> p: Q8Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn q8_quantize4(v: vec4<f32>, s: f32) -> u32 {
    return pack4xI8(vec4<i32>(clamp(round(v * s), vec4<f32>(-127.0), vec4<f32>(127.0))));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let blocks = p.cols / 32u;
    let i = flat_workgroup(wid, nwg) * WG + lid;
    let t = i / blocks;
    let b = i % blocks;
    if (t >= p.n_tokens) {
        return;
    }
    let xb = t * (p.x_stride / 4u) + 8u * b;
    var v: array<vec4<f32>, 8>;
    var m = 0.0;
    for (var k = 0u; k < 8u; k = k + 1u) {
        v[k] = x[xb + k];
        let a = abs(v[k]);
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    // `m >= 1e-30` is false for NaN; infinity gives iscale 0 from scale_for_absmax.
    var s = 0.0;
    if (m >= 1e-30) {
        s = scale_for_absmax(m);
    }
    let ob = t * p.record_words + 8u * b;
    for (var k = 0u; k < 8u; k = k + 1u) {
        out[ob + k] = select(0u, q8_quantize4(v[k], s), s != 0.0);
    }
    out[t * p.record_words + p.cols / 4u + b] = bitcast<u32>(select(0.0, 1.0 / s, s != 0.0));
}
