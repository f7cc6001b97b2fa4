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

pub mod kernel;
pub mod kquants;
pub mod legacy;
pub mod ops;
pub mod params;
pub mod q8;
pub mod ternary;
pub mod wgsl_comments;

use std::borrow::Cow;

pub use kernel::{registered_files, Kernel, KernelSource, PipelineKey, Variant, NATIVE};

use super::error::GpuError;
use crate::quant::{Family, GgmlType, Kernels};
use kernel::shader_file;

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
            Kernel::Mul,
            Kernel::GeluMul,
            Kernel::Softcap,
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

    /// The RMSNorm kernels: the plain one and those that also quantize their output
    /// ([`crate::KernelPolicy::norm_subgroups`] chooses their reductions).
    pub fn is_rms_norm(self) -> bool {
        matches!(
            self,
            Kernel::RmsNorm | Kernel::RmsNormQuantizeQ8 | Kernel::RmsNormQuantize
        )
    }

    /// The length of the runs of invocations the kernel sums with `segment_sum4i`: its
    /// subgroup variant needs every subgroup at least that large (0: no such sums).
    pub(crate) fn segment(self) -> u32 {
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
            Kernel::NormBitLinear(mode, tpr) => ternary::norm_bitlinear_constants(mode, tpr),
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
        self.wgsl_with(variant, shader_file)
    }

    /// [`Kernel::wgsl`] assembled from the shader files `file` gives by name (tests assemble
    /// the browser's comment-free files with it natively).
    pub fn wgsl_with<'a>(
        self,
        variant: Variant,
        file: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<String, GpuError> {
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
            let body = file(name).ok_or_else(|| GpuError::Shader {
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
