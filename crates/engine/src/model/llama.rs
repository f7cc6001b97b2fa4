//! The Llama family's pass (SmolLM2, Llama 2/3.x): pre-norm attention with grouped KV heads
//! and interleaved-pair RoPE, then a SiLU-gated FFN, each added to the residual stream.

use super::{ModelConfig, RunState, Weights};
use crate::pass::Pass;

/// The embedding and every block for a pass of `n` tokens; leaves the residual stream in
/// `s.x`.
pub fn forward(c: &ModelConfig, w: &Weights, s: &RunState, n: usize, p: &mut Pass) {
    let dim = c.dim;
    p.embed(w.token_embd, s.x); // x: (n, dim)
    for (i, l) in w.layers.iter().enumerate() {
        // Attention: x += wo . attention(rope(wq . xn), rope(wk . xn), wv . xn), xn = norm(x).
        p.rms_norm(s.x, l.attn_norm, s.xb, n, dim, c.eps); // xb: (n, dim)
        p.matmul(l.wq, s.xb, s.q, n); // q: (n, n_heads, head_dim)
        p.matmul(l.wk, s.xb, s.k, n); // k: (n, n_kv_heads, head_dim)
        p.matmul(l.wv, s.xb, s.v, n); // v: (n, n_kv_heads, head_dim)
        p.rope(s.q, c.n_heads);
        p.rope(s.k, c.n_kv_heads);
        p.attention(i, [s.q, s.k, s.v], s.att, c.n_heads); // att: (n, n_heads, head_dim)
        p.matmul(l.wo, s.att, s.xb2, n); // xb2: (n, dim)
        p.add(s.x, s.xb2, n * dim);
        // FFN: x += down(silu(gate . xn) * (up . xn)), xn = norm(x).
        p.rms_norm(s.x, l.ffn_norm, s.xb, n, dim, c.eps); // xb: (n, dim)
        p.matmul(l.w_gate, s.xb, s.hb, n); // hb: (n, ffn_dim)
        p.matmul(l.w_up, s.xb, s.hb2, n); // hb2: (n, ffn_dim)
        p.silu_mul(s.hb, s.hb2, n * c.ffn_dim); // hb = silu(hb) * hb2
        p.matmul(l.w_down, s.hb, s.xb2, n); // xb2: (n, dim)
        p.add(s.x, s.xb2, n * dim);
    }
}
