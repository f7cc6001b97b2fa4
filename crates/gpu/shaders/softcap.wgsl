// Soft cap (Gemma 2's final logits): cap * tanh(x / cap), the cap in ElementwiseParams.scalar,
// in place. tanh's argument clamped to [-10, 10] as in gelu_mul.wgsl. Driven by
// elementwise.wgsl (no second operand).
fn apply(x: f32, _unused: f32) -> f32 {
    let cap = p.scalar;
    return cap * tanh(clamp(x / cap, -10.0, 10.0));
}
