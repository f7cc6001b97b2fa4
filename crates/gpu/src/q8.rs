//! Integer-dot decode: activations quantized once per token to int8 blocks of 32
//! ([`QuantizeQ8Op`], the arithmetic of [`crate::quant::q8dot::quantize_q8`]), then the
//! `MatvecQ8` kernel of the weight's format ([`q8_matvec`]), which accumulates `dot4I8Packed`
//! products and applies each group's f32 scales to its exact integer sum, as llama.cpp's
//! `ggml_vec_dot_<type>_q8_1` does. After an RMSNorm the quantization is fused into the norm
//! ([`RmsNormQuantizeQ8Op`]). The f32 matvec stays for prefill and as the fallback.
//!
//! # The record buffer
//! One record per token, [`record_bytes`] each, back to back:
//!
//! | bytes                       | what                                                 |
//! |-----------------------------|------------------------------------------------------|
//! | 0 .. cols                   | `x_q` as int8, value `c` at byte `c`                 |
//! | cols .. cols + 4 cols/32    | f32 `d` of each block of 32 values                   |
//! | .. record_bytes             | zero padding to a multiple of 16 bytes               |
//!
//! Several products with the same input (q/k/v, gate/up) share one quantization: the GPU
//! backend keeps the records of a tensor while it is unchanged (crates/engine/src/backend/gpu).

use std::sync::Arc;

use super::kernels::params::NormQuantParams;
pub use super::kernels::params::Q8Params;
use super::kernels::{kquants, q8, Kernel};
use super::matmul::{grid, Dispatch, MatmulOp};
use super::weights::GpuWeight;
use super::{GpuContext, GpuError, Pooled};
use crate::quant::{Family, GgmlType};

/// Bytes of one token's record for rows of `cols` values (a multiple of 32).
pub fn record_bytes(cols: u32) -> u64 {
    u64::from(cols) + u64::from(cols.div_ceil(128)) * 16
}

/// Bytes of one token's norm record for rows of `cols` values (quant/q8.wgsl: the record of
/// `x * w`, then the sums of squares of `x` per block of 32 padded to 16 bytes, then 16 bytes
/// whose first f32 is the norm's eps).
pub fn norm_record_bytes(cols: u32) -> u64 {
    record_bytes(cols) + u64::from(cols.div_ceil(128)) * 16 + 16
}

/// A norm record buffer's first contents: zeros, and the norm's `eps` in its place (the
/// products never write it; [`q8_matvec_add_norm`] writes the rest every pass).
pub fn norm_record_init(cols: u32, eps: f32) -> Vec<u8> {
    let mut v = vec![0u8; norm_record_bytes(cols) as usize];
    let at = v.len() - 16;
    v[at..at + 4].copy_from_slice(&eps.to_le_bytes());
    v
}

/// Whether the integer-dot decode kernel exists for `dtype` and rows of `cols`.
pub fn has_q8_matvec(dtype: GgmlType, cols: u32) -> bool {
    Kernel::MatvecQ8(dtype).source().is_some()
        && dtype
            .block()
            .is_some_and(|b| u64::from(cols) % b.block_elems == 0)
        && cols % 32 == 0
        && cols > 0
}

/// One token's record read back: `(x_q, d)`, or `None` if `record` is too short.
pub fn decode_record(record: &[u8], cols: usize) -> Option<(Vec<i8>, Vec<f32>)> {
    let q = record.get(..cols)?.iter().map(|&b| b as i8).collect();
    let d = record
        .get(cols..cols + cols / 8)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((q, d))
}

/// The QuantizeQ8 dispatch for `n_tokens` rows of `cols` f32, built once, recorded every pass.
pub struct QuantizeQ8Op {
    pub dispatch: Dispatch,
    _params: Pooled,
}

impl QuantizeQ8Op {
    /// Records into `xq` (at least `n_tokens * record_bytes(cols)` bytes).
    pub fn new(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        xq: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        Self::build(ctx, x, None, None, xq, cols, n_tokens)
    }

