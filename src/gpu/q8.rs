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
//! backend keeps the records of a tensor while it is unchanged (src/backend/gpu).

use std::sync::Arc;

use super::bitlinear::NormQuantParams;
use super::kernels::{kquants, q8, Kernel};
use super::matmul::{grid, Dispatch, MatmulOp};
use super::weights::GpuWeight;
use super::{GpuContext, GpuError, Pooled};
use crate::gpu_uniform;
use crate::quant::GgmlType;

gpu_uniform! {
    /// Parameters of the QuantizeQ8 kernel.
    pub struct Q8Params {
        /// Tokens.
        pub n_tokens: u32,
        /// Values per token (a multiple of 32).
        pub cols: u32,
        /// Input row length: `x[t * x_stride + col]` (a multiple of 4).
        pub x_stride: u32,
        /// u32 words per record (`record_bytes(cols) / 4`).
        pub record_words: u32,
    }
}

/// Bytes of one token's record for rows of `cols` values (a multiple of 32).
pub fn record_bytes(cols: u32) -> u64 {
    u64::from(cols) + u64::from(cols.div_ceil(128)) * 16
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
        Self::build(ctx, x, None, xq, cols, n_tokens)
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
        Self::build(ctx, gate, Some(up), xq, cols, n_tokens)
    }

    fn build(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        up: Option<&wgpu::Buffer>,
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
        };
        let u = ctx.uniform("quantize_q8.params", &params);
        let wg = q8::QUANTIZE_WG;
        let kernel = match up {
            None => Kernel::QuantizeQ8,
            Some(_) => Kernel::SiluMulQuantizeQ8,
        };
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let mut buffers = vec![&u, x, xq];
        buffers.extend(up);
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
    let wg = match w.dtype {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
            kquants::matvec_q8_workgroup_size(w.dtype, w.bytes, w.cols)
        }
        _ => kernel.source().map_or(64, |s| s.default_workgroup_size),
    };
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
    a: &GpuWeight,
    b: &GpuWeight,
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
    let wg = kquants::matvec_q8_workgroup_size(a.dtype, a.bytes + b.bytes, a.cols);
    let span = kquants::matvec_q8_span(kernel, a.bytes + b.bytes, a.cols);
    MatmulOp::pair(ctx, (kernel, wg, span), a, b, xq, ya, yb)
}
