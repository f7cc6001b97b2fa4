//! BitLinear on the CPU: per-token int8 absmax activation quantization and the I2_S ternary
//! matrix product, written from the definitions (not from the GPU kernels they check).
//!
//! # What transformers does (the oracle)
//!
//! `transformers/integrations/bitnet.py` (`BitLinear.activation_quant` and `ActQuant.forward`):
//!
//! ```text
//! scale  = 127 / x.abs().max(dim=-1, keepdim=True).values.clamp(min=1e-5)
//! result = (x * scale).round().clamp(-128, 127)          # then .to(torch.int8)
//! y      = F.linear(result, w_ternary) / (input_scale * weight_scale)   # BitLinear
//! ```
//!
//! - **Per token**: the absmax is taken over the last dimension (one row of `cols` values).
//! - **Epsilon**: the absmax is clamped to at least `1e-5` (not only guarded against zero), so
//!   `s = 127 / max(max|x|, 1e-5)`; an all-zero row gets `s = 1.27e7` and all-zero codes.
//! - **Rounding**: `torch.round`, which rounds half to even (`2.5 -> 2`, `-3.5 -> -4`).
//! - **Clamp**: to `[-128, 127]`; since `|x * s| <= 127` up to one rounding, `-128` is never
//!   produced in practice, but the clamp is kept.
//! - **Scale**: `s = 127 / absmax` is the stored per-token scale (a division, not
//!   `absmax / 127` inverted), and the output divides by it.
//! - **Precision**: `ActQuant` (the training/online path) casts to f32 first; `BitLinear` (the
//!   packed-checkpoint path) computes in the model dtype (bf16 for BitNet b1.58 2B4T). We
//!   follow the f32 form: every step below is one correctly rounded f32 operation.
//! - **Weight scale**: transformers divides by its checkpoint's `weight_scale`; the GGUF I2_S
//!   tensor instead stores the absmean `s_w` as a multiplier (facts.md), so here
//!   `y = (W_ternary . x_q) * weight_scale / s`.
//!
//! The integer sum `W_ternary . x_q` is exact (i32; `|sum| <= 128 * cols`), so the only
//! rounding in [`bitlinear_i2s`] is the final `acc as f32 * weight_scale / s` (two correctly
//! rounded f32 operations; `acc` converts exactly while `|acc| < 2^24`).

/// The smallest absmax used for an activation row (transformers' `clamp(min=1e-5)`).
pub const ABSMAX_EPSILON: f32 = 1e-5;

/// Quantize `x` (rows of `cols` values, one per token) to int8 per token.
///
/// Returns `(x_q, scales)`: `x_q[t * cols + c] = clamp(round_half_even(x * s_t), -128, 127)`
/// with `s_t = 127 / max(max_c |x[t, c]|, 1e-5)`, and `scales[t] = s_t`. Inputs are assumed
/// finite (a NaN is ignored by the absmax and quantizes to 0).
///
/// # Panics
/// If `cols == 0` or `x.len()` is not a multiple of `cols` (a caller bug, not input data).
pub fn quantize_activations(x: &[f32], cols: usize) -> (Vec<i8>, Vec<f32>) {
    assert!(
        cols > 0 && x.len() % cols == 0,
        "quantize_activations: {} values are not whole rows of {cols}",
        x.len()
    );
    let mut q = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / cols);
    for row in x.chunks_exact(cols) {
        let absmax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = 127.0 / absmax.max(ABSMAX_EPSILON);
        scales.push(s);
        // `as i8` after the clamp is exact; a NaN product saturates to 0.
        q.extend(
            row.iter()
                .map(|&v| (v * s).round_ties_even().clamp(-128.0, 127.0) as i8),
        );
    }
    (q, scales)
}

/// The ternary weight at `(row, col)` of an I2_S tensor with rows of `cols` weights: 128
/// weights per 32 bytes, byte `j` of a block holding weights `j, 32 + j, 64 + j, 96 + j` in
/// bit pairs `[7:6], [5:4], [3:2], [1:0]`, code `c` meaning `c - 1`. (Code 3, never written,
/// gives +2, as the fused `sum(c * x) - sum(x)` form computes.)
fn i2s_weight(codes: &[u8], cols: usize, row: usize, col: usize) -> i32 {
    let i = row * cols + col;
    let (block, within) = (i / 128, i % 128);
    let (group, j) = (within / 32, within % 32);
    let code = (codes[block * 32 + j] >> (6 - 2 * group)) & 3;
    i32::from(code) - 1
}

