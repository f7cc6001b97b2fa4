//! Ternary formats: I2_S as BitLinear (int8 activations, integer accumulation), and upstream
//! ggml's TQ1_0 and TQ2_0 (decode: integer dot products on q8 records; prefill and the f32
//! fallback: f32 activations, for BitLinear quantized and written back as f32 first).
//!
//! # Kernels
//! - `QuantizeActivations` (`quantize_activations.wgsl`): f32 `(n_tokens, cols)` to one buffer
//!   of per-token records: a 16-byte header (the f32 scale `s = 127 / max(absmax, 1e-5)`, the
//!   i32 sum of the int8 values, two zero words) then the int8 values packed 4 per u32, zero
//!   padded to 16 bytes (see `shaders/quant/i2s.wgsl` and [`crate::bitlinear`]).
//! - `FakeQuantizeActivations` (`fake_quantize_activations.wgsl`): the same quantization
//!   written back as f32 `x_q / s`, `(n_tokens, cols)`, the BitLinear input of the TQ kernels.
//!   Both quantizers take `s` and `x_q` from `activation_quant.wgsl`, so they agree bit for bit
//!   with each other and with the CPU.
//! - `Matvec(I2_S)` / `Matmul(I2_S)` (`matvec_i2s.wgsl`, `matmul_i2s.wgsl`, helpers in
//!   `quant/i2s.wgsl`): take those records as binding 1; `sum(c * x_q)` with unsigned codes by
//!   `dot4I8Packed` into an i32, minus the header's `sum(x_q)`, times `weight_scale / s` once.
//! - `Matvec(TQ*)` / `Matmul(TQ*)`: one skeleton each (`matvec_ternary.wgsl`,
//!   `matmul_ternary.wgsl`) over a decode interface (`TQ_WORDS`, `tq_word`, `tq_scale`,
//!   `tq_word_dot`) that each format's decode file implements (`quant/tq1_0.wgsl`, ...), with the
//!   conversion-free 2-bit decode of `quant/ternary_codes.wgsl`; the result is multiplied by
//!   the `weight_scale` uniform (BitNet's per-tensor scale, else 1).
//!
//! # Layout on the GPU
//! I2_S rows are whole 32-byte blocks, so the codes are uploaded as they are (the per-tensor
//! scale travels in [`crate::weights::GpuWeight::scale`] and the `weight_scale` uniform).
//! TQ blocks are 54 and 66 bytes (not 4-byte aligned), so their planes ([`Kernels::planes`],
//! next to each block struct in `crates/core/src/quant/dtypes/`) repack each chunk of rows losslessly (the
//! same bits, struct of arrays, block order kept), each plane zero-padded to a multiple of 16
//! bytes: the codes at binding 3, the f16 `d` at binding 4, TQ1_0's `qh` at binding 5. Every
//! plane stays block-local, so a chunk uploaded in pieces gets the same planes
//! (`gpu::weights`).
//!
//! # Dispatch
//! - Matvec, I2_S and the integer-dot TQ1_0/TQ2_0 (`MatvecQ8`, on q8 records; for BitLinear
//!   from [`Kernel::QuantizeActivationsQ8`]): `TPR` invocations per row, each serving `RPT`
//!   rows (`WG / TPR * RPT` rows per workgroup) and reading 16-byte loads of codes, as
//!   [`matvec_mapping`] picks for the weight's rows (pipeline constants).
//! - Matvec, f32 TQ1_0/TQ2_0: [`TQ_MATVEC_THREADS_PER_ROW`] invocations per row (`WG / TPR`
//!   rows per workgroup), each reading u32 words, so that neighbouring invocations meet
//!   neighbouring activations.
//! - Matmul: one invocation per row, `WG` rows by [`MATMUL_TILE_TOKENS`] tokens per workgroup,
//!   token tiles fastest.
//! - QuantizeActivations, QuantizeActivationsQ8, FakeQuantizeActivations: one workgroup per
//!   token.

use std::borrow::Cow;

use super::{Kernel, KernelSource};
use crate::quant::{Family, Kernels};

/// Invocations per TQ1_0/TQ2_0 matvec row (`override TPR` in `matvec_ternary.wgsl`).
pub const TQ_MATVEC_THREADS_PER_ROW: u32 = 32;
/// Default workgroup size of the integer-dot TQ1_0/TQ2_0 matvec (a multiple of every `TPR` of
/// [`matvec_mapping`]).
pub const TQ_Q8_WG: u32 = 64;
/// Tokens per matmul tile (`const TT` in `matmul_i2s.wgsl`/`matmul_ternary.wgsl`).
pub const MATMUL_TILE_TOKENS: u32 = 8;

/// The files of `kernel` for a format of the ternary families: I2_S's BitLinear kernels on
/// activation records ([`Family::I2S`]), or the TQ skeletons over the format's decode file
/// ([`Family::Ternary`]: with the conversion-free 2-bit decode, or for the integer-dot matvec
/// the activation record helpers and the format's integer dot).
pub fn source(kernel: Kernel, k: &Kernels) -> Option<KernelSource> {
    const P: &str = "matmul_params.wgsl";
    const C: &str = "quant/ternary_codes.wgsl";
    let d = k.decode;
    let (files, default_workgroup_size) = match (k.family, kernel) {
        (Family::I2S, Kernel::Matvec(_)) => (vec![P, d, "matvec_i2s.wgsl"], 64),
        (Family::I2S, Kernel::Matmul(_)) => (vec![P, d, "matmul_i2s.wgsl"], 64),
        (Family::Ternary, Kernel::Matvec(_)) => (vec![P, C, d, "matvec_ternary.wgsl"], 64),
        (Family::Ternary, Kernel::Matmul(_)) => (vec![P, C, d, "matmul_ternary.wgsl"], 64),
        (Family::Ternary, Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_)) => (
            vec![P, "quant/q8.wgsl", k.decode_q8?, "matvec_ternary_q8.wgsl"],
            TQ_Q8_WG,
        ),
        _ => return None,
    };
    Some(KernelSource {
        files: Cow::Owned(files),
        entry: "main",
        default_workgroup_size,
    })
}

