//! Matrix products over weights in any format: one token (matvec, decode) or several (matmul,
//! prefill). A weight split into chunks is handled by one dispatch per chunk, each writing its
//! own rows of the output.

use std::sync::Arc;

use super::context::CoopScratch;
pub use super::kernels::params::MatmulParams;
use super::kernels::{kquants, legacy, ternary, Kernel};
use super::weights::GpuWeight;
use super::{GpuContext, GpuError, Pooled};
use crate::quant::{Family, GgmlType};

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

/// Rows and tokens per workgroup of [`Kernel::MatmulF16`] (`CM`, `CN` in
/// `matmul_f16_coop.wgsl`).
pub const F16_ROWS: u32 = 128;
pub const F16_TOKENS: u32 = 128;
/// Halves of f16 weights a range of [`Kernel::MatmulF16`] converts at a time (32 MiB: a whole
/// 8192 x 2048 matrix); larger weights are converted and multiplied a range of rows at a time.
pub const F16_RANGE_HALVES: u64 = 16 << 20;
/// Workgroups up to which [`Kernel::MatmulF16`] splits the columns into slices (summed by
/// [`Kernel::SplitSum`]): fewer leave a long product such as Llama's `ffn_down` short of
/// workgroups, more make the slices' sums cost more than the parallelism gains.
pub const F16_SPLIT_WORKGROUPS: u32 = 256;

impl CoopScratch {
    /// Buffers of at least these sizes (bytes): weights, inputs, scales, partial products.
    fn get(ctx: &GpuContext, need: [u64; 4]) -> Result<CoopScratch, GpuError> {
        let mut guard = ctx
            .coop_scratch
            .lock()
            .map_err(|_| GpuError::Validation("cooperative-matrix scratch lock poisoned".into()))?;
        let have = guard.as_ref().map_or([0; 4], |s| {
            [s.w16.size(), s.xh.size(), s.inv.size(), s.part.size()]
        });
        if have.iter().zip(need).any(|(h, n)| *h < n) {
            let old = guard.take();
            let pick = |i: usize, label: &str, current: Option<&wgpu::Buffer>| match current {
                Some(b) if have[i] >= need[i] => Ok(b.clone()),
                _ => ctx.storage(label, need[i].max(have[i])),
            };
            *guard = Some(CoopScratch {
                w16: pick(0, "matmul.f16_weights", old.as_ref().map(|s| &s.w16))?,
                xh: pick(1, "matmul.f16_inputs", old.as_ref().map(|s| &s.xh))?,
                inv: pick(2, "matmul.f16_scales", old.as_ref().map(|s| &s.inv))?,
                part: pick(3, "matmul.f16_slices", old.as_ref().map(|s| &s.part))?,
            });
        }
        let s = guard.as_ref().expect("made above");
        Ok(CoopScratch {
            w16: s.w16.clone(),
            xh: s.xh.clone(),
            inv: s.inv.clone(),
            part: s.part.clone(),
        })
    }

    /// Bytes the context's scratch holds.
    pub fn bytes(ctx: &GpuContext) -> u64 {
        ctx.coop_scratch
            .lock()
            .ok()
            .and_then(|g| {
                g.as_ref()
                    .map(|s| s.w16.size() + s.xh.size() + s.inv.size() + s.part.size())
            })
            .unwrap_or(0)
    }
}

/// The column slices [`Kernel::MatmulF16`] splits a product of `rows` rows, `cols` columns
/// and `n_tokens` tokens into: doubling while the workgroups stay under
/// [`F16_SPLIT_WORKGROUPS`] and each slice keeps at least two 16-column steps.
pub fn f16_split(rows: u32, cols: u32, n_tokens: u32) -> u32 {
    let tiles = rows.div_ceil(F16_ROWS) * n_tokens.div_ceil(F16_TOKENS);
    let steps = cols / 16;
    let mut s = 1;
    while tiles * s * 2 <= F16_SPLIT_WORKGROUPS && steps % (2 * s) == 0 && steps / (2 * s) >= 2 {
        s *= 2;
    }
    s
}

