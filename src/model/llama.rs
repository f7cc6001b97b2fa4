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
        // Attention: q (n, n_heads, head_dim), k and v (n, n_kv_heads, head_dim) of the
        // normed stream, RoPE on q and k, then attention over the cache into att
        // (n, n_heads, head_dim).
        b.norm_matmul(NormProducts {
            x: s.x,
            norm: l.attn_norm,
            eps: c.eps,
            dim: c.dim,
            n,
            normed: s.xb,
            weights: &[l.wq, l.wk, l.wv],
            outs: &[s.q, s.k, s.v],
            combine: Combine::Attention {
                layer: i,
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                out: s.att,
            },
        })?;
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
