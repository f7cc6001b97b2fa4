//! Loading a model ([`load_model`]) onto a new WebGPU device or the caller's own: from OPFS
//! (sync access handles in a worker, `File` slices elsewhere) or from a GGUF `Blob`, one
//! tensor at a time.

use super::*;

pub(super) struct Loaded {
    pub(super) engine: Engine<GpuBackend>,
    pub(super) tokenizer: Tokenizer,
    pub(super) template: ChatTemplate,
    pub(super) info: ModelInfo,
}

fn model_info(
    name: &str,
    config: &ModelConfig,
    ctx: usize,
    file_bytes: u64,
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    load_path: &'static str,
) -> ModelInfo {
    ModelInfo {
        name: name.to_string(),
        architecture: config.arch_name.clone(),
        n_vocab: config.n_vocab,
        n_layers: config.n_layers,
        dim: config.dim,
        n_heads: config.n_heads,
        n_kv_heads: config.n_kv_heads,
        trained_context_length: config.context_length,
        context_length: ctx,
        file_bytes,
        gpu_bytes: 0,
        chat_template: template.source().to_string(),
        bos_token_id: tokenizer.bos(),
        eos_token_id: tokenizer.eos(),
        stop_token_ids: tokenizer.stop_ids().to_vec(),
        load_path,
    }
}

/// How the package opens a model: its context, a batch of [`BATCH`] tokens, and a tokenizer
/// it must have (checked before any weight is uploaded).
fn open_options(o: &LoadOptions) -> OpenOptions {
    OpenOptions {
        context: o.context_length,
        batch: BATCH,
        require_tokenizer: true,
        arithmetic: match o.exact {
            true => crate::session::Arithmetic::Exact,
            false => crate::session::Arithmetic::Fast,
        },
        ..OpenOptions::default()
    }
}

/// The package's view of a loaded session.
fn loaded(
    session: Session<GpuBackend>,
    name: &str,
    file_bytes: u64,
    load_path: &'static str,
) -> Result<Loaded, WebError> {
    let Session {
        engine,
        tokenizer,
        template,
        ..
    } = session;
    let tokenizer = tokenizer.ok_or_else(|| {
        WebError::new(
            "UnsupportedModel",
            format!("{name}: the model has no tokenizer"),
        )
    })?;
    let info = model_info(
        name,
        &engine.model.config,
        engine.model.ctx,
        file_bytes,
        &tokenizer,
        &template,
        load_path,
    );
    Ok(Loaded {
        engine,
        tokenizer,
        template,
        info,
    })
}

/// A model from OPFS: sync access handles in a dedicated worker, `File` slices elsewhere.
pub(super) async fn load_cached(
    name: &str,
    backend: GpuBackend,
    o: &LoadOptions,
    progress: &Progress,
) -> Result<Loaded, WebError> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    let sync = !o.force_blob && crate::web::cached::sync_access_handles();
    if sync {
        let files = crate::storage::opfs::OpfsFiles::open(&store, name)
            .await
            .map_err(WebError::from)?;
        let file_bytes = files.total_bytes();
        let opened = crate::web::cached::open_files(files).map_err(model_error)?;
        progress.send("upload", 0.0, file_bytes as f64, "uploading the weights");
        let counted = crate::web::cached::Counted::new(&opened, |n| {
            progress.send(
                "upload",
                n as f64,
                file_bytes as f64,
                "uploading the weights",
            );
        });
        let session =
            crate::session::load(&counted, backend, &open_options(o)).map_err(model_error)?;
        drop(opened);
        return loaded(session, name, file_bytes, "sync-access-handle");
    }
    let (dir, _kind, gguf_file) = store.complete_files(name).await.map_err(WebError::from)?;
    let model = BlobModel::opfs(&dir, gguf_file.as_deref(), name)
        .await
        .map_err(model_error)?;
    load_blob(model, name.to_string(), backend, o, progress).await
}

/// A model read through `Blob`s, a tensor at a time.
pub(super) async fn load_blob(
    mut model: BlobModel,
    name: String,
    backend: GpuBackend,
    o: &LoadOptions,
    progress: &Progress,
) -> Result<Loaded, WebError> {
    let total = model.bytes as f64;
    let done = Rc::new(Cell::new(0u64));
    let (p, d, signal) = (progress.clone(), done.clone(), o.signal.clone());
    let aborted = Rc::new(Cell::new(false));
    let a = aborted.clone();
    model.on_read = Some(Box::new(move |n| {
        d.set(d.get() + n);
        p.send("upload", d.get() as f64, total, "uploading the weights");
        if signal.as_ref().is_some_and(AbortSignal::aborted) {
            a.set(true);
        }
    }));
    progress.send("upload", 0.0, total, "uploading the weights");
    let source = AbortableSource {
        model: &model,
        aborted: &aborted,
    };
    let session = crate::session::load_async(&source, backend, &open_options(o)).await;
    if aborted.get() {
        if let Ok(mut s) = session {
            s.engine.model.backend.destroy();
        }
        return Err(aborted_load());
    }
    loaded(session.map_err(model_error)?, &name, model.bytes, "blob")
}

