//! tritium: quantized LLM inference on the GPU through wgpu (WebGPU in the browser,
//! Vulkan/Metal natively).
//!
//! Layers, bottom up: [`formats`] (bytes to meaning) and [`quant`] (block layouts and CPU
//! dequantization) are pure; [`storage`] is where bytes live.

pub mod error;
pub mod formats;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod quant;
pub mod storage;

#[cfg(feature = "cli")]
pub mod cli;

pub use error::Error;
