//! The non-matmul ops on the CPU, written from their definitions: RMSNorm, RoPE (interleaved
//! and NeoX, partial rotary, Llama-3 frequency scaling), causal grouped-query attention over a
//! KV cache, softmax, ReLU², SiLU-gated product, residual add, argmax and top-k.
//!
//! Inputs and outputs are f32; every sum, exponential and trigonometric function is evaluated
//! in f64 and rounded once at the end, so these are the reference the GPU kernels are checked
//! against (`crates/gpu/src/selftest/ops.rs`) as well as the CPU backend's ops.
//!
//! Layouts are row-major: a batch of `n` rows of `dim` values is `x[row * dim + i]`; q/k for
//! RoPE are `(n_tokens, n_heads, head_dim)`; a KV cache is `(max_ctx, n_kv_heads, head_dim)`.

use crate::ops::{select_order, AttentionScores, AttentionShape, RopeConfig, RopeStyle};

/// `y = x / sqrt(mean(x^2) + eps) * weight` over each row of `weight.len()` values.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let dim = weight.len().max(1);
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(dim) {
        let ss: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let inv = 1.0 / (ss / dim as f64 + f64::from(eps)).sqrt();
        y.extend(
            row.iter()
                .zip(weight)
                .map(|(&v, &w)| (f64::from(v) * inv * f64::from(w)) as f32),
        );
    }
    y
}

/// Rotate `x: (n_tokens, n_heads, head_dim)` in place; token `t` is at position `pos0 + t`.
/// Pair `i` turns by the angle `position * inv_freq[i]`: `(a, b) -> (a cos - b sin, a sin + b cos)`.
pub fn rope(x: &mut [f32], n_heads: usize, pos0: usize, cfg: &RopeConfig) {
    let freqs = cfg.inv_freqs();
    let half = cfg.rot_dim / 2;
    let head_dim = cfg.head_dim.max(1);
    for (row, head) in x.chunks_mut(head_dim).enumerate() {
        let pos = (pos0 + row / n_heads.max(1)) as f64;
        for (i, &f) in freqs.iter().enumerate() {
            let (ia, ib) = match cfg.style {
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                RopeStyle::NeoX => (i, i + half),
            };
            let (sin, cos) = (pos * f).sin_cos();
            let (a, b) = (f64::from(head[ia]), f64::from(head[ib]));
            head[ia] = (a * cos - b * sin) as f32;
            head[ib] = (a * sin + b * cos) as f32;
        }
    }
}

/// Causal attention of `q: (n_tokens, n_heads, head_dim)` against caches
/// `k, v: (positions, n_kv_heads, head_dim)`: the query of token `t` sits at position
/// `pos0 + t` and attends to positions `first ..= pos0 + t` (`first` 0, or where `scores`'s
/// window starts), with scores `q.k / sqrt(head_dim)` (soft-capped where `scores` says) and
/// a softmax taken relative to the row maximum. Returns `(n_tokens, n_heads, head_dim)`.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos0: usize,
    shape: AttentionShape,
    scores: AttentionScores,
) -> Vec<f32> {
    let AttentionShape {
        n_heads,
        n_kv_heads,
        head_dim: d,
    } = shape;
    let group = (n_heads / n_kv_heads.max(1)).max(1);
    let scale = 1.0 / (d as f64).sqrt();
    let kv_row = |pos: usize, kvh: usize| (pos * n_kv_heads + kvh) * d;
    let mut out = vec![0.0f32; q.len()];
    for (qi, (qh, oh)) in q.chunks(d).zip(out.chunks_mut(d)).enumerate() {
        let (t, h) = (qi / n_heads, qi % n_heads);
        let kvh = h / group;
        let keys = scores.first_key(pos0 + t)..pos0 + t + 1;
        let cap = f64::from(scores.softcap);
        let s: Vec<f64> = keys
            .clone()
            .map(|pos| {
                let kr = &k[kv_row(pos, kvh)..][..d];
                let s = scale * dot(qh, kr);
                match cap > 0.0 {
                    true => cap * (s / cap).tanh(),
                    false => s,
                }
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = s.iter().map(|s| (s - m).exp()).collect();
        let sum: f64 = p.iter().sum();
        for (i, o) in oh.iter_mut().enumerate() {
            let acc: f64 = keys
                .clone()
                .zip(&p)
                .map(|(pos, p)| p * f64::from(v[kv_row(pos, kvh) + i]))
                .sum();
            *o = (acc / sum) as f32;
        }
    }
    out
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// `softmax(x * scale)` over each row of `cols` values (`scale` is `1 / temperature`).
pub fn softmax(x: &[f32], cols: usize, scale: f32) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(cols.max(1)) {
        let z: Vec<f64> = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(scale))
            .collect();
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|&v| (v - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        y.extend(e.iter().map(|&v| (v / sum) as f32));
    }
    y
}

/// GELU in its tanh form, `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, in f64.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// `gelu(gate) * up` (Gemma's FFN).
pub fn gelu_mul(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| (gelu_tanh(f64::from(g)) * f64::from(u)) as f32)
        .collect()
}

/// `cap * tanh(x / cap)` (Gemma 2's final logits).
pub fn softcap(x: &mut [f32], cap: f32) {
    let c = f64::from(cap);
    for v in x {
        *v = (c * (f64::from(*v) / c).tanh()) as f32;
    }
}

/// `max(x, 0)^2`.
pub fn relu_squared(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| {
            let r = f64::from(v).max(0.0);
            (r * r) as f32
        })
        .collect()
}

