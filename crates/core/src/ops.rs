//! The vocabulary of ops every layer shares: which elementwise function, how RoPE rotates
//! (style, Llama-3 scaling, per-pair frequency divisors), the shape of an attention, and the
//! order argmax and top-k select by. The op list (`tritium-engine`'s `pass`), both backends, the GPU
//! runtime's kernels and the CPU reference ([`crate::cpu::ops`]) all take them from here.

use std::cmp::Ordering;
use std::f64::consts::PI;

/// Which function of `(first, second)` an elementwise op computes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// `first + second` (residual add).
    Add,
    /// `silu(first) * second` (Llama FFN).
    SiluMul,
    /// `max(first, 0)^2` (no second operand).
    ReluSquared,
    /// `max(first, 0)^2 * second` (BitNet FFN: `relu(gate)^2 * up`).
    ReluSquaredMul,
    /// `gelu(first) * second`, GELU in its tanh form (Gemma's FFN).
    GeluMul,
}

impl Elementwise {
    /// Whether the function reads a second operand.
    pub fn takes_second(self) -> bool {
        self != Elementwise::ReluSquared
    }

    /// The op's name in printed passes.
    pub fn name(self) -> &'static str {
        match self {
            Elementwise::Add => "add",
            Elementwise::SiluMul => "silu_mul",
            Elementwise::ReluSquared => "relu_squared",
            Elementwise::ReluSquaredMul => "relu_squared_mul",
            Elementwise::GeluMul => "gelu_mul",
        }
    }
}

/// Which elements RoPE rotates together.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)`: what Llama-architecture GGUFs expect (their converters permute Q/K).
    Interleaved,
    /// Pairs `(i, i + rot_dim/2)` ("rotate half"): transformers, GPT-NeoX, BitNet b1.58 2B4T.
    NeoX,
}

/// Llama-3 frequency scaling (`rope_scaling.rope_type = "llama3"` in transformers).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

/// Everything that defines a rotary embedding.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    pub head_dim: usize,
    /// Leading dimensions of each head that are rotated (even, at most `head_dim`); the rest
    /// pass through unchanged.
    pub rot_dim: usize,
    pub theta: f64,
    pub style: RopeStyle,
    pub llama3: Option<Llama3Scaling>,
    /// Per-pair divisors of the frequency (a GGUF's `rope_freqs.weight`), applied after
    /// `llama3` when both are present.
    pub freq_factors: Option<Vec<f32>>,
    /// Linear scaling (`rope.scaling.type = linear`): every frequency times this, which is
    /// positions times it (`1 / rope.scaling.factor`; 1 for none).
    pub freq_scale: f64,
}

impl RopeConfig {
    /// Full rotation, no scaling.
    pub fn new(head_dim: usize, theta: f64, style: RopeStyle) -> Self {
        RopeConfig {
            head_dim,
            rot_dim: head_dim,
            theta,
            style,
            llama3: None,
            freq_factors: None,
            freq_scale: 1.0,
        }
    }

    /// The angular frequency of each of the `rot_dim / 2` pairs: `theta^(-2i / rot_dim)`, then
    /// Llama-3 scaling as transformers' `_compute_llama3_parameters` defines it (long
    /// wavelengths divided by `factor`, short ones kept, the band between interpolated), then
    /// the optional per-pair divisors.
    pub fn inv_freqs(&self) -> Vec<f64> {
        let half = self.rot_dim / 2;
        (0..half)
            .map(|i| {
                let mut f = self.theta.powf(-((2 * i) as f64) / self.rot_dim as f64);
                if let Some(s) = &self.llama3 {
                    f = llama3_scale(f, s);
                }
                if let Some(&d) = self.freq_factors.as_ref().and_then(|ff| ff.get(i)) {
                    f /= f64::from(d);
                }
                f * self.freq_scale
            })
            .collect()
    }
}

/// One frequency through Llama-3 scaling.
pub fn llama3_scale(inv_freq: f64, s: &Llama3Scaling) -> f64 {
    let low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    let high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    let wavelen = 2.0 * PI / inv_freq;
    if wavelen < high_freq_wavelen {
        inv_freq
    } else if wavelen > low_freq_wavelen {
        inv_freq / s.factor
    } else {
        let smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor)
            / (s.high_freq_factor - s.low_freq_factor);
        (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq
    }
}

/// The shape of an attention call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub n_heads: usize,
    /// KV heads; query head `h` reads KV head `h / (n_heads / n_kv_heads)`.
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// What an attention's scores are besides causal: each query sees only the keys less than
/// `window` positions before it (0: every earlier key; Mistral's layers and Gemma's local
/// ones), and each score `s` (already scaled) becomes `softcap * tanh(s / softcap)` before
/// the softmax (0: as it is; Gemma 2).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct AttentionScores {
    pub window: usize,
    pub softcap: f32,
}

impl AttentionScores {
    /// The first position a query at `pos` sees.
    pub fn first_key(&self, pos: usize) -> usize {
        match self.window {
            0 => 0,
            w => (pos + 1).saturating_sub(w),
        }
    }
}

/// The order argmax and top-k select by: larger values first, equal values by lower index,
/// NaN after every number (NaNs among themselves by index).
pub fn select_order(a: (usize, f32), b: (usize, f32)) -> Ordering {
    match (a.1.is_nan(), b.1.is_nan()) {
        (false, true) => Ordering::Less,
        (true, false) => Ordering::Greater,
        (false, false) if a.1 != b.1 => {
            if a.1 > b.1 {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        }
        _ => a.0.cmp(&b.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_in_its_three_bands() {
        // Llama 3.1: factor 8, low 1, high 4, original context 8192: wavelengths below
        // 8192/4 = 2048 are kept, above 8192 divided by 8, between interpolated.
        let s = Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let high = 2.0 * PI / 100.0; // wavelength 100
        assert_eq!(llama3_scale(high, &s), high);
        let low = 2.0 * PI / 20000.0; // wavelength 20000
        assert!((llama3_scale(low, &s) - low / 8.0).abs() < 1e-18);
        // Wavelength 4096: smooth = (8192/4096 - 1) / 3 = 1/3, so the result is
        // (2/3) f/8 + (1/3) f = f (1/12 + 1/3) = 5f/12.
        let mid = 2.0 * PI / 4096.0;
        assert!((llama3_scale(mid, &s) - mid * 5.0 / 12.0).abs() < 1e-15);
        // Per-pair divisors (a GGUF's rope_freqs) apply after the scaling.
        let cfg = RopeConfig {
            freq_factors: Some(vec![1.0, 4.0]),
            ..RopeConfig::new(4, 100.0, RopeStyle::NeoX)
        };
        assert_eq!(cfg.inv_freqs(), vec![1.0, 0.1 / 4.0]);
        // The band edges join continuously.
        let edge = 2.0 * PI / 2048.0;
        assert!((llama3_scale(edge * (1.0 - 1e-12), &s) - edge).abs() < 1e-12);
    }
}
