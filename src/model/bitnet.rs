//! BitNet b1.58's blocks (2B4T structure, facts.md): every linear layer is BitLinear (per-token
//! int8 activations times ternary weights); the attention output is sub-normed before `wo`,
//! and the FFN is `down(ffn_sub_norm(relu(gate(x))^2 * up(x)))`; RoPE in NeoX order, since the
//! converters keep transformers' Q/K row order.

use super::Model;
use crate::backend::{Backend, Elementwise};
use crate::Error;

/// Embedding and every block for the pass's `n` tokens; leaves the residual stream in
/// `state.x`.
pub fn blocks<B: Backend>(m: &mut Model<B>, n: usize) -> Result<(), Error> {
    let c = &m.config;
    let (w, s) = (&m.weights, &m.state);
    let b = &mut m.backend;
    let q_dim = c.n_heads * c.head_dim;
    let missing = |what: &str, i: usize| Error::Usage(format!("blk.{i}.{what}.weight missing"));
    b.embed(w.token_embd, s.x)?; // x: (n, dim)
    for (i, l) in w.layers.iter().enumerate() {
        let attn_sub_norm = l.attn_sub_norm.ok_or_else(|| missing("attn_sub_norm", i))?;
        let ffn_sub_norm = l.ffn_sub_norm.ok_or_else(|| missing("ffn_sub_norm", i))?;
        // Attention.
        b.rms_norm(s.x, l.attn_norm, s.xb, n, c.dim, c.eps)?;
        b.bitlinear(l.wq, s.xb, s.q, n)?; // (n, n_heads, head_dim)
        b.bitlinear(l.wk, s.xb, s.k, n)?; // (n, n_kv_heads, head_dim)
        b.bitlinear(l.wv, s.xb, s.v, n)?;
        b.rope(s.q, c.n_heads)?;
        b.rope(s.k, c.n_kv_heads)?;
        b.attention(i, s.q, s.k, s.v, s.att, c.n_heads)?; // (n, n_heads, head_dim)
        b.rms_norm(s.att, attn_sub_norm, s.att_normed, n, q_dim, c.eps)?;
        b.bitlinear(l.wo, s.att_normed, s.xb2, n)?; // (n, dim)
        b.elementwise(Elementwise::Add, s.x, None, Some(s.xb2), n * c.dim)?;
        // FFN.
        b.rms_norm(s.x, l.ffn_norm, s.xb, n, c.dim, c.eps)?;
        b.bitlinear(l.w_gate, s.xb, s.hb, n)?; // (n, ffn_dim)
        b.bitlinear(l.w_up, s.xb, s.hb2, n)?;
        b.elementwise(
            Elementwise::ReluSquaredMul,
            s.hb,
            None,
            Some(s.hb2),
            n * c.ffn_dim,
        )?;
        b.rms_norm(s.hb, ffn_sub_norm, s.hb_normed, n, c.ffn_dim, c.eps)?;
        b.bitlinear(l.w_down, s.hb_normed, s.xb2, n)?; // (n, dim)
        b.elementwise(Elementwise::Add, s.x, None, Some(s.xb2), n * c.dim)?;
    }
    Ok(())
}
