// BitLinear's per-token activation quantization (transformers' BitNet activation_quant), the
// parts shared by quantize_activations.wgsl (int8 records for I2_S) and
// fake_quantize_activations.wgsl (f32 x_q / s for TQ1_0 / TQ2_0):
//   s = 127 / max(max|x|, 1e-5),  q = clamp(round_half_even(x * s), -128, 127)
// Both kernels compute s with scale_for_absmax (absmax_scale.wgsl, prepended), so their scales
// are the same bits, and both equal the CPU's (src/cpu/bitlinear.rs).

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
