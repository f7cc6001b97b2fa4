//! RoPE and attention on the GPU backend. `rope` only notes its tensor; the next op records
//! it, unless that op is the attention reading exactly the two noted tensors (q with the
//! query heads, k with the cache's KV heads): then the attention kernel rotates q and the new
//! keys itself (`attention.wgsl` with RoPE on) and the two rope dispatches, with the barriers
//! between them and the append, are gone. The q and k buffers are then left unrotated, which
//! [`crate::backend::Backend::attention`] allows.

use super::{GpuBackend, Key, Step};
use crate::backend::Tensor;
use crate::gpu::ops::{AttentionBuffers, AttentionCall, AttentionOp, RopeOp};
use crate::gpu::GpuError;
use crate::Error;

impl GpuBackend {
    /// Fold the RoPE of q and k into the attention that reads them (the default), or record
    /// every RoPE as its own dispatch (for comparisons).
    pub fn set_fold_rope(&mut self, on: bool) {
        self.fold_rope = on;
        self.tapes.clear();
    }

    /// Note a RoPE of `x` (recorded by [`Self::flush_pending`] or folded into attention).
    pub(super) fn note_rope(&mut self, x: Tensor, n_heads: usize) -> Result<(), Error> {
        self.flush_silu()?;
        self.flush_norm()?;
        self.wrote(x);
        if self.fold_rope && self.pending_rope.len() < 2 {
            self.pending_rope.push((x, n_heads));
            return Ok(());
        }
        self.flush_ropes()?;
        self.record_rope(x, n_heads)
    }

    /// Record the noted RoPEs as their own dispatches.
    pub(super) fn flush_ropes(&mut self) -> Result<(), Error> {
        for (x, n_heads) in std::mem::take(&mut self.pending_rope) {
            self.record_rope(x, n_heads)?;
        }
        Ok(())
    }

    /// Record everything noted but not yet recorded (RoPEs, a SiluMul, then an RMSNorm).
    pub(super) fn flush_pending(&mut self) -> Result<(), Error> {
        self.flush_ropes()?;
        self.flush_silu()?;
        self.flush_norm()
    }

    fn record_rope(&mut self, x: Tensor, n_heads: usize) -> Result<(), Error> {
        let n = self.n_tokens as u32;
        self.step(Key::Rope(x, n_heads), |s| {
            let table = s
                .rope
                .as_ref()
                .ok_or_else(|| GpuError::Validation("RoPE before its table was created".into()))?;
            Ok(Step::Rope(RopeOp::new(
                &s.ctx,
                table,
                s.buf(x),
                &s.position,
                n,
                n_heads as u32,
            )?))
        })
    }

    /// Whether the noted RoPEs are exactly those of this attention's q and k.
    fn ropes_fold_into(&self, q: Tensor, k: Tensor, n_heads: usize) -> bool {
        let Some(kv) = self.cache.as_ref().map(|c| c.n_kv_heads as usize) else {
            return false;
        };
        let (qh, kh) = ((q, n_heads), (k, kv));
        q != k
            && self.rope.is_some()
            && matches!(self.pending_rope.as_slice(), [a, b] if (*a, *b) == (qh, kh) || (*a, *b) == (kh, qh))
    }

    pub(super) fn record_attention(
        &mut self,
        layer: usize,
        [q, k, v, out]: [Tensor; 4],
        n_heads: usize,
    ) -> Result<(), Error> {
        let fold = self.ropes_fold_into(q, k, n_heads);
        if fold {
            self.pending_rope.clear();
        }
        self.flush_pending()?;
        self.wrote(out);
        let n = self.n_tokens as u32;
        self.step(Key::Attention(layer, [q, k, v, out], n_heads, fold), |s| {
            let io = AttentionBuffers {
                q: s.buf(q),
                k: s.buf(k),
                v: s.buf(v),
                out: s.buf(out),
            };
            let rope = match (fold, &s.rope) {
                (false, _) => None,
                (true, Some(t)) => Some(t),
                (true, None) => {
                    return Err(GpuError::Validation(
                        "RoPE before its table was created".into(),
                    ))
                }
            };
            let call = AttentionCall {
                layer,
                n_heads: n_heads as u32,
                n_tokens: n,
                splits: None,
                rope,
            };
            Ok(Step::Attention(AttentionOp::new(
                &s.ctx,
                s.cache()?,
                &s.position,
                io,
                call,
            )?))
        })
    }
}
