//! Quantization reference: block layouts with compile-time size checks and CPU
//! dequantization (and, for the converter, quantization) for every dtype we run.
//! Pure: no I/O, no GPU.
//!
//! A dtype is one implementation in its own file under `dtypes/` (its block struct and its
//! [`Block`] impl: layout, CPU decode and encode, integer form, and what its GPU kernels are
//! made of, as data), registered by one row in [`dtypes`]; the functions here dispatch through
//! that registry. The families' shared code sits beside it:
//! - `float`: the [`F16Le`] scale field and the f16/bf16 conversions;
//! - `legacy`: the 32-weight block formats' helpers;
//! - `kquants`: the 256-weight K-quant super-blocks' reference quantizers and header layout;
//! - `iquants`: the IQ2/IQ3/IQ1 formats' grid tables (`iq_grids`, generated from gguf-py by
//!   `tests/goldens/gen_iq_grids.py`) and grid-row decode;
//! - `ternary`: upstream ggml's ternary types' trit packing;
//! - [`planes`]: the upload layouts the GPU kernels read;
//! - `block`: the traits ([`Block`], [`Dtype`]) and the kernel data ([`Kernels`]).
//!
//! Dequantization is bit identical to gguf-py 0.19 (tested against goldens it wrote; Q2_K,
//! Q3_K, the IQ types and MXFP4 are dequantize-only and CPU-only);
//! quantization matches gguf-py/ggml byte for byte where they define it (Q8_0, the other legacy
//! types, TQ1_0, TQ2_0, F16, BF16) and ggml's reference quantizers for Q4_K, Q5_K and Q6_K
//! (tested against llama.cpp's bytes). [`ftype`] picks each tensor's type the way
//! `llama-quantize` does.
//! Everything here takes untrusted bytes: sizes are checked up front and nothing panics.

mod block;
mod dtype;
pub mod dtypes;
mod float;
mod iq_grids;
mod iquants;
mod kquants;
mod legacy;
pub mod planes;
pub mod q8dot;
mod ternary;

pub use block::{BitLinearInput, Block, Blocks, Dtype, Family, Kernels, Planes, Q8Tuning, Span};
pub use dtype::{BlockGeometry, GgmlType};
pub use dtypes::i2s::{ternary_code, BlockI2S, I2S_TRAILER_BYTES, QK_I2S};
pub use dtypes::lookup;
pub use dtypes::q4_0::BlockQ4_0;
pub use dtypes::q4_1::BlockQ4_1;
pub use dtypes::q4_k::BlockQ4K;
pub use dtypes::q5_0::BlockQ5_0;
pub use dtypes::q5_1::BlockQ5_1;
pub use dtypes::q5_k::BlockQ5K;
pub use dtypes::q6_k::BlockQ6K;
pub use dtypes::q8_0::BlockQ8_0;
pub use dtypes::tq1_0::BlockTQ1_0;
pub use dtypes::tq2_0::BlockTQ2_0;
pub use float::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, F16Le};
pub use kquants::{permute_k4_scales, permute_q5k_qh, scale_min_k4, QK_K};

/// Errors of the quantization layer.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("dtype {0} cannot be dequantized on the CPU")]
    Unsupported(GgmlType),
    #[error("quantizing to {0} is not supported")]
    QuantizeUnsupported(GgmlType),
    #[error("{dtype}: {n_elements} elements need {expected} bytes, got {got}")]
    SizeMismatch {
        dtype: GgmlType,
        n_elements: u64,
        expected: u64,
        got: u64,
    },
    #[error("{dtype}: {n_elements} elements is not a whole number of {block}-element blocks")]
    PartialBlock {
        dtype: GgmlType,
        n_elements: u64,
        block: u64,
    },
    #[error("{dtype}: element {index} has the invalid 2-bit code {code}")]
    InvalidCode {
        dtype: GgmlType,
        index: u64,
        code: u8,
    },
    #[error("cannot quantize to {dtype}: element {index} is {value}")]
    NonFinite {
        dtype: GgmlType,
        index: u64,
        value: f32,
    },
    #[error("{0}")]
    Invalid(String),
}