/// `max(g, 0)^2 * u` (BitNet's FFN activation).
pub fn relu_squared_mul(g: &[f32], u: &[f32]) -> Vec<f32> {
    g.iter()
        .zip(u)
        .map(|(&g, &u)| {
            let r = f64::from(g).max(0.0);
            (r * r * f64::from(u)) as f32
        })
        .collect()
}

/// `silu(g) * u` with `silu(g) = g / (1 + exp(-g))` (Llama's FFN activation).
pub fn silu_mul(g: &[f32], u: &[f32]) -> Vec<f32> {
    g.iter()
        .zip(u)
        .map(|(&g, &u)| {
            let g = f64::from(g);
            (g / (1.0 + (-g).exp()) * f64::from(u)) as f32
        })
        .collect()
}

/// `a + b`.
pub fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(&a, &b)| a + b).collect()
}

/// Index of the largest value (ties: the lowest index; NaN never wins). `None` when the row
/// holds no number.
pub fn argmax(row: &[f32]) -> Option<usize> {
    row.iter()
        .enumerate()
        .filter(|(_, v)| !v.is_nan())
        .min_by(|&(i, &a), &(j, &b)| select_order((i, a), (j, b)))
        .map(|(i, _)| i)
}

/// The `k` largest `(index, value)` pairs in [`select_order`] (descending value, ties by lower
/// index, NaNs last); fewer when the row is shorter than `k`.
///
/// The order is total (ties broken by index), so selecting the `k` first and sorting only them
/// gives exactly the first `k` of the whole row sorted, without sorting a vocabulary per token.
pub fn top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut all: Vec<(usize, f32)> = row.iter().cloned().enumerate().collect();
    if k == 0 {
        return Vec::new();
    }
    if k < all.len() {
        all.select_nth_unstable_by(k - 1, |&a, &b| select_order(a, b));
        all.truncate(k);
    }
    all.sort_by(|&a, &b| select_order(a, b));
    all.into_iter().map(|(i, v)| (i as u32, v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn rms_norm_by_hand() {
        // mean(9, 16) = 12.5; 1/sqrt(12.5 + 0.5) = 1/sqrt(13).
        let y = rms_norm(&[3.0, 4.0, 0.0, -2.0], &[1.0, 2.0], 0.5);
        let r = 1.0 / 13f64.sqrt();
        assert!(close(y[0], 3.0 * r) && close(y[1], 8.0 * r));
        // second row: mean(0, 4) = 2 -> 1/sqrt(2.5)
        let r = 1.0 / 2.5f64.sqrt();
        assert!(close(y[2], 0.0) && close(y[3], -4.0 * r));
    }

    #[test]
    fn rope_at_position_one_both_styles() {
        // head_dim 4, theta 100: frequencies 1 and 100^(-1/2) = 0.1.
        let cfg = RopeConfig::new(4, 100.0, RopeStyle::Interleaved);
        let f = cfg.inv_freqs();
        assert!((f[0] - 1.0).abs() < 1e-15 && (f[1] - 0.1).abs() < 1e-15);
        // Interleaved: pairs (0,1) by 1 rad and (2,3) by 0.1 rad.
        let mut x = vec![1.0, 0.0, 0.0, 2.0];
        rope(&mut x, 1, 1, &cfg);
        assert!(close(x[0], 1f64.cos()) && close(x[1], 1f64.sin()));
        assert!(close(x[2], -2.0 * 0.1f64.sin()) && close(x[3], 2.0 * 0.1f64.cos()));
        // NeoX: pairs (0,2) by 1 rad and (1,3) by 0.1 rad.
        let cfg = RopeConfig::new(4, 100.0, RopeStyle::NeoX);
        let mut x = vec![1.0, 0.0, 0.0, 2.0];
        rope(&mut x, 1, 1, &cfg);
        assert!(close(x[0], 1f64.cos()) && close(x[2], 1f64.sin()));
        assert!(close(x[1], -2.0 * 0.1f64.sin()) && close(x[3], 2.0 * 0.1f64.cos()));
        // Position 0 is the identity; the second token of a batch is at pos0 + 1.
        let mut x = vec![1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 2.0];
        rope(&mut x, 1, 0, &cfg);
        assert_eq!(&x[..4], &[1.0, 0.0, 0.0, 2.0]);
        assert!(close(x[4], 1f64.cos()) && close(x[6], 1f64.sin()));
    }

    #[test]
    fn rope_partial_rotation_leaves_the_tail() {
        let mut cfg = RopeConfig::new(6, 100.0, RopeStyle::NeoX);
        cfg.rot_dim = 4;
        let mut x = vec![1.0, 0.0, 0.0, 2.0, 5.0, 6.0];
        rope(&mut x, 1, 1, &cfg);
        assert!(close(x[0], 1f64.cos()) && close(x[2], 1f64.sin()));
        assert_eq!(&x[4..], &[5.0, 6.0]);
    }

    #[test]
    fn attention_is_causal_and_grouped() {
        // 2 query heads sharing 1 KV head, head_dim 1, two tokens at positions 0 and 1.
        let shape = AttentionShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 1,
        };
        let q = [1.0, 2.0, 1.0, 0.0];
        let k = [0.0, 1.0];
        let v = [10.0, 20.0];
        let o = attention(&q, &k, &v, 0, shape, AttentionScores::default());
        // Token 0 sees only position 0, whatever the query.
        assert!(close(o[0], 10.0) && close(o[1], 10.0));
        // Token 1, head 0 (q = 1): scores (0, 1) -> weights (1, e) / (1 + e).
        let e = 1f64.exp();
        assert!(close(o[2], (10.0 + 20.0 * e) / (1.0 + e)));
        // Head 1 (q = 0): equal scores, the mean.
        assert!(close(o[3], 15.0));
        // The same second token decoded alone at pos0 = 1 gives the same result.
        let o1 = attention(&q[2..], &k, &v, 1, shape, AttentionScores::default());
        assert_eq!(&o1[..], &o[2..]);
    }

    #[test]
    fn attention_windows_and_soft_caps() {
        let shape = AttentionShape {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
        };
        // Three keys; the query at position 2 with a window of 2 sees positions 1 and 2.
        let (k, v) = ([1.0, 2.0, 3.0], [10.0, 20.0, 40.0]);
        let w2 = AttentionScores {
            window: 2,
            softcap: 0.0,
        };
        let o = attention(&[1.0], &k, &v, 2, shape, w2);
        let (e2, e3) = (2f64.exp(), 3f64.exp());
        assert!(close(o[0], (20.0 * e2 + 40.0 * e3) / (e2 + e3)));
        // A window of 1 is the key at the query's own position; one wider than the text, all.
        let w1 = AttentionScores { window: 1, ..w2 };
        assert!(close(attention(&[1.0], &k, &v, 2, shape, w1)[0], 40.0));
        let w9 = AttentionScores { window: 9, ..w2 };
        let all = attention(&[1.0], &k, &v, 2, shape, AttentionScores::default());
        assert_eq!(attention(&[1.0], &k, &v, 2, shape, w9), all);
        // A soft cap of 1 turns scores 1, 2, 3 into tanh(1), tanh(2), tanh(3).
        let cap = AttentionScores {
            window: 0,
            softcap: 1.0,
        };
        let o = attention(&[1.0], &k, &v, 2, shape, cap);
        let p: Vec<f64> = [1f64, 2.0, 3.0].iter().map(|s| s.tanh().exp()).collect();
        let want = (10.0 * p[0] + 20.0 * p[1] + 40.0 * p[2]) / p.iter().sum::<f64>();
        assert!(close(o[0], want));
    }

    #[test]
    fn gelu_mul_and_softcap_follow_their_definitions() {
        // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.841192 (to 6 places).
        assert!((gelu_tanh(1.0) - 0.841192).abs() < 1e-6);
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert!(close(gelu_mul(&[1.0], &[2.0])[0], 2.0 * gelu_tanh(1.0)));
        let mut x = [0.5f32, -30.0, 1e9];
        softcap(&mut x, 5.0);
        assert!(close(x[0], 5.0 * 0.1f64.tanh()));
        assert!(close(x[1], -5.0 * 6f64.tanh()));
        assert_eq!(x[2], 5.0);
    }

    #[test]
    fn softmax_and_activations() {
        let y = softmax(&[0.0, 2f32.ln(), 5.0, 5.0], 2, 1.0);
        assert!(close(y[0], 1.0 / 3.0) && close(y[1], 2.0 / 3.0));
        assert!(close(y[2], 0.5) && close(y[3], 0.5));
        let y = softmax(&[0.0, 2.0 * 2f32.ln()], 2, 0.5);
        assert!(close(y[1], 2.0 / 3.0));
        assert_eq!(relu_squared(&[-2.0, 3.0]), vec![0.0, 9.0]);
        assert_eq!(relu_squared_mul(&[-2.0, 3.0], &[5.0, 2.0]), vec![0.0, 18.0]);
        let y = silu_mul(&[0.0, 1.0], &[7.0, 2.0]);
        assert!(close(y[0], 0.0) && close(y[1], 2.0 / (1.0 + (-1f64).exp())));
        assert_eq!(add(&[1.0, -1.0], &[0.5, 0.25]), vec![1.5, -0.75]);
    }

    #[test]
    fn argmax_ties_and_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 2.0, 3.0]), Some(1));
        assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN, 1.0]), Some(1));
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), Some(0));
        assert_eq!(argmax(&[f32::NAN]), None);
        assert_eq!(argmax(&[]), None);
    }

    /// The selection is the whole sort's first `k`, on rows with ties, NaNs and signed zeros.
    #[test]
    fn top_k_is_the_sorted_rows_head() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let row: Vec<f32> = (0..3000)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                match i % 97 {
                    0 => f32::NAN,
                    1 => -0.0,
                    2 => 0.0,
                    _ => (state % 64) as f32 - 32.0,
                }
            })
            .collect();
        let mut all: Vec<(usize, f32)> = row.iter().cloned().enumerate().collect();
        all.sort_by(|&a, &b| select_order(a, b));
        for k in [0, 1, 2, 40, 999, 2999, 3000, 5000] {
            let got = top_k(&row, k);
            assert_eq!(got.len(), k.min(row.len()));
            for (g, w) in got.iter().zip(&all) {
                assert_eq!((g.0 as usize, g.1.to_bits()), (w.0, w.1.to_bits()), "k {k}");
            }
        }
    }

    #[test]
    fn top_k_order() {
        let row = [1.0, f32::NAN, 3.0, 2.0, 3.0, -1.0];
        let t = top_k(&row, 4);
        assert_eq!(t, vec![(2, 3.0), (4, 3.0), (3, 2.0), (0, 1.0)]);
        let t = top_k(&row, 10);
        assert_eq!(t.len(), 6);
        assert_eq!(t[5].0, 1);
        assert!(t[5].1.is_nan());
    }
}

