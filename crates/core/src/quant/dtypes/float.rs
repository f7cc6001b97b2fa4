//! F32, F16 and BF16: element types rather than blocks, so they implement [`Dtype`] by hand,
//! over the element loops of `quant/float.rs`.

use crate::quant::block::{Dtype, Family, Kernels, Q8Rows};
use crate::quant::planes::row_slots;
use crate::quant::{float, GgmlType, QuantError};

/// The registry entry of F32.
pub const F32: Float = Float {
    dtype: GgmlType::F32,
    size: 4,
    dequantize: float::dequantize_f32,
    quantize: float::quantize_f32,
    kernels: Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_f32.wgsl",
        decode_q8: None,
        f16_tiles: false,
        planes: row_slots,
    }),
};

/// The registry entry of F16.
pub const F16: Float = Float {
    dtype: GgmlType::F16,
    size: 2,
    dequantize: float::dequantize_f16,
    quantize: float::quantize_f16,
    kernels: Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_f16.wgsl",
        decode_q8: None,
        f16_tiles: true,
        planes: row_slots,
    }),
};

/// The registry entry of BF16 (CPU only).
pub const BF16: Float = Float {
    dtype: GgmlType::BF16,
    size: 2,
    dequantize: float::dequantize_bf16,
    quantize: float::quantize_bf16,
    kernels: None,
};

/// A little-endian float element type. Any bytes are valid and any value encodes (NaN and
/// infinities included).
pub struct Float {
    dtype: GgmlType,
    /// Bytes per element.
    size: usize,
    /// Little-endian elements to f32s; `data.len() == size * out.len()`.
    dequantize: fn(&[u8], &mut [f32]),
    quantize: fn(&[f32]) -> Vec<u8>,
    kernels: Option<&'static Kernels>,
}

/// No integer form.
impl Q8Rows for Float {}

impl Dtype for Float {
    fn ggml(&self) -> GgmlType {
        self.dtype
    }

    fn dequantize(&self, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        (self.dequantize)(data, out);
        Ok(())
    }

    fn can_quantize(&self) -> bool {
        true
    }

    fn quantize(&self, values: &[f32]) -> Result<Vec<u8>, QuantError> {
        Ok((self.quantize)(values))
    }

    /// Clear the top exponent bit of every element (the high byte's bit 6).
    fn tame(&self, data: &mut [u8]) {
        for e in data.chunks_exact_mut(self.size) {
            e[self.size - 1] &= 0xbf;
        }
    }

    fn kernels(&self) -> Option<&'static Kernels> {
        self.kernels
    }
}
