//! cuBLAS matrix products on the device's stream: `y = x W^T` for row-major `x: (n, k)` and
//! `W: (m, k)` (a weight as its rows), `y: (n, m)` in f32.

use std::ffi::c_void;

use cudarc::cublas::sys as cb;

use crate::device::Device;
use crate::GdsError;

/// The element type of a product's operands.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GemmType {
    /// f16 operands, f32 sums (tensor cores).
    F16,
    /// f32 operands and sums, no reduced-precision shortcuts (no TF32).
    F32,
    /// int8 operands, exact int32 sums and result (tensor cores).
    I8,
}

/// A cuBLAS handle bound to a device's stream.
pub struct Blas {
    handle: cb::cublasHandle_t,
}

// SAFETY: the handle is used through `&mut self` only, from threads that bound the context.
unsafe impl Send for Blas {}

fn blas_err(what: &'static str) -> impl Fn(cb::cublasStatus_t) -> GdsError {
    move |s| GdsError::Blas {
        what,
        message: format!("{s:?}"),
    }
}

fn check(what: &'static str, s: cb::cublasStatus_t) -> Result<(), GdsError> {
    if s == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(blas_err(what)(s))
    }
}

impl Blas {
    /// A handle whose products run on `device`'s stream.
    pub fn new(device: &Device) -> Result<Blas, GdsError> {
        crate::libs::load_cublas()?;
        device.bind()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: an out-parameter; the handle is destroyed on drop.
        check("create", unsafe { cb::cublasCreate_v2(&mut handle) })?;
        let blas = Blas { handle };
        // SAFETY: a live handle and stream.
        check("set stream", unsafe {
            cb::cublasSetStream_v2(handle, device.stream() as cb::cudaStream_t)
        })?;
        Ok(blas)
    }

    /// `y (n, m) = x (n, k) . w (m, k)^T`, operands of type `t` at device addresses `x` and
    /// `w`, `y` f32 (int32 for [`GemmType::I8`], whose `k` must be a multiple of 4).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &mut self,
        t: GemmType,
        m: usize,
        n: usize,
        k: usize,
        w: u64,
        x: u64,
        y: u64,
    ) -> Result<(), GdsError> {
        let (data, compute, out) = match t {
            GemmType::F16 => (
                cb::cudaDataType_t::CUDA_R_16F,
                cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cb::cudaDataType_t::CUDA_R_32F,
            ),
            GemmType::F32 => (
                cb::cudaDataType_t::CUDA_R_32F,
                cb::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
                cb::cudaDataType_t::CUDA_R_32F,
            ),
            GemmType::I8 => (
                cb::cudaDataType_t::CUDA_R_8I,
                cb::cublasComputeType_t::CUBLAS_COMPUTE_32I,
                cb::cudaDataType_t::CUDA_R_32I,
            ),
        };
        // The scalars' type is the compute type's (f32, or i32 for int8 products).
        let (alpha, beta) = (1f32, 0f32);
        let (ialpha, ibeta) = (1i32, 0i32);
        let (pa, pb) = match t {
            GemmType::I8 => (
                &ialpha as *const i32 as *const c_void,
                &ibeta as *const i32 as *const c_void,
            ),
            _ => (
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
            ),
        };
        let dim = |v: usize| {
            i32::try_from(v).map_err(|_| GdsError::Blas {
                what: "gemm",
                message: format!("dimension {v} exceeds cuBLAS's 32-bit sizes"),
            })
        };
        // Column-major view: y^T (m, n) = W (m, k) . x^T (k, n), where W is the row-major
        // weight read transposed and x^T the row-major activations as they are.
        // SAFETY: live device buffers of the stated shapes; the handle's stream orders them.
        check("gemm", unsafe {
            cb::cublasGemmEx(
                self.handle,
                cb::cublasOperation_t::CUBLAS_OP_T,
                cb::cublasOperation_t::CUBLAS_OP_N,
                dim(m)?,
                dim(n)?,
                dim(k)?,
                pa,
                w as *const c_void,
                data,
                dim(k)?,
                x as *const c_void,
                data,
                dim(k)?,
                pb,
                y as *mut c_void,
                out,
                dim(m)?,
                compute,
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        })
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe { cb::cublasDestroy_v2(self.handle) };
    }
}