/// `y[t, :] = W x[t, :]` for `n_tokens` tokens, built once and recorded every forward pass.
pub struct MatmulOp {
    pub dispatches: Vec<Dispatch>,
    _uniforms: Vec<Pooled>,
    /// The product reads its inputs from the shared f16 scratch ([`MatmulOp::coop_f16`]).
    f16_inputs: bool,
    /// Its first dispatch scales them into it.
    scales_input: bool,
}

/// The legacy matvec's workgroup on CPU adapters: 4 invocations (one SIMD group of
/// SwiftShader), 16 rows each, so 64 rows share each staged piece of x. In the
/// browser WebGPU zero-initializes workgroup memory at the start of every workgroup, and
/// SwiftShader does that in every group of 4 invocations, element by element, then waits at a
/// barrier: with 32-wide workgroups of one row per invocation that cost as much as the product
/// itself. Four invocations of 16 rows each keep that cost small, in the browser and natively
/// alike (with the attention and reduction workgroups of src/ops shaped the same way).
pub const SOFTWARE_MATVEC_WG: u32 = 4;

/// The workgroup size of `kernel` on this adapter, `wg` where nothing else applies. On a CPU
/// adapter ([`GpuContext::is_software`]) the cost grows with the invocations a workgroup holds
/// rather than with the work: the legacy matvec takes [`SOFTWARE_MATVEC_WG`], the legacy
/// matmul 16-token tiles.
fn adapter_workgroup_size(ctx: &GpuContext, kernel: Kernel, wg: u32) -> u32 {
    if ctx.is_software() {
        software_workgroup_size(kernel, wg)
    } else {
        wg
    }
}

/// The workgroup size of `kernel` on a CPU adapter (see [`adapter_workgroup_size`]; public for
/// tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn software_workgroup_size(kernel: Kernel, wg: u32) -> u32 {
    if kernel.family() != Some(Family::Legacy) {
        return wg;
    }
    match kernel {
        Kernel::Matvec(_) | Kernel::MatvecAdd(_) => SOFTWARE_MATVEC_WG,
        Kernel::Matmul(_) => 64,
        _ => wg,
    }
}

/// Whether the device has the cooperative matrices (16x16x16 f16 into f32, and f16) and
/// subgroups of exactly [`kquants::COOP_SUBGROUP`] invocations, which the cooperative-matrix
/// kernels' work splits assume.
pub fn has_coop_subgroups(ctx: &GpuContext) -> bool {
    ctx.features.cooperative_matrix
        && ctx.features.subgroups
        && ctx.features.subgroup_min_size == kquants::COOP_SUBGROUP
        && ctx.features.subgroup_max_size == kquants::COOP_SUBGROUP
}

/// Whether products of several tokens over `dtype` take [`Kernel::MatmulF16`] on this device
/// ([`MatmulOp::coop_f16`]): it has the cooperative matrices (and f16) and 32-wide subgroups,
/// which the kernel's split of a tile among its 4 subgroups assumes, `dtype` converts to
/// f16 tiles ([`Kernel::DequantF16`]; [`MatmulOp::new`] also needs rows of whole 32-value
/// blocks), and the context's [`crate::KernelPolicy::coop_products`] allows it.
pub fn uses_coop(ctx: &GpuContext, dtype: GgmlType) -> bool {
    ctx.policy.coop_products
        && has_coop_subgroups(ctx)
        && Kernel::DequantF16(dtype).source().is_some()
        && Kernel::MatmulF16(false).source().is_some()
}

