//! The non-matmul ops: RMSNorm and softmax ([`norm`]), RoPE ([`rope`]), attention over a KV
//! cache ([`attention`]), element-wise activations and residual adds ([`elementwise`]), and
//! argmax / top-k ([`select`]).
//!
//! Like [`crate::matmul::MatmulOp`], each op creates its uniforms and bind groups once and
//! records its dispatches into a compute pass every forward pass. Ops that depend on the
//! position (RoPE, attention) read it from one shared [`Position`] uniform, so advancing a
//! recorded forward pass to the next token is a single 16-byte write. Each op's CPU twin is
//! in [`crate::cpu::ops`].

pub mod attention;
pub mod elementwise;
pub mod norm;
pub mod rope;
pub mod select;

pub use attention::{
    AttentionBuffers, AttentionCall, AttentionChoice, AttentionOp, KvCache, KvDtype,
};
pub use elementwise::{Elementwise, ElementwiseOp};
pub use norm::{RmsNormOp, SoftmaxOp};
pub use rope::{RopeOp, RopeTable};
pub use select::{ArgmaxOp, TopKOp};

use std::sync::Arc;

pub use super::kernels::params::PositionParams;
use super::kernels::Kernel;
use super::{GpuContext, GpuError};

/// The uniform holding the current position; one per forward pass, shared by its ops.
pub struct Position {
    pub buffer: crate::Pooled,
}

impl Position {
    pub fn new(ctx: &GpuContext, pos0: u32) -> Self {
        Position {
            buffer: ctx.uniform("position", &Self::params(pos0)),
        }
    }

    /// Queue a write of `pos0`; it applies to work submitted after this call. The caller
    /// keeps `pos0 + n_tokens <= max_ctx` of the KV cache (beyond it, appends are dropped
    /// and attention sees only the first `max_ctx` keys).
    pub fn set(&self, ctx: &GpuContext, pos0: u32) {
        ctx.write(&self.buffer, 0, &[Self::params(pos0)]);
    }

    fn params(pos0: u32) -> PositionParams {
        PositionParams {
            pos0,
            ..Default::default()
        }
    }
}

/// The pipeline of `kernel` and its workgroup size.
fn pipeline(
    ctx: &GpuContext,
    kernel: Kernel,
) -> Result<(Arc<wgpu::ComputePipeline>, u32), GpuError> {
    let wg = workgroup_size(ctx, kernel);
    Ok((ctx.kernel(kernel, Some(wg))?, wg))
}

/// The workgroup size the ops of this module give `kernel` on `ctx`.
pub fn workgroup_size(ctx: &GpuContext, kernel: Kernel) -> u32 {
    let mut wg = kernel.source().map_or(64, |s| s.default_workgroup_size);
    // CPU adapters pay per invocation (see `GpuContext::is_software`), and in the browser
    // also for every workgroup's zero-initialized workgroup memory, per group of 4
    // invocations on SwiftShader (see `SOFTWARE_MATVEC_WG` in src/matmul.rs): the
    // reductions, which size their arrays by the workgroup, take 32 invocations there.
    if ctx.is_software() && matches!(kernel, Kernel::RmsNorm | Kernel::Softmax | Kernel::Argmax) {
        wg = wg.min(SOFTWARE_REDUCTION_WG);
    }
    // A caller's size for the plain RMSNorm (`KernelPolicy::rms_norm_workgroup`): one
    // workgroup per row whatever its size, so only the reduction's width changes.
    if let (Kernel::RmsNorm, Some(size)) = (kernel, ctx.policy.rms_norm_workgroup) {
        wg = size;
    }
    wg
}

/// Workgroup size of the reductions on CPU adapters.
const SOFTWARE_REDUCTION_WG: u32 = 32;

/// An error unless `buffer` holds at least `bytes`.
fn need(what: &str, buffer: &wgpu::Buffer, bytes: u64) -> Result<(), GpuError> {
    if buffer.size() < bytes {
        return Err(GpuError::Validation(format!(
            "{what}: the buffer holds {} bytes, the op needs {bytes}",
            buffer.size()
        )));
    }
    Ok(())
}

/// An error naming the op unless `ok`.
fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), GpuError> {
    if ok {
        Ok(())
    } else {
        Err(GpuError::Unsupported(what()))
    }
}
