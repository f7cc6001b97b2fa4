//! The kernel registry: every compute kernel is a typed [`Kernel`], its WGSL is assembled from
//! plain `.wgsl` files in `shaders/` (shared helpers prepended, never generated from Rust
//! strings), and compiled pipelines are cached by [`PipelineKey`].
//!
//! Kernels come in families, each in its own module, which lists its files and how its weights
//! are dispatched: [`legacy`], [`kquants`], [`ternary`] (weight kernels, whose members are the
//! dtypes of the registry in `crate::quant::dtypes` with that [`Family`]: a member's decode
//! files are prepended to its family's skeletons), [`q8`] (int8 activation records) and
//! [`ops`] (norms, RoPE, attention, activations, sampling). Every file under `shaders/` is
//! found by name (the table build.rs writes), so a kernel or a dtype brings its files and
//! nothing lists them.

pub mod kquants;
pub mod legacy;
pub mod ops;
pub mod q8;
pub mod ternary;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{GpuContext, GpuError};
use crate::quant::{Family, GgmlType, Kernels};

/// Every compute kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `y = W x` for one token (decode), weights in the given format.
    Matvec(GgmlType),
    /// `y = W x` for one token (decode) on int8 activation records ([`crate::gpu::q8`]):
    /// integer dot products, the block scales applied per group.
    MatvecQ8(GgmlType),
    /// [`Kernel::Matvec`] added to what `y` holds (`y += W x`), legacy formats.
    MatvecAdd(GgmlType),
    /// [`Kernel::MatvecQ8`] added to what `y` holds (`y += W x`: a residual add in the same
    /// dispatch).
    MatvecQ8Add(GgmlType),
    /// Two [`Kernel::MatvecQ8`] products of one input in one dispatch (q and k, gate and up:
    /// `matvec_kquants_q8_pair.wgsl`), K-quant formats.
    MatvecQ8Pair(GgmlType),
    /// [`Kernel::MatvecQ8Add`] that also writes the norm record of the sum for the RMSNorm
    /// that reads it next (`q8_add_norm.wgsl`: one q8 block of 32 rows a workgroup): the
    /// products of that norm read the record, and [`Kernel::SiluMulQuantizeQ8Norm`] applies
    /// the norm's factor to them, so the norm has no dispatch.
    MatvecQ8AddNorm(GgmlType),
    /// `Y = X W^T` for several tokens (prefill).
    Matmul(GgmlType),
    /// Weights in the given format to f16 tiles, the weight operand of [`Kernel::MatmulF16`].
    DequantF16(GgmlType),
    /// Activations to f16 tiles scaled per token, the input operand of [`Kernel::MatmulF16`].
    ScaleF16,
    /// `Y = X W^T` for several tokens (prefill) on cooperative matrices over f16 tiles of both
    /// operands, f32 accumulation (where the device has them:
    /// [`crate::gpu::GpuFeatures::cooperative_matrix`]; see `MatmulOp::coop_f16`); `true`:
    /// added to what `Y` holds (a residual add in the product's dispatch).
    MatmulF16(bool),
    /// The column slices of a split [`Kernel::MatmulF16`] summed into its output (`true`:
    /// added to it).
    SplitSum(bool),
    /// Rows of an embedding table gathered by token id.
    Embedding(GgmlType),
    /// Per-token int8 absmax quantization of activations (BitLinear input).
    QuantizeActivations,
    /// [`Kernel::QuantizeActivations`] written as [`Kernel::MatvecQ8`] records (every block
    /// scaled by `1 / s`): the BitLinear input of the integer-dot TQ1_0/TQ2_0 decode.
    QuantizeActivationsQ8,
    /// Per-32 int8 quantization of activations, the input of [`Kernel::MatvecQ8`].
    QuantizeQ8,
    /// `x = silu(x) * up` (the SiluMul elementwise op) and [`Kernel::QuantizeQ8`] of the
    /// product, in one dispatch (the input of the integer-dot `ffn_down` product).
    SiluMulQuantizeQ8,
    /// [`Kernel::SiluMulQuantizeQ8`] of gate and up products of a norm record
    /// ([`Kernel::MatvecQ8AddNorm`]): the norm's factor applied to both first.
    SiluMulQuantizeQ8Norm,
    /// RMSNorm followed by [`Kernel::QuantizeQ8`] of its output, in one dispatch (the input of
    /// the integer-dot decode products after a norm: q/k/v, gate/up).
    RmsNormQuantizeQ8,
    /// The same quantization written back as f32 `x_q / s` (BitLinear input for kernels that
    /// take f32 activations: TQ1_0, TQ2_0).
    FakeQuantizeActivations,
    /// RMSNorm followed by the int8 activation quantization of its output, in one dispatch
    /// (the input of an I2_S BitLinear during decode).
    RmsNormQuantize,
    /// RMSNorm, the int8 activation quantization and one token's I2_S products in one
    /// dispatch (`norm_bitlinear.wgsl`), with its `MODE`: 0 up to three weights (q/k/v),
    /// 1 the gated FFN (`relu(gate)^2 * up`), 2 added to a residual; and its invocations per
    /// row (`TPR`: [`crate::gpu::bitlinear::norm_bitlinear_threads_per_row`]).
    NormBitLinear(u32, u32),
    RmsNorm,
    Rope,
    Attention,
    /// The prefill attention by KV head (`attention.wgsl`'s `main_group`): a workgroup
    /// attends for the 2 to 4 query heads that share a KV head, loading its rows once.
    AttentionGroup,
    /// The one-token attention with the combine of its pieces in the attend dispatch
    /// (`attention.wgsl`'s `main_decode`: the last piece of a head to finish combines them;
    /// natively, see `AttentionOp::combines_in_attend`).
    AttentionDecode,
    /// The prefill attention on cooperative matrices for heads of the given size
    /// (`attention_coop.wgsl`, flash attention over the f16 cache; native only, see
    /// `AttentionOp::uses_coop`).
    AttentionCoop(u32),
    Softmax,
    ReluSquared,
    SiluMul,
    Add,
    Argmax,
    TopK,
    /// An empty dispatch (benchmarks measure the per-dispatch overhead with it).
    Noop,
    /// A plain buffer copy (benchmarks measure the bandwidth a kernel can reach with it).
    Copy,
}

