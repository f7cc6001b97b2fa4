//! [`MemoryStore`]: a [`ShardStore`] held in memory, for tests (native and wasm). It can be
//! given a quota, to test what happens when a download does not fit.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::store::{
    check_model_name, shard_count, ModelKind, PartialModel, ShardStore, ShardWriter, StoreError,
    StoredModel,
};
use crate::formats::rdrr::MANIFEST_FILE;
use crate::formats::source::check_relative_path;

#[derive(Debug, Default)]
struct Partial {
    source: String,
    files: BTreeMap<String, Vec<u8>>,
    verified: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct Complete {
    kind: ModelKind,
    files: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Default)]
struct Inner {
    partial: BTreeMap<String, Partial>,
    complete: BTreeMap<String, Complete>,
}

impl Inner {
    fn used(&self) -> u64 {
        let sum = |files: &BTreeMap<String, Vec<u8>>| -> u64 {
            files.values().map(|f| f.len() as u64).sum()
        };
        self.partial.values().map(|p| sum(&p.files)).sum::<u64>()
            + self.complete.values().map(|c| sum(&c.files)).sum::<u64>()
    }

    fn partial(&mut self, model: &str) -> Result<&mut Partial, StoreError> {
        self.partial
            .get_mut(model)
            .ok_or_else(|| StoreError::NotFound {
                name: model.to_string(),
                why: "no download of it was begun".to_string(),
            })
    }
}

