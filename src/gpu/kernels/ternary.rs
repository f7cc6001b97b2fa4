//! Ternary formats: I2_S as BitLinear (int8 activations, integer accumulation), and upstream
//! ggml's TQ1_0 and TQ2_0 (f32 activations; for BitLinear the activations are quantized and
//! written back as f32 first).
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
//! | format | binding 3                                 | binding 4              |
//! |--------|-------------------------------------------|------------------------|
//! | I2_S   | codes, 32 B per 128 weights               |                        |
//! | TQ2_0  | `qs`, 64 B (16 words) per block           | `d` f16, 2 B per block |
//! | TQ1_0  | `qs` then `qh`, 52 B (13 words) per block | `d` f16, 2 B per block |
//!
//! # Dispatch
//! - Matvec: `TPR` invocations per row; I2_S: [`I2S_MATVEC_THREADS_PER_ROW`], each invocation
//!   serving [`I2S_MATVEC_ROWS_PER_THREAD`] rows (`WG / TPR * RPT` rows per workgroup), each
//!   invocation reading 16-byte vec4s; TQ: [`TQ_MATVEC_THREADS_PER_ROW`] (`WG / TPR` rows per
//!   workgroup), each invocation reading u32 words, so that neighbouring invocations meet
//!   neighbouring activations.
//! - Matmul: one invocation per row, `WG` rows by [`MATMUL_TILE_TOKENS`] tokens per workgroup,
//!   token tiles fastest.
//! - QuantizeActivations, FakeQuantizeActivations: one workgroup per token.

use super::{Kernel, KernelSource};
use crate::quant::GgmlType;

/// Invocations per I2_S matvec row (`override TPR` in `matvec_i2s.wgsl`).
pub const I2S_MATVEC_THREADS_PER_ROW: u32 = 16;
/// Rows each I2_S matvec invocation serves (`override RPT` in `matvec_i2s.wgsl`).
pub const I2S_MATVEC_ROWS_PER_THREAD: u32 = 2;
/// Invocations per TQ1_0/TQ2_0 matvec row (`override TPR` in `matvec_ternary.wgsl`).
pub const TQ_MATVEC_THREADS_PER_ROW: u32 = 32;
/// Tokens per matmul tile (`const TT` in `matmul_i2s.wgsl`/`matmul_ternary.wgsl`).
pub const MATMUL_TILE_TOKENS: u32 = 8;

pub const FILES: &[(&str, &str)] = &[
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
    const A: &str = "activation_quant.wgsl";
    const R: &str = "activation_record.wgsl";
    let (files, default_workgroup_size): (&'static [&'static str], u32) = match kernel {
        Kernel::QuantizeActivations => (&[A, R, "quantize_activations.wgsl"], 256),
        Kernel::FakeQuantizeActivations => (&[A, "fake_quantize_activations.wgsl"], 256),
        Kernel::RmsNormQuantize => (&[A, R, "rms_norm_quantize.wgsl"], 256),
        Kernel::NormBitLinear(..) => (
            &[A, "quant/i2s.wgsl", "norm_bitlinear.wgsl"],
            crate::gpu::bitlinear::NORM_BITLINEAR_WORKGROUP,
        ),
        Kernel::Matvec(I2_S) => (&[P, "quant/i2s.wgsl", "matvec_i2s.wgsl"], 64),
        Kernel::Matmul(I2_S) => (&[P, "quant/i2s.wgsl", "matmul_i2s.wgsl"], 64),
        Kernel::Matvec(TQ1_0) => (&[P, C, "quant/tq1_0.wgsl", "matvec_ternary.wgsl"], 64),
        Kernel::Matmul(TQ1_0) => (&[P, C, "quant/tq1_0.wgsl", "matmul_ternary.wgsl"], 64),
        Kernel::Matvec(TQ2_0) => (&[P, C, "quant/tq2_0.wgsl", "matvec_ternary.wgsl"], 64),
        Kernel::Matmul(TQ2_0) => (&[P, C, "quant/tq2_0.wgsl", "matmul_ternary.wgsl"], 64),
        _ => return None,
    };
    Some(KernelSource {
        files,
        entry: "main",
        default_workgroup_size,
    })
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
            let mut qsh = Vec::with_capacity(blocks.len() * 52);
            let mut d = Vec::with_capacity(blocks.len() * 2);
            for b in blocks {
                qsh.extend_from_slice(&b[..52]);
                d.extend_from_slice(&b[52..54]);
            }
            vec![pad16(qsh), pad16(d)]
        }
        _ => vec![pad16(data.to_vec())],
    }
}

/// Workgroups for `rows` rows (of one chunk) and `n_tokens` tokens.
pub fn workgroups(kernel: Kernel, rows: u32, n_tokens: u32, workgroup_size: u32) -> u32 {
    let wg = workgroup_size.max(1);
    match kernel {
        Kernel::Matvec(GgmlType::I2_S) => {
            rows.div_ceil((wg / I2S_MATVEC_THREADS_PER_ROW).max(1) * I2S_MATVEC_ROWS_PER_THREAD)
        }
        Kernel::Matvec(_) => rows.div_ceil((wg / TQ_MATVEC_THREADS_PER_ROW).max(1)),
        Kernel::Matmul(_) => rows.div_ceil(wg) * n_tokens.div_ceil(MATMUL_TILE_TOKENS),
        Kernel::QuantizeActivations | Kernel::FakeQuantizeActivations => n_tokens,
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
        assert_eq!(p.len(), 2);
        assert_eq!(&p[0][52..104], &data[54..106]);
        assert_eq!(&p[1][2..4], &data[54 + 52..54 + 54]);
        assert!(p.iter().all(|q| q.len() % 16 == 0));
        let data: Vec<u8> = (0..2 * 66).map(|i| (i * 5 % 251) as u8).collect();
        let p = planes(GgmlType::TQ2_0, &data, 1, 512);
        assert_eq!(&p[0][64..128], &data[66..130]);
        assert_eq!(&p[1][..4], &[data[64], data[65], data[130], data[131]]);
    }
}