/// A [`BlobModel`] whose reads fail once the load's signal aborted.
struct AbortableSource<'a> {
    model: &'a BlobModel,
    aborted: &'a Cell<bool>,
}

impl crate::session::ModelMeta for AbortableSource<'_> {
    fn header(&self) -> Result<&crate::formats::gguf::GgufFile, crate::Error> {
        Ok(&self.model.header)
    }

    fn tokenizer(&self) -> Result<Tokenizer, crate::Error> {
        self.model.tokenizer.take().ok_or(crate::Error::Internal(
            "the model's tokenizer was taken twice",
        ))
    }

    fn chat_template(&self, _: Option<&Tokenizer>) -> Result<ChatTemplate, crate::Error> {
        Ok(self.model.template.clone())
    }

    fn runtime_hints(&self) -> Option<&crate::session::RuntimeOptimizations> {
        self.model.runtime_hints()
    }
}

impl crate::model::AsyncTensorSource for AbortableSource<'_> {
    fn meta(&self, name: &str) -> Option<(crate::quant::GgmlType, Vec<u64>)> {
        self.model.meta(name)
    }

    async fn read(&self, name: &str) -> Result<Vec<u8>, crate::Error> {
        if self.aborted.get() {
            return Err(crate::error::ModelError::Aborted.into());
        }
        self.model.read(name).await
    }
}

/// The single GGUF file of the cached model `name`, for the `integrity` check: an RDRR model
/// has no one file to check (its manifest's hashes were checked shard by shard as it
/// downloaded).
pub(super) async fn cached_gguf(name: &str) -> Result<web_sys::Blob, WebError> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    let (dir, _kind, gguf_file) = store.complete_files(name).await.map_err(WebError::from)?;
    let Some(file) = gguf_file else {
        return Err(WebError::new(
            "InvalidArgument",
            format!(
                "integrity is the SHA-256 of a single GGUF file, and {name} is an RDRR model \
                 (every shard of it was checked against its manifest's hash as it downloaded)"
            ),
        ));
    };
    let mut blobs = crate::web::source::directory_blobs(&dir, name)
        .await
        .map_err(model_error)?;
    blobs.remove(&file).ok_or_else(|| {
        WebError::new(
            "NotFound",
            format!("{name}: the cached GGUF file {file} is missing"),
        )
    })
}

/// Load a model onto a new WebGPU device: `source` is the name of a complete model in OPFS,
/// or a GGUF `File`/`Blob`/`ArrayBuffer`/typed array. `options`: `contextLength` (KV cache
/// positions; default the model's, at most 4096), `onProgress` (`{ phase: 'parse' |
/// 'upload' | 'warmup' | 'ready', loaded, total, fraction, message }`), `signal` (checked
/// between tensors), `name` (of a `Blob` model, for messages), `readThroughBlobs` (read an
/// OPFS model through `File` slices even in a worker), `warmup` (default true: one pass
/// after loading, so the first request does not pay for compiling the kernels). Rejects with `WebGPUNotAvailable`,
/// `NotFound`, `UnsupportedModel`, `InvalidArgument`, `AbortError`, `StorageError`.
#[wasm_bindgen]
pub async fn load_model(source: JsValue, options: JsValue) -> Result<WasmModel, JsValue> {
    install_panic_hook();
    let o = read_load_options(&options)?;
    if !has_webgpu() {
        return Err(no_webgpu().into());
    }
    let start = js_sys::Date::now();
    let progress = Progress(o.on_progress.clone());
    let check_abort = || match &o.signal {
        Some(s) if s.aborted() => Err(aborted_load()),
        _ => Ok(()),
    };
    check_abort()?;
    // A tokenizer given instead of the model's: parsed before anything is read or uploaded.
    let tokenizer = o
        .tokenizer_json
        .as_deref()
        .map(Tokenizer::from_json)
        .transpose()
        .map_err(|e| WebError::new("UnsupportedModel", format!("the tokenizerUrl file: {e}")))?;
    progress.send("parse", 0.0, 0.0, "reading the model's metadata");
    // The device first: no WebGPU adapter fails before any reading.
    let ctx = match &o.device_gpu {
        Some(gpu) => crate::web::device::context_on(gpu).await,
        None => GpuContext::new(&DeviceOptions::default()).await,
    }
    .map_err(|e| match WebError::from(e) {
        w if w.code == "NoWebGPU" => WebError::new("WebGPUNotAvailable", w.message),
        w => w,
    })?;
    // A load that fails or is aborted from here on frees what it put on the GPU at once.
    let releaser = ctx.releaser();
    let result = load_on(ctx, source, &o, tokenizer, &progress, start).await;
    if result.is_err() {
        releaser.release();
    }
    result
}

