//! tritium-native-gds: CUDA for tritium's servers. It knows no models: a device with one stream
//! ([`Device`]), 4 KiB-aligned device buffers ([`DeviceBuffer`]), page-locked host buffers for
//! readback ([`HostBuffer`]), events, captured graphs ([`Graph`]), kernels compiled at run time
//! by NVRTC for the device's architecture and cached on disk ([`Module`]), and cuBLAS products
//! ([`Blas`]). The kernels themselves ([`kernels::SOURCE`]) are generic ops (products of packed
//! weight formats, norms, rotary embeddings, attention, selection).
//!
//! The CUDA libraries are loaded when a device is opened, not linked: the crate builds and its
//! users start on machines without CUDA, and what is missing is an error that names it
//! ([`GdsError::NoDriver`], [`GdsError::Library`]).

mod blas;
pub mod cache;
mod compile;
mod device;
mod error;
pub mod gds;
pub mod io;
pub mod kernels;
mod libs;

pub use blas::{Blas, GemmType};
pub use compile::{cache_dir, compile_cubin, Module};
pub use device::{Arg, Device, DeviceBuffer, DeviceInfo, Event, Graph, HostBuffer, Kernel};
pub use error::GdsError;
pub use libs::{library_dirs, load_nvrtc};

/// The crate's version, so that the root crate can report which runtime it links.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
