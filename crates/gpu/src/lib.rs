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

use tritium_core::{cpu, quant};

pub mod bitlinear;
pub mod buffers;
pub mod context;
pub mod embedding;
pub mod error;
pub mod kernels;
pub mod matmul;
pub mod ops;
pub mod pipelines;
pub mod pool;
pub mod q8;
pub mod selftest;
pub mod uniforms;
pub mod weights;

pub use context::{
    AdapterSummary, DeviceOptions, GpuContext, GpuFeatures, GpuLimits, KernelPolicy, Releaser,
};
pub use error::GpuError;
pub use kernels::{Kernel, PipelineKey, Variant};
pub use pool::{BufferPool, PoolStats, Pooled};
