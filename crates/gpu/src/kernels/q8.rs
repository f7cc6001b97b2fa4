//! Int8 activations for the integer-dot decode kernels ([`Kernel::MatvecQ8`]): the
//! `QuantizeQ8` kernel (`quantize_q8.wgsl`, one invocation per block of 32 values), the same
//! quantization fused after an RMSNorm (`RmsNormQuantizeQ8`, `rms_norm_quantize_q8.wgsl`) and the
//! record helpers every `MatvecQ8` kernel includes (`quant/q8.wgsl`). The record layout and the
//! op are in [`crate::q8`]; the arithmetic is [`crate::quant::q8dot`]'s.

use std::borrow::Cow;

use super::{Kernel, KernelSource};

/// Invocations per QuantizeQ8 workgroup (four per block of 32 values; a multiple of 4).
pub const QUANTIZE_WG: u32 = 64;

/// quantize_q8.wgsl and what it includes: scale_for_absmax (shared with the BitLinear
/// quantizer), the shared record arithmetic, silu_mul.wgsl's `apply` from the SiluMul op.
const QUANTIZE_FILES: &[&str] = &[
    "absmax_scale.wgsl",
    "activation_quant.wgsl",
    "q8_quarter.wgsl",
    "silu_mul.wgsl",
    "quantize_q8.wgsl",
];

pub fn source(kernel: Kernel) -> Option<KernelSource> {
    match kernel {
        Kernel::QuantizeQ8 => Some(KernelSource {
            files: Cow::Borrowed(QUANTIZE_FILES),
            entry: "main",
            default_workgroup_size: QUANTIZE_WG,
        }),
        Kernel::SiluMulQuantizeQ8 => Some(KernelSource {
            files: Cow::Borrowed(QUANTIZE_FILES),
            entry: "main_silu",
            default_workgroup_size: QUANTIZE_WG,
        }),
        // The same files (quantize_q8.wgsl's `main_silu_norm`).
        Kernel::SiluMulQuantizeQ8Norm => Some(KernelSource {
            files: Cow::Borrowed(QUANTIZE_FILES),
            entry: "main_silu_norm",
            default_workgroup_size: QUANTIZE_WG,
        }),
        Kernel::RmsNormQuantizeQ8 => Some(KernelSource {
            files: Cow::Borrowed(&[
                "absmax_scale.wgsl",
                "activation_quant.wgsl",
                "q8_quarter.wgsl",
                "rms_norm_quantize_q8.wgsl",
            ]),
            entry: "main",
            default_workgroup_size: 256,
        }),
        _ => None,
    }
}

/// Workgroups of QuantizeQ8 for `n_tokens` rows of `cols` values (four invocations per block
/// of 32).
pub fn workgroups(cols: u32, n_tokens: u32, workgroup_size: u32) -> u32 {
    (cols / 32 * 4 * n_tokens).div_ceil(workgroup_size.max(1))
}
