//! Quantization reference: block layouts with compile-time size checks and CPU
//! dequantization (and, for the converter, quantization) for every dtype we run.
//! Pure: no I/O, no GPU.

mod dtype;

pub use dtype::{BlockGeometry, GgmlType};

/// Errors of the quantization layer.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("dtype {0} cannot be dequantized on the CPU")]
    Unsupported(GgmlType),
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
    #[error("{0}")]
    Invalid(String),
}
pub mod trellis;