/// BitLinear over I2_S weights: `y[t, r] = (sum_c w[r, c] * x_q[t, c]) * weight_scale / s_t`.
///
/// `codes` holds at least `rows * cols / 4` bytes of packed I2_S codes (a trailing scale is
/// ignored); `x_q` and `scales` come from [`quantize_activations`] over `scales.len()` tokens.
/// The result is `(n_tokens, rows)`.
///
/// # Panics
/// If `cols % 128 != 0` or a slice is shorter than the shapes say (caller bugs).
pub fn bitlinear_i2s(
    codes: &[u8],
    weight_scale: f32,
    rows: usize,
    cols: usize,
    x_q: &[i8],
    scales: &[f32],
) -> Vec<f32> {
    assert!(cols % 128 == 0, "I2_S rows must be whole 128-weight blocks");
    assert!(codes.len() >= rows * cols / 4, "I2_S codes too short");
    assert!(x_q.len() >= scales.len() * cols, "activations too short");
    let mut y = Vec::with_capacity(rows * scales.len());
    for (t, &s) in scales.iter().enumerate() {
        let x = &x_q[t * cols..(t + 1) * cols];
        for r in 0..rows {
            let acc: i32 = x
                .iter()
                .enumerate()
                .map(|(c, &v)| i2s_weight(codes, cols, r, c) * i32::from(v))
                .sum();
            y.push(acc as f32 * weight_scale / s);
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_by_hand() {
        // absmax 2.0 -> s = 63.5: 1.0 -> 63.5 -> 64 (half to even), -2 -> -127,
        // 0.5 -> 31.75 -> 32, 0.1 -> 6.35 -> 6.
        let (q, s) = quantize_activations(&[1.0, -2.0, 0.5, 0.1], 4);
        assert_eq!(s, vec![63.5]);
        assert_eq!(q, vec![64, -127, 32, 6]);
    }

    #[test]
    fn ties_round_half_to_even_and_scale_is_per_token() {
        // Row 0: absmax 127 -> s = 1 exactly, so x * s is x and the ties are visible.
        // Row 1: absmax 63.5 -> s = 2.
        let x = [2.5, -3.5, 126.5, 127.0, 0.25, -0.75, 63.5, 0.0];
        let (q, s) = quantize_activations(&x, 4);
        assert_eq!(s, vec![1.0, 2.0]);
        assert_eq!(q, vec![2, -4, 126, 127, 0, -2, 127, 0]);
    }

    #[test]
    fn zero_and_tiny_rows_use_the_epsilon() {
        let (q, s) = quantize_activations(&[0.0, 0.0, 5e-6, -1e-6], 2);
        assert_eq!(s, vec![127.0 / 1e-5, 127.0 / 1e-5]);
        assert_eq!(s[0], 12_700_000.0);
        // 5e-6 * 1.27e7 rounds in f32 to exactly 63.5, a tie -> 64 (even);
        // -1e-6 * 1.27e7 = -12.7 -> -13.
        assert_eq!(5e-6f32 * s[1], 63.5);
        assert_eq!(q, vec![0, 0, 64, -13]);
    }

    /// Pack one row's ternary weights (`-1, 0, +1`) as I2_S codes.
    fn pack(weights: &[i32]) -> Vec<u8> {
        let mut out = vec![0u8; weights.len() / 4];
        for (i, &w) in weights.iter().enumerate() {
            let (block, within) = (i / 128, i % 128);
            let (group, j) = (within / 32, within % 32);
            out[block * 32 + j] |= ((w + 1) as u8) << (6 - 2 * group);
        }
        out
    }

    #[test]
    fn bitlinear_by_hand() {
        // Two rows of 128: row 0 is +1 at columns 0 and 33, -1 at 127; row 1 is all -1.
        let mut w = vec![0i32; 256];
        w[0] = 1;
        w[33] = 1;
        w[127] = -1;
        for v in &mut w[128..] {
            *v = -1;
        }
        let codes = pack(&w);
        // Byte 0 of block 0 holds weights 0, 32, 64, 96: codes 2, 1, 1, 1.
        assert_eq!(codes[0], 0b10_01_01_01);
        let mut x_q = vec![0i8; 128];
        x_q[0] = 10;
        x_q[33] = -3;
        x_q[127] = 7;
        x_q[5] = 100;
        // Row 0: 10 - 3 - 7 = 0 -> 0. Row 1: -(10 - 3 + 7 + 100) = -114.
        let y = bitlinear_i2s(&codes, 0.5, 2, 128, &x_q, &[2.0]);
        assert_eq!(y, vec![0.0, -114.0 * 0.5 / 2.0]);
    }

    #[test]
    fn bitlinear_matches_quantized_reference_values() {
        // Agrees with the library quantizer's packing (crate::quant) on a random row.
        let cols = 256;
        let values: Vec<f32> = (0..cols)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0)
            .collect();
        let data = crate::quant::quantize(crate::quant::GgmlType::I2_S, &values).unwrap();
        let ws = crate::quant::i2s_weight_scale(&data, cols).unwrap();
        let deq = crate::quant::dequantize(crate::quant::GgmlType::I2_S, &data, cols).unwrap();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let (x_q, s) = quantize_activations(&x, cols);
        let want: f64 = deq
            .iter()
            .zip(&x_q)
            .map(|(&w, &q)| f64::from(w) * f64::from(q))
            .sum::<f64>()
            / f64::from(s[0]);
        let got = bitlinear_i2s(&data, ws, 1, cols, &x_q, &s)[0];
        assert!((f64::from(got) - want).abs() <= 1e-6 * want.abs().max(1.0));
    }
}
