//! Ternary formats: I2_S as BitLinear (int8 activations, integer accumulation), and upstream
//! ggml's TQ1_0 and TQ2_0 (decode: integer dot products on q8 records; prefill and the f32
//! fallback: f32 activations, for BitLinear quantized and written back as f32 first).
//!
//! # Kernels
//! - `QuantizeActivations` (`quantize_activations.wgsl`): f32 `(n_tokens, cols)` to one buffer
//!   of per-token records: a 16-byte header (the f32 scale `s = 127 / max(absmax, 1e-5)`, the
//!   i32 sum of the int8 values, two zero words) then the int8 values packed 4 per u32, zero
//!   padded to 16 bytes (see `shaders/quant/i2s.wgsl` and [`crate::gpu::bitlinear`]).
//! - `FakeQuantizeActivations` (`fake_quantize_activations.wgsl`): the same quantization
//!   written back as f32 `x_q / s`, `(n_tokens, cols)`, the BitLinear input of the TQ kernels.
//!   Both quantizers take `s` and `x_q` from `activation_quant.wgsl`, so they agree bit for bit
//!   with each other and with the CPU.
//! - `Matvec(I2_S)` / `Matmul(I2_S)` (`matvec_i2s.wgsl`, `matmul_i2s.wgsl`, helpers in
//!   `quant/i2s.wgsl`): take those records as binding 1; `sum(c * x_q)` with unsigned codes by
//!   `dot4I8Packed` into an i32, minus the header's `sum(x_q)`, times `weight_scale / s` once.
//! - `Matvec(TQ*)` / `Matmul(TQ*)`: one skeleton each (`matvec_ternary.wgsl`,
//!   `matmul_ternary.wgsl`) over a decode interface (`TQ_WORDS`, `tq_word`, `tq_scale`,
//!   `tq_word_dot`) that `quant/tq1_0.wgsl` and `quant/tq2_0.wgsl` implement, with the
//!   conversion-free 2-bit decode of `quant/ternary_codes.wgsl`; the result is multiplied by
//!   the `weight_scale` uniform (BitNet's per-tensor scale, else 1).
//!
//! # Layout on the GPU
//! I2_S rows are whole 32-byte blocks, so the codes are uploaded as they are (the per-tensor
//! scale travels in [`crate::gpu::weights::GpuWeight::scale`] and the `weight_scale` uniform).
//! TQ blocks are 54 and 66 bytes (not 4-byte aligned), so [`planes`] repacks each chunk of rows
//! losslessly (the same bits, struct of arrays, block order kept), each plane zero-padded to a
//! multiple of 16 bytes:
//!
//! | format | binding 3                                 | binding 4              | binding 5             |
//! |--------|-------------------------------------------|------------------------|-----------------------|
//! | I2_S   | codes, 32 B per 128 weights               |                        |                       |
//! | TQ2_0  | `qs`, 64 B (16 words) per block           | `d` f16, 2 B per block |                       |
//! | TQ1_0  | `qs`, 48 B (3 x 16) per block             | `d` f16, 2 B per block | `qh`, 4 B per block   |
//!
//! TQ1_0's `qh` words have a plane of their own so that each block's three 16-byte units of
//! `qs` are aligned loads and the `qh` words of a row's blocks, which the integer-dot matvec
//! takes in a pass of their own, are consecutive (H200: 47.0 -> 48.5% of the copy bandwidth
//! at 256 MiB; BENCHMARKS.md). Every plane stays block-local, so a chunk uploaded in pieces
//! gets the same planes (`gpu::weights`).
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

use super::{Kernel, KernelSource};
use crate::quant::GgmlType;

/// Invocations per TQ1_0/TQ2_0 matvec row (`override TPR` in `matvec_ternary.wgsl`).
pub const TQ_MATVEC_THREADS_PER_ROW: u32 = 32;
/// Default workgroup size of the integer-dot TQ1_0/TQ2_0 matvec (a multiple of every `TPR` of
/// [`matvec_mapping`]).
pub const TQ_Q8_WG: u32 = 64;
/// Tokens per matmul tile (`const TT` in `matmul_i2s.wgsl`/`matmul_ternary.wgsl`).
pub const MATMUL_TILE_TOKENS: u32 = 8;

