//! BitLinear on the GPU: per-token int8 quantization of the activations, then the ternary
//! product (see [`crate::cpu::bitlinear`] for the definition and what transformers does).
//!
//! - **I2_S**: the activations are quantized into int8 records (below) and the I2_S kernels
//!   accumulate integers, applying `weight_scale / s` once.
//! - **TQ1_0, TQ2_0** (upstream llama.cpp's BitNet files): for one token (decode) the same
//!   quantization is written as the q8 records of [`crate::q8`], with `1 / s` as every
//!   block's scale ([`QuantizeActivationsOp::q8`]), and the integer-dot TQ kernel
//!   (`MatvecQ8`) sums `(c - 1) x_q` exactly per block before the block scales and
//!   `weight_scale`. For several tokens (prefill), and where the adapter decodes faster with
//!   f32 matvecs ([`crate::GpuContext::int_dot_decode`]), the activations are written back
//!   as f32 `x_q / s` (fake quantization) and the f32 TQ kernels run on that. An f32-only TQ
//!   decode pays a decode and an f32 activation load per weight, which leaves it far below
//!   the integer-dot one in weight bytes read per second.
//!
//! # The quantized activations buffer (I2_S)
//! One record per token, `record_bytes(cols)` bytes each, records back to back:
//!
//! | bytes             | what                                                          |
//! |-------------------|---------------------------------------------------------------|
//! | 0..4              | f32 `s = 127 / max(max|x|, 1e-5)` (bit-equal to the CPU's)    |
//! | 4..8              | i32 `sum(x_q)` (the fused kernels subtract it)                |
//! | 8..16             | zero                                                          |
//! | 16..16 + cols     | `x_q` as int8, value `c` at byte `16 + c`                     |
//! | .. record_bytes   | zero padding to a multiple of 16 bytes                        |
//!
//! The I2_S matvec/matmul kernels take this buffer as binding 1 ("x") of the [`MatmulOp`]
//! convention, so `MatmulOp::new(ctx, w_i2s, &xq, &y, n_tokens)` works on it directly, and one
//! quantization can feed several weights with the same input (q/k/v, gate/up). The same holds
//! for the f32 buffer of the TQ formats ([`fake_activations_bytes`]).

use std::sync::Arc;

pub use super::kernels::params::{
    FakeQuantParams, NormBitLinearParams, NormQuantParams, QuantizeParams,
};
use super::kernels::ternary::{
    self as ternary, NORM_BITLINEAR_ROWS_PER_THREAD, NORM_BITLINEAR_WORKGROUP,
};
use super::kernels::Kernel;
use super::matmul::{grid, Dispatch, MatmulOp};
use super::weights::GpuWeight;
use super::{GpuContext, GpuError, GpuFeatures, Pooled};
use crate::quant::{BitLinearInput, GgmlType};

/// The longest input `norm_bitlinear.wgsl` holds in workgroup memory (`16 * XQ_VEC4S`).
pub const NORM_BITLINEAR_MAX_DIM: u32 = 9600;

/// Bytes of a record's header (scale, sum, two zero words).
pub const RECORD_HEADER_BYTES: u64 = 16;

/// The largest row length: sums of int8 values stay exact in the f32 reduction
/// (`128 * cols <= 2^24`).
pub const MAX_COLS: u32 = 1 << 17;

/// Bytes of one token's record for rows of `cols` values.
pub fn record_bytes(cols: u32) -> u64 {
    RECORD_HEADER_BYTES + u64::from(cols.div_ceil(16)) * 16
}

/// Bytes of the quantized activations of `n_tokens` tokens.
pub fn activations_bytes(cols: u32, n_tokens: u32) -> u64 {
    record_bytes(cols) * u64::from(n_tokens)
}

/// Bytes of the fake-quantized (f32 `x_q / s`) activations of `n_tokens` rows of `cols`.
pub fn fake_activations_bytes(cols: u32, n_tokens: u32) -> u64 {
    4 * u64::from(cols) * u64::from(n_tokens)
}

