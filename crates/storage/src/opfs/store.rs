//! [`OpfsStore`]: the [`ShardStore`] of the browser.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use futures_util::lock::Mutex;
use serde::{Deserialize, Serialize};
use web_sys::{FileSystemDirectoryHandle, FileSystemFileHandle};

use super::js;
use super::writer::OpfsWriter;
use crate::formats::rdrr::MANIFEST_FILE;
use crate::store::{
    check_model_name, shard_count, ModelKind, PartialModel, ShardStore, StoreError, StoredModel,
};

use super::js::{io, MODELS, OPFS_ROOT};
const FILES: &str = "files";
const STATE: &str = "state.json";
const COMPLETE: &str = "complete";

/// What `state.json` holds: where the download comes from and what verified.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    source: String,
    verified: BTreeMap<String, String>,
}

/// What the `complete` marker holds.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    /// `rdrr` or `gguf`.
    kind: String,
    /// The model file of a GGUF model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<String>,
}

fn not_begun(model: &str) -> StoreError {
    StoreError::NotFound {
        name: model.to_string(),
        why: "no download of it was begun".to_string(),
    }
}

/// File names inside a model are plain names: no folders.
fn check_file(file: &str) -> Result<(), StoreError> {
    crate::formats::source::check_relative_path(file)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            if file.contains('/') {
                Err("OPFS models hold plain file names, not folders".to_string())
            } else {
                Ok(())
            }
        })
        .map_err(|why| StoreError::BadName {
            name: file.to_string(),
            why,
        })
}

/// The model store in the browser's Origin Private File System.
///
/// ```text
/// <OPFS>/tritium/models/<name>/files/...   the model's files (an RDRR folder, or one GGUF)
/// <OPFS>/tritium/models/<name>/state.json  source URL and the files verified so far
/// <OPFS>/tritium/models/<name>/complete    the marker written last, by commit
/// ```
///
/// A model is complete exactly when its `complete` marker exists; the model's own files live
/// in `files/`, so no file a manifest names can pose as the marker or the state. Files are
/// appended to through sync access handles where there are some (a dedicated worker: about
/// 3x faster, no copy), else through `createWritable` streams opened with `keepExistingData`
/// and a seek to the end (the main thread); `state.json` and the marker are replaced whole
/// through writable streams (which swap their file in when they close, so those are never
/// half written). Nothing is written before the first file of a download:
/// [`ShardStore::begin`] only reads, so a download refused for lack of room leaves no trace.
pub struct OpfsStore {
    root: FileSystemDirectoryHandle,
    /// Sources of downloads begun but not yet written to.
    sources: RefCell<HashMap<String, String>>,
    /// Serializes read-modify-write of the state files.
    state_lock: Mutex<()>,
    /// Write through sync access handles (a dedicated worker has them).
    sync_handles: bool,
    /// Whether this store writes the state files (not on a worker fetching a download's shard:
    /// the download's own thread keeps them).
    state_updates: bool,
}

impl OpfsStore {
    /// The store of this origin (nothing is created until a download writes).
    pub async fn open() -> Result<OpfsStore, StoreError> {
        let root = js::opfs_root()
            .await
            .map_err(|e| StoreError::NoRoot(js::error_text(&e)))?;
        Ok(OpfsStore {
            root,
            sources: RefCell::default(),
            state_lock: Mutex::new(()),
            sync_handles: js::has_sync_access_handles(),
            state_updates: true,
        })
    }

    /// This store for a worker fetching one shard of a download another thread runs: it writes
    /// the shard's file and never the state file (which that thread keeps; the shard it is given
    /// is never marked verified while it runs, so there is no mark for it to remove).
    pub fn without_state_updates(mut self) -> OpfsStore {
        self.state_updates = false;
        self
    }

    /// Wait until writers dropped unfinished (a cancelled download) have closed, so that
    /// what they wrote is in OPFS.
    pub async fn settle(&self) {
        super::writer::settle().await;
    }

    async fn models(&self, create: bool) -> Result<Option<FileSystemDirectoryHandle>, StoreError> {
        let path = "";
        let Some(top) = js::dir(&self.root, OPFS_ROOT, create)
            .await
            .map_err(|e| io(path, &e))?
        else {
            return Ok(None);
        };
        js::dir(&top, MODELS, create)
            .await
            .map_err(|e| io(path, &e))
    }

