// Product: a * b (in place: out *= b; with cols set, a per-column scale). Driven by
// elementwise.wgsl.
fn apply(a: f32, b: f32) -> f32 {
    return a * b;
}