/// A model store in memory. Clones share the same contents.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    quota: Option<u64>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store that holds at most `bytes` (reported by [`ShardStore::available_bytes`]; writes
    /// past it fail).
    pub fn with_quota(bytes: u64) -> MemoryStore {
        MemoryStore {
            quota: Some(bytes),
            ..MemoryStore::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The files of the complete model `name` (tests look at them).
    pub fn model_files(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        self.lock().complete.get(name).map(|c| c.files.clone())
    }

    /// The bytes of a partial file (tests look at them).
    pub fn partial_file(&self, model: &str, file: &str) -> Option<Vec<u8>> {
        self.lock()
            .partial
            .get(model)
            .and_then(|p| p.files.get(file).cloned())
    }
}

fn check_file(file: &str) -> Result<(), StoreError> {
    check_relative_path(file).map_err(|e| StoreError::BadName {
        name: file.to_string(),
        why: e.to_string(),
    })
}

/// Appends straight into the partial file.
pub struct MemoryWriter {
    store: MemoryStore,
    model: String,
    file: String,
}

impl ShardWriter for MemoryWriter {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let quota = self.store.quota;
        let mut inner = self.store.lock();
        if let Some(q) = quota {
            if inner.used() + bytes.len() as u64 > q {
                return Err(StoreError::Io {
                    path: format!("{}/{}", self.model, self.file),
                    message: format!("quota of {q} bytes exceeded"),
                });
            }
        }
        let partial = inner.partial(&self.model)?;
        partial
            .files
            .entry(self.file.clone())
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }

    async fn finish(self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl ShardStore for MemoryStore {
    type Writer = MemoryWriter;

    async fn begin(&self, model: &str, source: &str) -> Result<PartialModel, StoreError> {
        check_model_name(model)?;
        let mut inner = self.lock();
        let partial = inner.partial.entry(model.to_string()).or_default();
        if partial.source != source {
            *partial = Partial {
                source: source.to_string(),
                ..Partial::default()
            };
        }
        Ok(PartialModel {
            name: model.to_string(),
            source: Some(partial.source.clone()),
            verified: partial.verified.clone(),
            bytes: partial.files.values().map(|f| f.len() as u64).sum(),
        })
    }

    async fn partial_files(&self, model: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.lock().partial(model)?.files.keys().cloned().collect())
    }

    async fn partial_len(&self, model: &str, file: &str) -> Result<Option<u64>, StoreError> {
        check_file(file)?;
        Ok(self
            .lock()
            .partial(model)?
            .files
            .get(file)
            .map(|f| f.len() as u64))
    }

    async fn append(
        &self,
        model: &str,
        file: &str,
        truncate: bool,
    ) -> Result<MemoryWriter, StoreError> {
        check_file(file)?;
        let mut inner = self.lock();
        let partial = inner.partial(model)?;
        let bytes = partial.files.entry(file.to_string()).or_default();
        if truncate {
            bytes.clear();
            partial.verified.remove(file);
        }
        Ok(MemoryWriter {
            store: self.clone(),
            model: model.to_string(),
            file: file.to_string(),
        })
    }

    async fn read_partial(
        &self,
        model: &str,
        file: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let bytes = inner
            .partial(model)?
            .files
            .get(file)
            .ok_or_else(|| StoreError::Io {
                path: format!("{model}/{file}"),
                message: "no such file".to_string(),
            })?;
        let range = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(buf.len())?))
            .filter(|r| r.end <= bytes.len())
            .ok_or_else(|| StoreError::Io {
                path: format!("{model}/{file}"),
                message: format!(
                    "read of {} bytes at {offset} is past the end ({} bytes)",
                    buf.len(),
                    bytes.len()
                ),
            })?;
        buf.copy_from_slice(&bytes[range]);
        Ok(())
    }

    async fn remove_partial_file(&self, model: &str, file: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let partial = inner.partial(model)?;
        partial.files.remove(file);
        partial.verified.remove(file);
        Ok(())
    }

    async fn mark_verified(&self, model: &str, file: &str, hash: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let partial = inner.partial(model)?;
        if !partial.files.contains_key(file) {
            return Err(StoreError::Io {
                path: format!("{model}/{file}"),
                message: "marked verified but it does not exist".to_string(),
            });
        }
        partial
            .verified
            .insert(file.to_string(), hash.to_ascii_lowercase());
        Ok(())
    }

    async fn commit(&self, model: &str, kind: ModelKind, file: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let partial = inner.partial(model)?;
        let files = match kind {
            ModelKind::Rdrr => std::mem::take(&mut partial.files),
            ModelKind::Gguf => {
                let bytes = partial.files.remove(file).ok_or_else(|| StoreError::Io {
                    path: format!("{model}/{file}"),
                    message: "committed but it does not exist".to_string(),
                })?;
                BTreeMap::from([(format!("{model}.gguf"), bytes)])
            }
        };
        inner.partial.remove(model);
        inner
            .complete
            .insert(model.to_string(), Complete { kind, files });
        Ok(())
    }

    async fn discard_partial(&self, model: &str) -> Result<(), StoreError> {
        self.lock().partial.remove(model);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<StoredModel>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .complete
            .iter()
            .map(|(name, c)| StoredModel {
                name: name.clone(),
                kind: c.kind,
                bytes: c.files.values().map(|f| f.len() as u64).sum(),
                shards: match c.kind {
                    ModelKind::Gguf => 0,
                    ModelKind::Rdrr => c.files.get(MANIFEST_FILE).map_or(0, |m| shard_count(m)),
                },
                location: format!("memory:{name}"),
            })
            .collect())
    }

    async fn list_partial(&self) -> Result<Vec<PartialModel>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .partial
            .iter()
            .map(|(name, p)| PartialModel {
                name: name.clone(),
                source: Some(p.source.clone()),
                verified: p.verified.clone(),
                bytes: p.files.values().map(|f| f.len() as u64).sum(),
            })
            .collect())
    }

    async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        check_model_name(name)?;
        let mut inner = self.lock();
        let a = inner.complete.remove(name).is_some();
        let b = inner.partial.remove(name).is_some();
        Ok(a || b)
    }

    async fn bytes_used(&self) -> Result<u64, StoreError> {
        Ok(self.lock().used())
    }

    async fn available_bytes(&self) -> Result<Option<u64>, StoreError> {
        Ok(self.quota.map(|q| q.saturating_sub(self.lock().used())))
    }
}
