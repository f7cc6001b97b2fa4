//! The GPU runtime: one code path for Vulkan/Metal/DX12 natively and WebGPU in the browser.
//!
//! - [`context`]: device creation and what the device can do.
//! - [`kernels`]: the typed registry of WGSL kernels (one file per kernel in `shaders/`) and
//!   the pipeline cache keyed by [`kernels::PipelineKey`].
//! - [`buffers`]: storage, uniform and readback buffers.
//! - [`pool`]: the buffer pool the uniforms, scratch space and readback buffers of ops come
//!   from and return to.
//! - [`weights`]: quantized weights uploaded as-is (or repacked losslessly), split across
//!   bindings when they exceed the binding limit.
//! - [`matmul`]: matrix-vector and matrix-matrix products over any weight format.

pub mod bitlinear;
pub mod buffers;
pub mod context;
pub mod embedding;
pub mod kernels;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod q8;
pub mod selftest;
pub mod uniforms;
pub mod weights;

pub use context::{AdapterSummary, DeviceOptions, GpuContext, GpuFeatures, GpuLimits, Releaser};
pub use kernels::{Kernel, PipelineKey, Variant};
pub use pool::{BufferPool, PoolStats, Pooled};

/// Errors of the GPU layer.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("the GPU refused the device request: {0}")]
    RequestDevice(String),
    #[error("kernel {kernel}: {message}")]
    Shader { kernel: String, message: String },
    #[error("{what}: {bytes} bytes is more than this device allows ({limit})")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    #[error("{0} is not supported on the GPU")]
    Unsupported(String),
    #[error("GPU validation error: {0}")]
    Validation(String),
    #[error("reading back from the GPU failed: {0}")]
    Readback(String),
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    #[error(transparent)]
    Quant(#[from] crate::quant::QuantError),
}
