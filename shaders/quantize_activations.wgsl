// BitLinear activation quantization, per token (transformers' BitNet activation_quant):
//   s = 127 / max(max|x|, 1e-5),  q = clamp(round_half_even(x * s), -128, 127)
// One workgroup per token: an absmax reduction, then the int8 values packed 4 per u32 and
// their sum. s is computed by exact integer long division (correctly rounded, like the CPU's
// f32 division), since WGSL allows 2.5 ulp for `/` and the scale must match bit for bit.
// Output record layout: see quant/i2s.wgsl (header vec4, then the packed values).
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

// 127 / m, correctly rounded to nearest even, for a finite m >= 1e-5 (so the quotient is a
// normal number); 0 for m = infinity. 127 = N * 2^-17 with N = 127 << 17, m = M * 2^(e - 150);
// the 24-bit quotient mantissa plus a round bit come from 25 steps of restoring division and
// the remainder is the sticky bit.
fn scale_for_absmax(m: f32) -> f32 {
    let bits = bitcast<u32>(m);
    let e = (bits >> 23u) & 0xffu;
    if (e == 0xffu) {
        return 0.0;
    }
    let mant = (bits & 0x7fffffu) | 0x800000u;
    var num = 127u << 17u;
    var exp = 133i - i32(e); // unbiased exponent of the quotient when num >= mant
    if (num < mant) {
        num = num << 1u;
        exp = exp - 1i;
    }
    var q = 0u;
    var r = num;
    for (var i = 0u; i < 25u; i = i + 1u) {
        q = q << 1u;
        if (r >= mant) {
            r = r - mant;
            q = q | 1u;
        }
        r = r << 1u;
    }
    // q in [2^24, 2^25): 24 mantissa bits and the round bit.
    var mq = q >> 1u;
    let round_bit = (q & 1u) == 1u;
    if (round_bit && (r != 0u || (mq & 1u) == 1u)) {
        mq = mq + 1u;
        if (mq == 0x1000000u) {
            mq = mq >> 1u;
            exp = exp + 1i;
        }
    }
    return bitcast<f32>((u32(exp + 127i) << 23u) | (mq & 0x7fffffu));
}

// clamp(round_half_even(v * s), -128, 127): `round` is half to even in WGSL, and the product
// is one correctly rounded f32 multiply, as on the CPU.
fn quantize4(v: vec4<f32>, s: f32) -> vec4<i32> {
    return vec4<i32>(clamp(round(v * s), vec4<f32>(-128.0), vec4<f32>(127.0)));
}

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
    var m = 0.0;
    for (var i = lid; i < words; i = i + WG) {
        let v = abs(x[xbase + i]);
        m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    }
    let absmax = workgroup_max(m, lid);
    let s = scale_for_absmax(max(absmax, 1e-5));

    // The second pass reads x again (from cache): keeping it in registers between the passes
    // measured slower on an H200.
    let obase = t * p.record_words + 4u;
    let padded = p.record_words - 4u;
    var sum = 0i;
    for (var i = lid; i < padded; i = i + WG) {
        var word = 0u;
        if (i < words) {
            let q = quantize4(x[xbase + i], s);
            sum = sum + q.x + q.y + q.z + q.w;
            word = pack4xI8(q);
        }
        out[obase + i] = word;
    }
    // Integer partial sums are exact in f32 while |sum| <= 128 * cols <= 2^24
    // (cols <= 131072, checked on the host), in any reduction order.
    let total = workgroup_sum(f32(sum), lid);
    if (lid == 0u) {
        out[obase - 4u] = bitcast<u32>(s);
        out[obase - 3u] = bitcast<u32>(i32(total));
        out[obase - 2u] = 0u;
        out[obase - 1u] = 0u;
    }
}
