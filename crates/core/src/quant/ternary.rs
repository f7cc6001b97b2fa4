//! What upstream ggml's ternary formats share (TQ1_0, 1.6875 bits per weight in base-3
//! packing, and TQ2_0, 2 bits per weight; each in its own file under `dtypes/`). Both store one
//! f16 absmax `d` per 256 weights; a weight is `d * t` with `t` in {-1, 0, +1}.
//!
//! Quantization and dequantization follow gguf-py 0.19 (which matches ggml's
//! `quantize_row_tq*_ref`) bit for bit: `d = max|x|`, `t = round(x / d)` computed as
//! `x * (1/d)` and rounded half away from zero.

use super::q8dot::{IntBlock, QK8};

/// Elements per ternary block.
pub const QK_K: usize = 256;

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// `(d, codes)` with `codes[i] = round(x[i] / d) + 1` in 0..=2 (gguf-py's ternary quantizer).
pub(super) fn ternarize(x: &[f32; QK_K]) -> (f32, [u8; QK_K]) {
    let d = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let codes = std::array::from_fn(|i| {
        // |x * id| <= 1 up to rounding, so this is -1, 0 or +1; clamp keeps it total.
        let t = (x[i] * id).round().clamp(-1.0, 1.0) as i8;
        (t + 1) as u8
    });
    (d, codes)
}

/// Trit `n` (0 = most significant) of a TQ1_0 byte: `((q * 3^n mod 256) * 3) >> 8`.
pub(super) fn trit(q: u8, n: usize) -> u8 {
    let shifted = q.wrapping_mul(POW3[n]);
    ((u16::from(shifted) * 3) >> 8) as u8
}

/// Pack trits (0..=2, most significant first) as `ceil(v * 256 / 243)`.
pub(super) fn pack_trits(trits: &[u8]) -> u8 {
    let v = trits.iter().fold(0u16, |acc, &t| acc * 3 + u16::from(t));
    // Four trits are padded to five with a trailing zero (the `3^n` weights 81..3).
    let v = v * if trits.len() == 4 { 3 } else { 1 };
    (v * 256).div_ceil(243) as u8
}

/// The integer form of a ternary block: codes `c - 1` with one scale `d`, in groups of the
/// activations' 32 (each its own activation scale).
pub(super) fn int_form(codes: &[u8; QK_K], d: f32) -> IntBlock {
    IntBlock {
        codes: codes.iter().map(|&c| i32::from(c) - 1).collect(),
        groups: vec![(QK8, d, 0.0); QK_K / QK8],
    }
}

/// [`int_form`] into the caller's storage: codes, scales, offsets.
pub(super) fn int_decode(
    codes: &[u8; QK_K],
    d: f32,
    (out, scales, offsets): (&mut [i16; QK_K], &mut [f32], &mut [f32]),
) {
    for (c, &q) in out.iter_mut().zip(codes) {
        *c = i16::from(q) - 1;
    }
    ternary_groups(d, scales, offsets);
}

/// The groups of a ternary block's integer form: `d` with no offset, per 32 weights.
pub(super) fn ternary_groups(d: f32, scales: &mut [f32], offsets: &mut [f32]) {
    scales.fill(d);
    offsets.fill(0.0);
}

#[cfg(test)]
mod tests {
    use super::super::block::Block;
    use super::super::{BlockTQ1_0, BlockTQ2_0};
    use super::*;

    #[test]
    fn every_trit_byte_round_trips() {
        for v in 0..243u16 {
            let trits: [u8; 5] = std::array::from_fn(|n| ((v / 3u16.pow(4 - n as u32)) % 3) as u8);
            let q = pack_trits(&trits);
            for (n, &t) in trits.iter().enumerate() {
                assert_eq!(trit(q, n), t, "value {v} trit {n}");
            }
        }
    }

    #[test]
    fn ternary_round_trips_are_exact_on_ternary_input() {
        let x: [f32; QK_K] = std::array::from_fn(|i| [0.5f32, -0.5, 0.0][(i * 7) % 3]);
        let mut y = [0f32; QK_K];
        BlockTQ1_0::quantize(&x).dequantize(&mut y);
        assert_eq!(x, y);
        BlockTQ2_0::quantize(&x).dequantize(&mut y);
        assert_eq!(x, y);
    }
}
