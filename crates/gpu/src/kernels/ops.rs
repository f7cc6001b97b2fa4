//! Kernel family: norms, RoPE, attention, activations, sampling. The op structs that bind and
//! dispatch them live in `src/ops/`; their CPU twins in `crates/core/src/cpu/ops.rs`.

use std::borrow::Cow;

use super::{Kernel, KernelSource, NATIVE};

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
        // One subgroup of 32 (`AttentionOp::uses_coop`); native only (WebGPU has no
        // cooperative matrices).
        Kernel::AttentionCoop(_) if NATIVE => (
            &[
                "position_params.wgsl",
                "rope_angle.wgsl",
                "attention_params.wgsl",
                "attention_coop.wgsl",
            ],
            ATTENTION_COOP_WG,
        ),
        Kernel::Softmax => (&["softmax.wgsl"], 256),
        Kernel::ReluSquared => (&["elementwise.wgsl", "relu_squared.wgsl"], 256),
        Kernel::SiluMul => (&["elementwise.wgsl", "silu_mul.wgsl"], 256),
        Kernel::Add => (&["elementwise.wgsl", "add.wgsl"], 256),
        Kernel::Mul => (&["elementwise.wgsl", "mul.wgsl"], 256),
        Kernel::GeluMul => (&["elementwise.wgsl", "gelu_mul.wgsl"], 256),
        Kernel::Softcap => (&["elementwise.wgsl", "softcap.wgsl"], 256),
        Kernel::Argmax => (&["select_common.wgsl", "argmax.wgsl"], 256),
        Kernel::TopK => (&["select_common.wgsl", "top_k.wgsl"], 256),
        _ => return None,
    };
    Some(KernelSource {
        files: Cow::Borrowed(files),
        entry: match kernel {
            Kernel::AttentionGroup => "main_group",
            Kernel::AttentionDecode => "main_decode",
            _ => "main",
        },
        default_workgroup_size,
    })
}

/// Invocations per workgroup of the prefill attention on cooperative matrices
/// ([`Kernel::AttentionCoop`]): one subgroup of 32.
pub const ATTENTION_COOP_WG: u32 = 32;
