// The parameters of attention.wgsl and attention_coop.wgsl (mirrors AttentionParams in
// src/gpu/ops/attention.rs).

struct AttentionParams {
    mode: u32,
    n_tokens: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    max_ctx: u32,
    n_splits: u32,
    kv_f16: u32,
    scale: f32,
    min_split: u32,
    rope_dim: u32, // dimensions rotated (0: no RoPE here)
    rope_neox: u32, // 1: pairs (i, i + rope_dim/2); 0: pairs (2i, 2i+1)
    fused: u32, // attend: 1 also appends the one new token's K and V (decode)
    quantize: u32, // combine: 1 also writes the output's q8 records into src3
    norm_cols: u32, // decode attend: q, k, v are products of a norm record of rows of this
                    // many values, whose factor the attend applies (attention_norm.wgsl); else 0
    window: u32, // keys seen: the last `window` positions up to the query's own (0: all)
    softcap: f32, // scores become softcap * tanh(score / softcap) (0: as they are)
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
