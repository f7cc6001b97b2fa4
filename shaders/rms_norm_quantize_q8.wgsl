// RMSNorm, then the per-32 int8 quantization of the normalized row for the integer-dot decode
// kernels (quantize_q8.wgsl's arithmetic), in one dispatch: decode runs one token, and the two
// kernels' launch and barrier would cost more than their work. One workgroup per row sums
// squares (workgroup_sum), then each invocation takes whole blocks of 32 values: it computes
// y = (src * w) * inv for the block in registers, writes it to binding 2 (the f32 output, for any
// other reader) and quantizes the same values, so the records equal quantize_q8 of `y` bit for
// bit: iscale = 127 / amax (scale_for_absmax from activation_quant.wgsl, exact),
// q = clamp(round_half_even(y * iscale), -127, 127), d = 1 / iscale; a block with amax < 1e-30
// (or not finite) is all zeros with d = 0. Record layout: quant/q8.wgsl.
//
// Bindings:
//   0  uniform NormQuantParams (record_words: u32 words per q8 record)
//   1  src: (n_rows, dim) f32 as vec4, the rows to normalize (dim a multiple of 32)
//   2  x: (n_rows, dim) f32 as vec4, the normalized rows y (named `x` because the included
//      activation_quant.wgsl refers to that binding)
//   3  w: (dim) f32 as vec4, the norm's weight
//   4  out: (n_rows, record_words) u32 q8 records

struct NormQuantParams {
    n_rows: u32,
    dim: u32,          // a multiple of 32
    eps: f32,
    record_words: u32, // u32 words per record: dim / 4 + 4 * ceil(dim / 128)
}

@group(0) @binding(0) var<uniform> p: NormQuantParams;
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

fn norm_q8_quantize4(v: vec4<f32>, s: f32) -> u32 {
    return pack4xI8(vec4<i32>(clamp(round(v * s), vec4<f32>(-127.0), vec4<f32>(127.0))));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = flat_workgroup(wid, nwg);
    // Uniform per workgroup, so the reduction below stays in uniform control flow.
    if (row >= p.n_rows) {
        return;
    }
    let words = p.dim / 4u;
    let base = row * words;
    var ss = 0.0;
    for (var i = lid; i < words; i = i + WG) {
        let v = src[base + i];
        ss = ss + dot(v, v);
    }
    let inv = inverseSqrt(workgroup_sum(ss, lid) / f32(p.dim) + p.eps);
    let rec = row * p.record_words;
    for (var b = lid; b < p.dim / 32u; b = b + WG) {
        var v: array<vec4<f32>, 8>;
        var m = 0.0;
        for (var k = 0u; k < 8u; k = k + 1u) {
            let e = 8u * b + k;
            v[k] = (src[base + e] * w[e]) * inv;
            x[base + e] = v[k];
            let a = abs(v[k]);
            m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
        }
        // `m >= 1e-30` is false for NaN; infinity gives iscale 0 from scale_for_absmax.
        var s = 0.0;
        if (m >= 1e-30) {
            s = scale_for_absmax(m);
        }
        for (var k = 0u; k < 8u; k = k + 1u) {
            out[rec + 8u * b + k] = select(0u, norm_q8_quantize4(v[k], s), s != 0.0);
        }
        out[rec + words + b] = bitcast<u32>(select(0.0, 1.0 / s, s != 0.0));
    }
}
