// GELU-gated product (Gemma's FFN activation): gelu(g) * u with GELU's tanh form,
// gelu(g) = g / 2 (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))). tanh's argument is clamped to
// [-10, 10], where tanh is +-1 in f32 already, so that an implementation's tanh never sees
// an infinity (g^3 overflows for |g| above about 7e12). Driven by elementwise.wgsl.
fn apply(g: f32, u: f32) -> f32 {
    let z = clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -10.0, 10.0);
    return 0.5 * g * (1.0 + tanh(z)) * u;
}