pub mod ftype;
pub mod trellis;

/// Whether [`quantize`] can produce this type.
pub fn can_quantize(dtype: GgmlType) -> bool {
    lookup(dtype).is_some_and(|d| d.can_quantize())
}

/// Decode `n_elements` values of `dtype` from `data` (exactly `dtype.tensor_bytes(n)` bytes).
pub fn dequantize(dtype: GgmlType, data: &[u8], n_elements: usize) -> Result<Vec<f32>, QuantError> {
    check_input(dtype, data, n_elements)?;
    let mut out = vec![0f32; n_elements];
    dequantize_checked(dtype, data, &mut out)?;
    Ok(out)
}

/// Decode `out.len()` values of `dtype` from `data` into `out`.
pub fn dequantize_into(dtype: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_input(dtype, data, out.len())?;
    dequantize_checked(dtype, data, out)
}

/// Decode whole rows of `dtype` (`data` exactly `dtype.row_bytes(out.len())` bytes) into `out`,
/// without the per-tensor scale of types that have one ([`tensor_scale`]).
pub fn dequantize_rows(dtype: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let imp = lookup(dtype).ok_or(QuantError::Unsupported(dtype))?;
    let n = out.len() as u64;
    let expected = dtype.row_bytes(n).ok_or(QuantError::PartialBlock {
        dtype,
        n_elements: n,
        block: dtype.row_granularity(),
    })?;
    if data.len() as u64 != expected {
        return Err(QuantError::SizeMismatch {
            dtype,
            n_elements: n,
            expected,
            got: data.len() as u64,
        });
    }
    imp.dequantize_rows(data, out)
}

/// The per-tensor scale a tensor of `n_elements` values of `dtype` carries in `data` (I2_S's
/// `weight_scale`), which every product applies; `None` for types without one.
pub fn tensor_scale(
    dtype: GgmlType,
    data: &[u8],
    n_elements: usize,
) -> Result<Option<f32>, QuantError> {
    lookup(dtype).map_or(Ok(None), |d| d.tensor_scale(data, n_elements))
}

/// The per-tensor `weight_scale` of an I2_S tensor: the f32 at byte `n_elements / 4`.
pub fn i2s_weight_scale(data: &[u8], n_elements: usize) -> Result<f32, QuantError> {
    tensor_scale(GgmlType::I2_S, data, n_elements)?
        .ok_or_else(|| QuantError::Invalid("I2_S: no scale".into()))
}

/// How a BitLinear op feeds `dtype`, or `None` where it is not a BitLinear weight type.
pub fn bitlinear_input(dtype: GgmlType) -> Option<BitLinearInput> {
    lookup(dtype)?.bitlinear()
}

/// Whether rows of `dtype` may be quantized apart and concatenated (not where the tensor
/// shares one scale).
pub fn rows_independent(dtype: GgmlType) -> bool {
    lookup(dtype).is_none_or(|d| d.rows_independent())
}

/// Make random bytes of a `dtype` tensor tame data ([`Dtype::tame`]; unchanged for types we do
/// not run).
pub fn tame(dtype: GgmlType, data: &mut [u8]) {
    if let Some(d) = lookup(dtype) {
        d.tame(data);
    }
}

/// What the GPU kernels of `dtype` are made of, if it has any.
pub fn kernels(dtype: GgmlType) -> Option<&'static Kernels> {
    lookup(dtype)?.kernels()
}

/// Encode `values` as `dtype`. Block types need a whole number of blocks and finite values;
/// F32/F16/BF16 take anything (NaN and infinities included).
///
/// Every block type is byte identical to ggml's `quantize_row_*_ref` (what llama.cpp uses when
/// there is no importance matrix), K-quants included; I2_S
/// ternarizes with the tensor's absmean (see [`ternary_code`]) and appends the scale.
pub fn quantize(dtype: GgmlType, values: &[f32]) -> Result<Vec<u8>, QuantError> {
    lookup(dtype)
        .ok_or(QuantError::QuantizeUnsupported(dtype))?
        .quantize(values)
}

