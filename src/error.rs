//! The crate-wide error: each layer's error joined with `#[from]`.

use crate::formats::gguf::GgufError;
use crate::formats::hf::HfError;
use crate::formats::rdrr::RdrrError;
use crate::formats::safetensors::SafetensorsError;
use crate::formats::source::SourceError;
use crate::formats::trellis::TrellisError;
use crate::quant::QuantError;
use crate::sampling::SamplingError;
use crate::storage::download::DownloadError;
use crate::storage::StoreError;
use crate::text::TextError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Rdrr(#[from] RdrrError),
    #[error(transparent)]
    Hf(#[from] HfError),
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    #[error(transparent)]
    Trellis(#[from] TrellisError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Text(#[from] TextError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Boxed: download errors carry URLs and hashes, and `Error` stays small.
    #[error(transparent)]
    Download(#[from] Box<DownloadError>),
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{0}")]
    Usage(String),
    /// Any of the above, with the file or folder it came from.
    #[error("{path}: {source}")]
    At {
        path: String,
        #[source]
        source: Box<Error>,
    },
}

impl From<DownloadError> for Error {
    fn from(e: DownloadError) -> Error {
        Error::Download(Box::new(e))
    }
}

impl Error {
    /// Attach the path of the file or folder the error came from.
    pub fn at(self, path: &std::path::Path) -> Error {
        Error::At {
            path: path.display().to_string(),
            source: Box::new(self),
        }
    }
}
