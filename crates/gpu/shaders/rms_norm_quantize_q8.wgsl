// RMSNorm, then the per-32 int8 quantization of the normalized row for the integer-dot decode
// kernels (quantize_q8.wgsl's arithmetic), in one dispatch: decode runs one token, and the two
// kernels' launch and barrier would cost more than their work. One workgroup per row sums
// squares (workgroup_sum), then four invocations take each block of 32 values, 8 values each
// (as quantize_q8.wgsl does): each computes y = (src * w) * inv for its values in registers,
// writes them to binding 2 (the f32 output, for any other reader), shares their absmax with
// the block's other three through workgroup memory (q8_quarter.wgsl) and quantizes them, so the records equal
// quantize_q8 of `y` bit for bit: iscale = 127 / amax (scale_for_absmax from activation_quant.wgsl, exact),
// q = clamp(round_half_even(y * iscale), -127, 127), d = 1 / iscale; a block with amax < 1e-30
// (or not finite) is all zeros with d = 0. Record layout: quant/q8.wgsl.
// Where a row has at most one quarter block (8 values) per invocation (dim <= 8 WG: every
// decode row of the models served), the row is read once into registers and the sum of squares,
// the scale and the records come from those registers in one pass; longer rows are walked
// twice (the sum, then the blocks), with the same arithmetic.
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
    // One quarter per invocation: the values stay in registers, one pass.
    if (p.dim / 8u <= WG) {
        let quarters = p.dim / 8u;
        let live = lid < quarters;
        let e = 2u * min(lid, quarters - 1u);
        let a0 = src[base + e];
        let a1 = src[base + e + 1u];
        let w0 = w[e];
        let w1 = w[e + 1u];
        let part = select(0.0, dot(a0, a0) + dot(a1, a1), live);
        let inv = inverseSqrt(workgroup_sum(part, lid) / f32(p.dim) + p.eps);
        let v0 = (a0 * w0) * inv;
        let v1 = (a1 * w1) * inv;
        let s = q8_quarter_scale(lid, v0, v1);
        if (live) {
            store_quarter(row, lid, v0, v1, s);
        }
        return;
    }
    var ss = 0.0;
    for (var i = lid; i < words; i = i + WG) {
        let v = src[base + i];
        ss = ss + dot(v, v);
    }
    let inv = inverseSqrt(workgroup_sum(ss, lid) / f32(p.dim) + p.eps);
    // Quarter q (8 values) of the row: vec4s 2q, 2q + 1, block q / 4. Every invocation runs
    // every round (barriers); WG is a multiple of 4, so a block's quarters share a round.
    let quarters = p.dim / 8u;
    for (var q0 = 0u; q0 < quarters; q0 = q0 + WG) {
        let q = q0 + lid;
        let live = q < quarters;
        let e = 2u * min(q, quarters - 1u);
        let v0 = (src[base + e] * w[e]) * inv;
        let v1 = (src[base + e + 1u] * w[e + 1u]) * inv;
        let s = q8_quarter_scale(lid, v0, v1);
        workgroupBarrier();
        if (live) {
            store_quarter(row, q, v0, v1, s);
        }
    }
}

// Quarter q (8 values: vec4s 2q, 2q + 1 of the row, block q / 4) of normalized row `row`, v0
// and v1, to x, and to its record at iscale s (the block's scale word from its first quarter).
fn store_quarter(row: u32, q: u32, v0: vec4<f32>, v1: vec4<f32>, s: f32) {
    let words = p.dim / 4u;
    let e = row * words + 2u * q;
    x[e] = v0;
    x[e + 1u] = v1;
    let rec = row * p.record_words;
    out[rec + 2u * q] = q8_pack4(v0, s);
    out[rec + 2u * q + 1u] = q8_pack4(v1, s);
    if (q % 4u == 0u) {
        out[rec + words + q / 4u] = q8_scale_word(s);
    }
}