/// The activation quantizers of BitLinear and the fused I2_S norm and products.
pub fn activation_source(kernel: Kernel) -> Option<KernelSource> {
    const S: &str = "absmax_scale.wgsl";
    const A: &str = "activation_quant.wgsl";
    const R: &str = "activation_record.wgsl";
    let (files, default_workgroup_size): (&'static [&'static str], u32) = match kernel {
        Kernel::QuantizeActivations => (&[S, A, R, "quantize_activations.wgsl"], 256),
        Kernel::QuantizeActivationsQ8 => {
            return Some(KernelSource {
                files: Cow::Borrowed(&[S, A, R, "quantize_activations.wgsl"]),
                entry: "main_q8",
                default_workgroup_size: 256,
            })
        }
        Kernel::FakeQuantizeActivations => (&[S, A, "fake_quantize_activations.wgsl"], 256),
        Kernel::RmsNormQuantize => (&[S, A, R, "rms_norm_quantize.wgsl"], 256),
        // I2_S's own kernel: it includes I2_S's decode file.
        Kernel::NormBitLinear(..) => (
            &[S, A, "quant/i2s.wgsl", "norm_bitlinear.wgsl"],
            NORM_BITLINEAR_WORKGROUP,
        ),
        _ => return None,
    };
    Some(KernelSource {
        files: Cow::Borrowed(files),
        entry: "main",
        default_workgroup_size,
    })
}

/// Rows from which the I2_S and integer-dot TQ matvecs take [`WIDE_MAPPING`].
pub const WIDE_ROWS: u32 = 32768;
/// `(TPR, RPT)` of those matvecs for weights of fewer than [`WIDE_ROWS`] rows.
pub const MATVEC_MAPPING: (u32, u32) = (16, 2);
/// `(TPR, RPT)` of those matvecs from [`WIDE_ROWS`] rows on.
pub const WIDE_MAPPING: (u32, u32) = (8, 4);

/// Invocations per row and rows per invocation (`TPR`, `RPT`) of the I2_S matvec and the
/// integer-dot TQ1_0/TQ2_0 matvecs for a weight of `rows` rows (`None` for other kernels).
///
/// Eight threads per row and four rows each keep more loads in flight per invocation, which a
/// large matrix needs (there it is much the faster mapping), but 32 rows per workgroup leave a
/// BitNet-sized matrix (2560 rows: 80 workgroups) too few workgroups for the GPU, where 16 x 2
/// is faster; from [`WIDE_ROWS`] rows there are at least 1024 (about eight per multiprocessor
/// of a GPU with 132 of them, such as an H100 or H200).
pub fn matvec_mapping(kernel: Kernel, rows: u32) -> Option<(u32, u32)> {
    let mapped = matches!(
        (kernel, kernel.family()?),
        (Kernel::Matvec(_), Family::I2S)
            | (
                Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_),
                Family::Ternary
            )
    );
    mapped.then_some(if rows >= WIDE_ROWS {
        WIDE_MAPPING
    } else {
        MATVEC_MAPPING
    })
}

/// Workgroups for `rows` rows (of one chunk) and `n_tokens` tokens.
pub fn workgroups(
    kernel: Kernel,
    rows: u32,
    n_tokens: u32,
    workgroup_size: u32,
    mapping: Option<(u32, u32)>,
) -> u32 {
    let wg = workgroup_size.max(1);
    let mapped = || {
        let (tpr, rpt) = mapping.unwrap_or(MATVEC_MAPPING);
        rows.div_ceil((wg / tpr).max(1) * rpt)
    };
    match kernel {
        Kernel::Matvec(_) if kernel.family() == Some(Family::I2S) => mapped(),
        Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_) => mapped(),
        Kernel::Matvec(_) => rows.div_ceil((wg / TQ_MATVEC_THREADS_PER_ROW).max(1)),
        Kernel::Matmul(_) => rows.div_ceil(wg) * n_tokens.div_ceil(MATMUL_TILE_TOKENS),
        Kernel::QuantizeActivations
        | Kernel::QuantizeActivationsQ8
        | Kernel::FakeQuantizeActivations => n_tokens,
        _ => rows,
    }
}

/// Invocations per workgroup of the NormBitLinear kernel.
pub const NORM_BITLINEAR_WORKGROUP: u32 = 256;

/// Rows per invocation of the NormBitLinear kernel (its `RPT`).
pub const NORM_BITLINEAR_ROWS_PER_THREAD: u32 = 2;

/// The pipeline constants of the NormBitLinear kernel with `tpr` invocations per row.
pub fn norm_bitlinear_constants(mode: u32, tpr: u32) -> Vec<(&'static str, f64)> {
    vec![
        ("MODE", f64::from(mode)),
        ("TPR", f64::from(tpr)),
        ("RPT", f64::from(NORM_BITLINEAR_ROWS_PER_THREAD)),
    ]
}