    /// The folder of model `model`, created (with its state) when `create`.
    async fn model_dir(
        &self,
        model: &str,
        create: bool,
    ) -> Result<Option<FileSystemDirectoryHandle>, StoreError> {
        check_model_name(model)?;
        let Some(models) = self.models(create).await? else {
            return Ok(None);
        };
        let existing = js::dir(&models, model, false)
            .await
            .map_err(|e| io(model, &e))?;
        match existing {
            Some(d) => Ok(Some(d)),
            None if !create => Ok(None),
            None => {
                // Made once, with its state, even by concurrent callers.
                let _guard = self.state_lock.lock().await;
                if let Some(d) = js::dir(&models, model, false)
                    .await
                    .map_err(|e| io(model, &e))?
                {
                    return Ok(Some(d));
                }
                let source = self
                    .sources
                    .borrow()
                    .get(model)
                    .cloned()
                    .ok_or_else(|| not_begun(model))?;
                let d = js::dir(&models, model, true)
                    .await
                    .map_err(|e| io(model, &e))?
                    .ok_or_else(|| not_begun(model))?;
                let state = State {
                    source,
                    verified: BTreeMap::new(),
                };
                self.write_state(&d, model, &state).await?;
                Ok(Some(d))
            }
        }
    }

    /// The `files/` folder of a partial download (created with `create`).
    async fn files_dir(
        &self,
        model: &str,
        create: bool,
    ) -> Result<Option<FileSystemDirectoryHandle>, StoreError> {
        let Some(d) = self.model_dir(model, create).await? else {
            return Ok(None);
        };
        if !create && self.is_complete(&d, model).await? {
            return Err(StoreError::Io {
                path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{model}"),
                message: "the model is complete; it has no download in progress".to_string(),
            });
        }
        js::dir(&d, FILES, create)
            .await
            .map_err(|e| io(&format!("{model}/{FILES}"), &e))
    }

    async fn partial_handle(
        &self,
        model: &str,
        file: &str,
        create: bool,
    ) -> Result<Option<FileSystemFileHandle>, StoreError> {
        check_file(file)?;
        let Some(files) = self.files_dir(model, create).await? else {
            return Ok(None);
        };
        js::file(&files, file, create)
            .await
            .map_err(|e| io(&format!("{model}/{FILES}/{file}"), &e))
    }

    async fn is_complete(
        &self,
        d: &FileSystemDirectoryHandle,
        model: &str,
    ) -> Result<bool, StoreError> {
        Ok(js::file(d, COMPLETE, false)
            .await
            .map_err(|e| io(&format!("{model}/{COMPLETE}"), &e))?
            .is_some())
    }

