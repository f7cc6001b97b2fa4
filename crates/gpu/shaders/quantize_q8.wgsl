// Int8 activations for the integer-dot decode kernels (crate::quant::q8dot::quantize_q8), per
// block of 32 values: iscale = 127 / amax by exact long division (scale_for_absmax from
// activation_quant.wgsl, prepended: bit-equal to the CPU's f32 division), q = clamp(round(x *
// iscale), -127, 127) (`round` is half to even, one correctly rounded multiply, as on the CPU),
// d = 1 / iscale; a block with amax < 1e-30 (or not finite) is all zeros with d = 0.
// Four invocations per block, each reading 8 values (2 vec4) and writing their 2 words; the
// block's absmax goes through workgroup memory (q8_quarter.wgsl: one barrier; max is exact in
// any order, so the records are those of one invocation per block, bit for bit). Record
// layout: quant/q8.wgsl. WG: a multiple of 4, at most 256.
//
// Entry points: `main` quantizes x; `main_silu` first replaces x by silu(x) * up
// (silu_mul.wgsl's `apply`, prepended: the SiluMul elementwise op's arithmetic, bit for bit)
// and quantizes that (Llama's FFN: the gated product and the input records of ffn_down in
// one dispatch); `main_silu_norm` does the same for gate and up products of a norm record
// (made by the residual add before them: q8_add_norm.wgsl), which are the products of the
// normed row times its RMS: it first takes the norm's factor inv = 1 / sqrt(sum of squares /
// norm_cols + eps) from the record (each workgroup sums its blocks' sums: one reduction, in
// the few workgroups of this dispatch rather than in the thousands of the products) and
// computes silu(inv g) * (inv u).
//
// Bindings:
//   0  uniform Q8Params
//   1  x: (n_tokens, x_stride) f32 as vec4, cols values used per token (main_silu: the gate,
//      overwritten with the product)
//   2  out: (n_tokens, record_words) u32 records
//   3  up: like x (main_silu, main_silu_norm)
//   4  norm: the norm record of norm_cols values (main_silu_norm only), read as vec4<f32>

struct Q8Params {
    n_tokens: u32,     // tokens
    cols: u32,         // values per token (a multiple of 32)
    x_stride: u32,     // input row length (a multiple of 4)
    record_words: u32, // u32 words per record: cols / 4 + 4 * ceil(cols / 128)
    norm_cols: u32,    // main_silu_norm: the norm's row length (a multiple of 32), else 0
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Q8Params;
@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<storage, read> up: array<vec4<f32>>;

// Token, block, quarter (8 values) and first vec4 of x of invocation i (token n_tokens and
// past: nothing to do).
fn q8_quarter_of(i: u32) -> vec4<u32> {
    let blocks = max(p.cols / 32u, 1u); // a divisor: at least 1 (tests/gpu_uniforms.rs)
    let t = (i / 4u) / blocks;
    let b = (i / 4u) % blocks;
    let k = i % 4u;
    return vec4<u32>(t, b, k, t * (p.x_stride / 4u) + 8u * b + 2u * k);
}

// Quarter `at` of a block's record from its 8 values (every invocation calls it: a barrier).
fn q8_store_quarter(at: vec4<u32>, lid: u32, v0: vec4<f32>, v1: vec4<f32>) {
    let s = q8_quarter_scale(lid, v0, v1);
    if (at.x >= p.n_tokens) {
        return;
    }
    let ob = at.x * p.record_words + 8u * at.y + 2u * at.z;
    out[ob] = q8_pack4(v0, s);
    out[ob + 1u] = q8_pack4(v1, s);
    if (at.z == 0u) {
        out[at.x * p.record_words + p.cols / 4u + at.y] = q8_scale_word(s);
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let at = q8_quarter_of(flat_workgroup(wid, nwg) * WG + lid);
    var v0 = vec4<f32>(0.0);
    var v1 = vec4<f32>(0.0);
    if (at.x < p.n_tokens) {
        v0 = x[at.w];
        v1 = x[at.w + 1u];
    }
    q8_store_quarter(at, lid, v0, v1);
}

// silu(g) * u of four values (silu_mul.wgsl's `apply` on each).
fn silu_mul4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(apply(g.x, u.x), apply(g.y, u.y), apply(g.z, u.z), apply(g.w, u.w));
}

@compute @workgroup_size(WG)
fn main_silu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let at = q8_quarter_of(flat_workgroup(wid, nwg) * WG + lid);
    var v0 = vec4<f32>(0.0);
    var v1 = vec4<f32>(0.0);
    if (at.x < p.n_tokens) {
        v0 = silu_mul4(x[at.w], up[at.w]);
        v1 = silu_mul4(x[at.w + 1u], up[at.w + 1u]);
        x[at.w] = v0;
        x[at.w + 1u] = v1;
    }
    q8_store_quarter(at, lid, v0, v1);
}

@group(0) @binding(4) var<storage, read> norm: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn main_silu_norm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // The norm's factor: this invocation's share of the blocks' sums, loaded with the values.
    let base = q8_norm_base(p.norm_cols);
    let sums = (p.norm_cols + 127u) / 128u;
    var part = 0.0;
    for (var i = lid; i < sums; i = i + WG) {
        let v = norm[base + i];
        part = part + ((v.x + v.y) + (v.z + v.w));
    }
    let at = q8_quarter_of(flat_workgroup(wid, nwg) * WG + lid);
    var g0 = vec4<f32>(0.0);
    var g1 = vec4<f32>(0.0);
    var u0 = vec4<f32>(0.0);
    var u1 = vec4<f32>(0.0);
    if (at.x < p.n_tokens) {
        g0 = x[at.w];
        g1 = x[at.w + 1u];
        u0 = up[at.w];
        u1 = up[at.w + 1u];
    }
    let eps = norm[base + sums].x;
    let inv = inverseSqrt(workgroup_sum(part, lid) / f32(max(p.norm_cols, 1u)) + eps);
    var v0 = vec4<f32>(0.0);
    var v1 = vec4<f32>(0.0);
    if (at.x < p.n_tokens) {
        v0 = silu_mul4(g0 * inv, u0 * inv);
        v1 = silu_mul4(g1 * inv, u1 * inv);
        x[at.w] = v0;
        x[at.w + 1u] = v1;
    }
    q8_store_quarter(at, lid, v0, v1);
}
