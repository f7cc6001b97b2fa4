// SiLU-gated product (Llama's FFN activation): silu(g) * u with silu(g) = g / (1 + exp(-g)).
// For g very negative exp(-g) overflows to +inf and the quotient is -0, as it should be.
// Driven by elementwise.wgsl.
fn apply(g: f32, u: f32) -> f32 {
    return g / (1.0 + exp(-g)) * u;
}
