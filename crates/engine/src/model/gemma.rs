//! The Gemma 2 and Gemma 3 pass: the embedding scaled by sqrt(dim); per block, pre- and
//! post-norms around attention and around a GELU-gated FFN, each output added to the residual
//! stream after its post-norm. Attention is grouped-query with NeoX RoPE; Gemma 3 RMS-norms
//! each head of q and k first. Windowed layers attend over the last `window` positions (Gemma 3
//! with its own RoPE table there), and Gemma 2 soft-caps the scores; its final logits are
//! soft-capped in the head ([`super::Model::ops`]).

use super::{ModelConfig, RunState, Weights};
use crate::error::ModelError;
use crate::pass::Pass;
use crate::Error;

/// The embedding and every block for a pass of `n` tokens; leaves the residual stream in
/// `s.x`.
pub fn forward(
    c: &ModelConfig,
    w: &Weights,
    s: &RunState,
    n: usize,
    p: &mut Pass,
) -> Result<(), Error> {
    let dim = c.dim;
    p.embed(w.token_embd, s.x); // x: (n, dim)
    if let Some(e) = w.embed_scale {
        p.scale_columns(s.x, e, n, dim); // x *= sqrt(dim)
    }
    for (i, l) in w.layers.iter().enumerate() {
        let missing = |name: &str| -> Error {
            ModelError::MissingTensor {
                name: format!("blk.{i}.{name}.weight"),
            }
            .into()
        };
        let post_attn = l
            .attn_post_norm
            .ok_or_else(|| missing("post_attention_norm"))?;
        let post_ffn = l.ffn_post_norm.ok_or_else(|| missing("post_ffw_norm"))?;
        // Attention: x += norm(wo . attention(rope(wq . xn), rope(wk . xn), wv . xn)).
        super::llama::attention(c, w, l, s, n, i, p)?; // xb2: (n, dim)
        p.rms_norm(s.xb2, post_attn, s.xb, n, dim, c.eps);
        p.add(s.x, s.xb, n * dim);
        // FFN: x += norm(down(gelu(gate . xn) * (up . xn))), xn = norm(x).
        p.rms_norm(s.x, l.ffn_norm, s.xb, n, dim, c.eps);
        super::llama::gate_up(c, w, l, s, n, i, p); // hb, hb2: (n, ffn_dim)
        p.gelu_mul(s.hb, s.hb2, n * c.ffn_dim); // hb = gelu(hb) * hb2
        super::llama::down(c, w, l, s, n, i, p); // xb2: (n, dim)
        p.rms_norm(s.xb2, post_ffn, s.xb, n, dim, c.eps);
        p.add(s.x, s.xb, n * dim);
    }
    Ok(())
}
