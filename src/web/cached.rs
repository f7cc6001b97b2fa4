//! Greedy generation from a model in OPFS, loaded tensor by tensor: each tensor is read from
//! its shard (a sync access handle, straight into wasm memory), uploaded to its GPU buffer and
//! freed before the next, so wasm memory holds at most one tensor besides the tokenizer and
//! the metadata, never the model. Runs in a dedicated worker (see `storage::opfs`).

use wasm_bindgen::prelude::*;

use super::errors::WebError;
use super::{has_webgpu, install_panic_hook, to_js};
use crate::backend::gpu::GpuBackend;
use crate::formats::gguf::GgufFile;
use crate::formats::source::ModelFiles;
use crate::gpu::{DeviceOptions, GpuContext};
use crate::model::{GgufTensors, Model, ModelConfig, RdrrModel, TensorSource};
use crate::quant::GgmlType;
use crate::storage::opfs::{OpfsFiles, OpfsStore};
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

#[derive(serde::Serialize)]
struct CachedReport {
    adapter: String,
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
    text: String,
    /// Bytes of the model's files in OPFS.
    model_bytes: u64,
    /// wasm memory before the model was opened, after its metadata and tokenizer were read,
    /// after its weights were loaded onto the GPU, and after generating.
    wasm_memory_before: f64,
    wasm_memory_after_open: f64,
    wasm_memory_after_load: f64,
    wasm_memory_after_generate: f64,
    load_ms: f64,
    prefill_ms: f64,
    decode_ms: f64,
}

/// Load the complete model `name` from OPFS onto this worker's WebGPU device, tensor by
/// tensor, and generate greedily from the raw-text `prompt` (BOS as the tokenizer says) for at
/// most `max_tokens` tokens with a KV cache of `ctx_tokens` positions. Must run in a dedicated
/// worker (`NeedsWorker` otherwise). Resolves to `{ adapter, prompt_ids, generated_ids, text,
/// model_bytes, wasm_memory_before, wasm_memory_after_open, wasm_memory_after_load,
/// wasm_memory_after_generate,
/// load_ms, prefill_ms, decode_ms }`.
#[wasm_bindgen]
pub async fn opfs_generate_greedy(
    name: String,
    prompt: String,
    max_tokens: u32,
    ctx_tokens: u32,
) -> Result<JsValue, JsValue> {
    install_panic_hook();
    if !has_webgpu() {
        return Err(WebError::new("NoWebGPU", "WebGPU is not available here").into());
    }
    let wasm_memory_before = wasm_memory_bytes();
    let start = js_sys::Date::now();
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    let files = OpfsFiles::open(&store, &name)
        .await
        .map_err(WebError::from)?;
    let model_bytes = files.total_bytes();
    let opened = Opened::open(files).map_err(WebError::from)?;
    let config = ModelConfig::from_gguf(opened.header()).map_err(WebError::from)?;
    let tokenizer = opened.tokenizer().map_err(WebError::from)?;
    let prompt_ids = tokenizer
        .encode(&prompt, true)
        .map_err(|e| WebError::from(crate::Error::from(e)))?;
    let wasm_memory_after_open = wasm_memory_bytes();
    let ctx = GpuContext::new(&DeviceOptions::default())
        .await
        .map_err(WebError::from)?;
    let adapter = format!("{} ({})", ctx.adapter.name, ctx.adapter.backend);
    let backend = GpuBackend::new(ctx, 64).map_err(WebError::from)?;
    let model =
        Model::load(backend, config, &opened, ctx_tokens as usize).map_err(WebError::from)?;
    // Close the sync access handles: the weights are on the GPU now.
    drop(opened);
    let wasm_memory_after_load = wasm_memory_bytes();
    let load_ms = js_sys::Date::now() - start;

    let (g, text) = super::generate::greedy_text(model, &tokenizer, &prompt_ids, max_tokens)
        .await
        .map_err(WebError::from)?;
    to_js(&CachedReport {
        adapter,
        prompt_ids: g.prompt_ids,
        generated_ids: g.ids,
        text,
        model_bytes,
        wasm_memory_before,
        wasm_memory_after_open,
        wasm_memory_after_load,
        wasm_memory_after_generate: wasm_memory_bytes(),
        load_ms,
        prefill_ms: g.usage.prefill_ms,
        decode_ms: g.usage.decode_ms,
    })
}