/// The factors of an f16 operand row (`Activations::F16` of the engine's passes, the GPU's
/// `scale_f16.wgsl`): `(scale, back)`, `scale` the power of two that brings the row's largest
/// magnitude into [1, 2) and `back = 1 / scale`, both `1` for a row of zeros. Exponents are
/// kept inside the normal range (biased 1 ..= 253), so both factors are normal f32.
pub fn f16_operand_scale(row: &[f32]) -> (f32, f32) {
    let m = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if m == 0.0 {
        return (1.0, 1.0);
    }
    let e = ((m.to_bits() >> 23) & 0xff).clamp(1, 253);
    (f32::from_bits((254 - e) << 23), f32::from_bits(e << 23))
}

#[cfg(test)]
mod f16_operand_tests {
    use super::f16_operand_scale;

    #[test]
    fn scales_bring_the_largest_magnitude_into_one_two() {
        for m in [1e-30f32, 3e-8, 0.7, 1.0, 1.5, 2.0, 1000.0, 6e4, 1e38] {
            let (s, back) = f16_operand_scale(&[0.0, -m, m / 3.0]);
            let v = m * s;
            assert!((1.0..2.0).contains(&v), "{m}: {v}");
            assert_eq!(s * back, 1.0, "{m}");
        }
        assert_eq!(f16_operand_scale(&[0.0; 4]), (1.0, 1.0));
        assert_eq!(f16_operand_scale(&[]), (1.0, 1.0));
    }
}
