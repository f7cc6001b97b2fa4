//! A model in OPFS opened for loading tensor by tensor: each tensor is read from its shard (a
//! sync access handle, straight into wasm memory), uploaded to its GPU buffer and freed before
//! the next, so wasm memory holds at most one tensor besides the tokenizer and the metadata,
//! never the model. Sync access handles need a dedicated worker (see `storage::opfs`).

use wasm_bindgen::prelude::*;

use crate::formats::gguf::GgufFile;
use crate::model::TensorSource;
use crate::quant::GgmlType;
use crate::session::{ModelMeta, OpenedModel};
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

/// A model in OPFS opened as the model its files hold (a GGUF file or an RDRR folder, as the
/// store recorded it when it was downloaded).
pub(super) fn open_files(files: OpfsFiles) -> Result<OpenedModel<OpfsFiles>, crate::Error> {
    match (files.kind(), files.gguf_file().map(str::to_string)) {
        (ModelKind::Gguf, Some(file)) => OpenedModel::gguf(files, &file),
        _ => OpenedModel::folder(files),
    }
}

/// True in a dedicated worker, where OPFS files have sync access handles.
pub(super) fn sync_access_handles() -> bool {
    js_sys::Reflect::get(&js_sys::global(), &"FileSystemFileHandle".into())
        .and_then(|class| js_sys::Reflect::get(&class, &"prototype".into()))
        .and_then(|proto| js_sys::Reflect::get(&proto, &"createSyncAccessHandle".into()))
        .is_ok_and(|f| f.is_function())
}

/// A model whose tensor reads report the bytes read so far after each tensor.
pub(super) struct Counted<'a, S, F: Fn(u64)> {
    inner: &'a S,
    done: std::cell::Cell<u64>,
    report: F,
}

impl<'a, S, F: Fn(u64)> Counted<'a, S, F> {
    pub(super) fn new(inner: &'a S, report: F) -> Self {
        Counted {
            inner,
            done: std::cell::Cell::new(0),
            report,
        }
    }
}

impl<S: ModelMeta, F: Fn(u64)> ModelMeta for Counted<'_, S, F> {
    fn header(&self) -> Result<&GgufFile, crate::Error> {
        self.inner.header()
    }

    fn tokenizer(&self) -> Result<Tokenizer, crate::Error> {
        self.inner.tokenizer()
    }

    fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, crate::Error> {
        self.inner.chat_template(tokenizer)
    }

    fn runtime_hints(&self) -> Option<&crate::session::RuntimeOptimizations> {
        self.inner.runtime_hints()
    }
}

impl<S: TensorSource, F: Fn(u64)> TensorSource for Counted<'_, S, F> {
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
