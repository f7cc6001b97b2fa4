// attention.wgsl's `qkv_factor` for the kernels whose q, k and v always come normed
// (Kernel::Attention, Kernel::AttentionGroup): no binding, the factor 1. The decode attend's
// is in attention_norm.wgsl.
fn qkv_factor(lid: u32) -> f32 {
    return 1.0;
}