/// Which optional device capabilities a pipeline is compiled for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Variant {
    pub f16: bool,
    pub subgroups: bool,
}

/// The pipeline cache key: kernel, variant and the workgroup size (a WGSL `override`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub kernel: Kernel,
    pub variant: Variant,
    pub workgroup_size: u32,
    /// Invocations per row and rows per invocation (`TPR`, `RPT`) of the matvec kernels that
    /// take them ([`ternary::matvec_mapping`]), or `None`: the kernel's defaults.
    pub mapping: Option<(u32, u32)>,
    /// Units per step (`SPAN`) of the K-quant integer-dot matvecs
    /// ([`kquants::matvec_q8_span`]), or `None`: the kernel's default.
    pub span: Option<u32>,
}

/// The shader files of one kernel, in the order they are concatenated (helpers first), and
/// the kernel's entry point.
#[derive(Debug, Clone)]
pub struct KernelSource {
    pub files: Cow<'static, [&'static str]>,
    pub entry: &'static str,
    /// The workgroup size used when the caller has no preference.
    pub default_workgroup_size: u32,
}

// `static SHADERS: &[(&str, &str)]`: every file under `shaders/` as `(path there, contents)`,
// sorted by path; in the browser's build without the native-only files (see build.rs).
include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// Whether the native-only kernels exist: the cooperative-matrix prefill (WebGPU has no
/// cooperative matrices, and the browser's package does not carry their files).
pub(crate) const NATIVE: bool = cfg!(not(target_arch = "wasm32"));

/// `shaders/` file contents by name.
fn shader_file(name: &str) -> Option<&'static str> {
    SHADERS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The names of every registered shader file (each should appear once).
