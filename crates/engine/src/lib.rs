//! tritium's engine: models as passes of ops, the backends that run them, and one way to open
//! a model.
//!
//! - [`pass`]: a forward pass as a list of typed ops, and the planning rules that fuse them.
//! - [`backend`]: the CPU reference and the wgpu backend, behind one narrow interface.
//! - [`model`]: each architecture's forward pass (Llama, BitNet) and its weights.
//! - [`engine`]: a model on a backend with its KV cache: prefill, decode, generation.
//! - [`session`]: [`open`] resolves a model reference, detects its format, picks the backend
//!   and returns a [`Session`].
//! - [`error`]: the library's [`Error`], each lower layer's error joined with `#[from]`.

use tritium_core::{cpu, formats, ops, quant};
#[cfg(feature = "gpu")]
use tritium_gpu as gpu;
use tritium_storage as storage;
use tritium_text as text;

pub mod backend;
pub mod engine;
pub mod error;
pub mod model;
pub mod pass;
pub mod sampling;
pub mod session;

pub use error::Error;
#[cfg(not(target_arch = "wasm32"))]
pub use session::open;
pub use session::{OpenOptions, Session};
