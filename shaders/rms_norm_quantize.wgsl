// RMSNorm, then BitLinear's per-token activation quantization of the normalized row, in one
// dispatch (decode runs one token: two kernels' launches, barriers and memory round trips cost
// more than their work). One workgroup per row; each invocation loads its (at most PER) vec4 of
// the row once, all loads issued together, and keeps them in registers: sum of squares, the
// normalized values (written to `x` on the way), their absmax, the scale (activation_quant.wgsl's
// scale_for_absmax, bit-equal to the CPU's) and the int8 record (layout: quant/i2s.wgsl, as
// quantize_activations.wgsl writes it) all come from those registers. Rows of at most
// PER * WG * 4 values (checked on the host).
//
// Bindings:
//   0  uniform NormQuantParams
//   1  src: (n_rows, dim) f32, the rows to normalize
//   2  x: (n_rows, dim) f32, the normalized rows (named `x` as the quantizer's input, which
//      activation_quant.wgsl's token_scale reads)
//   3  w: (dim) f32, the norm's weight
//   4  out: (n_rows, record_words) u32 activation records

const PER: u32 = 16u;

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
    var v: array<vec4<f32>, PER>;
    for (var j = 0u; j < PER; j = j + 1u) {
        let i = lid + j * WG;
        v[j] = select(vec4<f32>(0.0), src[base + min(i, words - 1u)], i < words);
    }
    var ss = 0.0;
    for (var j = 0u; j < PER; j = j + 1u) {
        ss = ss + dot(v[j], v[j]);
    }
    let inv = inverseSqrt(workgroup_sum(ss, lid) / f32(p.dim) + p.eps);
    var m = 0.0;
    for (var j = 0u; j < PER; j = j + 1u) {
        let i = lid + j * WG;
        if (i < words) {
            let a = (v[j] * w[i]) * inv;
            v[j] = a;
            x[base + i] = a;
            let b = abs(a);
            m = max(m, max(max(b.x, b.y), max(b.z, b.w)));
        }
    }
    let s = scale_for_absmax(max(workgroup_max(m, lid), 1e-5));

    let obase = row * p.record_words + 4u;
    let padded = p.record_words - 4u;
    var sum = 0i;
    for (var j = 0u; j < PER; j = j + 1u) {
        let i = lid + j * WG;
        if (i < padded) {
            var word = 0u;
            if (i < words) {
                let q = quantize4(v[j], s);
                sum = sum + q.x + q.y + q.z + q.w;
                word = pack4xI8(q);
            }
            out[obase + i] = word;
        }
    }
    // Exact in f32 while |sum| <= 128 * dim <= 2^24.
    let total = workgroup_sum(f32(sum), lid);
    if (lid == 0u) {
        out[obase - 4u] = bitcast<u32>(s);
        out[obase - 3u] = bitcast<u32>(i32(total));
        out[obase - 2u] = 0u;
        out[obase - 1u] = 0u;
    }
}
