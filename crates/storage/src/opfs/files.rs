//! [`OpfsFiles`]: a complete model in OPFS read synchronously, through
//! `FileSystemSyncAccessHandle`s, as the engine's loader reads files ([`ModelFiles`] and
//! [`ByteSource`] are synchronous). Sync access handles exist only in dedicated workers, so
//! loading a model from OPFS runs in one; each read goes straight into wasm memory, a tensor
//! at a time.

use std::collections::BTreeMap;

use wasm_bindgen::{JsCast, JsValue};
use web_sys::{FileSystemFileHandle, FileSystemReadWriteOptions, FileSystemSyncAccessHandle};

use super::js;
use super::store::OpfsStore;
use crate::formats::source::{check_range, ByteSource, ModelFiles, SourceError};
use crate::store::{ModelKind, StoreError};

/// Why a model in OPFS cannot be opened for synchronous reading.
#[derive(Debug, thiserror::Error)]
pub enum OpfsFilesError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Not in a dedicated worker: the page must load models in a `Worker`.
    #[error(
        "{0}: reading a model from OPFS needs FileSystemSyncAccessHandle, which exists only in \
         dedicated workers; load and run the model in a Worker"
    )]
    NeedsWorker(String),
    /// The browser refused a sync access handle (another tab or worker holds the file).
    #[error("{path}: {message}")]
    Open { path: String, message: String },
}

struct Handle {
    handle: FileSystemSyncAccessHandle,
    len: u64,
}

/// The files of a complete model in OPFS, open for synchronous reads. The handles close when
/// this is dropped.
pub struct OpfsFiles {
    files: BTreeMap<String, Handle>,
    /// `model/files`, for error messages.
    prefix: String,
    kind: ModelKind,
    gguf_file: Option<String>,
}

impl OpfsFiles {
    /// Open every file of the complete model `name` (a handful: shards and JSON files).
    pub async fn open(store: &OpfsStore, name: &str) -> Result<OpfsFiles, OpfsFilesError> {
        let (dir, kind, gguf_file) = store.complete_files(name).await?;
        let prefix = format!("opfs:/{}/models/{name}/files", super::js::OPFS_ROOT);
        let store_err = |e: &JsValue| StoreError::Io {
            path: prefix.clone(),
            message: js::error_text(e),
        };
        let mut files = BTreeMap::new();
        for entry in js::entries(&dir).await.map_err(|e| store_err(&e))? {
            if entry.is_dir() {
                continue;
            }
            let path = format!("{prefix}/{}", entry.name);
            let file: FileSystemFileHandle = entry.handle.unchecked_into();
            let has_sync = js_sys::Reflect::get(&file, &"createSyncAccessHandle".into())
                .is_ok_and(|f| f.is_function());
            if !has_sync {
                return Err(OpfsFilesError::NeedsWorker(path));
            }
            let handle: FileSystemSyncAccessHandle = js::wait(file.create_sync_access_handle())
                .await
                .map_err(|e| OpfsFilesError::Open {
                    path: path.clone(),
                    message: js::error_text(&e),
                })?
                .unchecked_into();
            let len = handle.get_size().map_err(|e| OpfsFilesError::Open {
                path: path.clone(),
                message: js::error_text(&e),
            })? as u64;
            files.insert(entry.name, Handle { handle, len });
        }
        Ok(OpfsFiles {
            files,
            prefix,
            kind,
            gguf_file,
        })
    }

    /// RDRR or GGUF.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }

    /// The file that is the model, for a GGUF model.
    pub fn gguf_file(&self) -> Option<&str> {
        self.gguf_file.as_deref()
    }

    /// Bytes of all the model's files.
    pub fn total_bytes(&self) -> u64 {
        self.files.values().map(|h| h.len).sum()
    }
}

impl Drop for OpfsFiles {
    fn drop(&mut self) {
        for h in self.files.values() {
            h.handle.close();
        }
    }
}

/// One open file.
struct OpfsSource<'a> {
    handle: &'a Handle,
    name: String,
}

impl ByteSource for OpfsSource<'_> {
    fn len(&self) -> u64 {
        self.handle.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range(&self.name, offset, buf.len() as u64, self.handle.len)?;
        let options = FileSystemReadWriteOptions::new();
        let mut done = 0usize;
        while done < buf.len() {
            options.set_at((offset + done as u64) as f64);
            let n = self
                .handle
                .handle
                .read_with_u8_array_and_options(&mut buf[done..], &options)
                .map_err(|e| SourceError::Io {
                    path: self.name.clone(),
                    message: js::error_text(&e),
                })? as usize;
            if n == 0 {
                return Err(SourceError::Io {
                    path: self.name.clone(),
                    message: format!("the file ended at byte {}", offset + done as u64),
                });
            }
            done += n;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl ModelFiles for OpfsFiles {
    fn open<'a>(&'a self, path: &str) -> Result<Box<dyn ByteSource + 'a>, SourceError> {
        crate::formats::source::check_relative_path(path)?;
        let handle = self.files.get(path).ok_or_else(|| SourceError::NotFound {
            path: format!("{}/{path}", self.prefix),
        })?;
        Ok(Box::new(OpfsSource {
            handle,
            name: format!("{}/{path}", self.prefix),
        }))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        if !dir.is_empty() {
            return Err(SourceError::NotFound {
                path: format!("{}/{dir}", self.prefix),
            });
        }
        Ok(self.files.keys().cloned().collect())
    }
}
