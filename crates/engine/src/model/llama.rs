//! The Llama family's pass (SmolLM2, Llama 2/3.x, Qwen2/2.5, Qwen3, Phi-3): pre-norm attention with
//! grouped KV heads and RoPE, then a SiLU-gated FFN, each added to the residual stream. Qwen2
//! adds biases to q, k and v; Qwen3 RMS-norms each head of q and k before RoPE; Phi-3's
//! stacked q/k/v and gate/up matrices arrive split ([`super::weights`]). The RoPE order is the
//! config's (interleaved pairs for `llama`, whose converters permute Q/K; NeoX halves for Qwen
//! and Phi-3).

use super::lora::Target;
use super::weights::LayerWeights;
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
    for (i, l) in w.layers.iter().enumerate() {
        // Attention: x += wo . attention(rope(wq . xn), rope(wk . xn), wv . xn), xn = norm(x).
        attention(c, w, l, s, n, i, p)?; // xb2: (n, dim)
        p.add(s.x, s.xb2, n * dim);
        // FFN: x += down(silu(gate . xn) * (up . xn)), xn = norm(x).
        p.rms_norm(s.x, l.ffn_norm, s.xb, n, dim, c.eps); // xb: (n, dim)
        gate_up(c, w, l, s, n, i, p); // hb, hb2: (n, ffn_dim)
        p.silu_mul(s.hb, s.hb2, n * c.ffn_dim); // hb = silu(hb) * hb2
        down(c, w, l, s, n, i, p); // xb2: (n, dim)
        p.add(s.x, s.xb2, n * dim);
    }
    Ok(())
}

/// Block `i`'s attention, `s.xb2 = wo . attention(rope(wq . xn), rope(wk . xn), wv . xn)` with
/// `xn = norm(s.x)`, as the Llama family and Gemma share it: Qwen2's q/k/v biases, Qwen3's and
/// Gemma 3's per-head q/k norms and the q scale (longrope's attention factor, Gemma 27B's score
/// scale) where the weights have them, the layer's RoPE table and its window and soft cap.
pub(super) fn attention(
    c: &ModelConfig,
    w: &Weights,
    l: &LayerWeights,
    s: &RunState,
    n: usize,
    i: usize,
    p: &mut Pass,
) -> Result<(), Error> {
    let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    p.rms_norm(s.x, l.attn_norm, s.xb, n, c.dim, c.eps); // xb: (n, dim)
    p.matmul(l.wq, s.xb, s.q, n); // q: (n, n_heads, head_dim)
    p.matmul(l.wk, s.xb, s.k, n); // k: (n, n_kv_heads, head_dim)
    p.matmul(l.wv, s.xb, s.v, n); // v: (n, n_kv_heads, head_dim)
    for (t, target, width) in [
        (s.q, Target::Q, q_dim),
        (s.k, Target::K, kv_dim),
        (s.v, Target::V, kv_dim),
    ] {
        w.lora.apply(p, i, target, [s.xb, t], n, width); // LoRA: t += s * B (A . xn)
    }
    for (t, b, width) in [(s.q, l.bq, q_dim), (s.k, l.bk, kv_dim), (s.v, l.bv, kv_dim)] {
        if let Some(b) = b {
            p.add_bias(t, b, n, width); // Qwen2: q, k, v += bias
        }
    }
    let (q, k) = match (l.q_norm, l.k_norm, s.q_normed, s.k_normed) {
        (None, None, ..) => (s.q, s.k),
        (Some(qn), Some(kn), Some(q), Some(k)) => {
            // Qwen3, Gemma 3: each head of q and k RMS-normed over head_dim.
            p.rms_norm(s.q, qn, q, n * c.n_heads, c.head_dim, c.eps);
            p.rms_norm(s.k, kn, k, n * c.n_kv_heads, c.head_dim, c.eps);
            (q, k)
        }
        _ => {
            return Err(ModelError::MissingTensor {
                name: format!("blk.{i}.attn_q_norm.weight and attn_k_norm.weight"),
            }
            .into())
        }
    };
    if let Some(m) = w.q_scale {
        // Longrope's attention factor: m on the rotated dimensions of q and of k is m^2 on
        // q's alone as far as the scores go, and RoPE is linear, so before it.
        p.scale_columns(q, m, n * c.n_heads, c.head_dim);
    }
    let table = c.rope_table(i);
    p.rope_by(q, c.n_heads, table);
    p.rope_by(k, c.n_kv_heads, table);
    // att: (n, n_heads, head_dim), over a sliding window where the file states one.
    p.attention_with(i, [q, k, s.v], s.att, c.n_heads, c.scores(i));
    p.matmul(l.wo, s.att, s.xb2, n); // xb2: (n, dim)
    w.lora.apply(p, i, Target::O, [s.att, s.xb2], n, c.dim);
    Ok(())
}

/// The FFN's gate and up products of `s.xb`, `s.hb = gate . xb`, `s.hb2 = up . xb`, with the
/// applied adapters' updates.
pub(super) fn gate_up(
    c: &ModelConfig,
    w: &Weights,
    l: &LayerWeights,
    s: &RunState,
    n: usize,
    i: usize,
    p: &mut Pass,
) {
    p.matmul(l.w_gate, s.xb, s.hb, n); // hb: (n, ffn_dim)
    p.matmul(l.w_up, s.xb, s.hb2, n); // hb2: (n, ffn_dim)
    w.lora.apply(p, i, Target::Gate, [s.xb, s.hb], n, c.ffn_dim);
    w.lora.apply(p, i, Target::Up, [s.xb, s.hb2], n, c.ffn_dim);
}

/// The FFN's down product `s.xb2 = down . hb`, with the applied adapters' updates.
pub(super) fn down(
    c: &ModelConfig,
    w: &Weights,
    l: &LayerWeights,
    s: &RunState,
    n: usize,
    i: usize,
    p: &mut Pass,
) {
    p.matmul(l.w_down, s.hb, s.xb2, n); // xb2: (n, dim)
    w.lora.apply(p, i, Target::Down, [s.hb, s.xb2], n, c.dim);
}
