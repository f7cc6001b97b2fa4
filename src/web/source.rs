//! Models read through `Blob`s, asynchronously, a tensor at a time: a GGUF the page hands over
//! (a `File`, a `Blob`, an `ArrayBuffer` wrapped in one), or a model in OPFS read on the main
//! thread, where sync access handles do not exist (`getFile()` gives a `File`, and
//! `file.slice(a, b).arrayBuffer()` reads one tensor). Only the metadata (a GGUF header, an
//! RDRR folder's JSON files) is read whole; a tensor's bytes are in wasm memory only while it
//! is uploaded.

use std::collections::BTreeMap;

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Blob, FileSystemDirectoryHandle, FileSystemFileHandle, FileSystemHandle};

use super::errors::WebError;
use crate::error::ModelError;
use crate::formats::gguf::GgufFile;
use crate::formats::rdrr::{self, Manifest};
use crate::formats::source::{ByteSource, MemoryFiles, ModelFiles, SourceError};
use crate::model::{AsyncTensorSource, RdrrModel};
use crate::quant::GgmlType;
use crate::storage::opfs::error_text;
use crate::text::{ChatTemplate, Tokenizer};
use crate::Error;

/// The first read of a GGUF header; doubled until the header fits.
const FIRST_HEADER_READ: u64 = 4 << 20;
/// A GGUF header larger than this is refused.
const MAX_HEADER: u64 = 512 << 20;

/// The lengths of an RDRR folder's files given as `Blob`s, for [`rdrr::check_layout`] (which
/// opens each shard for its length and reads nothing).
struct BlobLengths<'a>(&'a BTreeMap<String, Blob>);

/// A file's length, with no bytes to read.
struct Length<'a> {
    name: &'a str,
    len: u64,
}

impl ByteSource for Length<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        Err(SourceError::Io {
            path: self.name.to_string(),
            message: format!(
                "{} bytes at {offset}: only its length is known here",
                buf.len()
            ),
        })
    }

    fn name(&self) -> &str {
        self.name
    }
}

impl ModelFiles for BlobLengths<'_> {
    fn open<'a>(&'a self, path: &str) -> Result<Box<dyn ByteSource + 'a>, SourceError> {
        match self.0.get_key_value(path) {
            Some((name, blob)) => Ok(Box::new(Length {
                name,
                len: blob.size() as u64,
            })),
            None => Err(SourceError::NotFound {
                path: path.to_string(),
            }),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        match dir {
            "" => Ok(self.0.keys().cloned().collect()),
            _ => Ok(Vec::new()),
        }
    }
}

fn missing_tensor(name: &str) -> Error {
    ModelError::MissingTensor {
        name: name.to_string(),
    }
    .into()
}

fn js_io(what: &str, e: &JsValue) -> Error {
    SourceError::Io {
        path: what.to_string(),
        message: error_text(e),
    }
    .into()
}

/// `blob[offset .. offset + len]` as bytes.
pub(crate) async fn read_blob(
    blob: &Blob,
    what: &str,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Error> {
    let size = blob.size() as u64;
    match offset.checked_add(len) {
        Some(end) if end <= size => {}
        _ => {
            return Err(Error::Source(SourceError::OutOfRange {
                what: what.to_string(),
                offset,
                len,
                source_len: size,
            }))
        }
    }
    let part = blob
        .slice_with_f64_and_f64(offset as f64, (offset + len) as f64)
        .map_err(|e| js_io(what, &e))?;
    let buffer = JsFuture::from(part.array_buffer())
        .await
        .map_err(|e| js_io(what, &e))?;
    Ok(Uint8Array::new(&buffer).to_vec())
}

/// The first bytes of a file, standing for the whole: reads past them fail (and the caller
/// reads more).
struct Prefix<'a> {
    bytes: &'a [u8],
    len: u64,
}

impl ByteSource for Prefix<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.bytes.len() as u64)
            .ok_or_else(|| SourceError::OutOfRange {
                what: "GGUF header".into(),
                offset,
                len: buf.len() as u64,
                source_len: self.bytes.len() as u64,
            })?;
        buf.copy_from_slice(&self.bytes[offset as usize..end as usize]);
        Ok(())
    }
}