    /// `gate = silu(gate) * up` (the SiluMul elementwise op, bit for bit), then the records
    /// of the product into `xq`, in one dispatch.
    pub fn silu_mul(
        ctx: &GpuContext,
        gate: &wgpu::Buffer,
        up: &wgpu::Buffer,
        xq: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        Self::build(ctx, gate, Some(up), None, xq, cols, n_tokens)
    }

    /// `gate = silu(inv gate) * (inv up)`, with `inv` the factor of the RMSNorm whose norm
    /// record `norm` (rows of `norm_cols`: [`norm_record_bytes`]) gate and up are the
    /// products of, and the records of that product into `xq`, in one dispatch (one token):
    /// the gated FFN after [`q8_matvec_add_norm`], whose norm has no dispatch of its own.
    pub fn silu_mul_norm(
        ctx: &GpuContext,
        (gate, up): (&wgpu::Buffer, &wgpu::Buffer),
        (norm, norm_cols): (&wgpu::Buffer, u32),
        xq: &wgpu::Buffer,
        cols: u32,
    ) -> Result<Self, GpuError> {
        if norm_cols == 0 || norm_cols % 32 != 0 {
            return Err(GpuError::Unsupported(format!(
                "a norm record of rows of {norm_cols} values (needs a multiple of 32)"
            )));
        }
        check_norm_record(norm, norm_cols)?;
        Self::build(ctx, gate, Some(up), Some((norm, norm_cols)), xq, cols, 1)
    }

