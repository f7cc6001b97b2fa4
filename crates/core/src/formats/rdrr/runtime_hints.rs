//! `runtimeOptimizations`: the manifest's advisory hints for kernel selection and tuning.
//! GPU capabilities always win over these; the engine may ignore them.
//!
//! The documented names are enums; an unknown kernel variant, operation or attention tier is
//! an error that names the field (`runtimeOptimizations.preferredKernels.matmul`). Extra,
//! unknown fields of the object are tolerated.

use std::collections::BTreeMap;

use super::json::{value_at, Obj};
use super::RdrrError;

named_enum! {
    /// `preferredKernels.matmul`.
    MatmulKernel {
        F32 = "f32",
        F16 = "f16",
        GemvF16 = "gemv_f16",
        Q4Fused = "q4_fused",
        Q4FusedBatched = "q4_fused_batched",
    }
}

named_enum! {
    /// `preferredKernels.attention`.
    AttentionKernel {
        TiledF16 = "tiled_f16",
        StreamingF16 = "streaming_f16",
        BasicF32 = "basic_f32",
    }
}

named_enum! {
    /// `preferredKernels.rmsnorm`.
    RmsNormKernel {
        F32 = "f32",
        F16 = "f16",
        F16Subgroup = "f16_subgroup",
    }
}

named_enum! {
    /// `preferredKernels.dequant`.
    DequantKernel {
        Q4k = "q4k",
        Q8 = "q8",
        F16Passthrough = "f16_passthrough",
    }
}

named_enum! {
    /// `preferredKernels.softmax`.
    SoftmaxKernel {
        F32 = "f32",
        F16Online = "f16_online",
    }
}

named_enum! {
    /// `attentionTier`: force an attention implementation tier.
    AttentionTier {
        Tiled = "tiled",
        Streaming = "streaming",
        Basic = "basic",
    }
}

/// The operations `preferredKernels` may name.
pub const KERNEL_OPERATIONS: &[&str] = &["matmul", "attention", "rmsnorm", "dequant", "softmax"];

/// A GPU feature named in `disableFeatures`. The spec's list is open-ended ("e.g."), so names
/// other than the two it documents are kept as written rather than refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GpuFeature {
    Subgroups,
    ShaderF16,
    Other(String),
}

impl GpuFeature {
    pub fn parse(name: &str) -> GpuFeature {
        match name {
            "subgroups" => GpuFeature::Subgroups,
            "shader-f16" => GpuFeature::ShaderF16,
            other => GpuFeature::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            GpuFeature::Subgroups => "subgroups",
            GpuFeature::ShaderF16 => "shader-f16",
            GpuFeature::Other(name) => name,
        }
    }
}

/// `preferredKernels`: operation -> kernel variant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreferredKernels {
    pub matmul: Option<MatmulKernel>,
    pub attention: Option<AttentionKernel>,
    pub rmsnorm: Option<RmsNormKernel>,
    pub dequant: Option<DequantKernel>,
    pub softmax: Option<SoftmaxKernel>,
}

/// `runtimeOptimizations`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeOptimizations {
    pub preferred_kernels: PreferredKernels,
    /// Kernel name (`matmul_f16`, `rmsnorm`, ...) -> workgroup size `[x, y, z]`, each >= 1.
    pub workgroup_overrides: BTreeMap<String, [u32; 3]>,
    pub disable_features: Vec<GpuFeature>,
    pub force_f32_accumulation: Option<bool>,
    pub attention_tier: Option<AttentionTier>,
    /// Device tuning hint (`apple-m1`, `nvidia-rtx`, ...).
    pub target_device: Option<String>,
}

impl RuntimeOptimizations {
    /// Hints written as a JSON object in the manifest's `runtimeOptimizations` form, outside a
    /// manifest (a caller's, `tritium run --hints`); `source` names the text in errors, whose
    /// fields are named as in a manifest (`runtimeOptimizations.preferredKernels.matmul`).
    pub fn from_json(source: &str, text: &str) -> Result<RuntimeOptimizations, RdrrError> {
        let value = super::json::parse(source, text.as_bytes())?;
        let mut top = serde_json::Map::new();
        top.insert("runtimeOptimizations".to_string(), value);
        let top = serde_json::Value::Object(top);
        let obj = Obj::new(source, String::new(), &top)?;
        Ok(parse(&obj, "runtimeOptimizations")?.unwrap_or_default())
    }
}

/// Parse field `key` of `top` as [`RuntimeOptimizations`].
pub(crate) fn parse(top: &Obj<'_>, key: &str) -> Result<Option<RuntimeOptimizations>, RdrrError> {
    let Some(obj) = top.object(key)? else {
        return Ok(None);
    };
    let mut hints = RuntimeOptimizations::default();
    if let Some(kernels) = obj.object("preferredKernels")? {
        let k = &mut hints.preferred_kernels;
        for op in kernels.map.keys() {
            let op = op.as_str();
            match op {
                "matmul" => {
                    k.matmul = kernels.named(op, MatmulKernel::from_name, MatmulKernel::NAMES)?
                }
                "attention" => {
                    k.attention =
                        kernels.named(op, AttentionKernel::from_name, AttentionKernel::NAMES)?
                }
                "rmsnorm" => {
                    k.rmsnorm = kernels.named(op, RmsNormKernel::from_name, RmsNormKernel::NAMES)?
                }
                "dequant" => {
                    k.dequant = kernels.named(op, DequantKernel::from_name, DequantKernel::NAMES)?
                }
                "softmax" => {
                    k.softmax = kernels.named(op, SoftmaxKernel::from_name, SoftmaxKernel::NAMES)?
                }
                _ => {
                    return Err(kernels.error(
                        op,
                        format!(
                            "unknown operation; expected one of: {}",
                            KERNEL_OPERATIONS.join(", ")
                        ),
                    ))
                }
            }
        }
    }
    if let Some(overrides) = obj.object("workgroupOverrides")? {
        for (kernel, value) in overrides.map {
            let path = overrides.field_path(kernel);
            let size: [u32; 3] = value_at(overrides.file, &path, value)?;
            if size.contains(&0) {
                return Err(overrides.error(kernel, "workgroup sizes must be at least 1"));
            }
            hints.workgroup_overrides.insert(kernel.clone(), size);
        }
    }
    if let Some(features) = obj.get::<Vec<String>>("disableFeatures")? {
        hints.disable_features = features.iter().map(|f| GpuFeature::parse(f)).collect();
    }
    hints.force_f32_accumulation = obj.get("forceF32Accumulation")?;
    hints.attention_tier = obj.named(
        "attentionTier",
        AttentionTier::from_name,
        AttentionTier::NAMES,
    )?;
    hints.target_device = obj.get("targetDevice")?;
    Ok(Some(hints))
}
