// ReLU squared (BitNet's FFN activation): max(x, 0)^2, times the up projection u when gated:
// relu(gate)^2 * up in one pass. Driven by elementwise.wgsl.
fn apply(x: f32, u: f32) -> f32 {
    let r = max(x, 0.0);
    let sq = r * r;
    if (p.gated == 1u) {
        return sq * u;
    }
    return sq;
}
