//! tritium's pure bottom layer: no GPU, no I/O beyond the bytes it is handed.
//!
//! - [`quant`]: block layouts, the dtype registry, CPU dequantization and quantization.
//! - [`formats`]: model files (GGUF, RDRR, safetensors, Trellis, Hugging Face folders) from
//!   bytes to meaning, and the byte-source traits the storage layer implements.
//! - [`ops`]: the op vocabulary both backends share (RoPE, attention shapes, elementwise ops).
//! - [`cpu`]: the CPU reference kernels.

pub mod cpu;
pub mod formats;
pub mod ops;
pub mod quant;
