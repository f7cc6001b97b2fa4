//! What the GPU runtime can fail with.

/// Errors of the GPU layer.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("the GPU refused the device request: {0}")]
    RequestDevice(String),
    #[error("kernel {kernel}: {message}")]
    Shader { kernel: String, message: String },
    #[error("{what}: {bytes} bytes is more than this device allows ({limit})")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    #[error("{0} is not supported on the GPU")]
    Unsupported(String),
    #[error("GPU validation error: {0}")]
    Validation(String),
    #[error("reading back from the GPU failed: {0}")]
    Readback(String),
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    #[error(transparent)]
    Quant(#[from] crate::quant::QuantError),
}
