//! The browser's model store: OPFS (the Origin Private File System), wasm32 with the `web`
//! feature only.
//!
//! - [`OpfsStore`] implements [`ShardStore`](super::ShardStore) with the same semantics as the
//!   native [`FsStore`](super::FsStore): partial downloads persisted file by file with their
//!   verified hashes, a model complete only once its `complete` marker is written (last), list,
//!   get, delete, bytes used, plus `navigator.storage.estimate()` for the room left (the
//!   downloader refuses a model that does not fit before writing anything) and a `persist()`
//!   request.
//! - Writing picks what the context has: in a dedicated worker, `FileSystemSyncAccessHandle`s
//!   (writes go from wasm memory straight into the file, durable as they land; about 3x
//!   the throughput of writable streams in Chromium); on the main thread, where
//!   there are none, `createWritable` streams. A stream writes into a swap file that replaces
//!   the file when it closes, so an append reopens it with `keepExistingData: true` and seeks
//!   to its end, and a writer dropped mid-shard (cancellation) closes in the background, the
//!   store waiting for that close before it touches OPFS again, so the resume sees the bytes.
//!   Both keep every verified shard and the partial bytes of an interrupted one.
//! - Reading for the engine ([`OpfsFiles`]) uses `FileSystemSyncAccessHandle`s, because the
//!   model loader reads synchronously: tensor by tensor, straight into wasm memory, in a
//!   dedicated worker. Reading during downloads (hashing a resumed prefix, group read-back)
//!   is asynchronous (`getFile()` and `Blob.slice().arrayBuffer()`), so it works anywhere.

mod files;
mod js;
mod store;
mod writer;

pub use files::{OpfsFiles, OpfsFilesError};
pub use js::OPFS_ROOT;
pub use store::OpfsStore;
pub use writer::OpfsWriter;

pub use js::error_text;