    async fn read_state(
        &self,
        d: &FileSystemDirectoryHandle,
        model: &str,
    ) -> Result<Option<State>, StoreError> {
        let path = format!("{model}/{STATE}");
        let Some(h) = js::file(d, STATE, false).await.map_err(|e| io(&path, &e))? else {
            return Ok(None);
        };
        let bytes = js::read_all(&h).await.map_err(|e| io(&path, &e))?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{path}"),
                message: e.to_string(),
            })
    }

    async fn write_state(
        &self,
        d: &FileSystemDirectoryHandle,
        model: &str,
        state: &State,
    ) -> Result<(), StoreError> {
        let path = format!("{model}/{STATE}");
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let h = js::file(d, STATE, true)
            .await
            .map_err(|e| io(&path, &e))?
            .ok_or_else(|| not_begun(model))?;
        js::write_whole(&h, &bytes).await.map_err(|e| io(&path, &e))
    }

    /// Change the state of a partial download (one change at a time).
    async fn update_state(
        &self,
        model: &str,
        f: impl FnOnce(&mut State),
    ) -> Result<(), StoreError> {
        if !self.state_updates {
            return Ok(());
        }
        let d = self
            .model_dir(model, true)
            .await?
            .ok_or_else(|| not_begun(model))?;
        let _guard = self.state_lock.lock().await;
        let mut state = self.read_state(&d, model).await?.unwrap_or_default();
        f(&mut state);
        self.write_state(&d, model, &state).await
    }

    /// Sum of the sizes of the files under `dir`.
    async fn dir_bytes(dir: &FileSystemDirectoryHandle, path: &str) -> Result<u64, StoreError> {
        let mut total = 0;
        let mut stack = vec![(dir.clone(), path.to_string())];
        while let Some((d, p)) = stack.pop() {
            for entry in js::entries(&d).await.map_err(|e| io(&p, &e))? {
                let child = format!("{p}/{}", entry.name);
                if entry.is_dir() {
                    stack.push((wasm_bindgen::JsCast::unchecked_into(entry.handle), child));
                } else {
                    let h: FileSystemFileHandle =
                        wasm_bindgen::JsCast::unchecked_into(entry.handle);
                    total += js::file_size(&h).await.map_err(|e| io(&child, &e))?;
                }
            }
        }
        Ok(total)
    }

    /// The complete model in folder `d`, if it is one.
    async fn stored(
        &self,
        name: &str,
        d: &FileSystemDirectoryHandle,
    ) -> Result<Option<StoredModel>, StoreError> {
        let marker_path = format!("{name}/{COMPLETE}");
        let Some(h) = js::file(d, COMPLETE, false)
            .await
            .map_err(|e| io(&marker_path, &e))?
        else {
            return Ok(None);
        };
        let bytes = js::read_all(&h).await.map_err(|e| io(&marker_path, &e))?;
        let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: marker_path.clone(),
            message: e.to_string(),
        })?;
        let kind = match marker.kind.as_str() {
            "gguf" => ModelKind::Gguf,
            _ => ModelKind::Rdrr,
        };
        let files_path = format!("{name}/{FILES}");
        let files = js::dir(d, FILES, false)
            .await
            .map_err(|e| io(&files_path, &e))?
            .ok_or_else(|| StoreError::Corrupt {
                path: files_path.clone(),
                message: "a complete model without its files".to_string(),
            })?;
        let bytes = Self::dir_bytes(&files, &files_path).await?;
        let shards = match kind {
            ModelKind::Gguf => 0,
            ModelKind::Rdrr => match js::file(&files, MANIFEST_FILE, false).await {
                Ok(Some(m)) => js::read_all(&m).await.map_or(0, |b| shard_count(&b)),
                _ => 0,
            },
        };
        let location = match &marker.file {
            Some(f) => format!("opfs:/{OPFS_ROOT}/{MODELS}/{name}/{FILES}/{f}"),
            None => format!("opfs:/{OPFS_ROOT}/{MODELS}/{name}/{FILES}"),
        };
        Ok(Some(StoredModel {
            name: name.to_string(),
            kind,
            bytes,
            shards,
            location,
        }))
    }

    /// The model folders: (name, handle).
    async fn model_dirs(&self) -> Result<Vec<(String, FileSystemDirectoryHandle)>, StoreError> {
        let Some(models) = self.models(false).await? else {
            return Ok(Vec::new());
        };
        let entries = js::entries(&models).await.map_err(|e| io("", &e))?;
        Ok(entries
            .into_iter()
            .filter(|e| e.is_dir() && check_model_name(&e.name).is_ok())
            .map(|e| (e.name, wasm_bindgen::JsCast::unchecked_into(e.handle)))
            .collect())
    }

    /// The `files/` folder of the complete model `name` and, for a GGUF model, its file name.
    pub async fn complete_files(
        &self,
        name: &str,
    ) -> Result<(FileSystemDirectoryHandle, ModelKind, Option<String>), StoreError> {
        self.settle().await;
        let missing = || StoreError::NotFound {
            name: name.to_string(),
            why: "it is not in the browser's model store (OPFS)".to_string(),
        };
        let d = self.model_dir(name, false).await?.ok_or_else(missing)?;
        let h = js::file(&d, COMPLETE, false)
            .await
            .map_err(|e| io(name, &e))?
            .ok_or_else(|| StoreError::NotFound {
                name: name.to_string(),
                why: "its download has not completed".to_string(),
            })?;
        let bytes = js::read_all(&h).await.map_err(|e| io(name, &e))?;
        let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: format!("{name}/{COMPLETE}"),
            message: e.to_string(),
        })?;
        let files = js::dir(&d, FILES, false)
            .await
            .map_err(|e| io(name, &e))?
            .ok_or_else(missing)?;
        let kind = if marker.kind == "gguf" {
            ModelKind::Gguf
        } else {
            ModelKind::Rdrr
        };
        Ok((files, kind, marker.file))
    }

    /// Write through writable streams even where sync access handles exist (they are used by
    /// default where there are some).
    pub fn use_writable_streams(&mut self) {
        self.sync_handles = false;
    }

    /// True when files are written through sync access handles.
    pub fn writes_with_sync_handles(&self) -> bool {
        self.sync_handles
    }

    /// `navigator.storage.estimate()`: bytes used by this origin and its quota.
    pub async fn estimate(&self) -> Result<(u64, Option<u64>), StoreError> {
        js::estimate().await.map_err(|e| StoreError::Io {
            path: "navigator.storage.estimate()".to_string(),
            message: js::error_text(&e),
        })
    }

    /// Ask that this origin's storage be kept under storage pressure
    /// (`navigator.storage.persist()`); `None` where that cannot be asked (a worker).
    pub async fn persist(&self) -> Option<bool> {
        js::persist().await
    }
}

