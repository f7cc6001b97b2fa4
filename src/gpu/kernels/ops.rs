//! Kernel family: norms, RoPE, attention, activations, sampling. The op structs that bind and
//! dispatch them live in `src/gpu/ops/`; their CPU twins in `src/cpu/ops.rs`.

use super::{Kernel, KernelSource};

/// The prefill attention on cooperative matrices, native only (WebGPU has none).
#[cfg(not(target_arch = "wasm32"))]
pub const NATIVE_FILES: &[(&str, &str)] = &[(
    "attention_coop.wgsl",
    include_str!("../../../shaders/attention_coop.wgsl"),
)];
#[cfg(target_arch = "wasm32")]
pub const NATIVE_FILES: &[(&str, &str)] = &[];

pub const FILES: &[(&str, &str)] = &[
    (
        "position_params.wgsl",
        include_str!("../../../shaders/position_params.wgsl"),
    ),
    (
        "rms_norm.wgsl",
        include_str!("../../../shaders/rms_norm.wgsl"),
    ),
    ("rope.wgsl", include_str!("../../../shaders/rope.wgsl")),
    (
        "rope_angle.wgsl",
        include_str!("../../../shaders/rope_angle.wgsl"),
    ),
    (
        "attention_params.wgsl",
        include_str!("../../../shaders/attention_params.wgsl"),
    ),
    (
        "attention_partials.wgsl",
        include_str!("../../../shaders/attention_partials.wgsl"),
    ),
    (
        "attention_partials_coherent.wgsl",
        include_str!("../../../shaders/attention_partials_coherent.wgsl"),
    ),
    (
        "attention_norm.wgsl",
        include_str!("../../../shaders/attention_norm.wgsl"),
    ),
    (
        "attention_norm_none.wgsl",
        include_str!("../../../shaders/attention_norm_none.wgsl"),
    ),
    (
        "attention.wgsl",
        include_str!("../../../shaders/attention.wgsl"),
    ),
    (
        "attention_combine.wgsl",
        include_str!("../../../shaders/attention_combine.wgsl"),
    ),
    (
        "softmax.wgsl",
        include_str!("../../../shaders/softmax.wgsl"),
    ),
    (
        "elementwise.wgsl",
        include_str!("../../../shaders/elementwise.wgsl"),
    ),
    (
        "relu_squared.wgsl",
        include_str!("../../../shaders/relu_squared.wgsl"),
    ),
    (
        "silu_mul.wgsl",
        include_str!("../../../shaders/silu_mul.wgsl"),
    ),
    ("add.wgsl", include_str!("../../../shaders/add.wgsl")),
    (
        "select_common.wgsl",
        include_str!("../../../shaders/select_common.wgsl"),
    ),
    ("argmax.wgsl", include_str!("../../../shaders/argmax.wgsl")),
    ("top_k.wgsl", include_str!("../../../shaders/top_k.wgsl")),
];

pub fn source(kernel: Kernel) -> Option<KernelSource> {
    let (files, default_workgroup_size): (&'static [&'static str], u32) = match kernel {
        Kernel::RmsNorm => (&["rms_norm.wgsl"], 256),
        Kernel::Rope => (
            &["position_params.wgsl", "rope_angle.wgsl", "rope.wgsl"],
            64,
        ),
        // 256: one key per thread in the scores loop (TILE = 256 keys); a power of two from 16
        // to 256, at least head_dim / 4 (`AttentionOp` takes less on CPU adapters).
        Kernel::Attention | Kernel::AttentionGroup => (
            &[
                "position_params.wgsl",
                "rope_angle.wgsl",
                "absmax_scale.wgsl",
                "q8_quarter.wgsl",
                "attention_params.wgsl",
                "attention_partials.wgsl",
                "attention_norm_none.wgsl",
                "attention.wgsl",
                "attention_combine.wgsl",
            ],
            256,
        ),
        Kernel::AttentionDecode => (
            &[
                "position_params.wgsl",
                "rope_angle.wgsl",
                "absmax_scale.wgsl",
                "q8_quarter.wgsl",
                "attention_params.wgsl",
                "attention_partials_coherent.wgsl",
                "attention_norm.wgsl",
                "attention.wgsl",
                "attention_combine.wgsl",
            ],
            256,
        ),
        // One subgroup of 32 (`AttentionOp::uses_coop`).
        Kernel::AttentionCoop(_) if !NATIVE_FILES.is_empty() => (
            &[
                "position_params.wgsl",
                "rope_angle.wgsl",
                "attention_params.wgsl",
                "attention_coop.wgsl",
            ],
            crate::gpu::ops::attention::COOP_WG,
        ),
        Kernel::Softmax => (&["softmax.wgsl"], 256),
        Kernel::ReluSquared => (&["elementwise.wgsl", "relu_squared.wgsl"], 256),
        Kernel::SiluMul => (&["elementwise.wgsl", "silu_mul.wgsl"], 256),
        Kernel::Add => (&["elementwise.wgsl", "add.wgsl"], 256),
        Kernel::Argmax => (&["select_common.wgsl", "argmax.wgsl"], 256),
        Kernel::TopK => (&["select_common.wgsl", "top_k.wgsl"], 256),
        _ => return None,
    };
    Some(KernelSource {
        files,
        entry: match kernel {
            Kernel::AttentionGroup => "main_group",
            Kernel::AttentionDecode => "main_decode",
            _ => "main",
        },
        default_workgroup_size,
    })
}

/// Uniform structs of this family (checked against the WGSL by tests/gpu_uniforms.rs).
pub fn uniforms() -> Vec<crate::gpu::uniforms::UniformLayout> {
    use crate::gpu::ops;
    use crate::gpu::uniforms::UniformLayout;
    vec![
        UniformLayout::of::<ops::PositionParams>(),
        UniformLayout::of::<ops::norm::RmsNormParams>(),
        UniformLayout::of::<ops::norm::SoftmaxParams>(),
        UniformLayout::of::<ops::rope::RopeParams>(),
        UniformLayout::of::<ops::attention::AttentionParams>(),
        UniformLayout::of::<ops::elementwise::ElementwiseParams>(),
        UniformLayout::of::<ops::select::SelectParams>(),
    ]
}