pub const FILES: &[(&str, &str)] = &[
    (
        "absmax_scale.wgsl",
        include_str!("../../../shaders/absmax_scale.wgsl"),
    ),
    (
        "activation_quant.wgsl",
        include_str!("../../../shaders/activation_quant.wgsl"),
    ),
    (
        "fake_quantize_activations.wgsl",
        include_str!("../../../shaders/fake_quantize_activations.wgsl"),
    ),
    (
        "activation_record.wgsl",
        include_str!("../../../shaders/activation_record.wgsl"),
    ),
    (
        "quantize_activations.wgsl",
        include_str!("../../../shaders/quantize_activations.wgsl"),
    ),
    (
        "rms_norm_quantize.wgsl",
        include_str!("../../../shaders/rms_norm_quantize.wgsl"),
    ),
    (
        "norm_bitlinear.wgsl",
        include_str!("../../../shaders/norm_bitlinear.wgsl"),
    ),
    (
        "quant/i2s.wgsl",
        include_str!("../../../shaders/quant/i2s.wgsl"),
    ),
    (
        "quant/ternary_codes.wgsl",
        include_str!("../../../shaders/quant/ternary_codes.wgsl"),
    ),
    (
        "quant/tq1_0.wgsl",
        include_str!("../../../shaders/quant/tq1_0.wgsl"),
    ),
    (
        "quant/tq2_0.wgsl",
        include_str!("../../../shaders/quant/tq2_0.wgsl"),
    ),
    (
        "matvec_i2s.wgsl",
        include_str!("../../../shaders/matvec_i2s.wgsl"),
    ),
    (
        "matmul_i2s.wgsl",
        include_str!("../../../shaders/matmul_i2s.wgsl"),
    ),
    (
        "quant/tq1_0_q8.wgsl",
        include_str!("../../../shaders/quant/tq1_0_q8.wgsl"),
    ),
    (
        "quant/tq2_0_q8.wgsl",
        include_str!("../../../shaders/quant/tq2_0_q8.wgsl"),
    ),
    (
        "matvec_ternary_q8.wgsl",
        include_str!("../../../shaders/matvec_ternary_q8.wgsl"),
    ),
    (
        "matvec_ternary.wgsl",
        include_str!("../../../shaders/matvec_ternary.wgsl"),
    ),
    (
        "matmul_ternary.wgsl",
        include_str!("../../../shaders/matmul_ternary.wgsl"),
    ),
];

