//! Errors of the model-store entry points as JS `Error`s with a stable `code` (and, where it
//! helps, the numbers or names behind the message as properties):
//!
//! | code | when | extra properties |
//! |---|---|---|
//! | `IntegrityError` | a shard or group hash did not match (twice for a shard) | `file`, `algorithm`, `expected`, `actual` |
//! | `QuotaExceeded` | the model does not fit in the origin's quota (nothing was written) | `needed`, `available` |
//! | `NetworkError` | the server could not be reached or kept failing (resumable) | `url` |
//! | `NotFound` | HTTP 404/410, or no such model in the store | `url` or `model` |
//! | `HttpError` | any other refusing HTTP status | `url`, `status` |
//! | `InvalidManifest` | a manifest, tensors.json or GGUF that cannot be used safely | `url` |
//! | `BadName` | a model or file name that is not a plain name | `value` |
//! | `StorageError` | OPFS failed | |
//! | `AbortError` | the `signal` aborted the download (resumable) | |
//! | `NeedsWorker` | loading a model from OPFS outside a dedicated worker | |
//! | `NoWebGPU` | no WebGPU adapter or device | |
//! | `GpuError` | WebGPU failed while loading or running | |
//! | `ModelError` | the model cannot be loaded or run | |
//! | `BadArgument` | an option of the wrong type | |
//! | `DownloadError` | any other download failure | |

use js_sys::Reflect;
use wasm_bindgen::JsValue;

use crate::storage::download::DownloadError;
use crate::storage::opfs::OpfsFilesError;
use crate::storage::StoreError;

/// An error on its way to JS.
pub(crate) struct WebError {
    pub code: &'static str,
    pub message: String,
    pub fields: Vec<(&'static str, JsValue)>,
}

impl WebError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> WebError {
        WebError {
            code,
            message: message.into(),
            fields: Vec::new(),
        }
    }

    fn with(mut self, name: &'static str, value: impl Into<JsValue>) -> WebError {
        self.fields.push((name, value.into()));
        self
    }

    /// A JS `Error` with `message`, `code` and the extra properties.
    pub(crate) fn into_js(self) -> JsValue {
        let err = js_sys::Error::new(&self.message);
        let _ = Reflect::set(&err, &"code".into(), &self.code.into());
        for (name, value) in self.fields {
            let _ = Reflect::set(&err, &name.into(), &value);
        }
        err.into()
    }
}

impl From<WebError> for JsValue {
    fn from(e: WebError) -> JsValue {
        e.into_js()
    }
}

impl From<StoreError> for WebError {
    fn from(e: StoreError) -> WebError {
        let message = e.to_string();
        match e {
            StoreError::BadName { name, .. } => {
                WebError::new("BadName", message).with("name", name)
            }
            StoreError::NotFound { name, .. } => {
                WebError::new("NotFound", message).with("name", name)
            }
            // The browser's own quota error, should a write exceed the room the estimate gave.
            StoreError::Io { message: m, .. } if m.starts_with("QuotaExceededError") => {
                WebError::new("QuotaExceeded", message)
            }
            _ => WebError::new("StorageError", message),
        }
    }
}

impl From<DownloadError> for WebError {
    fn from(e: DownloadError) -> WebError {
        let message = e.to_string();
        match e {
            DownloadError::HashMismatch {
                what,
                algorithm,
                expected,
                actual,
                url,
                ..
            } => WebError::new("IntegrityError", message)
                .with("file", what)
                .with("algorithm", algorithm)
                .with("expected", expected)
                .with("actual", actual)
                .with("url", url),
            DownloadError::GroupMismatch {
                group,
                algorithm,
                expected,
                actual,
            } => WebError::new("IntegrityError", message)
                .with("group", group)
                .with("algorithm", algorithm)
                .with("expected", expected)
                .with("actual", actual),
            DownloadError::Quota { needed, available } => WebError::new("QuotaExceeded", message)
                .with("needed", needed as f64)
                .with("available", available as f64),
            DownloadError::Network { url, .. } | DownloadError::Protocol { url, .. } => {
                WebError::new("NetworkError", message).with("url", url)
            }
            DownloadError::Status {
                url,
                status: 404 | 410,
            } => WebError::new("NotFound", message).with("url", url),
            DownloadError::Status { url, status } => WebError::new("HttpError", message)
                .with("url", url)
                .with("status", status),
            DownloadError::Manifest { url, .. }
            | DownloadError::InvalidManifest { url, .. }
            | DownloadError::TooLarge { url, .. }
            | DownloadError::NotGguf { url, .. } => {
                WebError::new("InvalidManifest", message).with("url", url)
            }
            DownloadError::Store(e) => e.into(),
            // Anything the downloader adds later.
            #[allow(unreachable_patterns)]
            _ => WebError::new("DownloadError", message),
        }
    }
}

impl From<OpfsFilesError> for WebError {
    fn from(e: OpfsFilesError) -> WebError {
        match e {
            OpfsFilesError::Store(e) => e.into(),
            e @ OpfsFilesError::NeedsWorker(_) => WebError::new("NeedsWorker", e.to_string()),
            e @ OpfsFilesError::Open { .. } => WebError::new("StorageError", e.to_string()),
        }
    }
}

impl From<crate::Error> for WebError {
    fn from(e: crate::Error) -> WebError {
        match e {
            crate::Error::Store(e) => e.into(),
            crate::Error::Download(e) => (*e).into(),
            crate::Error::Gpu(e) => e.into(),
            e => WebError::new("ModelError", e.to_string()),
        }
    }
}

impl From<crate::gpu::GpuError> for WebError {
    fn from(e: crate::gpu::GpuError) -> WebError {
        use crate::gpu::GpuError;
        match e {
            GpuError::NoAdapter(_) | GpuError::RequestDevice(_) => {
                WebError::new("NoWebGPU", e.to_string())
            }
            e => WebError::new("GpuError", e.to_string()),
        }
    }
}
