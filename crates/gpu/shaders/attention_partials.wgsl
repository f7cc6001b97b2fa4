// attention.wgsl's binding 7: (n_tokens, n_heads, n_splits, head_dim / 4) vec4 acc, then
// (n_tokens, n_heads, n_splits) vec4 (m, l, 0, 0).
@group(0) @binding(7) var<storage, read_write> partials: array<vec4<f32>>;