pub fn source(kernel: Kernel) -> Option<KernelSource> {
    use GgmlType::*;
    const P: &str = "matmul_params.wgsl";
    const C: &str = "quant/ternary_codes.wgsl";
    const S: &str = "absmax_scale.wgsl";
    const A: &str = "activation_quant.wgsl";
    const R: &str = "activation_record.wgsl";
    const Q: &str = "quant/q8.wgsl";
    let (files, default_workgroup_size): (&'static [&'static str], u32) = match kernel {
        Kernel::QuantizeActivations => (&[S, A, R, "quantize_activations.wgsl"], 256),
        Kernel::QuantizeActivationsQ8 => {
            return Some(KernelSource {
                files: &[S, A, R, "quantize_activations.wgsl"],
                entry: "main_q8",
                default_workgroup_size: 256,
            })
        }
        Kernel::FakeQuantizeActivations => (&[S, A, "fake_quantize_activations.wgsl"], 256),
        Kernel::RmsNormQuantize => (&[S, A, R, "rms_norm_quantize.wgsl"], 256),
        Kernel::NormBitLinear(..) => (
            &[S, A, "quant/i2s.wgsl", "norm_bitlinear.wgsl"],
            crate::gpu::bitlinear::NORM_BITLINEAR_WORKGROUP,
        ),
        Kernel::Matvec(I2_S) => (&[P, "quant/i2s.wgsl", "matvec_i2s.wgsl"], 64),
        Kernel::Matmul(I2_S) => (&[P, "quant/i2s.wgsl", "matmul_i2s.wgsl"], 64),
        Kernel::Matvec(TQ1_0) => (&[P, C, "quant/tq1_0.wgsl", "matvec_ternary.wgsl"], 64),
        Kernel::Matmul(TQ1_0) => (&[P, C, "quant/tq1_0.wgsl", "matmul_ternary.wgsl"], 64),
        Kernel::Matvec(TQ2_0) => (&[P, C, "quant/tq2_0.wgsl", "matvec_ternary.wgsl"], 64),
        Kernel::Matmul(TQ2_0) => (&[P, C, "quant/tq2_0.wgsl", "matmul_ternary.wgsl"], 64),
        Kernel::MatvecQ8(TQ1_0) | Kernel::MatvecQ8Add(TQ1_0) => (
            &[P, Q, "quant/tq1_0_q8.wgsl", "matvec_ternary_q8.wgsl"],
            TQ_Q8_WG,
        ),
        Kernel::MatvecQ8(TQ2_0) | Kernel::MatvecQ8Add(TQ2_0) => (
            &[P, Q, "quant/tq2_0_q8.wgsl", "matvec_ternary_q8.wgsl"],
            TQ_Q8_WG,
        ),
        _ => return None,
    };
    Some(KernelSource {
        files,
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
/// Measured on an H200 (`tritium bench kernels`, workgroups of 64; I2_S / TQ2_0 / TQ1_0 as %
/// of the copy bandwidth at 256 MiB, and the I2_S 2560x6912 shape in us): 16 x 2: 60 / 59 /
/// 28%, 5.98 us; 8 x 4: 87 / 76 / 34%, 8.43 us; 8 x 2: 68 / 66 / 31%, 7.39 us. Eight threads
/// per row and four rows each keep more loads in flight per invocation, which a large matrix
/// needs, but 32 rows per workgroup leave a BitNet-sized matrix (2560 rows: 80 workgroups)
/// too few workgroups for the GPU; from [`WIDE_ROWS`] rows there are at least 1024 (about
/// eight per multiprocessor of an H200).
pub fn matvec_mapping(kernel: Kernel, rows: u32) -> Option<(u32, u32)> {
    use GgmlType::*;
    match kernel {
        Kernel::Matvec(I2_S)
        | Kernel::MatvecQ8(TQ1_0 | TQ2_0)
        | Kernel::MatvecQ8Add(TQ1_0 | TQ2_0) => Some(if rows >= WIDE_ROWS {
            WIDE_MAPPING
        } else {
            MATVEC_MAPPING
        }),
        _ => None,
    }
}

/// Zero-pad a plane to a whole number (at least one) of 16-byte `vec4<u32>` slots.
fn pad16(mut plane: Vec<u8>) -> Vec<u8> {
    plane.resize(plane.len().next_multiple_of(16).max(16), 0);
    plane
}

/// The planes a chunk of `rows` rows is uploaded as (see the module docs). `data` is the
/// chunk's bytes in the file format (for I2_S the packed codes only).
pub fn planes(dtype: GgmlType, data: &[u8], _rows: u32, _cols: u32) -> Vec<Vec<u8>> {
    match dtype {
        GgmlType::TQ2_0 => {
            let blocks = data.chunks_exact(66);
            let mut qs = Vec::with_capacity(blocks.len() * 64);
            let mut d = Vec::with_capacity(blocks.len() * 2);
            for b in blocks {
                qs.extend_from_slice(&b[..64]);
                d.extend_from_slice(&b[64..66]);
            }
            vec![pad16(qs), pad16(d)]
        }
        GgmlType::TQ1_0 => {
            let blocks = data.chunks_exact(54);
            let mut qsh = Vec::with_capacity(blocks.len() * 48);
            let mut qh = Vec::with_capacity(blocks.len() * 4);
            let mut d = Vec::with_capacity(blocks.len() * 2);
            for b in blocks {
                qsh.extend_from_slice(&b[..48]);
                qh.extend_from_slice(&b[48..52]);
                d.extend_from_slice(&b[52..54]);
            }
            vec![pad16(qsh), pad16(d), pad16(qh)]
        }
        _ => vec![pad16(data.to_vec())],
    }
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
    match kernel {
        Kernel::Matvec(GgmlType::I2_S) | Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_) => {
            let (tpr, rpt) = mapping.unwrap_or(MATVEC_MAPPING);
            rows.div_ceil((wg / tpr).max(1) * rpt)
        }
        Kernel::Matvec(_) => rows.div_ceil((wg / TQ_MATVEC_THREADS_PER_ROW).max(1)),
        Kernel::Matmul(_) => rows.div_ceil(wg) * n_tokens.div_ceil(MATMUL_TILE_TOKENS),
        Kernel::QuantizeActivations
        | Kernel::QuantizeActivationsQ8
        | Kernel::FakeQuantizeActivations => n_tokens,
        _ => rows,
    }
}

/// Uniform structs of this family (checked against the WGSL by tests/gpu_uniforms.rs).
pub fn uniforms() -> Vec<crate::gpu::uniforms::UniformLayout> {
    use crate::gpu::bitlinear::{
        FakeQuantParams, NormBitLinearParams, NormQuantParams, QuantizeParams,
    };
    use crate::gpu::uniforms::UniformLayout;
    vec![
        UniformLayout::of::<QuantizeParams>(),
        UniformLayout::of::<FakeQuantParams>(),
        UniformLayout::of::<NormQuantParams>(),
        UniformLayout::of::<NormBitLinearParams>(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tq_planes_keep_every_byte() {
        let data: Vec<u8> = (0..3 * 54).map(|i| (i * 7 % 251) as u8).collect();
        let p = planes(GgmlType::TQ1_0, &data, 1, 768);
        assert_eq!(p.len(), 3);
        // Block 1's qs, d and qh.
        assert_eq!(&p[0][48..96], &data[54..102]);
        assert_eq!(&p[1][2..4], &data[54 + 52..54 + 54]);
        assert_eq!(&p[2][4..8], &data[54 + 48..54 + 52]);
        assert!(p.iter().all(|q| q.len() % 16 == 0));
        let data: Vec<u8> = (0..2 * 66).map(|i| (i * 5 % 251) as u8).collect();
        let p = planes(GgmlType::TQ2_0, &data, 1, 512);
        assert_eq!(&p[0][64..128], &data[66..130]);
        assert_eq!(&p[1][..4], &[data[64], data[65], data[130], data[131]]);
    }
}