/// Workgroups a family's kernel needs for `rows` rows and `n_tokens` tokens (public for
/// tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn workgroups(
    kernel: Kernel,
    rows: u32,
    n_tokens: u32,
    workgroup_size: u32,
    mapping: Option<(u32, u32)>,
) -> u32 {
    match kernel {
        Kernel::Matvec(_)
        | Kernel::MatvecAdd(_)
        | Kernel::MatvecQ8(_)
        | Kernel::MatvecQ8Add(_)
        | Kernel::MatvecQ8AddNorm(_)
        | Kernel::Matmul(_) => match kernel.family() {
            Some(Family::KQuant(_)) => kquants::workgroups(kernel, rows, n_tokens, workgroup_size),
            Some(Family::Ternary | Family::I2S) => {
                ternary::workgroups(kernel, rows, n_tokens, workgroup_size, mapping)
            }
            Some(Family::Legacy) | None => {
                legacy::workgroups(kernel, rows, n_tokens, workgroup_size)
            }
        },
        _ => 1,
    }
}

/// The workgroup size [`MatmulOp::new`] gives `kernel` (a matvec or matmul) for `rows` rows
/// and `n_tokens` tokens on a device with `workgroup_storage` bytes of workgroup memory, before
/// [`adapter_workgroup_size`] (public for tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn product_workgroup_size(
    kernel: Kernel,
    workgroup_storage: u32,
    rows: u32,
    n_tokens: u32,
) -> u32 {
    if let (Kernel::Matmul(_), Some(Family::KQuant(_))) = (kernel, kernel.family()) {
        return kquants::matmul_workgroup_size(workgroup_storage, rows, n_tokens);
    }
    kernel.source().map_or(64, |s| s.default_workgroup_size)
}

impl MatmulOp {
    /// `x` holds `n_tokens` rows of `w.cols` values (for I2_S: the int8-quantized activations
    /// from the QuantizeActivations kernel, see [`crate::bitlinear`]); `y` receives
    /// `n_tokens` rows of `w.rows` f32.
    pub fn new(
        ctx: &GpuContext,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        if Self::takes_coop(ctx, w, n_tokens) {
            return Self::coop_f16(ctx, w, x, y, n_tokens, (Self::coop_range(w), false));
        }
        let kernel = if n_tokens == 1 {
            Kernel::Matvec(w.dtype)
        } else {
            Kernel::Matmul(w.dtype)
        };
        let storage = ctx.limits.max_compute_workgroup_storage_size;
        let wg = product_workgroup_size(kernel, storage, w.rows, n_tokens);
        let wg = adapter_workgroup_size(ctx, kernel, wg);
        Self::with_kernel(ctx, kernel, wg, w, x, y, n_tokens)
    }

    /// Whether [`MatmulOp::new`] runs `n_tokens` tokens through `w` on cooperative matrices
    /// ([`MatmulOp::coop_f16`]).
    pub fn takes_coop(ctx: &GpuContext, w: &GpuWeight, n_tokens: u32) -> bool {
        n_tokens > 1 && uses_coop(ctx, w.dtype) && w.cols % 32 == 0
    }

    /// Rows of `w` converted to f16 at a time for [`MatmulOp::coop_f16`].
    fn coop_range(w: &GpuWeight) -> u32 {
        let range = (F16_RANGE_HALVES / w.cols as u64) as u32 / F16_ROWS * F16_ROWS;
        range.max(F16_ROWS)
    }

    /// `y += W x` for several tokens on cooperative matrices, the add in the product's (or its
    /// slices' sum's) dispatch: the same bits as [`MatmulOp::new`] into a scratch followed by
    /// the Add kernel. Check [`MatmulOp::takes_coop`] first.
    pub fn coop_add(
        ctx: &GpuContext,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        if !Self::takes_coop(ctx, w, n_tokens) {
            return Err(GpuError::Unsupported(format!(
                "a cooperative-matrix product added to its output: {} for {n_tokens} tokens",
                w.name
            )));
        }
        Self::coop_f16(ctx, w, x, y, n_tokens, (Self::coop_range(w), true))
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
        let span = kquants::matvec_q8_span(kernel, w.bytes, w.cols);
        Self::spanned(ctx, (kernel, wg, span), w, x, y, n_tokens)
    }