pub fn registered_files() -> Vec<&'static str> {
    SHADERS.iter().map(|(n, _)| *n).collect()
}

impl Kernel {
    /// Every kernel that has a source, for tests that walk the registry.
    pub fn all() -> Vec<Kernel> {
        let mut v = Vec::new();
        for t in GgmlType::ALL {
            v.extend([
                Kernel::Matvec(t),
                Kernel::MatvecAdd(t),
                Kernel::MatvecQ8(t),
                Kernel::MatvecQ8Add(t),
                Kernel::MatvecQ8Pair(t),
                Kernel::MatvecQ8AddNorm(t),
                Kernel::Matmul(t),
                Kernel::DequantF16(t),
                Kernel::Embedding(t),
            ]);
        }
        v.extend([
            Kernel::ScaleF16,
            Kernel::MatmulF16(false),
            Kernel::MatmulF16(true),
            Kernel::SplitSum(false),
            Kernel::SplitSum(true),
            Kernel::QuantizeQ8,
            Kernel::SiluMulQuantizeQ8,
            Kernel::SiluMulQuantizeQ8Norm,
            Kernel::RmsNormQuantizeQ8,
            Kernel::QuantizeActivations,
            Kernel::QuantizeActivationsQ8,
            Kernel::FakeQuantizeActivations,
            Kernel::RmsNormQuantize,
            Kernel::NormBitLinear(0, 16),
            Kernel::NormBitLinear(1, 16),
            Kernel::NormBitLinear(2, 16),
            Kernel::NormBitLinear(0, 8),
            Kernel::NormBitLinear(1, 8),
            Kernel::NormBitLinear(2, 8),
            Kernel::RmsNorm,
            Kernel::Rope,
            Kernel::Attention,
            Kernel::AttentionGroup,
            Kernel::AttentionDecode,
            Kernel::AttentionCoop(64),
            Kernel::AttentionCoop(128),
            Kernel::Softmax,
            Kernel::ReluSquared,
            Kernel::SiluMul,
            Kernel::Add,
            Kernel::Argmax,
            Kernel::TopK,
            Kernel::Noop,
            Kernel::Copy,
        ]);
        v.retain(|k| k.source().is_some());
        v
    }

    /// Where this kernel's WGSL lives.
    pub fn source(self) -> Option<KernelSource> {
        if self.dtype().is_some() {
            let k = self.format()?;
            return match k.family {
                Family::Legacy => legacy::source(self, k),
                Family::KQuant(_) => kquants::source(self, k),
                Family::Ternary | Family::I2S => ternary::source(self, k),
            };
        }
        match self {
            Kernel::ScaleF16 | Kernel::MatmulF16(_) | Kernel::SplitSum(_) => {
                kquants::coop_source(self)
            }
            Kernel::QuantizeQ8
            | Kernel::SiluMulQuantizeQ8
            | Kernel::SiluMulQuantizeQ8Norm
            | Kernel::RmsNormQuantizeQ8 => q8::source(self),
            Kernel::QuantizeActivations
            | Kernel::QuantizeActivationsQ8
            | Kernel::FakeQuantizeActivations
            | Kernel::RmsNormQuantize
            | Kernel::NormBitLinear(..) => ternary::activation_source(self),
            Kernel::Copy => Some(KernelSource {
                files: Cow::Borrowed(&["copy.wgsl"]),
                entry: "main",
                default_workgroup_size: 256,
            }),
            Kernel::Noop => Some(KernelSource {
                files: Cow::Borrowed(&["noop.wgsl"]),
                entry: "main",
                default_workgroup_size: 64,
            }),
            _ => ops::source(self),
        }
    }

    /// The weight type of a kernel over weights (`Matvec(t)`, ..., `Embedding(t)`).
    pub fn dtype(self) -> Option<GgmlType> {
        match self {
            Kernel::Matvec(t)
            | Kernel::MatvecAdd(t)
            | Kernel::MatvecQ8(t)
            | Kernel::MatvecQ8Add(t)
            | Kernel::MatvecQ8Pair(t)
            | Kernel::MatvecQ8AddNorm(t)
            | Kernel::Matmul(t)
            | Kernel::DequantF16(t)
            | Kernel::Embedding(t) => Some(t),
            _ => None,
        }
    }

