//! Row-wise ops: RMSNorm and softmax (one workgroup per row).

pub use super::super::kernels::params::{RmsNormParams, SoftmaxParams};
use super::{check, need, pipeline};
use crate::kernels::Kernel;
use crate::matmul::{grid, Dispatch};
use crate::{GpuContext, GpuError, Pooled};

/// `out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight` for `n_rows` rows of `dim`.
pub struct RmsNormOp {
    dispatch: Dispatch,
    _params: Pooled,
}

impl RmsNormOp {
    /// `x`, `out`: `(n_rows, dim)` f32 (distinct buffers); `weight`: `dim` f32.
    pub fn new(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        weight: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_rows: u32,
        dim: u32,
        eps: f32,
    ) -> Result<Self, GpuError> {
        let bytes = u64::from(n_rows) * u64::from(dim) * 4;
        need("rms_norm x", x, bytes)?;
        need("rms_norm out", out, bytes)?;
        need("rms_norm weight", weight, u64::from(dim) * 4)?;
        let (pipeline, _) = pipeline(ctx, Kernel::RmsNorm)?;
        let params = ctx.uniform(
            "rms_norm.params",
            &RmsNormParams {
                n_rows,
                dim,
                eps,
                pad0: 0,
            },
        );
        let bind_group = ctx.bind(&pipeline, &[&params, x, out, weight]);
        Ok(RmsNormOp {
            dispatch: Dispatch {
                pipeline,
                bind_group,
                workgroups: grid(n_rows, ctx.limits.max_compute_workgroups_per_dimension),
            },
            _params: params,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch.record(pass);
    }
}

/// Rows longer than this are split into chunks of this many columns, one workgroup each.
const SOFTMAX_CHUNK: u32 = 2048;

/// `out[r, :] = softmax(x[r, :] * scale)` for `n_rows` rows of `cols`.
pub struct SoftmaxOp {
    dispatches: Vec<Dispatch>,
    /// One uniform per dispatch (its mode), all with the same shape and scale.
    params: Vec<(Pooled, SoftmaxParams)>,
    _stats: wgpu::Buffer,
}

impl SoftmaxOp {
    /// `x`, `out`: `(n_rows, cols)` f32 (distinct buffers).
    pub fn new(
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_rows: u32,
        cols: u32,
        scale: f32,
    ) -> Result<Self, GpuError> {
        let bytes = u64::from(n_rows) * u64::from(cols) * 4;
        need("softmax x", x, bytes)?;
        need("softmax out", out, bytes)?;
        let (pipeline, _) = pipeline(ctx, Kernel::Softmax)?;
        let max_dim = ctx.limits.max_compute_workgroups_per_dimension;
        let n_chunks = cols.div_ceil(SOFTMAX_CHUNK);
        let split = n_chunks > 1;
        check(!split || n_rows <= max_dim, || {
            format!("softmax over {n_rows} rows of {cols}")
        })?;
        let stats = ctx.storage(
            "softmax.stats",
            if split {
                u64::from(n_rows) * u64::from(n_chunks) * 8
            } else {
                8
            },
        )?;
        let modes: &[u32] = if split { &[1, 2] } else { &[0] };
        let mut dispatches = Vec::new();
        let mut params = Vec::new();
        for &mode in modes {
            let prm = SoftmaxParams {
                n_rows,
                cols,
                scale,
                mode,
                chunk: SOFTMAX_CHUNK,
                n_chunks,
                pad0: 0,
                pad1: 0,
            };
            let u = ctx.uniform("softmax.params", &prm);
            dispatches.push(Dispatch {
                pipeline: pipeline.clone(),
                bind_group: ctx.bind(&pipeline, &[&u, x, out, &stats]),
                workgroups: if split {
                    [n_chunks, n_rows, 1]
                } else {
                    grid(n_rows, max_dim)
                },
            });
            params.push((u, prm));
        }
        Ok(SoftmaxOp {
            dispatches,
            params,
            _stats: stats,
        })
    }

    /// Change the input scale (1 / temperature) for work submitted after this call.
    pub fn set_scale(&self, ctx: &GpuContext, scale: f32) {
        for (u, prm) in &self.params {
            ctx.write(u, 0, &[SoftmaxParams { scale, ..*prm }]);
        }
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.dispatches {
            d.record(pass);
        }
    }
}
