// BitLinear activation quantization, per token (transformers' BitNet activation_quant):
//   s = 127 / max(max|x|, 1e-5),  q = clamp(round_half_even(x * s), -128, 127)
// One workgroup per token: an absmax reduction, then the int8 values packed 4 per u32 and
// their sum. s and q come from activation_quant.wgsl (prepended): s by exact integer long
// division, bit-equal to the CPU's f32 division.
// Output record layout: see quant/i2s.wgsl; activation_record.wgsl (prepended) writes it.
//
// Bindings:
//   0  uniform QuantizeParams
//   1  x: (n_tokens, x_stride) f32, cols % 4 == 0 values used per token
//   2  out: (n_tokens, record_words) u32 activation records

struct QuantizeParams {
    n_tokens: u32,     // tokens
    cols: u32,         // values per token (a multiple of 4)
    x_stride: u32,     // input row length: x[t * x_stride + col] (a multiple of 4)
    record_words: u32, // u32 words per output record: 4 + 4 * ceil(cols / 16)
}

@group(0) @binding(0) var<uniform> p: QuantizeParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = flat_workgroup(wid, nwg);
    // Uniform per workgroup, so the reductions below stay in uniform control flow.
    if (t >= p.n_tokens) {
        return;
    }
    let words = p.cols / 4u;
    let xbase = t * (p.x_stride / 4u);
    let s = token_scale(xbase, words, lid);

    // The second pass reads x again (from cache): keeping it in registers between the passes
    // is slower.
    write_record(xbase, words, t * p.record_words + 4u, p.record_words - 4u, s, lid);
}

// The same quantization written as a q8 record (quant/q8.wgsl; record_words = record_bytes(cols)
// / 4): the int8 values, then 1 / s as the scale of every block of 32 (the input of the
// integer-dot TQ1_0/TQ2_0 kernels, MatvecQ8, for BitLinear; cols a multiple of 32).
@compute @workgroup_size(WG)
fn main_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = flat_workgroup(wid, nwg);
    if (t >= p.n_tokens) {
        return;
    }
    let words = p.cols / 4u;
    let xbase = t * (p.x_stride / 4u);
    let s = token_scale(xbase, words, lid);
    let obase = t * p.record_words;
    for (var i = lid; i < words; i = i + WG) {
        out[obase + i] = pack4xI8(quantize4(x[xbase + i], s));
    }
    let d = bitcast<u32>(1.0 / s);
    let blocks = p.cols / 32u;
    for (var i = lid; i < p.record_words - words; i = i + WG) {
        out[obase + words + i] = select(0u, d, i < blocks);
    }
}