/// The byte size `n_elements` of `dtype` must have, as a `usize`.
fn expected_bytes(dtype: GgmlType, n_elements: usize) -> Result<usize, QuantError> {
    let n = n_elements as u64;
    let granularity = dtype.row_granularity();
    match dtype.tensor_bytes(n) {
        Some(bytes) => usize::try_from(bytes)
            .map_err(|_| QuantError::Invalid(format!("{dtype}: {n} elements overflow usize"))),
        None if granularity > 1 && n % granularity != 0 => Err(QuantError::PartialBlock {
            dtype,
            n_elements: n,
            block: granularity,
        }),
        None => Err(QuantError::Invalid(format!(
            "{dtype}: no byte size for {n} elements"
        ))),
    }
}

/// Fail unless `data` is exactly the bytes of `n_elements` values of `dtype`.
fn expect_len(dtype: GgmlType, data: &[u8], n_elements: usize) -> Result<(), QuantError> {
    let expected = expected_bytes(dtype, n_elements)?;
    if data.len() != expected {
        return Err(QuantError::SizeMismatch {
            dtype,
            n_elements: n_elements as u64,
            expected: expected as u64,
            got: data.len() as u64,
        });
    }
    Ok(())
}

fn check_input(dtype: GgmlType, data: &[u8], n_elements: usize) -> Result<(), QuantError> {
    if !dtype.can_dequantize() {
        return Err(QuantError::Unsupported(dtype));
    }
    expect_len(dtype, data, n_elements)
}

/// Dispatch after the size check.
fn dequantize_checked(dtype: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    lookup(dtype)
        .ok_or(QuantError::Unsupported(dtype))?
        .dequantize(data, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dequantizable_type_is_dispatched() {
        for t in GgmlType::ALL {
            let n = 256 * 4;
            let Some(bytes) = t.tensor_bytes(n) else {
                assert!(!t.can_dequantize(), "{t}");
                continue;
            };
            // Zero bytes are valid everywhere (I2_S code 0 is -1 with scale 0).
            let data = vec![0u8; bytes as usize];
            let r = dequantize(t, &data, n as usize);
            assert_eq!(r.is_ok(), t.can_dequantize(), "{t}: {r:?}");
        }
    }

    #[test]
    fn wrong_sizes_are_errors_not_panics() {
        for t in GgmlType::ALL.into_iter().filter(|t| t.can_dequantize()) {
            for n in [0usize, 1, 31, 32, 100, 128, 255, 256, 512] {
                for len in [0usize, 1, 17, 18, 33, 34, 64, 66, 144, 160, 210, 1024] {
                    let data = vec![0x5au8; len];
                    let ok = t.tensor_bytes(n as u64) == Some(len as u64);
                    let r = dequantize(t, &data, n);
                    // 0x5a has no code 3 in any bit pair, so the I2_S case decodes too.
                    assert_eq!(r.is_ok(), ok, "{t} n={n} len={len}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn quantize_refuses_partial_blocks_and_non_finite_values() {
        assert!(matches!(
            quantize(GgmlType::Q8_0, &[0.0; 33]),
            Err(QuantError::PartialBlock { .. })
        ));
        assert!(matches!(
            quantize(GgmlType::I2_S, &[0.0; 64]),
            Err(QuantError::PartialBlock { .. })
        ));
        let mut v = vec![0.5f32; 256];
        v[7] = f32::NAN;
        for t in [
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::TQ2_0,
            GgmlType::I2_S,
        ] {
            assert!(
                matches!(quantize(t, &v), Err(QuantError::NonFinite { index: 7, .. })),
                "{t}"
            );
        }
        assert!(quantize(GgmlType::F16, &v).is_ok());
        assert!(matches!(
            quantize(GgmlType::Q2_K, &v),
            Err(QuantError::QuantizeUnsupported(GgmlType::Q2_K))
        ));
    }
}
