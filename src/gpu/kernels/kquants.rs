//! Kernel family: see the module list in kernels/mod.rs.

use super::{Kernel, KernelSource};
use crate::quant::GgmlType;

pub const FILES: &[(&str, &str)] = &[];

pub fn source(_kernel: Kernel) -> Option<KernelSource> {
    None
}

pub fn planes(_dtype: GgmlType, data: &[u8], _rows: u32, _cols: u32) -> Vec<Vec<u8>> {
    vec![data.to_vec()]
}

pub fn workgroups(_kernel: Kernel, rows: u32, _n_tokens: u32, _workgroup_size: u32) -> u32 {
    rows
}

/// Uniform structs of this family (checked against the WGSL by tests/gpu_uniforms.rs).
pub fn uniforms() -> Vec<crate::gpu::uniforms::UniformLayout> {
    Vec::new()
}
