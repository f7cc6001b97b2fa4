//! The Llama family's blocks (SmolLM2, Llama 2/3.x): pre-norm attention with grouped KV heads
//! and interleaved-pair RoPE, then a SiLU-gated FFN, each added to the residual stream.

use super::Model;
use crate::backend::{Backend, Combine, NormProducts};
use crate::Error;

/// Embedding and every block for the pass's `n` tokens; leaves the residual stream in
/// `state.x`.
pub fn blocks<B: Backend>(m: &mut Model<B>, n: usize) -> Result<(), Error> {
    let c = &m.config;
    let (w, s) = (&m.weights, &m.state);
    let b = &mut m.backend;
    b.embed(w.token_embd, s.x)?; // x: (n, dim)
    for (i, l) in w.layers.iter().enumerate() {
        // Attention.
        b.rms_norm(s.x, l.attn_norm, s.xb, n, c.dim, c.eps)?;
        b.matmul(l.wq, s.xb, s.q, n)?; // (n, n_heads, head_dim)
        b.matmul(l.wk, s.xb, s.k, n)?; // (n, n_kv_heads, head_dim)
        b.matmul(l.wv, s.xb, s.v, n)?;
        b.rope(s.q, c.n_heads)?;
        b.rope(s.k, c.n_kv_heads)?;
        b.attention(i, s.q, s.k, s.v, s.att, c.n_heads)?; // (n, n_heads, head_dim)
        b.matmul_add(l.wo, s.att, s.xb2, s.x, n, n * c.dim)?;
        // FFN: x += down(silu(gate(xn)) * up(xn)), xn = rms_norm(x).
        b.norm_matmul(NormProducts {
            x: s.x,
            norm: l.ffn_norm,
            eps: c.eps,
            dim: c.dim,
            n,
            normed: s.xb,
            weights: &[l.w_gate, l.w_up],
            outs: &[s.hb, s.hb2], // (n, ffn_dim)
            combine: Combine::SiluMul { len: n * c.ffn_dim },
        })?;
        b.matmul_add(l.w_down, s.hb, s.xb2, s.x, n, n * c.dim)?;
    }
    Ok(())
}
