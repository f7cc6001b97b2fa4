//! Matrix products over weights in any format: one token (matvec, decode) or several (matmul,
//! prefill). A weight split into chunks is handled by one dispatch per chunk, each writing its
//! own rows of the output.

use std::sync::Arc;

use super::kernels::{kquants, legacy, ternary, Kernel};
use super::weights::GpuWeight;
use super::{GpuContext, GpuError, Pooled};
use crate::gpu_uniform;
use crate::quant::GgmlType;

gpu_uniform! {
    /// Parameters of every matvec/matmul kernel.
    pub struct MatmulParams {
        /// Rows of this chunk.
        pub rows: u32,
        /// Row length (input features).
        pub cols: u32,
        /// Tokens in the batch (1 for matvec).
        pub n_tokens: u32,
        /// Index of this chunk's first row in the output.
        pub row_offset: u32,
        /// Output row length (all rows of the weight): `y[t * y_stride + row]`.
        pub y_stride: u32,
        /// Input row length: `x[t * x_stride + col]`.
        pub x_stride: u32,
        /// Per-tensor weight scale ([`GpuWeight::scale`]: applied by I2_S, TQ1_0, TQ2_0).
        pub weight_scale: f32,
        /// The pair kernels ([`crate::gpu::kernels::Kernel::MatvecQ8Pair`]): the first
        /// weight's rows; 0 elsewhere.
        pub split: u32,
    }
}

/// Workgroup counts for `n` workgroups, folded into two dimensions when `n` exceeds the
/// per-dimension limit (shaders flatten with `flat_workgroup` from common.wgsl).
pub fn grid(n: u32, max_per_dim: u32) -> [u32; 3] {
    let max = max_per_dim.max(1);
    if n <= max {
        [n.max(1), 1, 1]
    } else {
        [max, n.div_ceil(max), 1]
    }
}

/// One dispatch, ready to record.
pub struct Dispatch {
    pub pipeline: Arc<wgpu::ComputePipeline>,
    pub bind_group: wgpu::BindGroup,
    pub workgroups: [u32; 3],
}

impl Dispatch {
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.workgroups[0], self.workgroups[1], self.workgroups[2]);
    }
}

/// `y[t, :] = W x[t, :]` for `n_tokens` tokens, built once and recorded every forward pass.
pub struct MatmulOp {
    pub dispatches: Vec<Dispatch>,
    _uniforms: Vec<Pooled>,
}

/// The legacy matvec's workgroup on CPU adapters: 4 invocations (one SIMD group of
/// SwiftShader), 16 rows each, so 64 rows share each staged piece of x. In the
/// browser WebGPU zero-initializes workgroup memory at the start of every workgroup, and
/// SwiftShader does that in every group of 4 invocations, element by element, then waits at a
/// barrier: with 32-wide workgroups of one row per invocation that cost as much as the product
/// itself. SmolLM2 Q4_1 on SwiftShader, GPU time per decoded token: 533 ms in the browser and
/// 342 natively before, 150 and 145 after (with the attention and reduction workgroups of
/// src/gpu/ops shaped the same way).
pub const SOFTWARE_MATVEC_WG: u32 = 4;

/// The workgroup size of `kernel` on this adapter, `wg` where nothing else applies. On a CPU
/// adapter ([`GpuContext::is_software`]) the cost grows with the invocations a workgroup holds
/// rather than with the work: the legacy matvec takes [`SOFTWARE_MATVEC_WG`], the legacy
/// matmul 16-token tiles.
fn adapter_workgroup_size(ctx: &GpuContext, kernel: Kernel, wg: u32) -> u32 {
    if !ctx.is_software() {
        return wg;
    }
    match kernel {
        Kernel::Matvec(t) | Kernel::MatvecAdd(t) if legacy::is_legacy(t) => SOFTWARE_MATVEC_WG,
        Kernel::Matmul(t) if legacy::is_legacy(t) => 64,
        _ => wg,
    }
}

/// Whether products of several tokens over `dtype` take [`Kernel::MatmulCoop`] on this device:
/// it has the cooperative matrices (and f16) and 32-wide subgroups, which the kernel's split
/// of a tile among its 8 subgroups assumes.
pub fn uses_coop(ctx: &GpuContext, dtype: GgmlType) -> bool {
    ctx.features.cooperative_matrix
        && ctx.features.subgroups
        && ctx.features.subgroup_min_size == kquants::COOP_SUBGROUP
        && ctx.features.subgroup_max_size == kquants::COOP_SUBGROUP
        && Kernel::MatmulCoop(dtype).source().is_some()
}

/// Workgroups a family's kernel needs for `rows` rows and `n_tokens` tokens.
fn workgroups(
    kernel: Kernel,
    rows: u32,
    n_tokens: u32,
    workgroup_size: u32,
    mapping: Option<(u32, u32)>,
) -> u32 {
    use GgmlType::*;
    match kernel {
        Kernel::Matvec(t)
        | Kernel::MatvecAdd(t)
        | Kernel::MatvecQ8(t)
        | Kernel::MatvecQ8Add(t)
        | Kernel::Matmul(t)
        | Kernel::MatmulCoop(t) => match t {
            Q4_K | Q5_K | Q6_K => kquants::workgroups(kernel, rows, n_tokens, workgroup_size),
            I2_S | TQ1_0 | TQ2_0 => {
                ternary::workgroups(kernel, rows, n_tokens, workgroup_size, mapping)
            }
            _ => legacy::workgroups(kernel, rows, n_tokens, workgroup_size),
        },
        _ => 1,
    }
}

