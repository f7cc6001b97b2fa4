// RMSNorm, then BitLinear's per-token activation quantization of the normalized row, in one
// dispatch (decode runs one token: the two kernels' launch and barrier cost more than their
// work). The same arithmetic as rms_norm.wgsl followed by quantize_activations.wgsl: one
// workgroup per row sums squares, writes y = x * w * inv to `y`, makes those writes visible to
// the workgroup, then finds the scale (activation_quant.wgsl's token_scale over `y`) and writes
// the int8 record (layout: quant/i2s.wgsl; the same as quantize_activations.wgsl).
//
// Bindings:
//   0  uniform NormQuantParams
//   1  src: (n_rows, dim) f32, the rows to normalize
//   2  y: (n_rows, dim) f32 as vec4, the normalized rows (token_scale reads them as `x`)
//   3  w: (dim) f32, the norm's weight
//   4  out: (n_rows, record_words) u32 activation records

struct NormQuantParams {
    n_rows: u32,
    dim: u32,          // a multiple of 4
    eps: f32,
    record_words: u32, // u32 words per output record: 4 + 4 * ceil(dim / 16)
}

@group(0) @binding(0) var<uniform> p: NormQuantParams;
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = flat_workgroup(wid, nwg);
    // Uniform per workgroup, so the reductions below stay in uniform control flow.
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
    for (var i = lid; i < words; i = i + WG) {
        x[base + i] = (src[base + i] * w[i]) * inv;
    }
    storageBarrier();
    let s = token_scale(base, words, lid);

    write_record(base, words, row * p.record_words + 4u, p.record_words - 4u, s, lid);
}
