//! The registry: every dtype tritium runs, one row each. Each row names the implementation in
//! the dtype's own file (`dtypes/<name>.rs`: its block struct, its [`Block`] impl with its CPU
//! code and what its GPU kernels are made of), and nothing else lists implemented dtypes: the
//! CPU dispatch, the kernel registry, the uploads and the plans all look them up here. Lookups
//! happen when weights are loaded and when plans and pipelines are built, never per dispatch.
//!
//! Adding a dtype of an existing family:
//! 1. `dtypes/<name>.rs`: its block struct with its size check, `impl Block` for it (with its
//!    [`Kernels`] where it runs on the GPU), and its entry `pub const <NAME>: Blocks<..> =
//!    Blocks::NEW` (which checks the struct against the GGUF table);
//! 2. its decode files under `crates/gpu/shaders/quant/`, implementing its family's interface (found by
//!    name: nothing lists shader files);
//! 3. here, its `mod` line and its row.
//!
//! The kernels, uploads, dispatch sizes and self-tests follow from the registry. The golden
//! test (`tests/quant_goldens.rs`) asks for gguf-py's bytes of every dequantizable type.
//!
//! [`Block`]: super::Block
//! [`Kernels`]: super::Kernels

pub mod float;
pub mod i2s;
pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod mxfp4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod tq1_0;
pub mod tq2_0;

use super::block::Q8Rows;
use super::q8dot::RowDotQ8;
use super::{Dtype, GgmlType};

/// `GgmlType => its implementation`, one row per dtype.
macro_rules! registry {
    ($($t:ident => $imp:expr,)*) => {
        /// The implementation of `t`, if tritium runs `t`.
        pub fn lookup(t: GgmlType) -> Option<&'static dyn Dtype> {
            match t {
                $(GgmlType::$t => Some(&$imp),)*
                _ => None,
            }
        }

        /// Every implemented dtype, in registry order.
        pub fn all() -> &'static [&'static dyn Dtype] {
            &[$(&$imp),*]
        }

        /// The fast integer row product of `t` ([`super::q8dot::Q8Dot`]), where its format
        /// has an integer form (see [`Q8Rows`] for why this is not a [`Dtype`] method).
        pub(super) fn q8_row_dot(t: GgmlType) -> Option<RowDotQ8> {
            match t {
                $(GgmlType::$t => $imp.q8_row_dot(),)*
                _ => None,
            }
        }
    };
}

registry! {
    F32 => float::F32,
    F16 => float::F16,
    BF16 => float::BF16,
    Q4_0 => q4_0::Q4_0,
    Q4_1 => q4_1::Q4_1,
    Q5_0 => q5_0::Q5_0,
    Q5_1 => q5_1::Q5_1,
    Q8_0 => q8_0::Q8_0,
    Q2_K => q2_k::Q2_K,
    Q3_K => q3_k::Q3_K,
    Q4_K => q4_k::Q4_K,
    Q5_K => q5_k::Q5_K,
    Q6_K => q6_k::Q6_K,
    TQ1_0 => tq1_0::TQ1_0,
    TQ2_0 => tq2_0::TQ2_0,
    I2_S => i2s::I2_S,
    IQ4_NL => iq4_nl::IQ4_NL,
    IQ4_XS => iq4_xs::IQ4_XS,
    IQ3_XXS => iq3_xxs::IQ3_XXS,
    IQ3_S => iq3_s::IQ3_S,
    IQ2_XXS => iq2_xxs::IQ2_XXS,
    IQ2_XS => iq2_xs::IQ2_XS,
    IQ2_S => iq2_s::IQ2_S,
    IQ1_S => iq1_s::IQ1_S,
    IQ1_M => iq1_m::IQ1_M,
    MXFP4 => mxfp4::MXFP4,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_name_their_own_type() {
        for d in all() {
            let t = d.ggml();
            assert!(lookup(t).is_some_and(|e| e.ggml() == t), "{t}");
        }
        let registered = GgmlType::ALL.iter().filter(|&&t| lookup(t).is_some());
        assert_eq!(registered.count(), all().len());
    }
}
