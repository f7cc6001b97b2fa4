//! Kernel family: norms, RoPE, attention, activations, sampling.

use super::{Kernel, KernelSource};

pub const FILES: &[(&str, &str)] = &[];

pub fn source(_kernel: Kernel) -> Option<KernelSource> {
    None
}

/// Uniform structs of this family (checked against the WGSL by tests/gpu_uniforms.rs).
pub fn uniforms() -> Vec<crate::gpu::uniforms::UniformLayout> {
    Vec::new()
}
