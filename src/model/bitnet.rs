//! BitNet b1.58's blocks (2B4T structure, facts.md): every linear layer is BitLinear (per-token
//! int8 activations times ternary weights); the attention output is sub-normed before `wo`,
//! and the FFN is `down(ffn_sub_norm(relu(gate(x))^2 * up(x)))`; RoPE in NeoX order, since the
//! converters keep transformers' Q/K row order. Each norm and the BitLinear products it feeds
//! are one [`Backend::norm_bitlinear`] call (with the FFN's gating and each residual add), which
//! the GPU runs as one dispatch per call during decode.

use super::Model;
use crate::backend::{Backend, Combine, NormProducts};
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
        b.norm_bitlinear(NormProducts {
            x: s.x,
            norm: l.attn_norm,
            eps: c.eps,
            dim: c.dim,
            n,
            normed: s.xb,
            weights: &[l.wq, l.wk, l.wv],
            outs: &[s.q, s.k, s.v], // (n, n_heads | n_kv_heads, head_dim)
            combine: Combine::Separate,
        })?;
        b.rope(s.q, c.n_heads)?;
        b.rope(s.k, c.n_kv_heads)?;
        b.attention(i, s.q, s.k, s.v, s.att, c.n_heads)?; // (n, n_heads, head_dim)
        b.norm_bitlinear(NormProducts {
            x: s.att,
            norm: attn_sub_norm,
            eps: c.eps,
            dim: q_dim,
            n,
            normed: s.att_normed,
            weights: &[l.wo],
            outs: &[s.xb2], // (n, dim)
            combine: Combine::AddTo {
                residual: s.x,
                len: n * c.dim,
            },
        })?;
        // FFN.
        b.norm_bitlinear(NormProducts {
            x: s.x,
            norm: l.ffn_norm,
            eps: c.eps,
            dim: c.dim,
            n,
            normed: s.xb,
            weights: &[l.w_gate, l.w_up],
            outs: &[s.hb, s.hb2], // (n, ffn_dim)
            combine: Combine::ReluSquaredMul { len: n * c.ffn_dim },
        })?;
        b.norm_bitlinear(NormProducts {
            x: s.hb,
            norm: ffn_sub_norm,
            eps: c.eps,
            dim: c.ffn_dim,
            n,
            normed: s.hb_normed,
            weights: &[l.w_down],
            outs: &[s.xb2], // (n, dim)
            combine: Combine::AddTo {
                residual: s.x,
                len: n * c.dim,
            },
        })?;
    }
    Ok(())
}