    /// What the kernels of this kernel's weight type are made of (the registry's
    /// [`Kernels`]), for a kernel over weights of a type with kernels.
    pub fn format(self) -> Option<&'static Kernels> {
        crate::quant::kernels(self.dtype()?)
    }

    /// The family of this kernel's weight type.
    pub fn family(self) -> Option<Family> {
        Some(self.format()?.family)
    }

    /// A short name for labels and errors (`matvec_q4_k`).
    pub fn label(self) -> String {
        match self {
            Kernel::Matvec(t) => format!("matvec_{}", t.name().to_lowercase()),
            Kernel::MatvecAdd(t) => format!("matvec_add_{}", t.name().to_lowercase()),
            Kernel::MatvecQ8(t) => format!("matvec_q8_{}", t.name().to_lowercase()),
            Kernel::MatvecQ8Add(t) => format!("matvec_q8_add_{}", t.name().to_lowercase()),
            Kernel::MatvecQ8Pair(t) => format!("matvec_q8_pair_{}", t.name().to_lowercase()),
            Kernel::MatvecQ8AddNorm(t) => {
                format!("matvec_q8_add_norm_{}", t.name().to_lowercase())
            }
            Kernel::Matmul(t) => format!("matmul_{}", t.name().to_lowercase()),
            Kernel::DequantF16(t) => format!("dequant_f16_{}", t.name().to_lowercase()),
            Kernel::ScaleF16 => "scale_f16".to_string(),
            Kernel::MatmulF16(false) => "matmul_f16".to_string(),
            Kernel::MatmulF16(true) => "matmul_f16_add".to_string(),
            Kernel::SplitSum(false) => "split_sum".to_string(),
            Kernel::SplitSum(true) => "split_sum_add".to_string(),
            Kernel::Embedding(t) => format!("embedding_{}", t.name().to_lowercase()),
            Kernel::NormBitLinear(mode, tpr) => format!("norm_bitlinear_{mode}_tpr{tpr}"),
            Kernel::AttentionCoop(hd) => format!("attention_coop_hd{hd}"),
            k => format!("{k:?}").to_lowercase(),
        }
    }

    /// The length of the runs of invocations the kernel sums with `segment_sum4i`: its
    /// subgroup variant needs every subgroup at least that large (0: no such sums).
    fn segment(self) -> u32 {
        match self {
            Kernel::NormBitLinear(_, tpr) => tpr,
            _ => 0,
        }
    }

    /// Pipeline constants besides the workgroup size (`override`s the kernel's WGSL declares).
    pub fn constants(self) -> Vec<(&'static str, f64)> {
        let mut v = match self {
            Kernel::MatvecQ8Add(_)
            | Kernel::MatvecAdd(_)
            | Kernel::MatmulF16(true)
            | Kernel::SplitSum(true) => vec![("ACCUMULATE", 1.0)],
            Kernel::NormBitLinear(mode, tpr) => {
                crate::gpu::bitlinear::norm_bitlinear_constants(mode, tpr)
            }
            Kernel::AttentionCoop(hd) => vec![("HD", f64::from(hd))],
            _ => Vec::new(),
        };
        // Workgroup arrays: the WGSL sizes them by the workgroup size for the browser, which
        // zero-initializes workgroup memory at the start of every workgroup (on SwiftShader
        // that costs as much as the work with the largest sizes). Native pipelines skip that
        // initialization and keep the largest sizes: the legacy matvec then stages 2048
        // columns of x at any workgroup size, and a GPU decodes a little slower with the
        // smaller arrays.
        if !cfg!(target_arch = "wasm32") {
            v.push(("REDUCE_N", 256.0));
            match self {
                Kernel::Matvec(_) | Kernel::MatvecAdd(_)
                    if self.family() == Some(Family::Legacy) =>
                {
                    v.push(("X_VEC4S", 512.0))
                }
                Kernel::Argmax => v.push(("BEST_N", 256.0)),
                Kernel::Attention | Kernel::AttentionGroup | Kernel::AttentionDecode => {
                    v.extend([("LANE_VEC4S", 512.0), ("TILE", 256.0)])
                }
                _ => {}
            }
        }
        v
    }

    /// The full WGSL text for a variant: enable directives, the reduction helpers that fit the
    /// variant, then the kernel's files.
    pub fn wgsl(self, variant: Variant) -> Result<String, GpuError> {
        let src = self
            .source()
            .ok_or_else(|| GpuError::Unsupported(self.label()))?;
        let mut text = String::new();
        // The cooperative-matrix kernels read f16 whatever the variant (the host picks them
        // only with shader-f16).
        let coop = matches!(self, Kernel::MatmulF16(_) | Kernel::AttentionCoop(_));
        if variant.f16 || coop {
            text.push_str("enable f16;\n");
        }
        if coop {
            text.push_str("enable wgpu_cooperative_matrix;\n");
        }
        // naga rejects `enable subgroups;`, browsers require it (facts.md).
        if variant.subgroups && cfg!(target_arch = "wasm32") {
            text.push_str("enable subgroups;\n");
        }
        let reduce = if variant.subgroups {
            "reduce_subgroup.wgsl"
        } else {
            "reduce_shared.wgsl"
        };
        for name in ["common.wgsl", reduce].iter().chain(src.files.iter()) {
            let body = shader_file(name).ok_or_else(|| GpuError::Shader {
                kernel: self.label(),
                message: format!("shader file {name} is not registered"),
            })?;
            text.push_str(&format!("// ---- {name}\n"));
            text.push_str(body);
            text.push('\n');
        }
        if let Kernel::MatvecQ8Pair(_) = self {
            text = kquants::pair_wgsl(&text).ok_or_else(|| GpuError::Shader {
                kernel: self.label(),
                message: "the format file has no planes or kq_load to pair".to_string(),
            })?;
        }
        Ok(text)
    }
}