/// One token's record read back: `(s, sum(x_q), x_q)`, or `None` if `record` is too short.
pub fn decode_record(record: &[u8], cols: usize) -> Option<(f32, i32, Vec<i8>)> {
    let header = record.get(..16)?;
    let s = f32::from_le_bytes(header[0..4].try_into().ok()?);
    let sum = i32::from_le_bytes(header[4..8].try_into().ok()?);
    let q = record
        .get(16..16 + cols)?
        .iter()
        .map(|&b| b as i8)
        .collect();
    Some((s, sum, q))
}

/// An activation quantization dispatch for `n_tokens` rows of `cols` f32 in `x`: int8
/// records ([`QuantizeActivationsOp::new`], for I2_S) or f32 `x_q / s`
/// ([`QuantizeActivationsOp::fake`], for TQ1_0/TQ2_0). Built once, recorded every pass.
pub struct QuantizeActivationsOp {
    pub dispatch: Dispatch,
    _params: Pooled,
}

impl QuantizeActivationsOp {
    /// Int8 records (module docs) into `xq`, at least [`activations_bytes`] bytes.
    pub fn new(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        xq: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        let layout = (Kernel::QuantizeActivations, 4, record_bytes(cols));
        Self::records(ctx, x, xq, cols, n_tokens, layout)
    }

    /// The same quantization as q8 records ([`crate::q8`]: the int8 values, then `1 / s`
    /// as every block's scale) into `xq`, at least `n_tokens * q8::record_bytes(cols)` bytes:
    /// the BitLinear input of the integer-dot TQ1_0/TQ2_0 decode (`MatvecQ8`).
    pub fn q8(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        xq: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        let layout = (
            Kernel::QuantizeActivationsQ8,
            32,
            crate::q8::record_bytes(cols),
        );
        Self::records(ctx, x, xq, cols, n_tokens, layout)
    }

    /// Records of `record` bytes per token by `kernel`, for rows of a multiple of `multiple`
    /// values.
    fn records(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        xq: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
        (kernel, multiple, record): (Kernel, u32, u64),
    ) -> Result<Self, GpuError> {
        if cols == 0 || cols % multiple != 0 || cols > MAX_COLS {
            return Err(GpuError::Unsupported(format!(
                "{} of rows of {cols} values (needs a multiple of {multiple}, at most \
                 {MAX_COLS})",
                kernel.label()
            )));
        }
        fits(xq, record * u64::from(n_tokens))?;
        let params = QuantizeParams {
            n_tokens,
            cols,
            x_stride: cols,
            record_words: (record / 4) as u32,
        };
        let u = ctx.uniform(&format!("{}.params", kernel.label()), &params);
        Self::build(ctx, kernel, u, x, xq, n_tokens)
    }

    /// F32 `x_q / s`, `(n_tokens, cols)`, into `y` (at least [`fake_activations_bytes`]).
    pub fn fake(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        if cols == 0 || cols % 4 != 0 {
            return Err(GpuError::Unsupported(format!(
                "activation quantization of rows of {cols} values (needs a multiple of 4)"
            )));
        }
        fits(y, fake_activations_bytes(cols, n_tokens))?;
        let params = FakeQuantParams {
            n_tokens,
            cols,
            x_stride: cols,
            y_stride: cols,
        };
        let u = ctx.uniform("fake_quantize_activations.params", &params);
        Self::build(ctx, Kernel::FakeQuantizeActivations, u, x, y, n_tokens)
    }

