//! I2_S, BitNet's ternary type (GGUF id 36 in the BitNet fork of llama.cpp).
//!
//! Layout (x86 builds of the fork's converter, the one that wrote the published files):
//! - `n / 4` bytes of 2-bit codes in 32-byte blocks of 128 weights. Byte `j` of a block holds
//!   weights `j, 32 + j, 64 + j, 96 + j` in bit pairs `[7:6], [5:4], [3:2], [1:0]`: weight
//!   `32 g + j` sits at shift `6 - 2 g`.
//! - then 32 bytes whose first 4 are the little-endian f32 per-tensor `weight_scale`.
//!
//! Code `c` means weight `(c - 1) * weight_scale`: 0 -> -1, 1 -> 0, 2 -> +1. Code 3 is never
//! written by the fork's quantizer (its kernels would compute +2 from it); we treat it as
//! corrupt data and refuse it with [`QuantError::InvalidCode`] rather than invent a value.
//!
//! ARM builds of the converter use 64-weight blocks and a different interleave; nothing in the
//! tensor bytes tells the two apart, so that must be detected from the file's metadata by the
//! caller.

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{check_finite, BitLinearInput, Dtype, Family, Kernels, Q8Rows};
use crate::quant::planes::padded;
use crate::quant::{expect_len, GgmlType, QuantError};

/// The registry entry.
pub const I2_S: I2S = I2S;

/// Weights per I2_S block.
pub const QK_I2S: usize = 128;
/// Bytes after the packed codes: the f32 scale, then padding.
pub const I2S_TRAILER_BYTES: usize = 32;

/// 128 ternary weights as 2-bit codes (see the module docs for the bit order).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockI2S {
    pub qs: [u8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockI2S>() == 32);

impl BlockI2S {
    /// The 2-bit code of weight `i` (taken mod 128).
    pub fn code(&self, i: usize) -> u8 {
        let (group, j) = ((i / 32) % 4, i % 32);
        (self.qs[j] >> (6 - 2 * group)) & 3
    }

    /// Pack 128 codes (each taken mod 4).
    pub fn from_codes(codes: &[u8; QK_I2S]) -> Self {
        let mut qs = [0u8; 32];
        for (i, &c) in codes.iter().enumerate() {
            let (group, j) = (i / 32, i % 32);
            qs[j] |= (c & 3) << (6 - 2 * group);
        }
        BlockI2S { qs }
    }

    /// `out[i] = (code(i) - 1) * scale`, or `Err(i)` for the first weight with code 3.
    pub fn dequantize(&self, scale: f32, out: &mut [f32; QK_I2S]) -> Result<(), usize> {
        for (i, o) in out.iter_mut().enumerate() {
            let c = self.code(i);
            if c == 3 {
                return Err(i);
            }
            *o = (i32::from(c) - 1) as f32 * scale;
        }
        Ok(())
    }
}

