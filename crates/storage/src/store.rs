//! [`ShardStore`]: where downloaded models live, as the downloader sees it.
//!
//! One interface for the native model store ([`FsStore`](super::FsStore)), memory
//! ([`MemoryStore`](super::MemoryStore), tests) and OPFS (the browser). It asks only for what
//! OPFS can do: open a file by name inside a folder, append to it, read it, know its size, truncate or
//! remove it, list a folder, and write small files. There is no rename: a model becomes complete
//! by [`ShardStore::commit`], which each store implements its own way (the filesystem renames the
//! folder into `models/`; OPFS writes a `complete` marker last). Until then the model is a
//! *partial* download that [`ShardStore::list`] never shows and `resolve_model` never finds.
//!
//! The methods are `async` and their futures need not be `Send`, so the browser's `!Send` JS
//! futures fit. Dropping any of these futures half-way (cancellation) must leave a state that
//! the next [`ShardStore::begin`] resumes from: verified files stay verified, partial files keep
//! what was written, nothing looks complete that is not.

use std::collections::BTreeMap;

use bytes::Bytes;

/// Errors of a model store. Each names the model, file or folder it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A model name that could be used to reach outside the store.
    #[error("{name:?} is not a usable model name: {why}")]
    BadName { name: String, why: String },
    #[error("model {name:?}: {why}")]
    NotFound { name: String, why: String },
    /// A file or folder operation failed.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// A file of the store holds something it should not (a state file that is not JSON, ...).
    #[error("{path}: {message}")]
    Corrupt { path: String, message: String },
    #[error("no model store folder: {0}")]
    NoRoot(String),
    /// A model argument that names no file, folder or stored model.
    #[error("cannot find model {arg:?}; tried: {}", tried.join("; "))]
    Unresolved { arg: String, tried: Vec<String> },
}

/// What a stored model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// An RDRR folder: `manifest.json`, `tensors.json`, shards, `tokenizer.json`.
    Rdrr,
    /// One GGUF file; the partial file named at commit becomes the model.
    Gguf,
}

impl ModelKind {
    /// `RDRR` or `GGUF`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Rdrr => "RDRR",
            ModelKind::Gguf => "GGUF",
        }
    }
}

/// A complete model in a store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredModel {
    pub name: String,
    pub kind: ModelKind,
    /// Bytes of all its files.
    pub bytes: u64,
    /// Shard count (RDRR; 0 for GGUF, or when the manifest cannot be read).
    pub shards: usize,
    /// Where it is: a path natively, a description elsewhere.
    pub location: String,
}

/// A download that has not completed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartialModel {
    pub name: String,
    /// The URL it is being fetched from (as given to [`ShardStore::begin`]).
    pub source: Option<String>,
    /// Files already verified, with the hash they were verified against (lowercase hex).
    pub verified: BTreeMap<String, String>,
    /// Bytes written so far.
    pub bytes: u64,
}

/// An open partial file that bytes are appended to. Dropping it without [`ShardWriter::finish`]
/// keeps what was written (best effort), so an interrupted shard resumes where it stopped.
#[allow(async_fn_in_trait)]
pub trait ShardWriter {
    /// Append `bytes`.
    async fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError>;

    /// Append `bytes`, a reference-counted piece of what the network delivered: a writer that
    /// stores on another thread keeps the piece instead of copying it (the native store).
    async fn write_shared(&mut self, bytes: &Bytes) -> Result<(), StoreError> {
        self.write(bytes).await
    }

    /// Flush and make what was written durable; then the file may be marked verified.
    async fn finish(self) -> Result<(), StoreError>;
}

/// The model store interface of the downloader. Model names are checked with
/// [`check_model_name`]; file names inside a model are plain names (the downloader checks them
/// against the manifest before calling here, and implementations check them again).
#[allow(async_fn_in_trait)]
pub trait ShardStore {
    type Writer: ShardWriter;

    /// Start, or continue, the partial download `model` from `source`. Returns what an earlier
    /// attempt left: the verified files and the bytes present. A partial download of `model`
    /// from another source is discarded first.
    async fn begin(&self, model: &str, source: &str) -> Result<PartialModel, StoreError>;

