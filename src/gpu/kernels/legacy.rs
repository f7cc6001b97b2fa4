//! F32, F16 and GGML's legacy block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): matvec, matmul and
//! embedding kernels.

use super::{Kernel, KernelSource};
use crate::quant::GgmlType;

pub const FILES: &[(&str, &str)] = &[
    (
        "matmul_params.wgsl",
        include_str!("../../../shaders/matmul_params.wgsl"),
    ),
    (
        "matvec_f32.wgsl",
        include_str!("../../../shaders/matvec_f32.wgsl"),
    ),
];

pub fn source(kernel: Kernel) -> Option<KernelSource> {
    match kernel {
        Kernel::Matvec(GgmlType::F32) => Some(KernelSource {
            files: &["matmul_params.wgsl", "matvec_f32.wgsl"],
            entry: "main",
            default_workgroup_size: 256,
        }),
        _ => None,
    }
}

/// The planes a chunk of rows is uploaded as: the file's bytes unchanged.
pub fn planes(_dtype: GgmlType, data: &[u8], _rows: u32, _cols: u32) -> Vec<Vec<u8>> {
    vec![data.to_vec()]
}

/// Workgroups for `rows` rows and `n_tokens` tokens.
pub fn workgroups(kernel: Kernel, rows: u32, _n_tokens: u32, _workgroup_size: u32) -> u32 {
    match kernel {
        Kernel::Matvec(_) => rows,
        _ => rows,
    }
}

/// Uniform structs of this family (checked against the WGSL by tests/gpu_uniforms.rs).
pub fn uniforms() -> Vec<crate::gpu::uniforms::UniformLayout> {
    Vec::new()
}