    /// One workgroup per token, bindings `(params, x, out)`.
    fn build(
        ctx: &GpuContext,
        kernel: Kernel,
        params: Pooled,
        x: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        let wg = kernel.source().map_or(256, |s| s.default_workgroup_size);
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let bind_group = ctx.bind(&pipeline, &[&params, x, out]);
        let n = ternary::workgroups(kernel, 0, n_tokens, wg, None);
        Ok(QuantizeActivationsOp {
            dispatch: Dispatch {
                pipeline: Arc::clone(&pipeline),
                bind_group,
                workgroups: grid(n, ctx.limits.max_compute_workgroups_per_dimension),
            },
            _params: params,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch.record(pass);
    }
}

/// RMSNorm of `n_rows` rows of `dim` f32 into `y`, and the int8 records of the normalized rows
/// into `xq` (the input of I2_S BitLinear products), in one dispatch.
pub struct RmsNormQuantizeOp {
    pub dispatch: Dispatch,
    _params: Pooled,
}

impl RmsNormQuantizeOp {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &GpuContext,
        src: &wgpu::Buffer,
        weight: &wgpu::Buffer,
        y: &wgpu::Buffer,
        xq: &wgpu::Buffer,
        n_rows: u32,
        dim: u32,
        eps: f32,
    ) -> Result<Self, GpuError> {
        if dim == 0 || dim % 4 != 0 || dim > MAX_COLS {
            return Err(GpuError::Unsupported(format!(
                "fused norm and quantization of rows of {dim} values (needs a multiple of 4, at \
                 most {MAX_COLS})"
            )));
        }
        let bytes = u64::from(n_rows) * u64::from(dim) * 4;
        for (what, b, need) in [
            ("input", src, bytes),
            ("output", y, bytes),
            ("weight", weight, u64::from(dim) * 4),
        ] {
            if b.size() < need {
                return Err(GpuError::TooLarge {
                    what: format!("rms_norm_quantize {what}"),
                    bytes: need,
                    limit: b.size(),
                });
            }
        }
        fits(xq, activations_bytes(dim, n_rows))?;
        let params = NormQuantParams {
            n_rows,
            dim,
            eps,
            record_words: (record_bytes(dim) / 4) as u32,
        };
        let u = ctx.uniform("rms_norm_quantize.params", &params);
        let kernel = Kernel::RmsNormQuantize;
        let wg = kernel.source().map_or(256, |s| s.default_workgroup_size);
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let bind_group = ctx.bind(&pipeline, &[&u, src, y, weight, xq]);
        Ok(RmsNormQuantizeOp {
            dispatch: Dispatch {
                pipeline: Arc::clone(&pipeline),
                bind_group,
                workgroups: grid(n_rows, ctx.limits.max_compute_workgroups_per_dimension),
            },
            _params: u,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch.record(pass);
    }
}

/// An error unless `buffer` holds at least `need` bytes.
fn fits(buffer: &wgpu::Buffer, need: u64) -> Result<(), GpuError> {
    if buffer.size() < need {
        return Err(GpuError::TooLarge {
            what: "quantized activations for the buffer given".into(),
            bytes: need,
            limit: buffer.size(),
        });
    }
    Ok(())
}

/// `y[t, :] = BitLinear(W, x[t, :])` for `n_tokens` tokens with W in I2_S, TQ1_0 or TQ2_0:
/// quantize the activations into an owned buffer (int8 records for I2_S, f32 `x_q / s` for
/// the TQ formats), then the format's matvec (one token) or matmul, which applies the weight's
/// per-tensor scale. Built once, recorded every pass (no buffers or bind groups are created
/// per pass).
pub struct BitLinearOp {
    pub quantize: QuantizeActivationsOp,
    pub matmul: MatmulOp,
    /// The quantized activations (records as in the module docs, or f32 for TQ).
    pub xq: wgpu::Buffer,
}

impl BitLinearOp {
    /// `x` holds `n_tokens` rows of `w.cols` f32; `y` receives `n_tokens` rows of `w.rows` f32.
    /// With `int_dot`, one token over TQ1_0/TQ2_0 takes the integer-dot kernel on q8 records
    /// ([`QuantizeActivationsOp::q8`]) instead of the f32 kernel on `x_q / s`.
    pub fn new(
        ctx: &GpuContext,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
        int_dot: bool,
    ) -> Result<Self, GpuError> {
        let label = format!("{}.xq", w.name);
        let input = crate::quant::bitlinear_input(w.dtype);
        let q8 = input == Some(BitLinearInput::FakeQuant)
            && int_dot
            && n_tokens == 1
            && crate::q8::has_q8_matvec(w.dtype, w.cols);
        if q8 {
            let xq = ctx.storage(&label, crate::q8::record_bytes(w.cols))?;
            let quantize = QuantizeActivationsOp::q8(ctx, x, &xq, w.cols, 1)?;
            let matmul = crate::q8::q8_matvec(ctx, w, &xq, y, false)?;
            return Ok(BitLinearOp {
                quantize,
                matmul,
                xq,
            });
        }
        let (quantize, xq) = match input {
            Some(BitLinearInput::Records) => {
                let xq = ctx.storage(&label, activations_bytes(w.cols, n_tokens))?;
                (
                    QuantizeActivationsOp::new(ctx, x, &xq, w.cols, n_tokens)?,
                    xq,
                )
            }
            Some(BitLinearInput::FakeQuant) => {
                let xq = ctx.storage(&label, fake_activations_bytes(w.cols, n_tokens))?;
                (
                    QuantizeActivationsOp::fake(ctx, x, &xq, w.cols, n_tokens)?,
                    xq,
                )
            }
            None => {
                return Err(GpuError::Unsupported(format!(
                    "BitLinear over {} weights ({}: ternary types only)",
                    w.dtype, w.name
                )))
            }
        };
        let matmul = MatmulOp::new(ctx, w, &xq, y, n_tokens)?;
        Ok(BitLinearOp {
            quantize,
            matmul,
            xq,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.quantize.record(pass);
        self.matmul.record(pass);
    }
}

/// What a [`NormBitLinearOp`] does with its products (the kernel's `MODE`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum NormBitLinearMode {
    /// Each weight's product into its own output (up to three: q, k, v).
    Separate,
    /// `y0 = relu(w0 x)^2 * (w1 x)` (BitNet's FFN).
    ReluSquaredGate,
    /// `y0 += w0 x`.
    Residual,
}

/// RMSNorm of one row, its BitLinear activation quantization and the I2_S products of up to
/// three weights with it, in one dispatch (`norm_bitlinear.wgsl`): the decode step between
/// two residual updates of BitNet. Built once, recorded every pass.
pub struct NormBitLinearOp {
    pub dispatch: Dispatch,
    _params: Pooled,
}

/// Invocations per row of the NormBitLinear kernel on this device (its `TPR`): 16, or 8 where
/// the subgroups are 8 wide, so that a row's invocations always fit one subgroup and their
/// sums take subgroup shuffles rather than workgroup memory and barriers. Of the mappings from
/// 8 to 32 invocations per row and 1 to 4 rows per invocation, 16 x 2 decodes fastest, 8 x 2
/// close behind it, 32 per row slowest.
pub fn norm_bitlinear_threads_per_row(features: &GpuFeatures) -> u32 {
    if features.subgroups && (8..16).contains(&features.subgroup_min_size) {
        8
    } else {
        16
    }
}

/// Rows one NormBitLinear workgroup computes (`WG / TPR * RPT`) with `tpr` invocations per row.
pub fn norm_bitlinear_rows_per_workgroup(tpr: u32) -> u32 {
    NORM_BITLINEAR_WORKGROUP / tpr * NORM_BITLINEAR_ROWS_PER_THREAD
}

impl NormBitLinearOp {
    /// Why the fused kernel cannot take these weights (the caller then records the norm, the
    /// quantization and the products separately), or `None` when it can.
    pub fn unsupported(
        ctx: &GpuContext,
        weights: &[&GpuWeight],
        dim: u32,
        mode: NormBitLinearMode,
    ) -> Option<String> {
        let per_wg =
            norm_bitlinear_rows_per_workgroup(norm_bitlinear_threads_per_row(&ctx.features));
        if weights.is_empty() || weights.len() > 3 {
            return Some(format!("{} weights (1 to 3)", weights.len()));
        }
        if dim == 0 || dim % 128 != 0 || dim > NORM_BITLINEAR_MAX_DIM {
            return Some(format!(
                "rows of {dim} values (a multiple of 128, at most {NORM_BITLINEAR_MAX_DIM})"
            ));
        }
        for w in weights {
            if w.dtype != GgmlType::I2_S || w.cols != dim || w.chunks.len() != 1 || w.rows == 0 {
                return Some(format!(
                    "{} ({} {}x{}, {} chunks)",
                    w.name,
                    w.dtype,
                    w.rows,
                    w.cols,
                    w.chunks.len()
                ));
            }
        }
        let ok = match mode {
            NormBitLinearMode::Separate => weights[..weights.len() - 1]
                .iter()
                .all(|w| w.rows % per_wg == 0),
            NormBitLinearMode::ReluSquaredGate => {
                weights.len() == 2 && weights[0].rows == weights[1].rows
            }
            NormBitLinearMode::Residual => weights.len() == 1,
        };
        (!ok).then(|| format!("{mode:?} over these shapes"))
    }

    /// `x`: one row of `dim` f32, `norm` its weight; `y` one output per weight (for
    /// [`NormBitLinearMode::ReluSquaredGate`] and [`NormBitLinearMode::Residual`] only the
    /// first); `spare`: two small buffers bound where a weight or output is absent.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        norm: &wgpu::Buffer,
        eps: f32,
        weights: &[&GpuWeight],
        y: &[&wgpu::Buffer],
        mode: NormBitLinearMode,
        spare: [&wgpu::Buffer; 2],
    ) -> Result<Self, GpuError> {
        let dim = weights.first().map_or(0, |w| w.cols);
        if let Some(why) = Self::unsupported(ctx, weights, dim, mode) {
            return Err(GpuError::Unsupported(format!(
                "fused norm and BitLinear: {why}"
            )));
        }
        let rows = |i: usize| weights.get(i).map_or(0, |w| w.rows);
        let scale = |i: usize| weights.get(i).map_or(1.0, |w| w.scale);
        let params = NormBitLinearParams {
            dim,
            eps,
            rows0: rows(0),
            rows1: rows(1),
            rows2: rows(2),
            scale0: scale(0),
            scale1: scale(1),
            scale2: scale(2),
        };
        for (what, b, need) in [
            ("input", x, u64::from(dim) * 4),
            ("norm weight", norm, u64::from(dim) * 4),
        ] {
            if b.size() < need {
                return Err(GpuError::TooLarge {
                    what: format!("norm_bitlinear {what}"),
                    bytes: need,
                    limit: b.size(),
                });
            }
        }
        let code = |i: usize| weights.get(i).unwrap_or(&weights[0]).chunks[0].planes[0].clone();
        let (w0, w1, w2) = (code(0), code(1), code(2));
        let out = |i: usize| y.get(i).copied();
        let (Some(y0), y1, y2) = (out(0), out(1), out(2)) else {
            return Err(GpuError::Validation(
                "norm_bitlinear without an output".into(),
            ));
        };
        let (y1, y2) = match mode {
            NormBitLinearMode::Separate => (y1.unwrap_or(spare[0]), y2.unwrap_or(spare[1])),
            _ => (spare[0], spare[1]),
        };
        let tpr = norm_bitlinear_threads_per_row(&ctx.features);
        let kernel = Kernel::NormBitLinear(
            match mode {
                NormBitLinearMode::Separate => 0,
                NormBitLinearMode::ReluSquaredGate => 1,
                NormBitLinearMode::Residual => 2,
            },
            tpr,
        );
        let pipeline = ctx.kernel(kernel, Some(NORM_BITLINEAR_WORKGROUP))?;
        let u = ctx.uniform("norm_bitlinear.params", &params);
        let bind_group = ctx.bind(&pipeline, &[&u, x, norm, &w0, &w1, &w2, y0, y1, y2]);
        let per_wg = norm_bitlinear_rows_per_workgroup(tpr);
        let n = match mode {
            NormBitLinearMode::Separate => weights.iter().map(|w| w.rows.div_ceil(per_wg)).sum(),
            _ => rows(0).div_ceil(per_wg),
        };
        Ok(NormBitLinearOp {
            dispatch: Dispatch {
                pipeline: Arc::clone(&pipeline),
                bind_group,
                workgroups: grid(n, ctx.limits.max_compute_workgroups_per_dimension),
            },
            _params: u,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch.record(pass);
    }
}