/// The runtime checks wgpu puts into our kernels: the buffer bounds only. Off are the loop
/// bounding, a 64-bit counter that naga adds to every loop of an untrusted shader so that a
/// loop which never ends cannot be assumed away by the driver's compiler, and the integer
/// division guards (a divisor of 0 taken as 1).
///
/// Our loops all end: each steps a counter by a positive constant, a pipeline constant or a
/// subgroup size towards a bound from a uniform, a builtin or the buffer's length
/// (tests/gpu_uniforms.rs, `every_loop_ends`, checks their forms). Every integer divisor is a
/// non-zero constant or `max(.., c)` with a non-zero constant c (`unguarded_divisors_are_nonzero`
/// there, on naga's IR of every kernel) — for an unsigned divisor `max(x, 1u)` is exactly the
/// guard naga would add, so the guards could never change a result. The counter costs real
/// time in the decode loops (TQ2_0's matvec and the BitNet prefill are markedly faster without
/// it). In the cooperative-matrix kernels the two go together: without the loop bounding but
/// with the division guards the prefill is much slower, for a reason not found; without both
/// it is a little faster than with both. In the browser wgpu hands the WGSL to the browser,
/// which applies its own checks.
pub fn runtime_checks() -> wgpu::ShaderRuntimeChecks {
    let mut checks = wgpu::ShaderRuntimeChecks::checked();
    checks.force_loop_bounding = false;
    checks.int_div_checks = false;
    checks
}

/// Compiled pipelines, created on first use.
#[derive(Default)]
pub struct PipelineCache {
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

impl GpuContext {
    /// The best variant this device supports.
    pub fn variant(&self) -> Variant {
        Variant {
            f16: self.features.shader_f16,
            subgroups: self.features.subgroups,
        }
    }

