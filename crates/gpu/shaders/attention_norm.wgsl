// The one-token decode attend's input norm (Kernel::AttentionDecode; attention.wgsl's `attend`
// calls qkv_factor): with norm_cols > 0, q, k and v are products of the norm record that the
// residual add before them wrote (q8_add_norm.wgsl: the record of x * w and the blocks' sums
// of squares of x), so each is rms(x) times the product of the normed row, and the RMSNorm
// before them has no dispatch of its own. Every workgroup takes the factor
// inv = 1 / sqrt(sum of squares / norm_cols + eps) from the record's block sums (as
// quantize_q8.wgsl's main_silu_norm does for the FFN) and applies it to the query and the new
// key and value as it loads them (RoPE is linear, so before or after the rotation is the same).
//
// Binding:
//   12  qkv_norm: the norm record of rows of norm_cols values (q8_quarter.wgsl's layout, eps
//       last), read as vec4<f32>; any buffer when norm_cols is 0

@group(0) @binding(12) var<storage, read> qkv_norm: array<vec4<f32>>;

// The norm's factor, or 1 when q, k and v come normed. Call from every invocation of the
// workgroup (a reduction).
fn qkv_factor(lid: u32) -> f32 {
    if (p.norm_cols == 0u) {
        return 1.0;
    }
    let base = q8_norm_base(p.norm_cols);
    let sums = (p.norm_cols + 127u) / 128u;
    var part = 0.0;
    for (var i = lid; i < sums; i = i + WG) {
        let v = qkv_norm[base + i];
        part = part + ((v.x + v.y) + (v.z + v.w));
    }
    let eps = qkv_norm[base + sums].x;
    return inverseSqrt(workgroup_sum(part, lid) / f32(max(p.norm_cols, 1u)) + eps);
}
