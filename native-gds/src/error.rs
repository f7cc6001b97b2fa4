//! Errors of the CUDA runtime: each says what is missing or what failed, never a panic.

/// What went wrong opening or using a CUDA device.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GdsError {
    /// No CUDA driver library on this machine.
    #[error("no CUDA driver: libcuda.so.1 was not found (is the NVIDIA driver installed?)")]
    NoDriver,
    /// The driver loaded but reports no device (or not the one asked for).
    #[error("no CUDA device {ordinal}: the driver reports {count}")]
    NoDevice { ordinal: usize, count: usize },
    /// A CUDA library the operation needs is not installed where it was looked for.
    #[error("{name} not found (looked in {searched}; set TRITIUM_CUDA_LIBS to its folder)")]
    Library {
        name: &'static str,
        searched: String,
    },
    /// A driver call failed.
    #[error("CUDA {what}: {message}")]
    Driver { what: &'static str, message: String },
    /// Not enough device memory for an allocation.
    #[error("out of GPU memory: {bytes} bytes asked for, {free} free of {total}")]
    OutOfMemory {
        bytes: usize,
        free: usize,
        total: usize,
    },
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile the kernels for {arch}: {log}")]
    Compile { arch: String, log: String },
    /// A cuBLAS call failed.
    #[error("cuBLAS {what}: {message}")]
    Blas { what: &'static str, message: String },
    /// A kernel that the loaded module does not have.
    #[error("kernel {0} is not in the compiled module")]
    NoKernel(String),
    /// A weight file could not be opened or read.
    #[error("{path}: {what}: {message}")]
    Io {
        path: String,
        what: &'static str,
        message: String,
    },
    /// A read past the end of a weight file (a truncated file or a wrong offset).
    #[error(
        "{path} is truncated: {len} bytes at offset {offset} asked for, the file has {file_len}"
    )]
    Truncated {
        path: String,
        offset: u64,
        len: u64,
        file_len: u64,
    },
    /// Host memory for staging could not be had.
    #[error("host memory for {bytes} bytes: {why}")]
    HostMemory { bytes: usize, why: String },
}

impl GdsError {
    pub(crate) fn driver(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GdsError {
        move |e| GdsError::Driver {
            what,
            message: e.to_string(),
        }
    }
}
