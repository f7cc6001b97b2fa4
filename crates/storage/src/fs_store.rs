//! [`FsStore`]: the native model store, a folder on disk.
//!
//! ```text
//! <root>/models/<name>/             a complete RDRR model: a plain RDRR folder
//! <root>/models/<name>.gguf         a complete GGUF model
//! <root>/partial/<name>/            a download in progress (the files as they arrive)
//! <root>/partial/<name>.state.json  its state: source URL and the files verified so far
//! ```
//!
//! The root is `--store DIR`, else `$TRITIUM_STORE`, else `<cache dir>/tritium` (see
//! [`store_root`]). A download becomes a model by one rename of its folder into `models/`,
//! after every file verified, so a crash never leaves a model that looks complete. The state
//! file is replaced by writing a temporary file and renaming it, so it is always whole.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::store::{
    check_model_name, shard_count, ModelKind, PartialModel, ShardStore, ShardWriter, StoreError,
    StoredModel,
};
use crate::formats::rdrr::MANIFEST_FILE;
use crate::formats::source::check_relative_path;

/// The environment variable naming the store folder.
pub const STORE_ENV: &str = "TRITIUM_STORE";

/// The store folder: `flag` (`--store DIR`), else `$TRITIUM_STORE`, else
/// `<user cache dir>/tritium`.
pub fn store_root(flag: Option<&Path>) -> Result<PathBuf, StoreError> {
    if let Some(dir) = flag {
        return Ok(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(STORE_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    dirs::cache_dir().map(|d| d.join("tritium")).ok_or_else(|| {
        StoreError::NoRoot(format!(
            "this system has no user cache folder; give one with --store DIR or {STORE_ENV}"
        ))
    })
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// What `partial/<name>.state.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    source: String,
    verified: BTreeMap<String, String>,
}

/// The native model store.
#[derive(Debug, Clone)]
pub struct FsStore {
    root: PathBuf,
}

impl FsStore {
    /// The store at `root` (created on the first download).
    pub fn new(root: impl Into<PathBuf>) -> FsStore {
        FsStore { root: root.into() }
    }

    /// The store chosen by `--store`, `$TRITIUM_STORE` or the cache folder.
    pub fn open_default(flag: Option<&Path>) -> Result<FsStore, StoreError> {
        Ok(FsStore::new(store_root(flag)?))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    fn partial_dir(&self, model: &str) -> PathBuf {
        self.root.join("partial").join(model)
    }

    fn state_path(&self, model: &str) -> PathBuf {
        self.root
            .join("partial")
            .join(format!("{model}.state.json"))
    }

    fn partial_file_path(&self, model: &str, file: &str) -> Result<PathBuf, StoreError> {
        check_model_name(model)?;
        check_relative_path(file).map_err(|e| StoreError::BadName {
            name: file.to_string(),
            why: e.to_string(),
        })?;
        Ok(self.partial_dir(model).join(file))
    }

    /// The path of the complete model `name` (an RDRR folder or a `.gguf` file), if there is
    /// one. A partial download is never returned.
    pub fn complete_path(&self, name: &str) -> Option<PathBuf> {
        check_model_name(name).ok()?;
        let dir = self.models_dir().join(name);
        if dir.join(MANIFEST_FILE).is_file() {
            return Some(dir);
        }
        let gguf = self.models_dir().join(format!("{name}.gguf"));
        gguf.is_file().then_some(gguf)
    }

    fn read_state(&self, model: &str) -> Result<Option<State>, StoreError> {
        let path = self.state_path(model);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        path: path.display().to_string(),
                        message: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    fn write_state(&self, model: &str, state: &State) -> Result<(), StoreError> {
        let path = self.state_path(model);
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| StoreError::Corrupt {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            sync_dir(path.parent());
            Ok(())
        };
        write().map_err(|e| io(&path, e))
    }

    fn update_state(&self, model: &str, f: impl FnOnce(&mut State)) -> Result<(), StoreError> {
        let mut state = self.read_state(model)?.unwrap_or_default();
        f(&mut state);
        self.write_state(model, &state)
    }

    fn partial_model(&self, model: &str, state: State) -> PartialModel {
        PartialModel {
            name: model.to_string(),
            source: Some(state.source),
            verified: state.verified,
            bytes: dir_bytes(&self.partial_dir(model)),
        }
    }
}

/// Sum of the sizes of the files under `path` (a file: its size; missing: 0).
fn dir_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_file() {
        return meta.len();
    }
    if !meta.is_dir() {
        return 0;
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| dir_bytes(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

/// Make renames and new entries in `dir` durable. Best effort: some file systems cannot sync a
/// folder.
fn sync_dir(dir: Option<&Path>) {
    #[cfg(unix)]
    if let Some(dir) = dir {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
}

fn remove_path(path: &Path) -> Result<bool, StoreError> {
    let result = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    result.map(|()| true).map_err(|e| io(path, e))
}

/// Pieces waiting for a writer thread, at most (then [`ShardWriter::write`] waits).
const WRITE_QUEUE: usize = 32;

/// A partial file opened for appending. The bytes are written by a thread of the writer's own
/// (the downloader receives every shard of a model on one task: copying a piece into the file
/// there held all of them to one core's write speed), fed the pieces the network delivered
/// without a copy, in order. Dropping the writer without [`ShardWriter::finish`] writes what is
/// queued and waits for the thread, so the file keeps every byte handed over and nothing else
/// writes to it afterwards.
pub struct FsWriter {
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    /// The thread's result: the file once every piece is written and flushed.
    done: Option<futures_channel::oneshot::Receiver<std::io::Result<File>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl FsWriter {
    /// A writer appending to `file` (at `path`, which errors name).
    pub fn for_file(file: File, path: PathBuf) -> Result<FsWriter, StoreError> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(WRITE_QUEUE);
        let (done_tx, done) = futures_channel::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("tritium-store".to_string())
            .spawn(move || {
                let mut out = BufWriter::with_capacity(64 << 10, file);
                let mut result = Ok(());
                while let Some(piece) = rx.blocking_recv() {
                    result = out.write_all(&piece);
                    if result.is_err() {
                        break;
                    }
                }
                // Closing the queue before answering: a `write` waiting on it fails at once.
                drop(rx);
                let result = result.and_then(|()| out.into_inner().map_err(|e| e.into_error()));
                // The writer may be gone (dropped): nobody to tell.
                let _ = done_tx.send(result);
            })
            .map_err(|e| io(&path, e))?;
        Ok(FsWriter {
            tx: Some(tx),
            done: Some(done),
            thread: Some(thread),
            path,
        })
    }

    /// Close the queue and wait for the thread's result.
    async fn close(&mut self) -> Result<File, StoreError> {
        self.tx = None;
        let result = match self.done.take() {
            Some(done) => done
                .await
                .unwrap_or_else(|_| Err(std::io::Error::other("the writing thread stopped"))),
            None => Err(std::io::Error::other("the file was closed already")),
        };
        if let Some(thread) = self.thread.take() {
            // It has answered, so it is ending: the join is immediate.
            let _ = thread.join();
        }
        result.map_err(|e| io(&self.path, e))
    }

    async fn queue(&mut self, bytes: Bytes) -> Result<(), StoreError> {
        let sent = match &self.tx {
            Some(tx) => tx.send(bytes).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The thread stopped on a write error: that error, else why the queue is closed.
        match self.close().await {
            Err(e) => Err(e),
            Ok(_) => Err(io(
                &self.path,
                std::io::Error::other("the writing thread stopped"),
            )),
        }
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ShardWriter for FsWriter {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.queue(Bytes::copy_from_slice(bytes)).await
    }

    async fn write_shared(&mut self, bytes: &Bytes) -> Result<(), StoreError> {
        self.queue(bytes.clone()).await
    }

    async fn finish(mut self) -> Result<(), StoreError> {
        let file = self.close().await?;
        file.sync_data().map_err(|e| io(&self.path, e))
    }
}

impl ShardStore for FsStore {
    type Writer = FsWriter;

    async fn begin(&self, model: &str, source: &str) -> Result<PartialModel, StoreError> {
        check_model_name(model)?;
        let dir = self.partial_dir(model);
        let fresh = State {
            source: source.to_string(),
            verified: BTreeMap::new(),
        };
        let state = match self.read_state(model) {
            Ok(Some(s)) if s.source == source && dir.is_dir() => s,
            // Another source: its files are of no use.
            Ok(Some(s)) if s.source != source => {
                remove_path(&dir)?;
                fresh
            }
            // No state, or one that cannot be read: keep the files (the downloader hashes
            // them again before trusting them), forget the marks.
            _ => fresh,
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        self.write_state(model, &state)?;
        Ok(self.partial_model(model, state))
    }

    async fn partial_files(&self, model: &str) -> Result<Vec<String>, StoreError> {
        check_model_name(model)?;
        let dir = self.partial_dir(model);
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let entry = entry.map_err(|e| io(&dir, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    async fn partial_len(&self, model: &str, file: &str) -> Result<Option<u64>, StoreError> {
        let path = self.partial_file_path(model, file)?;
        match std::fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    async fn append(
        &self,
        model: &str,
        file: &str,
        truncate: bool,
    ) -> Result<FsWriter, StoreError> {
        let path = self.partial_file_path(model, file)?;
        if truncate {
            self.update_state(model, |s| {
                s.verified.remove(file);
            })?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(!truncate)
            .write(true)
            .truncate(truncate)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        FsWriter::for_file(f, path)
    }

    async fn read_partial(
        &self,
        model: &str,
        file: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let path = self.partial_file_path(model, file)?;
        let f = File::open(&path).map_err(|e| io(&path, e))?;
        read_exact_at(&f, buf, offset).map_err(|e| io(&path, e))
    }

    async fn remove_partial_file(&self, model: &str, file: &str) -> Result<(), StoreError> {
        let path = self.partial_file_path(model, file)?;
        self.update_state(model, |s| {
            s.verified.remove(file);
        })?;
        remove_path(&path).map(|_| ())
    }

    async fn mark_verified(&self, model: &str, file: &str, hash: &str) -> Result<(), StoreError> {
        let path = self.partial_file_path(model, file)?;
        if !path.is_file() {
            return Err(StoreError::Io {
                path: path.display().to_string(),
                message: "marked verified but it does not exist".to_string(),
            });
        }
        self.update_state(model, |s| {
            s.verified
                .insert(file.to_string(), hash.to_ascii_lowercase());
        })
    }

    async fn commit(&self, model: &str, kind: ModelKind, file: &str) -> Result<(), StoreError> {
        check_model_name(model)?;
        let models = self.models_dir();
        std::fs::create_dir_all(&models).map_err(|e| io(&models, e))?;
        if let Some(existing) = self.complete_path(model) {
            return Err(StoreError::Io {
                path: existing.display().to_string(),
                message: "a model of this name is already in the store".to_string(),
            });
        }
        let dir = self.partial_dir(model);
        match kind {
            ModelKind::Rdrr => {
                let target = models.join(model);
                std::fs::rename(&dir, &target).map_err(|e| io(&target, e))?;
            }
            ModelKind::Gguf => {
                let source = self.partial_file_path(model, file)?;
                let target = models.join(format!("{model}.gguf"));
                std::fs::rename(&source, &target).map_err(|e| io(&target, e))?;
            }
        }
        sync_dir(Some(&models));
        // The model is complete now; what is left of the partial state is clutter.
        remove_path(&dir)?;
        remove_path(&self.state_path(model))?;
        Ok(())
    }

    async fn discard_partial(&self, model: &str) -> Result<(), StoreError> {
        check_model_name(model)?;
        remove_path(&self.partial_dir(model))?;
        remove_path(&self.state_path(model))?;
        Ok(())
    }

    async fn list(&self) -> Result<Vec<StoredModel>, StoreError> {
        let models = self.models_dir();
        let entries = match std::fs::read_dir(&models) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&models, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io(&models, e))?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let (name, kind) = if path.join(MANIFEST_FILE).is_file() {
                (file_name, ModelKind::Rdrr)
            } else if let Some(stem) = file_name.strip_suffix(".gguf") {
                if !path.is_file() {
                    continue;
                }
                (stem.to_string(), ModelKind::Gguf)
            } else {
                continue;
            };
            if check_model_name(&name).is_err() {
                continue;
            }
            let shards = match kind {
                ModelKind::Rdrr => std::fs::read(path.join(MANIFEST_FILE))
                    .map(|m| shard_count(&m))
                    .unwrap_or(0),
                ModelKind::Gguf => 0,
            };
            out.push(StoredModel {
                name,
                kind,
                bytes: dir_bytes(&path),
                shards,
                location: path.display().to_string(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn list_partial(&self) -> Result<Vec<PartialModel>, StoreError> {
        let dir = self.root.join("partial");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.path().is_dir() || check_model_name(&name).is_err() {
                continue;
            }
            let state = self.read_state(&name).unwrap_or(None).unwrap_or_default();
            out.push(self.partial_model(&name, state));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        check_model_name(name)?;
        let models = self.models_dir();
        let mut removed = remove_path(&models.join(name))?;
        removed |= remove_path(&models.join(format!("{name}.gguf")))?;
        removed |= remove_path(&self.partial_dir(name))?;
        removed |= remove_path(&self.state_path(name))?;
        Ok(removed)
    }

    async fn bytes_used(&self) -> Result<u64, StoreError> {
        Ok(dir_bytes(&self.models_dir()) + dir_bytes(&self.root.join("partial")))
    }

    /// Free space on the file system that holds the store (its nearest existing folder, before
    /// the first download creates it); `None` where the system does not say.
    async fn available_bytes(&self) -> Result<Option<u64>, StoreError> {
        let Some(dir) = self.root.ancestors().find(|d| d.is_dir()) else {
            return Ok(None);
        };
        Ok(fs4::available_space(dir).ok())
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

/// What a model argument names: an existing path (a GGUF file, an RDRR or Trellis folder) as
/// it is, else the complete model of that name in the store (`store`, else `$TRITIUM_STORE`,
/// else the cache folder). The error lists what was tried.
pub fn resolve_model(arg: &str, store: Option<&Path>) -> Result<PathBuf, StoreError> {
    let path = Path::new(arg);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let mut tried = vec![format!("{arg} (no such file or folder)")];
    if check_model_name(arg).is_ok() {
        match store_root(store) {
            Ok(root) => {
                let fs = FsStore::new(&root);
                if let Some(found) = fs.complete_path(arg) {
                    return Ok(found);
                }
                let models = fs.models_dir();
                tried.push(format!(
                    "{} and {} (not in the model store)",
                    models.join(arg).display(),
                    models.join(format!("{arg}.gguf")).display()
                ));
                if fs.partial_dir(arg).is_dir() {
                    tried.push(format!(
                        "a download of {arg:?} is incomplete: run `tritium pull` again to resume it"
                    ));
                }
            }
            Err(e) => tried.push(e.to_string()),
        }
    } else {
        tried.push("not a model name either (letters, digits, '.', '_', '-')".to_string());
    }
    Err(StoreError::Unresolved {
        arg: arg.to_string(),
        tried,
    })
}
