//! `loadAdapter`: a LoRA adapter for a loaded model, from OPFS (the id of a download: a GGUF
//! adapter or an RDRR adapter folder, verified as any model is) or from a GGUF adapter's bytes
//! (a `File`, `Blob`, `ArrayBuffer` or typed array). Adapters are megabytes: their files are
//! read whole into memory, checked against the model (architecture, blocks, shapes), then
//! uploaded; they apply to the generations that name them (`adapters`).

use super::*;
use crate::formats::source::MemoryFiles;
use crate::session::OpenedModel;
use crate::web::source::{directory_blobs, read_blob};

/// Most bytes of adapter files read into memory.
const MAX_ADAPTER_BYTES: u64 = 1 << 30;

fn too_large(name: &str, bytes: u64) -> WebError {
    WebError::new(
        "InvalidArgument",
        format!("adapter {name}: {bytes} bytes is more than an adapter holds (at most {MAX_ADAPTER_BYTES})"),
    )
}

/// The adapter's files and, for a GGUF adapter, its file's name.
async fn files_of(source: &JsValue, name: &str) -> Result<(MemoryFiles, Option<String>), WebError> {
    let mut files = MemoryFiles::new();
    if let Some(id) = source.as_string() {
        let store = OpfsStore::open().await.map_err(WebError::from)?;
        let (dir, _kind, gguf_file) = store.complete_files(&id).await.map_err(WebError::from)?;
        let blobs = directory_blobs(&dir, &id).await.map_err(model_error)?;
        let total: u64 = blobs.values().map(|b| b.size() as u64).sum();
        if total > MAX_ADAPTER_BYTES {
            return Err(too_large(name, total));
        }
        for (file, blob) in blobs {
            let bytes = read_blob(&blob, &file, 0, blob.size() as u64)
                .await
                .map_err(model_error)?;
            files.insert(file, bytes);
        }
        return Ok((files, gguf_file));
    }
    let blob = as_blob(source)?;
    let size = blob.size() as u64;
    if size > MAX_ADAPTER_BYTES {
        return Err(too_large(name, size));
    }
    let bytes = read_blob(&blob, name, 0, size).await.map_err(model_error)?;
    files.insert("adapter.gguf", bytes);
    Ok((files, Some("adapter.gguf".to_string())))
}

/// Read, check and upload the adapter `source` for the model of `state`: its index.
pub(super) async fn load(state: &State, source: &JsValue, name: &str) -> Result<usize, WebError> {
    let (files, gguf) = files_of(source, name).await?;
    let opened = match gguf {
        Some(file) => OpenedModel::gguf(files, &file),
        None => OpenedModel::folder(files),
    }
    .map_err(model_error)?;
    let mut guard = state.engine.borrow_mut();
    let engine = guard.as_mut().ok_or_else(disposed)?;
    let data = opened
        .adapter(name, &engine.model.config)
        .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?;
    let id = engine.model.load_adapter(&data).map_err(model_error)?;
    Ok(id.0)
}
