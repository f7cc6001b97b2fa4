//! Element-wise ops: ReLU² (optionally gated), SiLU- and GELU-gated products and residual add,
//! each out of place or in place; products and sums by columns; soft caps.

use super::{check, need, pipeline};
use crate::kernels::Kernel;
use crate::matmul::{grid, Dispatch};
use crate::{GpuContext, GpuError, Pooled};

pub use super::super::kernels::params::ElementwiseParams;
pub use tritium_core::ops::Elementwise;

fn kernel(f: Elementwise) -> Kernel {
    match f {
        Elementwise::Add => Kernel::Add,
        Elementwise::SiluMul => Kernel::SiluMul,
        Elementwise::ReluSquared | Elementwise::ReluSquaredMul => Kernel::ReluSquared,
        Elementwise::GeluMul => Kernel::GeluMul,
    }
}

/// `out[i] = f(first[i], second[i])` over `n` f32, with `first` = `out` when in place.
pub struct ElementwiseOp {
    dispatch: Dispatch,
    _params: Pooled,
    _placeholder: Option<wgpu::Buffer>,
}

impl ElementwiseOp {
    /// `first: None` computes in place (`out` is the first operand). `second` is required by
    /// every function but [`Elementwise::ReluSquared`], which ignores it. `out` must differ
    /// from the other buffers.
    pub fn new(
        ctx: &GpuContext,
        f: Elementwise,
        out: &wgpu::Buffer,
        first: Option<&wgpu::Buffer>,
        second: Option<&wgpu::Buffer>,
        n: u32,
    ) -> Result<Self, GpuError> {
        let bytes = u64::from(n) * 4;
        need("elementwise out", out, bytes)?;
        if let Some(a) = first {
            need("elementwise first operand", a, bytes)?;
        }
        let second = if f.takes_second() {
            let b = second.ok_or_else(|| {
                GpuError::Unsupported(format!("{f:?} without its second operand"))
            })?;
            need("elementwise second operand", b, bytes)?;
            Some(b)
        } else {
            None
        };
        check(n > 0, || format!("{f:?} over zero elements"))?;
        let (pipeline, wg) = pipeline(ctx, kernel(f))?;
        let params = ctx.uniform(
            "elementwise.params",
            &ElementwiseParams {
                n,
                in_place: u32::from(first.is_none()),
                gated: u32::from(f == Elementwise::ReluSquaredMul),
                cols: 0,
                ..Default::default()
            },
        );
        // Unused bindings still need a buffer, one that is not `out`.
        let placeholder = match (first, second) {
            (None, None) => Some(ctx.storage("elementwise.unused", 4)?),
            _ => None,
        };
        let any = first.or(second).or(placeholder.as_ref()).unwrap_or(out);
        let bind_group = ctx.bind(
            &pipeline,
            &[&params, first.unwrap_or(any), out, second.unwrap_or(any)],
        );
        Ok(Self::dispatched(
            ctx,
            pipeline,
            wg,
            bind_group,
            n,
            params,
            placeholder,
        ))
    }

    /// The op over `n` values in workgroups of `wg`, holding its uniform (and placeholder).
    fn dispatched(
        ctx: &GpuContext,
        pipeline: std::sync::Arc<wgpu::ComputePipeline>,
        wg: u32,
        bind_group: wgpu::BindGroup,
        n: u32,
        params: Pooled,
        placeholder: Option<wgpu::Buffer>,
    ) -> Self {
        ElementwiseOp {
            dispatch: Dispatch {
                pipeline,
                bind_group,
                workgroups: grid(
                    n.div_ceil(wg),
                    ctx.limits.max_compute_workgroups_per_dimension,
                ),
            },
            _params: params,
            _placeholder: placeholder,
        }
    }

    /// `out[r, c] += bias[c]` over `rows` rows of `cols` (the add kernel with its second
    /// operand repeated per row). `out` must differ from `bias`.
    pub fn add_bias(
        ctx: &GpuContext,
        out: &wgpu::Buffer,
        bias: &wgpu::Buffer,
        rows: u32,
        cols: u32,
    ) -> Result<Self, GpuError> {
        Self::by_columns(ctx, Kernel::Add, out, bias, rows, cols)
    }

    /// `out[r, c] *= scale[c]` over `rows` rows of `cols`. `out` must differ from `scale`.
    pub fn scale_columns(
        ctx: &GpuContext,
        out: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        rows: u32,
        cols: u32,
    ) -> Result<Self, GpuError> {
        Self::by_columns(ctx, Kernel::Mul, out, scale, rows, cols)
    }

    /// `kernel` in place over `rows` rows of `cols`, its second operand a row of `cols`.
    fn by_columns(
        ctx: &GpuContext,
        kernel: Kernel,
        out: &wgpu::Buffer,
        row: &wgpu::Buffer,
        rows: u32,
        cols: u32,
    ) -> Result<Self, GpuError> {
        let n = rows.checked_mul(cols).ok_or_else(|| {
            GpuError::Unsupported(format!("{kernel:?} over {rows}x{cols} values"))
        })?;
        need("elementwise out", out, u64::from(n) * 4)?;
        need("elementwise row", row, u64::from(cols) * 4)?;
        check(n > 0, || format!("{kernel:?} over zero elements"))?;
        let (pipeline, wg) = pipeline(ctx, kernel)?;
        let params = ctx.uniform(
            "elementwise.params",
            &ElementwiseParams {
                n,
                in_place: 1,
                gated: 0,
                cols,
                ..Default::default()
            },
        );
        let bind_group = ctx.bind(&pipeline, &[&params, row, out, row]);
        Ok(Self::dispatched(
            ctx, pipeline, wg, bind_group, n, params, None,
        ))
    }

    /// `x[i] = cap * tanh(x[i] / cap)` over `n` values, in place.
    pub fn softcap(ctx: &GpuContext, x: &wgpu::Buffer, n: u32, cap: f32) -> Result<Self, GpuError> {
        need("softcap x", x, u64::from(n) * 4)?;
        check(n > 0, || "a soft cap over zero elements".into())?;
        check(cap > 0.0 && cap.is_finite(), || {
            format!("a soft cap of {cap}")
        })?;
        let (pipeline, wg) = pipeline(ctx, Kernel::Softcap)?;
        let params = ctx.uniform(
            "elementwise.params",
            &ElementwiseParams {
                n,
                in_place: 1,
                scalar: cap,
                ..Default::default()
            },
        );
        // The unused bindings take a buffer of their own (no other may alias `x`).
        let spare = ctx.storage("softcap.unused", 4)?;
        let bind_group = ctx.bind(&pipeline, &[&params, &spare, x, &spare]);
        Ok(Self::dispatched(
            ctx,
            pipeline,
            wg,
            bind_group,
            n,
            params,
            Some(spare),
        ))
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch.record(pass);
    }
}
