//! tritium: quantized LLM inference on the GPU through wgpu (WebGPU in the browser,
//! Vulkan/Metal natively).
//!
//! Layers, bottom up: [`formats`] (bytes to meaning) and [`quant`] (block layouts and CPU
//! dequantization) are pure; [`storage`] is where bytes live.

pub mod backend;
pub mod cpu;
pub mod engine;
pub mod error;
pub mod formats;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod model;
pub mod ops;
pub mod pass;
pub mod quant;
pub mod sampling;
pub mod session;
pub mod storage;
pub mod text;

#[cfg(all(feature = "cli", feature = "gpu", not(target_arch = "wasm32")))]
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub mod web;

pub use error::Error;
#[cfg(not(target_arch = "wasm32"))]
pub use session::open;
pub use session::{OpenOptions, Session};