    /// The pipeline for `key`, compiled once and cached. Shader compilation errors come back as
    /// [`GpuError::Shader`] rather than aborting.
    pub fn pipeline(&self, key: PipelineKey) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let mut cache = self
            .pipelines
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let src = key
            .kernel
            .source()
            .ok_or_else(|| GpuError::Unsupported(key.kernel.label()))?;
        let wgsl = key.kernel.wgsl(key.variant)?;
        let label = key.kernel.label();
        let mut constants = vec![("WG", f64::from(key.workgroup_size))];
        constants.extend(key.kernel.constants());
        if let Some((tpr, rpt)) = key.mapping {
            constants.extend([("TPR", f64::from(tpr)), ("RPT", f64::from(rpt))]);
        }
        if let Some(span) = key.span {
            constants.push(("SPAN", f64::from(span)));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        };
        // SAFETY: the checks turned off (`runtime_checks`) are the loop bounding, and every
        // loop of these kernels ends (tests/gpu_uniforms.rs, `every_loop_ends`), and the
        // division guards, and every integer divisor is non-zero (the same file,
        // `unguarded_divisors_are_nonzero`).
        let module = unsafe {
            self.device
                .create_shader_module_trusted(desc, runtime_checks())
        };
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: None,
                module: &module,
                entry_point: Some(src.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(err) = block_on_scope(scope) {
            return Err(GpuError::Shader {
                kernel: label,
                message: err.to_string(),
            });
        }
        let p = Arc::new(pipeline);
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// The pipeline for `kernel` with this device's best variant and the kernel's default
    /// workgroup size (or `workgroup_size` when given).
    pub fn kernel(
        &self,
        kernel: Kernel,
        workgroup_size: Option<u32>,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        self.kernel_with(kernel, workgroup_size, None, None)
    }

    /// [`GpuContext::kernel`] with the kernel's `TPR` and `RPT` constants set (see
    /// [`PipelineKey::mapping`]) and the K-quant integer-dot matvecs' `SPAN` (see
    /// [`PipelineKey::span`]).
    pub fn kernel_with(
        &self,
        kernel: Kernel,
        workgroup_size: Option<u32>,
        mapping: Option<(u32, u32)>,
        span: Option<u32>,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let default = kernel.source().map_or(64, |s| s.default_workgroup_size);
        let workgroup_size = workgroup_size.unwrap_or(default);
        let mut variant = self.variant();
        // Segmented sums through subgroups hold only where every subgroup spans whole runs
        // and the workgroup is made of whole subgroups.
        let (min, max) = (
            self.features.subgroup_min_size,
            self.features.subgroup_max_size,
        );
        if kernel.segment() > 0 && (min < kernel.segment() || max == 0 || workgroup_size % max != 0)
        {
            variant.subgroups = false;
        }
        self.pipeline(PipelineKey {
            kernel,
            variant,
            workgroup_size,
            mapping,
            span,
        })
    }

    /// Run `f`, which makes GPU objects, turning a wgpu validation error it raises (a binding
    /// over the device's limits, say) into an error naming `what` instead of wgpu's default
    /// panic. Natively only: in the browser such errors reach the device's uncaptured-error
    /// handler.
    pub fn validated<T>(
        &self,
        what: impl FnOnce() -> String,
        f: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let made = f();
        let err = block_on_scope(scope);
        let made = made?;
        match err {
            Some(e) => Err(GpuError::Validation(format!("{}: {e}", what()))),
            None => Ok(made),
        }
    }

    /// A bind group for `pipeline`'s group 0 with each buffer bound at its binding.
    pub fn bind_at(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: *i,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// A bind group for `pipeline`'s group 0 with `buffers` bound at 0, 1, 2, ... in order.
    pub fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let at: Vec<(u32, &wgpu::Buffer)> = (0..).zip(buffers.iter().copied()).collect();
        self.bind_at(pipeline, &at)
    }
}

/// Wait for an error scope natively; in the browser errors surface asynchronously through the
/// device's uncaptured-error handler instead.
fn block_on_scope(scope: wgpu::ErrorScopeGuard) -> Option<wgpu::Error> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        pollster::block_on(scope.pop())
    }
    #[cfg(target_arch = "wasm32")]
    {
        drop(scope);
        None
    }
}
