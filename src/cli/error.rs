//! The command line's error: the library's ([`crate::Error`]), or one of its own: a command
//! used wrongly, or a file it could not read or write.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Lib(#[from] crate::Error),
    /// A command used wrongly: a missing or conflicting argument, a value out of range.
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// The GPU (or its libraries) could not do what was asked.
    #[error("{0}")]
    Device(String),
}

impl Error {
    /// Attach the path of the file or folder the error came from.
    pub fn at(self, path: &Path) -> Error {
        match self {
            Error::Lib(e) => Error::Lib(e.at(path)),
            Error::Usage(m) => Error::Usage(format!("{}: {m}", path.display())),
            e @ (Error::Io { .. } | Error::Device(_)) => e,
        }
    }
}

/// Each error of a layer below converts into the library's error, and from there into this
/// one (`?` in the commands).
macro_rules! through_lib {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::Lib(e.into())
            }
        })*
    };
}

through_lib!(
    crate::formats::source::SourceError,
    crate::formats::gguf::GgufError,
    crate::formats::rdrr::RdrrError,
    crate::formats::hf::HfError,
    crate::formats::safetensors::SafetensorsError,
    crate::formats::trellis::TrellisError,
    crate::quant::QuantError,
    crate::text::TextError,
    crate::sampling::SamplingError,
    crate::storage::StoreError,
    crate::storage::download::DownloadError,
    crate::error::ModelError,
    crate::error::BatchError,
    crate::error::BackendError,
);

#[cfg(feature = "gpu")]
through_lib!(crate::gpu::GpuError);