impl ShardStore for OpfsStore {
    type Writer = OpfsWriter;

    async fn prepare(&self, model: &str) -> Result<(), StoreError> {
        self.settle().await;
        self.model_dir(model, true)
            .await?
            .map(drop)
            .ok_or_else(|| not_begun(model))
    }

    async fn begin(&self, model: &str, source: &str) -> Result<PartialModel, StoreError> {
        check_model_name(model)?;
        self.settle().await;
        self.sources
            .borrow_mut()
            .insert(model.to_string(), source.to_string());
        let fresh = PartialModel {
            name: model.to_string(),
            source: Some(source.to_string()),
            verified: BTreeMap::new(),
            bytes: 0,
        };
        let Some(d) = self.model_dir(model, false).await? else {
            return Ok(fresh);
        };
        if self.is_complete(&d, model).await? {
            return Err(StoreError::Io {
                path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{model}"),
                message: "a model of this name is already in the store".to_string(),
            });
        }
        // A state that cannot be read counts as none: the files are fetched again.
        match self.read_state(&d, model).await.unwrap_or(None) {
            Some(state) if state.source == source => {
                let bytes = match js::dir(&d, FILES, false).await {
                    Ok(Some(files)) => Self::dir_bytes(&files, model).await?,
                    _ => 0,
                };
                Ok(PartialModel {
                    name: model.to_string(),
                    source: Some(state.source),
                    verified: state.verified,
                    bytes,
                })
            }
            _ => {
                // Another source's download (or a broken one): dropped. Nothing new is
                // written until the first file.
                let models = self.models(false).await?.ok_or_else(|| not_begun(model))?;
                js::remove(&models, model)
                    .await
                    .map_err(|e| io(model, &e))?;
                Ok(fresh)
            }
        }
    }

    async fn partial_files(&self, model: &str) -> Result<Vec<String>, StoreError> {
        self.settle().await;
        let Some(files) = self.files_dir(model, false).await? else {
            return Ok(Vec::new());
        };
        let entries = js::entries(&files).await.map_err(|e| io(model, &e))?;
        Ok(entries
            .into_iter()
            .filter(|e| !e.is_dir())
            .map(|e| e.name)
            .collect())
    }

    async fn partial_len(&self, model: &str, file: &str) -> Result<Option<u64>, StoreError> {
        self.settle().await;
        let Some(h) = self.partial_handle(model, file, false).await? else {
            return Ok(None);
        };
        let size = js::file_size(&h)
            .await
            .map_err(|e| io(&format!("{model}/{FILES}/{file}"), &e))?;
        Ok(Some(size))
    }

    async fn append(
        &self,
        model: &str,
        file: &str,
        truncate: bool,
    ) -> Result<OpfsWriter, StoreError> {
        check_file(file)?;
        self.settle().await;
        if truncate {
            self.update_state(model, |s| {
                s.verified.remove(file);
            })
            .await?;
        }
        let path = format!("{model}/{FILES}/{file}");
        let h = self
            .partial_handle(model, file, true)
            .await?
            .ok_or_else(|| not_begun(model))?;
        OpfsWriter::open(&h, path, truncate, self.sync_handles).await
    }

    async fn read_partial(
        &self,
        model: &str,
        file: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        self.settle().await;
        let path = format!("{model}/{FILES}/{file}");
        let h = self
            .partial_handle(model, file, false)
            .await?
            .ok_or_else(|| StoreError::Io {
                path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{path}"),
                message: "no such file".to_string(),
            })?;
        js::read_at(&h, offset, buf)
            .await
            .map_err(|e| io(&path, &e))
    }

    async fn remove_partial_file(&self, model: &str, file: &str) -> Result<(), StoreError> {
        check_file(file)?;
        self.settle().await;
        if self.model_dir(model, false).await?.is_none() {
            return Ok(());
        }
        self.update_state(model, |s| {
            s.verified.remove(file);
        })
        .await?;
        if let Some(files) = self.files_dir(model, false).await? {
            js::remove(&files, file)
                .await
                .map_err(|e| io(&format!("{model}/{FILES}/{file}"), &e))?;
        }
        Ok(())
    }

    async fn mark_verified(&self, model: &str, file: &str, hash: &str) -> Result<(), StoreError> {
        self.settle().await;
        if self.partial_handle(model, file, false).await?.is_none() {
            return Err(StoreError::Io {
                path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{model}/{FILES}/{file}"),
                message: "marked verified but it does not exist".to_string(),
            });
        }
        self.update_state(model, |s| {
            s.verified
                .insert(file.to_string(), hash.to_ascii_lowercase());
        })
        .await
    }