    /// Make the partial download `model`'s place in the store now (after
    /// [`begin`](Self::begin), which creates nothing, and the quota check), so that stores on
    /// other threads can write its files: the browser's hash workers fetch shards into their own
    /// handle on OPFS, which knows nothing of `begin`. Default: nothing (a store whose writers
    /// all share it makes the place with the first file).
    async fn prepare(&self, _model: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// The partial files of `model` (names, sorted).
    async fn partial_files(&self, model: &str) -> Result<Vec<String>, StoreError>;

    /// The length of a partial file, `None` when it does not exist.
    async fn partial_len(&self, model: &str, file: &str) -> Result<Option<u64>, StoreError>;

    /// Open a partial file for appending at its end, creating it; `truncate` empties it first
    /// (and forgets that it was verified).
    async fn append(
        &self,
        model: &str,
        file: &str,
        truncate: bool,
    ) -> Result<Self::Writer, StoreError>;

    /// Read `buf.len()` bytes at `offset` of a partial file.
    async fn read_partial(
        &self,
        model: &str,
        file: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError>;

    /// Replace a small partial file (manifest.json, tensors.json, tokenizer.json) with `bytes`.
    async fn write_partial_file(
        &self,
        model: &str,
        file: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let mut w = self.append(model, file, true).await?;
        w.write(bytes).await?;
        w.finish().await
    }

    /// Remove a partial file and its verified mark (nothing happens when it does not exist).
    async fn remove_partial_file(&self, model: &str, file: &str) -> Result<(), StoreError>;

    /// Record, durably, that `file` is complete and matched `hash` (lowercase hex).
    async fn mark_verified(&self, model: &str, file: &str, hash: &str) -> Result<(), StoreError>;

    /// Make the partial download `model` a complete model of `kind` (for [`ModelKind::Gguf`],
    /// `file` names the partial file that is the model). Only the downloader calls this, after
    /// every file verified; afterwards the partial state is gone.
    async fn commit(&self, model: &str, kind: ModelKind, file: &str) -> Result<(), StoreError>;

    /// Drop the partial download `model` (no error when there is none).
    async fn discard_partial(&self, model: &str) -> Result<(), StoreError>;

    /// The complete models, sorted by name.
    async fn list(&self) -> Result<Vec<StoredModel>, StoreError>;

    /// The partial downloads, sorted by name.
    async fn list_partial(&self) -> Result<Vec<PartialModel>, StoreError>;

    /// The complete model `name`, if there is one.
    async fn get(&self, name: &str) -> Result<Option<StoredModel>, StoreError> {
        check_model_name(name)?;
        Ok(self.list().await?.into_iter().find(|m| m.name == name))
    }

    /// Remove the model `name`, complete or partial. True when something was removed.
    async fn delete(&self, name: &str) -> Result<bool, StoreError>;

    /// Bytes of everything in the store, partial downloads included.
    async fn bytes_used(&self) -> Result<u64, StoreError>;

    /// Bytes that can still be written, when the store knows (the browser's quota); `None`
    /// when it has no limit to tell. The downloader checks this before writing anything.
    async fn available_bytes(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }
}

/// Model names are single plain path components: ASCII letters, digits, `.`, `_`, `-`, at
/// most 128 characters, not starting with `.`.
pub fn check_model_name(name: &str) -> Result<(), StoreError> {
    let bad = |why: &str| {
        Err(StoreError::BadName {
            name: name.to_string(),
            why: why.to_string(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 128 {
        return bad("it is longer than 128 characters");
    }
    if name.starts_with('.') {
        return bad("it starts with '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// The number of entries in a manifest's `shards` list (0 when it cannot be read): enough for
/// listings, which do not parse the whole manifest.
pub fn shard_count(manifest_json: &[u8]) -> usize {
    serde_json::from_slice::<serde_json::Value>(manifest_json)
        .ok()
        .and_then(|v| v.get("shards").and_then(|s| s.as_array()).map(Vec::len))
        .unwrap_or(0)
}

/// A model name from a URL: its last path component, without `manifest.json`, a `.gguf`
/// extension or a query, with other characters replaced by `_`; for a model at the root of
/// its server, the host and port (`127.0.0.1_8765`). `None` when nothing usable is left.
pub fn model_name_from_url(url: &str) -> Option<String> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let path = path.split_once("://").map_or(path, |(_, rest)| rest);
    let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return None;
    }
    let host = parts.remove(0);
    if parts.last() == Some(&"manifest.json") {
        parts.pop();
    }
    // A model served at the root of its server (as `tritium serve-model` serves one) is
    // named after the server: the same server gives the same name, so its cache is found.
    let last = parts.pop().unwrap_or(host);
    let last = last
        .strip_suffix(".gguf")
        .or_else(|| last.strip_suffix(".GGUF"))
        .unwrap_or(last);
    let name: String = percent_encoding::percent_decode_str(last)
        .decode_utf8_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = name.trim_start_matches('.').to_string();
    let name: String = name.chars().take(128).collect();
    check_model_name(&name).ok().map(|_| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names() {
        for ok in ["smollm2", "SmolLM2-135M.q4_1", "a_b-c.d"] {
            assert!(check_model_name(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            ".hidden",
            "..",
            "a/b",
            "a\\b",
            "a b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(check_model_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_from_urls() {
        let cases = [
            (
                "http://127.0.0.1:8080/models/smol/manifest.json",
                Some("smol"),
            ),
            ("http://127.0.0.1:8080/models/smol/", Some("smol")),
            (
                "https://h/x/SmolLM2-135M.Q4_1.gguf?download=1",
                Some("SmolLM2-135M.Q4_1"),
            ),
            ("https://h/x/my%20model", Some("my_model")),
            ("http://127.0.0.1:8080/", Some("127.0.0.1_8080")),
            (
                "http://127.0.0.1:8080/manifest.json",
                Some("127.0.0.1_8080"),
            ),
            ("http://[::1]:8080/", Some("___1__8080")),
            ("http://h/...", None),
            ("", None),
        ];
        for (url, want) in cases {
            assert_eq!(model_name_from_url(url).as_deref(), want, "{url}");
        }
    }
}