impl MatmulOp {
    /// `x` holds `n_tokens` rows of `w.cols` values (for I2_S: the int8-quantized activations
    /// from the QuantizeActivations kernel, see [`crate::gpu::bitlinear`]); `y` receives
    /// `n_tokens` rows of `w.rows` f32.
    pub fn new(
        ctx: &GpuContext,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        let kernel = if n_tokens == 1 {
            Kernel::Matvec(w.dtype)
        } else if uses_coop(ctx, w.dtype) {
            Kernel::MatmulCoop(w.dtype)
        } else {
            Kernel::Matmul(w.dtype)
        };
        let mut wg = kernel.source().map_or(64, |s| s.default_workgroup_size);
        if let Kernel::Matmul(GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K) = kernel {
            let bytes = ctx.limits.max_compute_workgroup_storage_size;
            wg = kquants::matmul_workgroup_size(bytes, w.rows, n_tokens);
        }
        let wg = adapter_workgroup_size(ctx, kernel, wg);
        Self::with_kernel(ctx, kernel, wg, w, x, y, n_tokens)
    }

    /// `y += W x` for one token, `w` in a legacy format ([`Kernel::MatvecAdd`]: the residual
    /// add in the product's dispatch).
    pub fn matvec_add(
        ctx: &GpuContext,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
    ) -> Result<Self, GpuError> {
        let kernel = Kernel::MatvecAdd(w.dtype);
        let wg = kernel
            .source()
            .ok_or_else(|| GpuError::Unsupported(kernel.label()))?
            .default_workgroup_size;
        let wg = adapter_workgroup_size(ctx, kernel, wg);
        Self::with_kernel(ctx, kernel, wg, w, x, y, 1)
    }

    /// Whether [`MatmulOp::matvec_add`] takes weights of `dtype`.
    pub fn has_matvec_add(dtype: GgmlType) -> bool {
        Kernel::MatvecAdd(dtype).source().is_some()
    }

    /// The same with an explicit kernel and workgroup size (self-tests run the matmul kernel
    /// for one token and sweep workgroup sizes; benchmarks may tune).
    pub fn with_kernel(
        ctx: &GpuContext,
        kernel: Kernel,
        wg: u32,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        // One pipeline for every chunk: the mapping follows the whole weight's rows.
        let mapping = ternary::matvec_mapping(kernel, w.rows);
        let pipeline = ctx.kernel_mapped(kernel, Some(wg), mapping)?;
        let mut dispatches = Vec::new();
        let mut uniforms = Vec::new();
        for chunk in &w.chunks {
            let params = MatmulParams {
                rows: chunk.rows,
                cols: w.cols,
                n_tokens,
                row_offset: chunk.first_row,
                y_stride: w.rows,
                x_stride: w.cols,
                weight_scale: w.scale,
                split: 0,
            };
            let u = ctx.uniform(&format!("{}.params", w.name), &params);
            let mut buffers: Vec<&wgpu::Buffer> = vec![&u, x, y];
            buffers.extend(chunk.planes.iter());
            let bind_group = ctx.bind(&pipeline, &buffers);
            let n = workgroups(kernel, chunk.rows, n_tokens, wg, mapping);
            dispatches.push(Dispatch {
                pipeline: pipeline.clone(),
                bind_group,
                workgroups: grid(n, ctx.limits.max_compute_workgroups_per_dimension),
            });
            uniforms.push(u);
        }
        Ok(MatmulOp {
            dispatches,
            _uniforms: uniforms,
        })
    }

    /// `ya = A x` and `yb = B x` for one token in one dispatch of `kernel` (a
    /// [`Kernel::MatvecQ8Pair`]): `x` the records of the input, `a` and `b` single chunks of
    /// one format and row length, `a`'s rows a multiple of the kernel's rows per workgroup
    /// (see [`crate::gpu::q8::can_pair`]).
    #[allow(clippy::too_many_arguments)]
    pub fn pair(
        ctx: &GpuContext,
        kernel: Kernel,
        wg: u32,
        a: &GpuWeight,
        b: &GpuWeight,
        x: &wgpu::Buffer,
        ya: &wgpu::Buffer,
        yb: &wgpu::Buffer,
    ) -> Result<Self, GpuError> {
        let ([ca], [cb]) = (a.chunks.as_slice(), b.chunks.as_slice()) else {
            return Err(GpuError::Unsupported(format!(
                "{} of {} and {}: weights in several chunks",
                kernel.label(),
                a.name,
                b.name
            )));
        };
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let rows = a.rows + b.rows;
        let params = MatmulParams {
            rows,
            cols: a.cols,
            n_tokens: 1,
            row_offset: 0,
            y_stride: a.rows,
            x_stride: a.cols,
            weight_scale: 1.0,
            split: a.rows,
        };
        let u = ctx.uniform(&format!("{}+{}.params", a.name, b.name), &params);
        let mut entries: Vec<(u32, &wgpu::Buffer)> = vec![(0, &u), (1, x), (2, ya)];
        entries.extend((3..).zip(ca.planes.iter()));
        entries.push((kquants::PAIR_OUTPUT_BINDING, yb));
        entries.extend((kquants::PAIR_PLANES_BINDING..).zip(cb.planes.iter()));
        let bind_group = ctx.bind_at(&pipeline, &entries);
        let n = kquants::workgroups(kernel, rows, 1, wg);
        Ok(MatmulOp {
            dispatches: vec![Dispatch {
                pipeline,
                bind_group,
                workgroups: grid(n, ctx.limits.max_compute_workgroups_per_dimension),
            }],
            _uniforms: vec![u],
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.dispatches {
            d.record(pass);
        }
    }
}
