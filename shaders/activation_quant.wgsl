// BitLinear's per-token activation quantization (transformers' BitNet activation_quant), the
// parts shared by quantize_activations.wgsl (int8 records for I2_S) and
// fake_quantize_activations.wgsl (f32 x_q / s for TQ1_0 / TQ2_0):
//   s = 127 / max(max|x|, 1e-5),  q = clamp(round_half_even(x * s), -128, 127)
// Both kernels compute s with scale_for_absmax, so their scales are the same bits, and both
// equal the CPU's (src/cpu/bitlinear.rs).

// 127 / m, correctly rounded to nearest even, for a finite m >= 1e-5 (so the quotient is a
// normal number); 0 for m = infinity. WGSL allows 2.5 ulp for `/` and the scale must match the
// CPU's f32 division bit for bit, hence exact integer long division: 127 = N * 2^-17 with
// N = 127 << 17, m = M * 2^(e - 150); the 24-bit quotient mantissa plus a round bit come from
// 25 steps of restoring division and the remainder is the sticky bit.
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

// The scale of token row `xbase` (`words` vec4 of the including kernel's `x` binding, which both
// kernels declare as `array<vec4<f32>>`): a workgroup absmax reduction, then scale_for_absmax.
// Call from uniform control flow with every invocation of the workgroup.
fn token_scale(xbase: u32, words: u32, lid: u32) -> f32 {
    var m = 0.0;
    for (var i = lid; i < words; i = i + WG) {
        let v = abs(x[xbase + i]);
        m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    }
    let absmax = workgroup_max(m, lid);
    return scale_for_absmax(max(absmax, 1e-5));
}