    /// [`MatmulOp::with_kernel`] with the K-quant integer-dot matvec's units per step given
    /// (`(kernel, workgroup size, span)`; self-tests run both spans at every shape).
    pub fn spanned(
        ctx: &GpuContext,
        launch: (Kernel, u32, Option<u32>),
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        Self::spanned_with(ctx, launch, w, x, y, n_tokens, &[])
    }

    /// [`MatmulOp::spanned`] with `extra` buffers bound at the given bindings of every chunk's
    /// dispatch (the norm record and weight of [`Kernel::MatvecQ8AddNorm`]).
    pub fn spanned_with(
        ctx: &GpuContext,
        (kernel, wg, span): (Kernel, u32, Option<u32>),
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
        extra: &[(u32, &wgpu::Buffer)],
    ) -> Result<Self, GpuError> {
        // One pipeline for every chunk: the mapping follows the whole weight's rows.
        let mapping = ternary::matvec_mapping(kernel, w.rows);
        let pipeline = ctx.kernel_with(kernel, Some(wg), mapping, span)?;
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
            let mut buffers: Vec<(u32, &wgpu::Buffer)> = vec![(0, &u), (1, x), (2, y)];
            buffers.extend((3..).zip(chunk.planes.iter()));
            buffers.extend(extra.iter().copied());
            let bind_group = ctx.bind_at(&pipeline, &buffers);
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
            f16_inputs: false,
            scales_input: false,
        })
    }

    /// `ya = A x` and `yb = B x` for one token in one dispatch of `kernel` (a
    /// [`Kernel::MatvecQ8Pair`]): `x` the records of the input, `a` and `b` single chunks of
    /// one format and row length, `a`'s rows a multiple of the kernel's rows per workgroup
    /// (see [`crate::q8::can_pair`]); `span` the units per step
    /// ([`kquants::matvec_q8_span`]).
    pub fn pair(
        ctx: &GpuContext,
        (kernel, wg, span): (Kernel, u32, Option<u32>),
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
        let pipeline = ctx.kernel_with(kernel, Some(wg), None, span)?;
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
            f16_inputs: false,
            scales_input: false,
        })
    }

    /// `y = X W^T` on cooperative matrices ([`Kernel::MatmulF16`]): the inputs to scaled f16
    /// tiles once ([`Kernel::ScaleF16`]), then for each range of at most `range_rows` rows
    /// (a multiple of [`F16_ROWS`]) of each chunk, its weights to f16 tiles
    /// ([`Kernel::DequantF16`]), their product, and where the product is split into column
    /// slices ([`f16_split`]), the slices' sum ([`Kernel::SplitSum`]).
    pub fn coop_f16(
        ctx: &GpuContext,
        w: &GpuWeight,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_tokens: u32,
        (range_rows, accumulate): (u32, bool),
    ) -> Result<Self, GpuError> {
        if w.cols % 32 != 0 {
            return Err(GpuError::Unsupported(format!(
                "cooperative-matrix product of {}: rows of {} values (not whole 32-value blocks)",
                w.name, w.cols
            )));
        }
        let range = range_rows.next_multiple_of(F16_ROWS);
        let ranges = || {
            w.chunks.iter().flat_map(move |c| {
                (0..c.rows)
                    .step_by(range as usize)
                    .map(move |r0| (c, r0, range.min(c.rows - r0)))
            })
        };
        let (cols, tokens) = (w.cols as u64, n_tokens as u64);
        let mut need = [
            0,
            tokens.next_multiple_of(F16_TOKENS as u64) * cols * 2,
            tokens * 4,
            4,
        ];
        for (_, _, rows) in ranges() {
            need[0] = need[0].max(rows.next_multiple_of(F16_ROWS) as u64 * cols * 2);
            let split = f16_split(rows, w.cols, n_tokens) as u64;
            if split > 1 {
                need[3] = need[3].max(split * tokens * rows as u64 * 4);
            }
        }
        let scratch = CoopScratch::get(ctx, need)?;
        let max_dim = ctx.limits.max_compute_workgroups_per_dimension;
        let scale = ctx.kernel(Kernel::ScaleF16, None)?;
        let dequant = ctx.kernel(Kernel::DequantF16(w.dtype), None)?;
        let product = ctx.kernel(Kernel::MatmulF16(accumulate), None)?;
        let sum = ctx.kernel(Kernel::SplitSum(accumulate), None)?;
        let params = |rows: u32, row_offset: u32, split: u32| MatmulParams {
            rows,
            cols: w.cols,
            n_tokens,
            row_offset,
            y_stride: w.rows,
            x_stride: w.cols,
            weight_scale: 1.0,
            split,
        };
        let mut dispatches = Vec::new();
        let mut uniforms = Vec::new();
        let u = ctx.uniform(&format!("{}.scale", w.name), &params(0, 0, 1));
        dispatches.push(Dispatch {
            bind_group: ctx.bind(&scale, &[&u, x, &scratch.xh, &scratch.inv]),
            pipeline: scale,
            workgroups: grid(n_tokens, max_dim),
        });
        uniforms.push(u);
        for (chunk, r0, rows) in ranges() {
            // The legacy formats' planes interleave the chunk's rows: they need its row count.
            let dequant_params = MatmulParams {
                y_stride: chunk.rows,
                ..params(rows, r0, 1)
            };
            let u = ctx.uniform(&format!("{}.dequant", w.name), &dequant_params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = vec![(0, &u), (1, &scratch.w16)];
            entries.extend((3..).zip(chunk.planes.iter()));
            // One invocation per 32 weights, for rows rounded up to 16.
            let units = rows.next_multiple_of(16) * (w.cols / 32);
            dispatches.push(Dispatch {
                bind_group: ctx.bind_at(&dequant, &entries),
                pipeline: dequant.clone(),
                workgroups: grid(units.div_ceil(kquants::COOP_WG), max_dim),
            });
            uniforms.push(u);
            let split = f16_split(rows, w.cols, n_tokens);
            let u = ctx.uniform(
                &format!("{}.params", w.name),
                &params(rows, chunk.first_row + r0, split),
            );
            let tiles = rows.div_ceil(F16_ROWS) * n_tokens.div_ceil(F16_TOKENS) * split;
            dispatches.push(Dispatch {
                bind_group: ctx.bind(
                    &product,
                    &[
                        &u,
                        &scratch.xh,
                        y,
                        &scratch.w16,
                        &scratch.inv,
                        &scratch.part,
                    ],
                ),
                pipeline: product.clone(),
                workgroups: grid(tiles, max_dim),
            });
            if split > 1 {
                dispatches.push(Dispatch {
                    bind_group: ctx.bind(&sum, &[&u, &scratch.part, y]),
                    pipeline: sum.clone(),
                    workgroups: grid((rows * n_tokens).div_ceil(kquants::COOP_WG), max_dim),
                });
            }
            uniforms.push(u);
        }
        Ok(MatmulOp {
            dispatches,
            _uniforms: uniforms,
            f16_inputs: true,
            scales_input: true,
        })
    }

    /// The same product taking its scaled inputs from the shared f16 scratch as the product
    /// recorded just before it left them: for consecutive cooperative-matrix products of one
    /// input (q, k and v; gate and up), where nothing in between writes that scratch but the
    /// weights' conversions. A product without that step is returned as it is.
    pub fn reusing_scaled_input(mut self) -> Self {
        if self.scales_input {
            self.dispatches.remove(0);
            self.scales_input = false;
        }
        self
    }

    /// Whether this product reads its inputs from the shared f16 scratch (a
    /// cooperative-matrix product, [`MatmulOp::coop_f16`]), so that it leaves them there.
    pub fn f16_inputs(&self) -> bool {
        self.f16_inputs
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.dispatches {
            d.record(pass);
        }
    }
}
