//! Where bytes live: native files and folders (this module), OPFS and HTTP (later).
//! Implements the pure formats' [`ByteSource`](crate::formats::source::ByteSource),
//! [`ModelFiles`](crate::formats::source::ModelFiles) and
//! [`ModelWriter`](crate::formats::source::ModelWriter) traits.

#[cfg(not(target_arch = "wasm32"))]
mod fs;

#[cfg(not(target_arch = "wasm32"))]
pub use fs::{DirFiles, FileSource};