    fn build(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        up: Option<&wgpu::Buffer>,
        norm: Option<(&wgpu::Buffer, u32)>,
        xq: &wgpu::Buffer,
        cols: u32,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        if cols == 0 || cols % 32 != 0 {
            return Err(GpuError::Unsupported(format!(
                "int8 activations of rows of {cols} values (needs a multiple of 32)"
            )));
        }
        let need = record_bytes(cols) * u64::from(n_tokens);
        let have = u64::from(cols) * 4 * u64::from(n_tokens);
        let inputs = [("records", xq, need), ("input", x, have)];
        let gated = up.map(|u| ("up", u, have));
        for (what, b, n) in inputs.into_iter().chain(gated) {
            if b.size() < n {
                return Err(GpuError::TooLarge {
                    what: format!("quantize_q8 {what}"),
                    bytes: n,
                    limit: b.size(),
                });
            }
        }
        let params = Q8Params {
            n_tokens,
            cols,
            x_stride: cols,
            record_words: (record_bytes(cols) / 4) as u32,
            norm_cols: norm.map_or(0, |(_, c)| c),
            ..Default::default()
        };
        let u = ctx.uniform("quantize_q8.params", &params);
        let wg = q8::QUANTIZE_WG;
        let kernel = match (up, norm) {
            (None, _) => Kernel::QuantizeQ8,
            (Some(_), None) => Kernel::SiluMulQuantizeQ8,
            (Some(_), Some(_)) => Kernel::SiluMulQuantizeQ8Norm,
        };
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let mut buffers = vec![&u, x, xq];
        buffers.extend(up);
        buffers.extend(norm.map(|(b, _)| b));
        let bind_group = ctx.bind(&pipeline, &buffers);
        let n = q8::workgroups(cols, n_tokens, wg);
        Ok(QuantizeQ8Op {
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

/// RMSNorm of `n_rows` rows of `dim` f32 into `y`, and the q8 records of `y` into `xq`, in one
/// dispatch (`rms_norm_quantize_q8.wgsl`): the records are [`QuantizeQ8Op`]'s of `y`, bit for
/// bit. Built once, recorded every pass.
pub struct RmsNormQuantizeQ8Op {
    pub dispatch: Dispatch,
    _params: Pooled,
}

impl RmsNormQuantizeQ8Op {
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
        if dim == 0 || dim % 32 != 0 {
            return Err(GpuError::Unsupported(format!(
                "fused norm and q8 quantization of rows of {dim} values (needs a multiple of 32)"
            )));
        }
        let bytes = u64::from(n_rows) * u64::from(dim) * 4;
        for (what, b, need) in [
            ("input", src, bytes),
            ("output", y, bytes),
            ("weight", weight, u64::from(dim) * 4),
            ("records", xq, record_bytes(dim) * u64::from(n_rows)),
        ] {
            if b.size() < need {
                return Err(GpuError::TooLarge {
                    what: format!("rms_norm_quantize_q8 {what}"),
                    bytes: need,
                    limit: b.size(),
                });
            }
        }
        let params = NormQuantParams {
            n_rows,
            dim,
            eps,
            record_words: (record_bytes(dim) / 4) as u32,
        };
        let u = ctx.uniform("rms_norm_quantize_q8.params", &params);
        let kernel = Kernel::RmsNormQuantizeQ8;
        let wg = kernel.source().map_or(256, |s| s.default_workgroup_size);
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let bind_group = ctx.bind(&pipeline, &[&u, src, y, weight, xq]);
        Ok(RmsNormQuantizeQ8Op {
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

fn check_norm_record(xq: &wgpu::Buffer, cols: u32) -> Result<(), GpuError> {
    let need = norm_record_bytes(cols);
    if xq.size() < need {
        return Err(GpuError::TooLarge {
            what: "norm record".into(),
            bytes: need,
            limit: xq.size(),
        });
    }
    Ok(())
}

/// The integer-dot matvec's workgroup size for `kernel` over `bytes` of `dtype` weights with
/// rows of `cols` (K-quants: by shape; legacy: the kernel's; public for
/// tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn q8_workgroup_size(kernel: Kernel, dtype: GgmlType, bytes: u64, cols: u32) -> u32 {
    match crate::quant::kernels(dtype).map(|k| k.family) {
        Some(Family::KQuant(tuning)) => kquants::matvec_q8_workgroup_size(&tuning, bytes, cols),
        _ => kernel.source().map_or(64, |s| s.default_workgroup_size),
    }
}

/// The workgroup size of [`Kernel::MatvecQ8AddNorm`] over `dtype` weights with rows of `cols`
/// on a device with `limits` (public for tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn add_norm_workgroup_size(
    kernel: Kernel,
    dtype: GgmlType,
    cols: u32,
    limits: &crate::GpuLimits,
) -> u32 {
    match crate::quant::kernels(dtype).map(|k| k.family) {
        Some(Family::KQuant(_)) => kquants::add_norm_workgroup_size(
            cols,
            limits.max_compute_invocations_per_workgroup,
            limits.max_compute_workgroup_storage_size,
        ),
        _ => kernel.source().map_or(256, |s| s.default_workgroup_size),
    }
}

/// Whether [`q8_matvec_add_norm`] takes `w`: a format with the kernel, rows of whole q8
/// blocks (32 rows, the norm's values), one chunk.
pub fn can_add_norm(w: &GpuWeight) -> bool {
    has_q8_matvec(w.dtype, w.cols)
        && Kernel::MatvecQ8AddNorm(w.dtype).source().is_some()
        && w.rows % kquants::ADD_NORM_ROWS == 0
        && w.rows > 0
        && w.chunks.len() == 1
}

/// `y += W x` for one token from the records `xq` of `x` (the residual add of
/// [`q8_matvec`] with `accumulate`), and the norm record of the new `y` for an RMSNorm of
/// weight `norm_w` into `norm_out` ([`norm_record_bytes`] of `W`'s rows, its eps word already
/// there: [`norm_record_init`]), in one dispatch ([`Kernel::MatvecQ8AddNorm`]). Check
/// [`can_add_norm`] first.
pub fn q8_matvec_add_norm(
    ctx: &GpuContext,
    w: &GpuWeight,
    xq: &wgpu::Buffer,
    y: &wgpu::Buffer,
    norm_w: &wgpu::Buffer,
    norm_out: &wgpu::Buffer,
) -> Result<MatmulOp, GpuError> {
    if !can_add_norm(w) {
        return Err(GpuError::Unsupported(format!(
            "the residual add with the next norm's record after {} ({} {}x{}, {} chunks)",
            w.name,
            w.dtype,
            w.rows,
            w.cols,
            w.chunks.len()
        )));
    }
    let rows = u64::from(w.rows);
    for (what, b, need) in [("residual", y, rows * 4), ("norm weight", norm_w, rows * 4)] {
        if b.size() < need {
            return Err(GpuError::TooLarge {
                what: format!("add_norm {what}"),
                bytes: need,
                limit: b.size(),
            });
        }
    }
    check_norm_record(norm_out, w.rows)?;
    let kernel = Kernel::MatvecQ8AddNorm(w.dtype);
    let wg = add_norm_workgroup_size(kernel, w.dtype, w.cols, &ctx.limits);
    let span = kquants::matvec_q8_span(kernel, w.bytes, w.cols);
    let extra = [
        (ADD_NORM_WEIGHT_BINDING, norm_w),
        (ADD_NORM_OUTPUT_BINDING, norm_out),
    ];
    MatmulOp::spanned_with(ctx, (kernel, wg, span), w, xq, y, 1, &extra)
}

/// Bindings of the norm's weight and the norm record in [`Kernel::MatvecQ8AddNorm`]
/// (`q8_add_norm.wgsl`).
pub const ADD_NORM_WEIGHT_BINDING: u32 = 13;
pub const ADD_NORM_OUTPUT_BINDING: u32 = 14;

/// `y = W x` for one token from the records `xq` of `x` (see [`has_q8_matvec`]), or with
/// `accumulate` `y += W x` (a residual add in the same dispatch).
pub fn q8_matvec(
    ctx: &GpuContext,
    w: &GpuWeight,
    xq: &wgpu::Buffer,
    y: &wgpu::Buffer,
    accumulate: bool,
) -> Result<MatmulOp, GpuError> {
    if !has_q8_matvec(w.dtype, w.cols) {
        return Err(GpuError::Unsupported(format!(
            "integer-dot matvec of {} with {} columns",
            w.dtype, w.cols
        )));
    }
    let kernel = if accumulate {
        Kernel::MatvecQ8Add(w.dtype)
    } else {
        Kernel::MatvecQ8(w.dtype)
    };
    let wg = q8_workgroup_size(kernel, w.dtype, w.bytes, w.cols);
    MatmulOp::with_kernel(ctx, kernel, wg, w, xq, y, 1)
}

/// Whether [`q8_matvec_pair`] takes `a` and `b`: the same K-quant format and row length, each
/// in one chunk, `a`'s rows a multiple of the kernel's rows per workgroup.
pub fn can_pair(a: &GpuWeight, b: &GpuWeight) -> bool {
    a.dtype == b.dtype
        && a.cols == b.cols
        && Kernel::MatvecQ8Pair(a.dtype).source().is_some()
        && has_q8_matvec(a.dtype, a.cols)
        && a.chunks.len() == 1
        && b.chunks.len() == 1
        && a.rows % kquants::MATVEC_ROWS == 0
        && a.rows.checked_add(b.rows).is_some()
}

/// `ya = A x` and `yb = B x` for one token from the records `xq` of `x`, in one dispatch
/// ([`Kernel::MatvecQ8Pair`]; each row's arithmetic is [`q8_matvec`]'s, so the outputs are
/// the same bits). Check [`can_pair`] first.
pub fn q8_matvec_pair(
    ctx: &GpuContext,
    (a, b): (&GpuWeight, &GpuWeight),
    xq: &wgpu::Buffer,
    ya: &wgpu::Buffer,
    yb: &wgpu::Buffer,
) -> Result<MatmulOp, GpuError> {
    if !can_pair(a, b) {
        return Err(GpuError::Unsupported(format!(
            "one integer-dot dispatch for {} ({} {}x{}) and {} ({} {}x{})",
            a.name, a.dtype, a.rows, a.cols, b.name, b.dtype, b.rows, b.cols
        )));
    }
    let kernel = Kernel::MatvecQ8Pair(a.dtype);
    let wg = q8_workgroup_size(kernel, a.dtype, a.bytes + b.bytes, a.cols);
    let span = kquants::matvec_q8_span(kernel, a.bytes + b.bytes, a.cols);
    MatmulOp::pair(ctx, (kernel, wg, span), a, b, xq, ya, yb)
}