/// The rest of [`load_model`], on the device `ctx`.
async fn load_on(
    ctx: GpuContext,
    source: JsValue,
    o: &LoadOptions,
    tokenizer: Option<Tokenizer>,
    progress: &Progress,
    start: f64,
) -> Result<WasmModel, JsValue> {
    let check_abort = || match &o.signal {
        Some(s) if s.aborted() => Err(aborted_load()),
        _ => Ok(()),
    };
    let device = DeviceInfo {
        adapter: ctx.adapter.name.clone(),
        backend: ctx.adapter.backend.clone(),
        device_type: ctx.adapter.device_type.clone(),
        driver: ctx.adapter.driver.clone(),
        shader_f16: ctx.features.shader_f16,
    };
    let backend = GpuBackend::new(ctx, BATCH).map_err(model_error)?;

    let loaded = if let Some(name) = source.as_string() {
        if let Some(want) = &o.integrity {
            let blob = load::cached_gguf(&name).await?;
            check_integrity(&blob, &name, want, progress).await?;
        }
        load_cached(&name, backend, o, progress).await?
    } else {
        let blob = as_blob(&source)?;
        let name = o.name.clone().unwrap_or_else(|| {
            Reflect::get(&blob, &"name".into())
                .ok()
                .and_then(|v| v.as_string())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "model.gguf".into())
        });
        if let Some(want) = &o.integrity {
            check_integrity(&blob, &name, want, progress).await?;
        }
        let model = BlobModel::gguf(blob, &name).await.map_err(model_error)?;
        load_blob(model, name, backend, o, progress).await?
    };
    check_abort()?;
    let Loaded {
        engine,
        tokenizer: own_tokenizer,
        template,
        mut info,
    } = loaded;
    let tokenizer = match tokenizer {
        Some(t) => {
            // Every id the tokenizer makes must index the model's embedding and logits.
            if t.vocab_size() > info.n_vocab {
                return Err(WebError::new(
                    "UnsupportedModel",
                    format!(
                        "the tokenizerUrl file has {} tokens and the model's vocabulary {}",
                        t.vocab_size(),
                        info.n_vocab
                    ),
                )
                .into());
            }
            info.bos_token_id = t.bos();
            info.eos_token_id = t.eos();
            info.stop_token_ids = t.stop_ids().to_vec();
            t
        }
        None => own_tokenizer,
    };
    info.gpu_bytes = engine.model.backend.bytes_used();
    let state = Rc::new(State {
        engine: RefCell::new(Some(engine)),
        tokenizer,
        template,
        info,
        device,
        busy: Cell::new(false),
        dispose_pending: Cell::new(false),
        disposed: Cell::new(false),
        stats: RefCell::new(Stats::default()),
    });
    // One pass so the pipelines are built before the first request is timed.
    if o.warmup {
        progress.send("warmup", 0.0, 1.0, "compiling the GPU kernels");
        if let Err(e) = warmup(&state).await {
            return Err(state.gpu_error(e).await.into());
        }
    }
    state.stats.borrow_mut().load_ms = js_sys::Date::now() - start;
    progress.send("ready", 1.0, 1.0, "ready");
    Ok(WasmModel { state })
}

// The engine's `RefCell` stays borrowed across the GPU waits: `State::busy` (set by the caller)
// keeps every other borrower out until this returns (they check it first, or only read
// `stats`).
#[allow(clippy::await_holding_refcell_ref)]
async fn warmup(state: &State) -> Result<(), crate::Error> {
    let mut guard = state.engine.borrow_mut();
    let Some(engine) = guard.as_mut() else {
        return Ok(());
    };
    let first = state.tokenizer.bos().unwrap_or(0);
    let opts = GenerateOptions {
        max_tokens: 1,
        sampling: SamplerConfig::greedy(),
        stop_ids: Vec::new(),
    };
    engine
        .generate(&[first], &opts, |_| TokenControl::Continue)
        .await?;
    engine.reset();
    Ok(())
}

/// `IntegrityError` unless `blob`'s SHA-256 is `want` (lowercase hex).
async fn check_integrity(
    blob: &web_sys::Blob,
    name: &str,
    want: &str,
    progress: &Progress,
) -> Result<(), WebError> {
    let total = blob.size();
    let got = crate::web::source::sha256_blob(blob, name, |n| {
        progress.send("verify", n as f64, total, "checking the model's SHA-256");
    })
    .await
    .map_err(model_error)?;
    if got != want {
        return Err(WebError::new(
            "IntegrityError",
            format!("{name}: SHA-256 mismatch: expected {want}, got {got}"),
        ));
    }
    Ok(())
}
