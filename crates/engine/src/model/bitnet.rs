//! BitNet b1.58's pass (2B4T structure, facts.md): every linear layer is BitLinear (per-token
//! int8 activations times ternary weights); the attention output is sub-normed before `wo`,
//! and the FFN is `down(ffn_sub_norm(relu(gate(x))^2 * up(x)))`; RoPE in NeoX order, since the
//! converters keep transformers' Q/K row order.

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
    let (dim, q_dim) = (c.dim, c.n_heads * c.head_dim);
    let missing = |what: &str, i: usize| ModelError::MissingTensor {
        name: format!("blk.{i}.{what}.weight"),
    };
    p.embed(w.token_embd, s.x); // x: (n, dim)
    for (i, l) in w.layers.iter().enumerate() {
        let attn_sub_norm = l.attn_sub_norm.ok_or_else(|| missing("attn_sub_norm", i))?;
        let ffn_sub_norm = l.ffn_sub_norm.ok_or_else(|| missing("ffn_sub_norm", i))?;
        // Attention: x += wo . sub_norm(attention(rope(wq . xn), rope(wk . xn), wv . xn)).
        p.rms_norm(s.x, l.attn_norm, s.xb, n, dim, c.eps); // xb: (n, dim)
        p.bitlinear(l.wq, s.xb, s.q, n); // q: (n, n_heads, head_dim)
        p.bitlinear(l.wk, s.xb, s.k, n); // k: (n, n_kv_heads, head_dim)
        p.bitlinear(l.wv, s.xb, s.v, n); // v: (n, n_kv_heads, head_dim)
        p.rope(s.q, c.n_heads);
        p.rope(s.k, c.n_kv_heads);
        p.attention(i, [s.q, s.k, s.v], s.att, c.n_heads); // att: (n, n_heads, head_dim)
        p.rms_norm(s.att, attn_sub_norm, s.att_normed, n, q_dim, c.eps);
        p.bitlinear(l.wo, s.att_normed, s.xb2, n); // xb2: (n, dim)
        p.add(s.x, s.xb2, n * dim);
        // FFN: x += down . sub_norm(relu(gate . xn)^2 * (up . xn)).
        p.rms_norm(s.x, l.ffn_norm, s.xb, n, dim, c.eps); // xb: (n, dim)
        p.bitlinear(l.w_gate, s.xb, s.hb, n); // hb: (n, ffn_dim)
        p.bitlinear(l.w_up, s.xb, s.hb2, n); // hb2: (n, ffn_dim)
        p.relu_squared_mul(s.hb, s.hb2, n * c.ffn_dim); // hb = relu(hb)^2 * hb2
        p.rms_norm(s.hb, ffn_sub_norm, s.hb_normed, n, c.ffn_dim, c.eps);
        p.bitlinear(l.w_down, s.hb_normed, s.xb2, n); // xb2: (n, dim)
        p.add(s.x, s.xb2, n * dim);
    }
    Ok(())
}