/// The per-tensor scale: the f32 at byte `n / 4`. `data.len()` must already be `n / 4 + 32`.
fn scale_at(data: &[u8], n: usize) -> Option<f32> {
    let b = data.get(n / 4..n / 4 + 4)?;
    Some(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decode a whole tensor; `data.len() == out.len() / 4 + 32` was checked by the caller.
fn dequantize(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let n = out.len();
    let scale = scale_at(data, n).ok_or_else(|| QuantError::Invalid("I2_S: no scale".into()))?;
    let packed = data
        .get(..n / 4)
        .ok_or_else(|| QuantError::Invalid("I2_S: short data".into()))?;
    let blocks: &[BlockI2S] =
        bytemuck::try_cast_slice(packed).map_err(|e| QuantError::Invalid(format!("I2_S: {e}")))?;
    for (b, (block, chunk)) in blocks.iter().zip(out.chunks_exact_mut(QK_I2S)).enumerate() {
        let chunk: &mut [f32; QK_I2S] = chunk
            .try_into()
            .map_err(|_| QuantError::Invalid("I2_S: ragged block".into()))?;
        block
            .dequantize(scale, chunk)
            .map_err(|i| QuantError::InvalidCode {
                dtype: GgmlType::I2_S,
                index: (b * QK_I2S + i) as u64,
                code: 3,
            })?;
    }
    Ok(())
}

/// Ternarize as BitNet's converter does (facts.md): `s = mean(|W|)` over the whole tensor
/// (accumulated in f64, stored as f32), code `= clamp(round(w / s), -1, 1) + 1` with ties to
/// even (torch's `round`). An all-zero tensor gets `s = 0` and every code 1 (weight 0).
fn quantize(values: &[f32]) -> Result<Vec<u8>, QuantError> {
    let n = values.len();
    if n % QK_I2S != 0 {
        return Err(QuantError::PartialBlock {
            dtype: GgmlType::I2_S,
            n_elements: n as u64,
            block: QK_I2S as u64,
        });
    }
    let sum: f64 = values.iter().map(|v| f64::from(v.abs())).sum();
    let scale = if n == 0 { 0.0 } else { (sum / n as f64) as f32 };
    let mut out = Vec::with_capacity(n / 4 + I2S_TRAILER_BYTES);
    for chunk in values.chunks_exact(QK_I2S) {
        let codes: [u8; QK_I2S] = std::array::from_fn(|i| ternary_code(chunk[i], scale));
        out.extend_from_slice(&BlockI2S::from_codes(&codes).qs);
    }
    out.extend_from_slice(&scale.to_le_bytes());
    out.resize(n / 4 + I2S_TRAILER_BYTES, 0);
    Ok(out)
}

/// `clamp(round_ties_even(w / scale), -1, 1) + 1`, or 1 (zero) when `scale == 0`.
pub fn ternary_code(w: f32, scale: f32) -> u8 {
    if scale == 0.0 {
        return 1;
    }
    let t = (w / scale).round_ties_even().clamp(-1.0, 1.0);
    (t as i8 + 1) as u8
}

const KERNELS: Kernels = Kernels {
    family: Family::I2S,
    decode: "quant/i2s.wgsl",
    decode_q8: None,
    f16_tiles: false,
    planes: padded,
};

/// I2_S as a [`Dtype`]: blocks across the whole tensor, then the trailer with the scale.
///
/// On the GPU rows are whole 32-byte blocks, so the codes are uploaded as they are (one padded
/// plane); the scale travels as the `weight_scale` uniform.
pub struct I2S;

/// No integer form (its products are BitLinear's, on its own int8 records).
impl Q8Rows for I2S {}

impl Dtype for I2S {
    fn ggml(&self) -> GgmlType {
        GgmlType::I2_S
    }

    fn dequantize(&self, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        dequantize(data, out)
    }

    /// `code - 1` per weight (the scale is [`Dtype::tensor_scale`]'s); code 3 is
    /// [`QuantError::InvalidCode`] at its index in `out`.
    fn dequantize_rows(&self, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        let blocks: &[BlockI2S] = bytemuck::try_cast_slice(data)
            .map_err(|e| QuantError::Invalid(format!("I2_S: {e}")))?;
        if blocks.len() * QK_I2S != out.len() {
            return Err(QuantError::Invalid(format!(
                "I2_S: {} blocks cannot fill {} elements",
                blocks.len(),
                out.len()
            )));
        }
        for (b, (block, chunk)) in blocks.iter().zip(out.chunks_exact_mut(QK_I2S)).enumerate() {
            let chunk: &mut [f32; QK_I2S] = chunk
                .try_into()
                .map_err(|_| QuantError::Invalid("I2_S: ragged block".into()))?;
            block
                .dequantize(1.0, chunk)
                .map_err(|i| QuantError::InvalidCode {
                    dtype: GgmlType::I2_S,
                    index: (b * QK_I2S + i) as u64,
                    code: 3,
                })?;
        }
        Ok(())
    }

    fn tensor_scale(&self, data: &[u8], n: usize) -> Result<Option<f32>, QuantError> {
        expect_len(GgmlType::I2_S, data, n)?;
        let scale =
            scale_at(data, n).ok_or_else(|| QuantError::Invalid("I2_S: no scale".into()))?;
        Ok(Some(scale))
    }

    fn can_quantize(&self) -> bool {
        true
    }

    fn quantize(&self, values: &[f32]) -> Result<Vec<u8>, QuantError> {
        check_finite(GgmlType::I2_S, values)?;
        quantize(values)
    }

    fn rows_independent(&self) -> bool {
        false
    }

    fn bitlinear(&self) -> Option<BitLinearInput> {
        Some(BitLinearInput::Records)
    }

    /// Codes 0..2 only, and a scale of 1.
    fn tame(&self, data: &mut [u8]) {
        let codes = data.len().saturating_sub(I2S_TRAILER_BYTES);
        for b in &mut data[..codes] {
            *b &= 0b0101_0101;
        }
        if let Some(scale) = data.get_mut(codes..codes + 4) {
            scale.copy_from_slice(&1.0f32.to_le_bytes());
        }
    }

    fn kernels(&self) -> Option<&'static Kernels> {
        Some(&KERNELS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_j_holds_weights_j_32_64_96_high_bits_first() {
        let mut b = BlockI2S::zeroed();
        b.qs[5] = 0b10_01_00_10;
        assert_eq!(b.code(5), 2);
        assert_eq!(b.code(37), 1);
        assert_eq!(b.code(69), 0);
        assert_eq!(b.code(101), 2);
        assert_eq!(b.code(4), 0);
    }

    #[test]
    fn codes_round_trip() {
        let codes: [u8; QK_I2S] = std::array::from_fn(|i| ((i * 5 + i / 7) % 3) as u8);
        let b = BlockI2S::from_codes(&codes);
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(b.code(i), c);
        }
    }

    #[test]
    fn ties_round_to_even() {
        assert_eq!(ternary_code(0.5, 1.0), 1);
        assert_eq!(ternary_code(-0.5, 1.0), 1);
        assert_eq!(ternary_code(1.5, 1.0), 2);
        assert_eq!(ternary_code(-7.0, 1.0), 0);
        assert_eq!(ternary_code(3.0, 0.0), 1);
    }
}
