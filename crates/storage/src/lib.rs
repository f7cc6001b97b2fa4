//! Where bytes live and how they arrive.
//!
//! - Native files and folders: [`FileSource`] and [`DirFiles`] implement the pure formats'
//!   [`ByteSource`](crate::formats::source::ByteSource),
//!   [`ModelFiles`](crate::formats::source::ModelFiles) and
//!   [`ModelWriter`](crate::formats::source::ModelWriter) traits.
//! - Model stores: the [`ShardStore`] interface of downloaded models, with [`FsStore`] (native
//!   model store), [`MemoryStore`] (tests) and OPFS (browser) behind it; [`resolve_model`] turns
//!   a command's model argument into a path.
//! - [`download`]: fetching RDRR models and GGUF files into a store, verified and resumable.

use tritium_core::formats;

pub mod download;
mod memory;
mod store;
#[cfg(test)]
mod store_tests;

#[cfg(not(target_arch = "wasm32"))]
mod fs;
#[cfg(not(target_arch = "wasm32"))]
mod fs_store;
/// The browser's model store (OPFS).
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub mod opfs;

pub use memory::{MemoryStore, MemoryWriter};
pub use store::{
    check_model_name, model_name_from_url, shard_count, ModelKind, PartialModel, ShardStore,
    ShardWriter, StoreError, StoredModel,
};

#[cfg(not(target_arch = "wasm32"))]
pub use fs::{DirFiles, FileSource};
#[cfg(not(target_arch = "wasm32"))]
pub use fs_store::{resolve_model, store_root, FsStore, FsWriter, STORE_ENV};
