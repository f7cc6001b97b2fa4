//! tritium-native-gds: streaming model weights from NVMe into VRAM with NVIDIA GPUDirect Storage
//! (cuFile) and running CUDA kernels on them, for servers whose models outgrow VRAM.
//!
//! This crate has no model knowledge. It is a compiling skeleton for now: cuFile I/O, aligned
//! device buffers, NVRTC kernels and the VRAM layer cache arrive with the GDS issue.

/// The crate's version, so that the root crate can report which GDS runtime it links.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
