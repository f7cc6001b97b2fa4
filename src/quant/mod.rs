//! Quantization reference: block layouts with compile-time size checks and CPU
//! dequantization (and, for the converter, quantization) for every dtype we run.
//! Pure: no I/O, no GPU.
//!
//! One file per family, each block type with its CPU dequantize next to it:
//! - `float`: F32, F16, BF16 and the [`F16Le`] scale field;
//! - `legacy`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32-weight blocks);
//! - `kquants`: Q4_K, Q5_K, Q6_K (256-weight super-blocks);
//! - `ternary`: TQ1_0, TQ2_0 (upstream ggml's ternary types);
//! - `i2s`: I2_S (BitNet's ternary type with one per-tensor scale).
//!
//! Dequantization is bit identical to gguf-py 0.19 (tested against goldens it wrote);
//! quantization matches gguf-py/ggml byte for byte where they define it (Q8_0, the other legacy
//! types, TQ1_0, TQ2_0, F16, BF16) and ggml's reference quantizers for Q4_K, Q5_K and Q6_K
//! (tested against llama.cpp's bytes). [`ftype`] picks each tensor's type the way
//! `llama-quantize` does.
//! Everything here takes untrusted bytes: sizes are checked up front and nothing panics.

mod dtype;
mod float;
mod i2s;
mod kquants;
mod legacy;
pub mod q8dot;
mod ternary;

pub use dtype::{BlockGeometry, GgmlType};
pub use float::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, F16Le};
pub use i2s::{ternary_code, BlockI2S, I2S_TRAILER_BYTES, QK_I2S};
pub use kquants::{scale_min_k4, BlockQ4K, BlockQ5K, BlockQ6K, QK_K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
pub use ternary::{BlockTQ1_0, BlockTQ2_0};

use bytemuck::Pod;

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
    use GgmlType::*;
    matches!(
        dtype,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q4_K
            | Q5_K
            | Q6_K
            | TQ1_0
            | TQ2_0
            | I2_S
    )
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

/// The per-tensor `weight_scale` of an I2_S tensor: the f32 at byte `n_elements / 4`.
pub fn i2s_weight_scale(data: &[u8], n_elements: usize) -> Result<f32, QuantError> {
    expect_len(GgmlType::I2_S, data, n_elements)?;
    i2s::scale_at(data, n_elements).ok_or_else(|| QuantError::Invalid("I2_S: no scale".into()))
}

/// Encode `values` as `dtype`. Block types need a whole number of blocks and finite values;
/// F32/F16/BF16 take anything (NaN and infinities included).
///
/// Every block type is byte identical to ggml's `quantize_row_*_ref` (what llama.cpp uses when
/// there is no importance matrix), K-quants included; I2_S
/// ternarizes with the tensor's absmean (see [`ternary_code`]) and appends the scale.
pub fn quantize(dtype: GgmlType, values: &[f32]) -> Result<Vec<u8>, QuantError> {
    use GgmlType::*;
    match dtype {
        F32 => Ok(float::quantize_f32(values)),
        F16 => Ok(float::quantize_f16(values)),
        BF16 => Ok(float::quantize_bf16(values)),
        Q4_0 => quantize_blocks(dtype, values, BlockQ4_0::quantize),
        Q4_1 => quantize_blocks(dtype, values, BlockQ4_1::quantize),
        Q5_0 => quantize_blocks(dtype, values, BlockQ5_0::quantize),
        Q5_1 => quantize_blocks(dtype, values, BlockQ5_1::quantize),
        Q8_0 => quantize_blocks(dtype, values, BlockQ8_0::quantize),
        Q4_K => quantize_blocks(dtype, values, BlockQ4K::quantize),
        Q5_K => quantize_blocks(dtype, values, BlockQ5K::quantize),
        Q6_K => quantize_blocks(dtype, values, BlockQ6K::quantize),
        TQ1_0 => quantize_blocks(dtype, values, BlockTQ1_0::quantize),
        TQ2_0 => quantize_blocks(dtype, values, BlockTQ2_0::quantize),
        I2_S => {
            check_finite(dtype, values)?;
            i2s::quantize(values)
        }
        _ => Err(QuantError::QuantizeUnsupported(dtype)),
    }
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
    use GgmlType::*;
    match dtype {
        F32 => float::dequantize_f32(data, out),
        F16 => float::dequantize_f16(data, out),
        BF16 => float::dequantize_bf16(data, out),
        Q4_0 => dequantize_blocks(data, out, BlockQ4_0::dequantize)?,
        Q4_1 => dequantize_blocks(data, out, BlockQ4_1::dequantize)?,
        Q5_0 => dequantize_blocks(data, out, BlockQ5_0::dequantize)?,
        Q5_1 => dequantize_blocks(data, out, BlockQ5_1::dequantize)?,
        Q8_0 => dequantize_blocks(data, out, BlockQ8_0::dequantize)?,
        Q4_K => dequantize_blocks(data, out, BlockQ4K::dequantize)?,
        Q5_K => dequantize_blocks(data, out, BlockQ5K::dequantize)?,
        Q6_K => dequantize_blocks(data, out, BlockQ6K::dequantize)?,
        TQ1_0 => dequantize_blocks(data, out, BlockTQ1_0::dequantize)?,
        TQ2_0 => dequantize_blocks(data, out, BlockTQ2_0::dequantize)?,
        I2_S => i2s::dequantize(data, out)?,
        _ => return Err(QuantError::Unsupported(dtype)),
    }
    Ok(())
}

/// View `data` as blocks (all block types have alignment 1) and decode each into `N` outputs.
fn dequantize_blocks<B: Pod, const N: usize>(
    data: &[u8],
    out: &mut [f32],
    decode: fn(&B, &mut [f32; N]),
) -> Result<(), QuantError> {
    let blocks: &[B] =
        bytemuck::try_cast_slice(data).map_err(|e| QuantError::Invalid(format!("{e}")))?;
    if blocks.len().checked_mul(N) != Some(out.len()) {
        return Err(QuantError::Invalid(format!(
            "{} blocks cannot fill {} elements",
            blocks.len(),
            out.len()
        )));
    }
    for (block, chunk) in blocks.iter().zip(out.chunks_exact_mut(N)) {
        let chunk = <&mut [f32; N]>::try_from(chunk)
            .map_err(|_| QuantError::Invalid("ragged block".into()))?;
        decode(block, chunk);
    }
    Ok(())
}

fn check_finite(dtype: GgmlType, values: &[f32]) -> Result<(), QuantError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(QuantError::NonFinite {
            dtype,
            index: i as u64,
            value: values[i],
        }),
        None => Ok(()),
    }
}

