//! Loading a model onto a new WebGPU device: from OPFS (sync access handles in a worker,
//! `File` slices elsewhere) or from a GGUF `Blob`, one tensor at a time.

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

fn context_for(o: &LoadOptions, config: &ModelConfig) -> usize {
    let trained = config.context_length.max(1);
    o.context_length
        .unwrap_or(trained.min(DEFAULT_CONTEXT))
        .min(trained)
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
        let opened = crate::web::cached::Opened::open(files).map_err(model_error)?;
        let config = ModelConfig::from_gguf(opened.header()).map_err(model_error)?;
        let tokenizer = opened.tokenizer().map_err(model_error)?;
        let template = opened.chat_template(&tokenizer);
        let ctx = context_for(o, &config);
        progress.send("upload", 0.0, file_bytes as f64, "uploading the weights");
        let counted = crate::web::cached::Counted::new(&opened, |n| {
            progress.send(
                "upload",
                n as f64,
                file_bytes as f64,
                "uploading the weights",
            );
        });
        let model = Model::load(backend, config.clone(), &counted, ctx).map_err(model_error)?;
        drop(opened);
        let info = model_info(
            name,
            &config,
            ctx,
            file_bytes,
            &tokenizer,
            &template,
            "sync-access-handle",
        );
        return Ok(Loaded {
            engine: Engine::new(model),
            tokenizer,
            template,
            info,
        });
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
    let config = ModelConfig::from_gguf(&model.header).map_err(model_error)?;
    let ctx = context_for(o, &config);
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
    let loaded = Model::load_async(backend, config.clone(), &source, ctx).await;
    if aborted.get() {
        if let Ok(mut m) = loaded {
            m.backend.destroy();
        }
        return Err(aborted_load());
    }
    let model_gpu = loaded.map_err(model_error)?;
    let info = model_info(
        &name,
        &config,
        ctx,
        model.bytes,
        &model.tokenizer,
        &model.template,
        "blob",
    );
    let BlobModel {
        tokenizer,
        template,
        ..
    } = model;
    Ok(Loaded {
        engine: Engine::new(model_gpu),
        tokenizer,
        template,
        info,
    })
}

/// A [`BlobModel`] whose reads fail once the load's signal aborted.
struct AbortableSource<'a> {
    model: &'a BlobModel,
    aborted: &'a Cell<bool>,
}

impl crate::model::AsyncTensorSource for AbortableSource<'_> {
    fn meta(&self, name: &str) -> Option<(crate::quant::GgmlType, Vec<u64>)> {
        self.model.meta(name)
    }

    async fn read(&self, name: &str) -> Result<Vec<u8>, crate::Error> {
        if self.aborted.get() {
            return Err(crate::Error::Usage("the load was aborted".into()));
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
