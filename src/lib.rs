//! tritium: quantized LLM inference on the GPU through wgpu (WebGPU in the browser,
//! Vulkan/Metal natively).
//!
//! The library is a facade over the workspace's crates, bottom up (a crate imports only the
//! ones below it, which Cargo enforces):
//! - `tritium-core`: [`quant`] (block layouts, the dtype registry, CPU dequantization),
//!   [`formats`] (model files from bytes to meaning), [`ops`] (the op vocabulary both backends
//!   share) and [`cpu`] (the CPU reference kernels);
//! - `tritium-text` ([`text`]: tokenizers, chat templates) and `tritium-storage` ([`storage`]:
//!   files, model stores, verified downloads);
//! - `tritium-gpu` ([`gpu`]: the wgpu runtime and the WGSL kernel registry);
//! - `tritium-engine`: [`pass`], [`backend`], [`model`], [`engine`], [`sampling`], [`session`]
//!   ([`open`]) and [`error`];
//! - this crate: the command line ([`cli`], `bench`) and the browser entry points (`web`).

pub use tritium_core::{cpu, formats, ops, quant};
pub use tritium_engine::{backend, engine, error, model, pass, sampling, session};
#[cfg(feature = "gpu")]
pub use tritium_gpu as gpu;
pub use tritium_storage as storage;
pub use tritium_text as text;

#[cfg(all(feature = "cli", feature = "gpu", not(target_arch = "wasm32")))]
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(all(feature = "cli", not(target_arch = "wasm32")))]
pub mod server;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub mod web;

pub use error::Error;
#[cfg(not(target_arch = "wasm32"))]
pub use session::open;
pub use session::{OpenOptions, Session};