/// Read a GGUF header from the start of `blob`, reading more until it fits.
async fn read_gguf_header(blob: &Blob, what: &str) -> Result<GgufFile, Error> {
    let size = blob.size() as u64;
    let mut want = FIRST_HEADER_READ.min(size);
    loop {
        let bytes = read_blob(blob, what, 0, want).await?;
        let prefix = Prefix {
            bytes: &bytes,
            len: size,
        };
        match GgufFile::read(&prefix) {
            Ok(header) => return Ok(header),
            Err(e) if want < size && want < MAX_HEADER => {
                // Most likely the header runs past what was read; a real error repeats
                // once the whole header is in.
                let _ = e;
                want = (want * 2).min(size).min(MAX_HEADER);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Where a [`BlobModel`]'s tensors are.
enum Layout {
    Gguf {
        blob: Blob,
    },
    Rdrr {
        manifest: Box<Manifest>,
        /// Where the header's tensors are in the folder.
        sources: rdrr::ViewSources,
        files: BTreeMap<String, Blob>,
    },
}

/// A model read through `Blob`s.
pub(crate) struct BlobModel {
    pub header: GgufFile,
    /// Taken by the load ([`crate::session::ModelMeta::tokenizer`]).
    pub tokenizer: std::cell::Cell<Option<Tokenizer>>,
    pub template: ChatTemplate,
    /// Bytes of the model's files.
    pub bytes: u64,
    layout: Layout,
    name: String,
    /// Called with the bytes of each tensor read.
    pub on_read: Option<Box<dyn Fn(u64)>>,
}

impl BlobModel {
    /// An RDRR manifest's runtime hints (`runtimeOptimizations`), if it has them.
    pub fn runtime_hints(&self) -> Option<&crate::session::RuntimeOptimizations> {
        match &self.layout {
            Layout::Rdrr { manifest, .. } => manifest.runtime_optimizations.as_ref(),
            _ => None,
        }
    }

    /// A GGUF file in a `Blob`.
    pub async fn gguf(blob: Blob, name: &str) -> Result<BlobModel, Error> {
        let header = read_gguf_header(&blob, name).await?;
        let tokenizer = Tokenizer::from_gguf(&header)?;
        let template = ChatTemplate::from_gguf(&header).unwrap_or_else(|_| ChatTemplate::chatml());
        Ok(BlobModel {
            bytes: blob.size() as u64,
            header,
            tokenizer: std::cell::Cell::new(Some(tokenizer)),
            template,
            layout: Layout::Gguf { blob },
            name: name.to_string(),
            on_read: None,
        })
    }

    /// An RDRR folder given as its files: the JSON files are read whole, the shards stay
    /// `Blob`s.
    pub async fn rdrr(files: BTreeMap<String, Blob>, name: &str) -> Result<BlobModel, Error> {
        let mut small = MemoryFiles::new();
        for (file, blob) in &files {
            if file.ends_with(".json") {
                let len = blob.size() as u64;
                small.insert(file.clone(), read_blob(blob, file, 0, len).await?);
            }
        }
        let model = RdrrModel::open(small)?;
        // The manifest against the shards' real lengths, before anything is read from them.
        rdrr::check_layout(&model.manifest, &BlobLengths(&files))?;
        let tokenizer = model.tokenizer()?;
        let template = model
            .chat_template(Some(&tokenizer))
            .unwrap_or_else(|_| ChatTemplate::chatml());
        let bytes = files.values().map(|b| b.size() as u64).sum();
        Ok(BlobModel {
            header: model.header,
            tokenizer: std::cell::Cell::new(Some(tokenizer)),
            template,
            bytes,
            layout: Layout::Rdrr {
                manifest: Box::new(model.manifest),
                sources: model.sources,
                files,
            },
            name: name.to_string(),
            on_read: None,
        })
    }

    /// The complete model `name` in OPFS, from the `files/` folder the store gives.
    pub async fn opfs(
        dir: &FileSystemDirectoryHandle,
        gguf_file: Option<&str>,
        name: &str,
    ) -> Result<BlobModel, Error> {
        let files = directory_blobs(dir, name).await?;
        match gguf_file {
            Some(file) => {
                let blob = files
                    .get(file)
                    .cloned()
                    .ok_or_else(|| SourceError::NotFound {
                        path: format!("{name}/{file}"),
                    })?;
                BlobModel::gguf(blob, name).await
            }
            None => BlobModel::rdrr(files, name).await,
        }
    }

    async fn read_tensor(&self, tensor: &str) -> Result<Vec<u8>, Error> {
        match &self.layout {
            Layout::Gguf { blob } => {
                let t = self
                    .header
                    .tensor(tensor)
                    .ok_or_else(|| missing_tensor(tensor))?;
                let (start, len) = self.header.tensor_range(t);
                read_blob(blob, &self.name, start, len).await
            }
            Layout::Rdrr {
                manifest,
                sources,
                files,
            } => {
                let info = self
                    .header
                    .tensor(tensor)
                    .ok_or_else(|| missing_tensor(tensor))?;
                let loc = manifest
                    .tensors
                    .get(sources.manifest_name(tensor))
                    .ok_or_else(|| missing_tensor(tensor))?;
                // Size, shape and dtype agree, spans add up and share no bytes: the buffer
                // below holds no more than the distinct bytes of the shards it reads.
                rdrr::check_tensor(tensor, loc)?;
                let mut out = Vec::new();
                for span in &loc.spans {
                    let file = manifest.shard_file(span.shard).map_err(|e| Error::At {
                        path: format!("{}: tensor {tensor}", self.name),
                        source: Box::new(e.into()),
                    })?;
                    let blob = files.get(file).ok_or_else(|| SourceError::NotFound {
                        path: format!("{}/{file}", self.name),
                    })?;
                    let part = read_blob(blob, file, span.offset, span.size).await?;
                    if out.is_empty() {
                        out = part;
                    } else {
                        out.extend_from_slice(&part);
                    }
                }
                Ok(sources.finish(info, out)?)
            }
        }
    }
}

impl AsyncTensorSource for BlobModel {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        self.header.tensor(name).map(|t| (t.dtype, t.dims.clone()))
    }

    async fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        let bytes = self.read_tensor(name).await?;
        if let Some(f) = &self.on_read {
            f(bytes.len() as u64);
        }
        Ok(bytes)
    }
}

/// The plain files of an OPFS folder as `File`s (`Blob`s), by name.
pub(crate) async fn directory_blobs(
    dir: &FileSystemDirectoryHandle,
    name: &str,
) -> Result<BTreeMap<String, Blob>, Error> {
    let fail = |e: JsValue| js_io(name, &e);
    let iter = dir.values();
    let mut out = BTreeMap::new();
    loop {
        let next = JsFuture::from(iter.next().map_err(fail)?)
            .await
            .map_err(fail)?;
        if Reflect::get(&next, &"done".into())
            .map_err(fail)?
            .is_truthy()
        {
            break;
        }
        let handle: FileSystemHandle = Reflect::get(&next, &"value".into())
            .map_err(fail)?
            .unchecked_into();
        if handle.kind() != web_sys::FileSystemHandleKind::File {
            continue;
        }
        let file: FileSystemFileHandle = handle.unchecked_into();
        let blob: Blob = JsFuture::from(file.get_file())
            .await
            .map_err(fail)?
            .unchecked_into();
        out.insert(file.name(), blob);
    }
    Ok(out)
}

/// A JS value as a `Blob`: a `Blob` or `File` as it is, an `ArrayBuffer` or typed array
/// wrapped in one (the browser copies it outside wasm memory).
pub(crate) fn as_blob(value: &JsValue) -> Result<Blob, WebError> {
    if let Some(blob) = value.dyn_ref::<Blob>() {
        return Ok(blob.clone());
    }
    if value.is_instance_of::<js_sys::ArrayBuffer>() || js_sys::ArrayBuffer::is_view(value) {
        let parts = js_sys::Array::of1(value);
        return Blob::new_with_buffer_source_sequence(&parts).map_err(|e| {
            WebError::new(
                "InvalidArgument",
                format!("cannot read the bytes: {}", error_text(&e)),
            )
        });
    }
    Err(WebError::new(
        "InvalidArgument",
        "the model must be a File, Blob, ArrayBuffer or typed array",
    ))
}

/// Bytes hashed per read by [`sha256_blob`].
const HASH_READ: u64 = 8 << 20;

/// The SHA-256 of `blob` (lowercase hex), read in slices (never whole in wasm memory);
/// `on_read(bytes_done)` after each slice.
pub(crate) async fn sha256_blob(
    blob: &Blob,
    what: &str,
    mut on_read: impl FnMut(u64),
) -> Result<String, Error> {
    use sha2::{Digest, Sha256};
    let size = blob.size() as u64;
    let mut hasher = Sha256::new();
    let mut at = 0;
    while at < size {
        let len = HASH_READ.min(size - at);
        hasher.update(read_blob(blob, what, at, len).await?);
        at += len;
        on_read(at);
    }
    Ok(hex::encode(hasher.finalize()))
}
