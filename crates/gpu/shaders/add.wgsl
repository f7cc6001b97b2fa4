// Residual add: a + b (in place: out += b). Driven by elementwise.wgsl.
fn apply(a: f32, b: f32) -> f32 {
    return a + b;
}