fn quantize_blocks<B: Pod, const N: usize>(
    dtype: GgmlType,
    values: &[f32],
    encode: fn(&[f32; N]) -> B,
) -> Result<Vec<u8>, QuantError> {
    if values.len() % N != 0 {
        return Err(QuantError::PartialBlock {
            dtype,
            n_elements: values.len() as u64,
            block: N as u64,
        });
    }
    check_finite(dtype, values)?;
    let mut out = Vec::with_capacity(values.len() / N * std::mem::size_of::<B>());
    for chunk in values.chunks_exact(N) {
        let chunk =
            <&[f32; N]>::try_from(chunk).map_err(|_| QuantError::Invalid("ragged block".into()))?;
        out.extend_from_slice(bytemuck::bytes_of(&encode(chunk)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_agree_with_the_dtype_table() {
        use std::mem::size_of;
        let sizes = [
            (GgmlType::Q4_0, size_of::<BlockQ4_0>(), 32),
            (GgmlType::Q4_1, size_of::<BlockQ4_1>(), 32),
            (GgmlType::Q5_0, size_of::<BlockQ5_0>(), 32),
            (GgmlType::Q5_1, size_of::<BlockQ5_1>(), 32),
            (GgmlType::Q8_0, size_of::<BlockQ8_0>(), 32),
            (GgmlType::Q4_K, size_of::<BlockQ4K>(), 256),
            (GgmlType::Q5_K, size_of::<BlockQ5K>(), 256),
            (GgmlType::Q6_K, size_of::<BlockQ6K>(), 256),
            (GgmlType::TQ1_0, size_of::<BlockTQ1_0>(), 256),
            (GgmlType::TQ2_0, size_of::<BlockTQ2_0>(), 256),
        ];
        for (t, bytes, elems) in sizes {
            let g = t.block().unwrap();
            assert_eq!((g.block_elems, g.block_bytes), (elems, bytes as u64), "{t}");
        }
    }

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
