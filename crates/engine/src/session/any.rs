//! A backend chosen at run time: the CPU, the wgpu GPU backend or CUDA, behind the one
//! [`Backend`] interface.

use crate::backend::cpu::CpuBackend;
#[cfg(feature = "gpu")]
use crate::backend::gpu::GpuBackend;
use crate::backend::{Backend, Batch, KvShape, Limits, Logits, Names, Pass, RopeConfig, Tensor};
use crate::backend::{Tokens, Weight, WeightData};
use crate::Error;

/// The CPU, the wgpu or the CUDA backend.
pub enum AnyBackend {
    Cpu(Box<CpuBackend>),
    #[cfg(feature = "gpu")]
    Gpu(Box<GpuBackend>),
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    Cuda(Box<crate::backend::cuda::CudaBackend>),
}

/// A value of the CPU, the wgpu or the CUDA backend.
pub enum Either<C, G, D = std::convert::Infallible> {
    Cpu(C),
    Gpu(G),
    Cuda(D),
}

/// The CUDA backend's types (uninhabited in a build without it).
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
mod cuda_types {
    pub type Plan = crate::backend::cuda::CudaPlan;
    pub type Recorded = crate::backend::cuda::CudaRecorded;
    pub type Pending = crate::backend::cuda::CudaPending;
}
#[cfg(not(all(feature = "cuda", not(target_arch = "wasm32"))))]
mod cuda_types {
    pub type Plan = std::convert::Infallible;
    pub type Recorded = std::convert::Infallible;
    pub type Pending = std::convert::Infallible;
}

/// The GPU backend's types (uninhabited in a build without it).
#[cfg(feature = "gpu")]
mod gpu_types {
    pub type Plan = crate::backend::gpu::GpuPlan;
    pub type Recorded = crate::backend::gpu::GpuRecorded;
    pub type Pending = crate::backend::gpu::GpuPending;
}
#[cfg(not(feature = "gpu"))]
mod gpu_types {
    pub type Plan = std::convert::Infallible;
    pub type Recorded = std::convert::Infallible;
    pub type Pending = std::convert::Infallible;
}

/// Run `$body` with `$b` bound to the backend inside `$self`.
macro_rules! each {
    ($self:expr, $b:ident => $body:expr) => {
        match $self {
            AnyBackend::Cpu($b) => $body,
            #[cfg(feature = "gpu")]
            AnyBackend::Gpu($b) => $body,
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            AnyBackend::Cuda($b) => $body,
        }
    };
}

fn mismatch() -> Error {
    Error::Internal("a plan or pass of one backend given to another")
}

impl AnyBackend {
    /// The GPU backend, if that is the one.
    #[cfg(feature = "gpu")]
    pub fn gpu(&mut self) -> Option<&mut GpuBackend> {
        match self {
            AnyBackend::Gpu(b) => Some(b),
            _ => None,
        }
    }
}

impl Backend for AnyBackend {
    type Plan = Either<<CpuBackend as Backend>::Plan, gpu_types::Plan, cuda_types::Plan>;
    type Recorded =
        Either<<CpuBackend as Backend>::Recorded, gpu_types::Recorded, cuda_types::Recorded>;
    type Pending =
        Either<<CpuBackend as Backend>::Pending, gpu_types::Pending, cuda_types::Pending>;

    fn describe(&self) -> String {
        each!(self, b => b.describe())
    }

    fn limits(&self) -> Limits {
        each!(self, b => b.limits())
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        each!(self, b => b.load_weight(w))
    }

    fn reads_located(&self, dtype: crate::quant::GgmlType) -> bool {
        each!(self, b => b.reads_located(dtype))
    }

    fn kv_request(&self) -> Option<crate::backend::KvType> {
        each!(self, b => b.kv_request())
    }

    fn set_arithmetic(&mut self, arithmetic: crate::backend::Arithmetic) {
        each!(self, b => b.set_arithmetic(arithmetic))
    }

    fn apply_hints(
        &mut self,
        hints: &crate::backend::hints::RuntimeOptimizations,
        notes: &mut Vec<crate::backend::hints::HintNote>,
    ) {
        each!(self, b => b.apply_hints(hints, notes))
    }

    fn activations(&self, w: Weight, rows: usize) -> crate::pass::Activations {
        each!(self, b => b.activations(w, rows))
    }

    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, Error> {
        each!(self, b => b.load_vector(name, values))
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        each!(self, b => b.alloc(name, len))
    }

    fn write_vector(&mut self, t: Tensor, values: &[f32]) -> Result<(), Error> {
        each!(self, b => b.write_vector(t, values))
    }

    fn init_cache(&mut self, kv: KvShape, rope: &[RopeConfig]) -> Result<(), Error> {
        each!(self, b => b.init_cache(kv, rope))
    }

    fn bytes_used(&self) -> u64 {
        each!(self, b => b.bytes_used())
    }

    fn plan(&self, pass: &Pass) -> Result<Self::Plan, Error> {
        Ok(match self {
            AnyBackend::Cpu(b) => Either::Cpu(b.plan(pass)?),
            #[cfg(feature = "gpu")]
            AnyBackend::Gpu(b) => Either::Gpu(b.plan(pass)?),
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            AnyBackend::Cuda(b) => Either::Cuda(b.plan(pass)?),
        })
    }

    fn plan_lines(&self, plan: &Self::Plan, names: &Names) -> Vec<String> {
        match (self, plan) {
            (AnyBackend::Cpu(b), Either::Cpu(p)) => b.plan_lines(p, names),
            #[cfg(feature = "gpu")]
            (AnyBackend::Gpu(b), Either::Gpu(p)) => b.plan_lines(p, names),
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            (AnyBackend::Cuda(b), Either::Cuda(p)) => b.plan_lines(p, names),
            #[allow(unreachable_patterns)]
            _ => vec![],
        }
    }

    fn record(&mut self, plan: &Self::Plan, batch: &Batch) -> Result<Self::Recorded, Error> {
        match (self, plan) {
            (AnyBackend::Cpu(b), Either::Cpu(p)) => Ok(Either::Cpu(b.record(p, batch)?)),
            #[cfg(feature = "gpu")]
            (AnyBackend::Gpu(b), Either::Gpu(p)) => Ok(Either::Gpu(b.record(p, batch)?)),
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            (AnyBackend::Cuda(b), Either::Cuda(p)) => Ok(Either::Cuda(b.record(p, batch)?)),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch()),
        }
    }

    fn submit(&mut self, pass: Self::Recorded, tokens: Tokens<'_>) -> Result<Self::Pending, Error> {
        match (self, pass) {
            (AnyBackend::Cpu(b), Either::Cpu(p)) => Ok(Either::Cpu(b.submit(p, tokens)?)),
            #[cfg(feature = "gpu")]
            (AnyBackend::Gpu(b), Either::Gpu(p)) => Ok(Either::Gpu(b.submit(p, tokens)?)),
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            (AnyBackend::Cuda(b), Either::Cuda(p)) => Ok(Either::Cuda(b.submit(p, tokens)?)),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch()),
        }
    }

    async fn wait(&mut self, pending: Self::Pending) -> Result<Logits, Error> {
        match (self, pending) {
            (AnyBackend::Cpu(b), Either::Cpu(p)) => b.wait(p).await,
            #[cfg(feature = "gpu")]
            (AnyBackend::Gpu(b), Either::Gpu(p)) => b.wait(p).await,
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            (AnyBackend::Cuda(b), Either::Cuda(p)) => b.wait(p).await,
            #[allow(unreachable_patterns)]
            _ => Err(mismatch()),
        }
    }
}
