//! Opening a model natively: a path, a store name or a URL, on the CPU or a GPU.

use std::path::{Path, PathBuf};

use super::{load, AnyBackend, BackendChoice, KvCacheType, OpenOptions, OpenedModel, Session};
use crate::backend::cpu::CpuBackend;
use crate::formats::source::SourceError;
use crate::storage::DirFiles;
use crate::Error;

/// Open a model and load it: `reference` is a GGUF file, an RDRR or Trellis folder, the name of
/// a model in the store, or the `http(s)` URL of a GGUF file or an RDRR folder (downloaded into
/// the store, verified, unless it is there already). Errors name the model.
pub fn open(reference: impl AsRef<Path>, options: &OpenOptions) -> Result<Session, Error> {
    let path = resolve(reference.as_ref(), options)?;
    let model = open_path(&path)?;
    let backend = backend(options)?;
    load(&model, backend, options).map_err(|e| e.at(&path))
}

/// Where the model `reference` names is on disk: the path itself, a model of the store, or
/// the store's copy of a URL (downloaded first when it is not complete there).
pub fn resolve(reference: &Path, options: &OpenOptions) -> Result<PathBuf, Error> {
    match reference.to_str() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            download(url, options)
        }
        Some(name) if !reference.exists() => Ok(crate::storage::resolve_model(
            name,
            options.store.as_deref(),
        )?),
        // A path that is not UTF-8 can only be a path.
        _ => Ok(reference.to_path_buf()),
    }
}

/// Open whatever `path` holds: a GGUF file, or an RDRR or Trellis folder. Errors name the path.
pub fn open_path(path: &Path) -> Result<OpenedModel<DirFiles>, Error> {
    let io = |message: String| SourceError::Io {
        path: path.display().to_string(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| io(e.to_string()))?;
    let opened = if meta.is_file() {
        let (dir, file) = match (path.parent(), path.file_name().and_then(|f| f.to_str())) {
            (Some(dir), Some(file)) => (dir, file),
            _ => return Err(io("not a file name this machine can open".into()).into()),
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        OpenedModel::gguf(DirFiles::new(dir), file)
    } else {
        OpenedModel::folder(DirFiles::new(path))
    };
    opened.map_err(|e| match e {
        // Already names the path.
        e @ Error::Source(_) => e,
        e => e.at(path),
    })
}

/// The backend `options` ask for.
pub fn backend(options: &OpenOptions) -> Result<AnyBackend, Error> {
    let batch = options.batch.max(1);
    let kv = match options.kv_cache {
        KvCacheType::Auto => None,
        KvCacheType::F16 => Some(crate::backend::KvType::F16),
        KvCacheType::F32 => Some(crate::backend::KvType::F32),
    };
    #[cfg(feature = "cuda")]
    {
        use crate::backend::cuda::CudaBackend;
        let cuda = match options.backend {
            BackendChoice::Cuda => Some(CudaBackend::new(0, batch)?),
            // Auto falls back when there is no driver, no device or no NVRTC.
            BackendChoice::Auto => CudaBackend::new(0, batch).ok(),
            _ => None,
        };
        if let Some(mut b) = cuda {
            b.set_kv_type(kv);
            b.set_vram_budget(options.vram_budget);
            return Ok(AnyBackend::Cuda(Box::new(b)));
        }
    }
    if options.vram_budget.is_some() {
        return Err(Error::Options(
            "a GPU memory budget (--vram-budget) needs the CUDA backend, and none opened",
        ));
    }
    #[cfg(not(feature = "cuda"))]
    if options.backend == BackendChoice::Cuda {
        return Err(Error::NotCompiled("cuda"));
    }
    #[cfg(feature = "gpu")]
    {
        use crate::gpu::{DeviceOptions, GpuContext};
        let gpu = match options.backend {
            BackendChoice::Cpu | BackendChoice::Cuda => None,
            BackendChoice::Gpu => Some(pollster::block_on(GpuContext::new(
                &DeviceOptions::default(),
            ))?),
            BackendChoice::Auto => pollster::block_on(GpuContext::new(&DeviceOptions::default()))
                .ok()
                .filter(|c| c.adapter.device_type != "Cpu"),
        };
        if let Some(ctx) = gpu {
            use crate::gpu::ops::KvDtype;
            let mut b = crate::backend::gpu::GpuBackend::new(ctx, batch)?;
            b.set_kv_dtype(match options.kv_cache {
                KvCacheType::Auto => None,
                KvCacheType::F16 => Some(KvDtype::F16),
                KvCacheType::F32 => Some(KvDtype::F32),
            });
            return Ok(AnyBackend::Gpu(Box::new(b)));
        }
    }
    #[cfg(not(feature = "gpu"))]
    if options.backend == BackendChoice::Gpu {
        return Err(Error::NotCompiled("gpu"));
    }
    let mut b = CpuBackend::new(batch);
    b.set_kv_type(kv);
    Ok(AnyBackend::Cpu(Box::new(b)))
}

/// Without the HTTP client, a URL cannot be opened.
#[cfg(not(feature = "http"))]
fn download(_url: &str, _options: &OpenOptions) -> Result<PathBuf, Error> {
    Err(Error::NotCompiled("http"))
}

/// Download the model at `url` into the store (every shard and group hash checked as it
/// streams) unless it is there already; its path in the store.
#[cfg(feature = "http")]
fn download(url: &str, options: &OpenOptions) -> Result<PathBuf, Error> {
    use crate::error::ModelError;
    use crate::storage::download::{pull, DownloadError, DownloadOptions, ReqwestClient};
    use crate::storage::StoreError;
    let name = crate::storage::model_name_from_url(url)
        .ok_or_else(|| ModelError::UnnamedUrl { url: url.into() })?;
    let store = crate::storage::FsStore::open_default(options.store.as_deref())?;
    if let Some(path) = store.complete_path(&name) {
        return Ok(path);
    }
    let network = |message: String| DownloadError::Network {
        url: url.into(),
        message,
        failures: 0,
    };
    let client = ReqwestClient::new().map_err(|e| network(e.message))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| network(format!("cannot start the async runtime: {e}")))?;
    let summary = rt.block_on(pull(
        &store,
        &client,
        url,
        &name,
        None,
        &DownloadOptions::default(),
        &|_| {},
    ))?;
    store.complete_path(&summary.name).ok_or_else(|| {
        StoreError::NotFound {
            name: summary.name.clone(),
            why: format!("downloaded from {url}, but not found in the store"),
        }
        .into()
    })
}