    async fn commit(&self, model: &str, kind: ModelKind, file: &str) -> Result<(), StoreError> {
        self.settle().await;
        let d = self
            .model_dir(model, false)
            .await?
            .ok_or_else(|| not_begun(model))?;
        if self.is_complete(&d, model).await? {
            return Err(StoreError::Io {
                path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{model}"),
                message: "a model of this name is already in the store".to_string(),
            });
        }
        let marker = match kind {
            ModelKind::Rdrr => Marker {
                kind: "rdrr".to_string(),
                file: None,
            },
            ModelKind::Gguf => {
                if self.partial_handle(model, file, false).await?.is_none() {
                    return Err(StoreError::Io {
                        path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{model}/{FILES}/{file}"),
                        message: "committed but it does not exist".to_string(),
                    });
                }
                Marker {
                    kind: "gguf".to_string(),
                    file: Some(file.to_string()),
                }
            }
        };
        let bytes = serde_json::to_vec(&marker).map_err(|e| StoreError::Corrupt {
            path: model.to_string(),
            message: e.to_string(),
        })?;
        let path = format!("{model}/{COMPLETE}");
        let h = js::file(&d, COMPLETE, true)
            .await
            .map_err(|e| io(&path, &e))?
            .ok_or_else(|| not_begun(model))?;
        // The marker is the last thing written: from here on the model is complete.
        js::write_whole(&h, &bytes)
            .await
            .map_err(|e| io(&path, &e))?;
        // What is left of the partial state is clutter.
        let _ = js::remove(&d, STATE).await;
        self.sources.borrow_mut().remove(model);
        Ok(())
    }

    async fn discard_partial(&self, model: &str) -> Result<(), StoreError> {
        check_model_name(model)?;
        self.settle().await;
        self.sources.borrow_mut().remove(model);
        let Some(d) = self.model_dir(model, false).await? else {
            return Ok(());
        };
        if self.is_complete(&d, model).await? {
            return Ok(());
        }
        if let Some(models) = self.models(false).await? {
            js::remove(&models, model)
                .await
                .map_err(|e| io(model, &e))?;
        }
        Ok(())
    }

    async fn list(&self) -> Result<Vec<StoredModel>, StoreError> {
        self.settle().await;
        let mut out = Vec::new();
        for (name, d) in self.model_dirs().await? {
            if let Some(m) = self.stored(&name, &d).await? {
                out.push(m);
            }
        }
        Ok(out)
    }

    async fn list_partial(&self) -> Result<Vec<PartialModel>, StoreError> {
        self.settle().await;
        let mut out = Vec::new();
        for (name, d) in self.model_dirs().await? {
            if self.is_complete(&d, &name).await? {
                continue;
            }
            let state = self
                .read_state(&d, &name)
                .await
                .unwrap_or(None)
                .unwrap_or_default();
            let bytes = match js::dir(&d, FILES, false).await {
                Ok(Some(files)) => Self::dir_bytes(&files, &name).await?,
                _ => 0,
            };
            out.push(PartialModel {
                name,
                source: Some(state.source),
                verified: state.verified,
                bytes,
            });
        }
        Ok(out)
    }

    async fn get(&self, name: &str) -> Result<Option<StoredModel>, StoreError> {
        check_model_name(name)?;
        self.settle().await;
        match self.model_dir(name, false).await? {
            Some(d) => self.stored(name, &d).await,
            None => Ok(None),
        }
    }

    async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        check_model_name(name)?;
        self.settle().await;
        self.sources.borrow_mut().remove(name);
        let Some(models) = self.models(false).await? else {
            return Ok(false);
        };
        js::remove(&models, name).await.map_err(|e| io(name, &e))
    }

    async fn bytes_used(&self) -> Result<u64, StoreError> {
        self.settle().await;
        match js::dir(&self.root, OPFS_ROOT, false).await {
            Ok(Some(top)) => Self::dir_bytes(&top, "").await,
            Ok(None) => Ok(0),
            Err(e) => Err(io("", &e)),
        }
    }

    async fn available_bytes(&self) -> Result<Option<u64>, StoreError> {
        // A browser without an estimate has no limit to tell.
        match js::estimate().await {
            Ok((usage, Some(quota))) => Ok(Some(quota.saturating_sub(usage))),
            _ => Ok(None),
        }
    }
}
