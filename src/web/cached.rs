//! A model in OPFS opened for loading tensor by tensor: each tensor is read from its shard (a
//! sync access handle, straight into wasm memory), uploaded to its GPU buffer and freed before
//! the next, so wasm memory holds at most one tensor besides the tokenizer and the metadata,
//! never the model. Sync access handles need a dedicated worker (see `storage::opfs`).

use wasm_bindgen::prelude::*;

use crate::formats::gguf::GgufFile;
use crate::formats::source::ModelFiles;
use crate::model::{GgufTensors, RdrrModel, TensorSource};
use crate::quant::GgmlType;
use crate::storage::opfs::OpfsFiles;
use crate::storage::ModelKind;
use crate::text::{ChatTemplate, Tokenizer};

/// Bytes of this instance's wasm memory (it only grows, so this is also its peak so far).
#[wasm_bindgen]
pub fn wasm_memory_bytes() -> f64 {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .map(|m| {
            m.buffer()
                .dyn_into::<js_sys::ArrayBuffer>()
                .map_or(0.0, |b| b.byte_length() as f64)
        })
        .unwrap_or(0.0)
}

/// A cached model opened for loading.
pub(super) enum Opened {
    Rdrr(Box<RdrrModel<OpfsFiles>>),
    Gguf {
        files: OpfsFiles,
        file: String,
        header: Box<GgufFile>,
    },
}

impl Opened {
    pub(super) fn open(files: OpfsFiles) -> Result<Opened, crate::Error> {
        match (files.kind(), files.gguf_file().map(str::to_string)) {
            (ModelKind::Gguf, Some(file)) => {
                let header = GgufFile::read(&*files.open(&file)?)?;
                Ok(Opened::Gguf {
                    files,
                    file,
                    header: Box::new(header),
                })
            }
            _ => Ok(Opened::Rdrr(Box::new(RdrrModel::open(files)?))),
        }
    }

    pub(super) fn header(&self) -> &GgufFile {
        match self {
            Opened::Rdrr(m) => &m.header,
            Opened::Gguf { header, .. } => header,
        }
    }

    pub(super) fn tokenizer(&self) -> Result<Tokenizer, crate::Error> {
        match self {
            Opened::Rdrr(m) => m.tokenizer(),
            Opened::Gguf { header, .. } => Ok(Tokenizer::from_gguf(header)?),
        }
    }
}

impl Opened {
    /// The model's chat template (ChatML when it has none that loads).
    pub(super) fn chat_template(&self, tokenizer: &Tokenizer) -> ChatTemplate {
        match self {
            Opened::Rdrr(m) => m.chat_template(Some(tokenizer)),
            Opened::Gguf { header, .. } => ChatTemplate::from_gguf(header),
        }
        .unwrap_or_else(|_| ChatTemplate::chatml())
    }
}

/// True in a dedicated worker, where OPFS files have sync access handles.
pub(super) fn sync_access_handles() -> bool {
    js_sys::Reflect::get(&js_sys::global(), &"FileSystemFileHandle".into())
        .and_then(|class| js_sys::Reflect::get(&class, &"prototype".into()))
        .and_then(|proto| js_sys::Reflect::get(&proto, &"createSyncAccessHandle".into()))
        .is_ok_and(|f| f.is_function())
}

/// A [`TensorSource`] that reports the bytes read so far after each tensor.
pub(super) struct Counted<'a, F: Fn(u64)> {
    inner: &'a dyn TensorSource,
    done: std::cell::Cell<u64>,
    report: F,
}

impl<'a, F: Fn(u64)> Counted<'a, F> {
    pub(super) fn new(inner: &'a dyn TensorSource, report: F) -> Self {
        Counted {
            inner,
            done: std::cell::Cell::new(0),
            report,
        }
    }
}

impl<F: Fn(u64)> TensorSource for Counted<'_, F> {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        self.inner.meta(name)
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, crate::Error> {
        let bytes = self.inner.read(name)?;
        self.done.set(self.done.get() + bytes.len() as u64);
        (self.report)(self.done.get());
        Ok(bytes)
    }
}

impl TensorSource for Opened {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        match self {
            Opened::Rdrr(m) => m.meta(name),
            Opened::Gguf { header, .. } => header.tensor(name).map(|t| (t.dtype, t.dims.clone())),
        }
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, crate::Error> {
        match self {
            Opened::Rdrr(m) => m.read(name),
            Opened::Gguf {
                files,
                file,
                header,
            } => {
                let src = files.open(file)?;
                GgufTensors {
                    file: header,
                    src: &*src,
                }
                .read(name)
            }
        }
    }
}
