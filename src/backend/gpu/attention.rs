//! RoPE and attention on the GPU backend. `rope` only notes its tensor; the next op records
//! it, unless that op is the attention reading exactly the two noted tensors (q with the
//! query heads, k with the cache's KV heads): then the attention kernel rotates q and the new
//! keys itself (`attention.wgsl` with RoPE on) and the two rope dispatches, with the barriers
//! between them and the append, are gone. The q and k buffers are then left unrotated, which
//! [`crate::backend::Backend::attention`] allows.
//!
//! A one-token attention whose output feeds an integer-dot product (attn_output) is recorded
//! with that product: its combine dispatch also writes the output's q8 records, so the
//! product's quantization dispatch goes (`attention.wgsl`'s quantized combine).

use super::add_norm::NormSource;
use super::{GpuBackend, Key, Step};
use crate::backend::Tensor;
use crate::gpu::ops::{AttentionBuffers, AttentionCall, AttentionOp, RopeOp};
use crate::gpu::GpuError;
use crate::Error;

/// A one-token attention not recorded yet (the next op may take its output's q8 records).
#[derive(Clone)]
pub(super) struct PendingAttention {
    layer: usize,
    tensors: [Tensor; 4],
    n_heads: usize,
    fold: bool,
    /// q, k and v are products of this norm record, whose factor the attention applies.
    norm: Option<NormSource>,
}

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

    /// Record everything noted but not yet recorded (an attention, RoPEs, a SiluMul, then an
    /// RMSNorm).
    pub(super) fn flush_pending(&mut self) -> Result<(), Error> {
        self.flush_add()?;
        if let Some(p) = self.pending_q8.take() {
            self.record_q8(p)?;
        }
        if let Some(a) = self.pending_attention.take() {
            self.record_attention_now(a, None)?;
        }
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

    /// Combine a one-token attention's pieces in its attend dispatch where the platform allows
    /// (the default), or in a dispatch of their own (for comparisons).
    pub fn set_combine_in_attend(&mut self, on: bool) {
        self.combine_in_attend = on;
        self.tapes.clear();
    }

    /// Fuse the q8 quantization of a one-token attention's output into the attention where
    /// the next op is an integer-dot product of it (the default), or quantize in a dispatch
    /// of its own (for comparisons).
    pub fn set_fuse_attention_q8(&mut self, on: bool) {
        self.fuse_attention_q8 = on;
        self.tapes.clear();
    }

    /// Cut every attention's context into `n` pieces (`None`: the op chooses), for tests that
    /// take the split path on CPU adapters, which otherwise attend in one piece.
    pub fn set_attention_splits(&mut self, n: Option<u32>) {
        self.attention_splits = n;
        self.tapes.clear();
    }

    /// Record an attention (held for the next op where it may write that op's q8 records):
    /// of q, k and v as they are, or (`norm`) of products of a norm record whose factor it
    /// applies ([`super::add_norm`]; only where [`Self::attention_takes_norm`]).
    pub(super) fn record_attention(
        &mut self,
        layer: usize,
        [q, k, v, out]: [Tensor; 4],
        n_heads: usize,
        norm: Option<NormSource>,
    ) -> Result<(), Error> {
        let fold = self.ropes_fold_into(q, k, n_heads);
        if fold {
            self.pending_rope.clear();
        }
        self.flush_pending()?;
        self.wrote(out);
        let a = PendingAttention {
            layer,
            tensors: [q, k, v, out],
            n_heads,
            fold,
            norm,
        };
        if self.attention_quantizes(n_heads) {
            // Recorded with the next op, which may take its records.
            self.pending_attention = Some(a);
            return Ok(());
        }
        self.record_attention_now(a, None)
    }

    /// Whether a one-token attention over `n_heads` query heads can take q, k and v as
    /// products of a norm record and apply the norm's factor ([`AttentionOp::takes_norm`]).
    pub(super) fn attention_takes_norm(&self, n_heads: usize) -> bool {
        self.cache.as_ref().is_some_and(|cache| {
            AttentionOp::takes_norm(
                &self.ctx,
                cache,
                n_heads as u32,
                self.attention_splits,
                self.combine_in_attend,
            )
        })
    }

    /// Whether a one-token attention over `n_heads` query heads can write the q8 records of
    /// its output (its combine does, [`AttentionOp::quantizes`]).
    fn attention_quantizes(&self, n_heads: usize) -> bool {
        let Some(cache) = self.cache.as_ref() else {
            return false;
        };
        let splits =
            AttentionOp::pieces(&self.ctx, cache, 1, n_heads as u32, self.attention_splits);
        self.int_dot
            && self.fuse_attention_q8
            && self.n_tokens == 1
            && AttentionOp::quantizes(splits, cache.head_dim)
    }

    /// The pending attention when `x` is its output, recorded now with the q8 records of `x`
    /// (rows of `cols` values) written into `records`; whether it was.
    pub(super) fn attention_into_records(
        &mut self,
        x: Tensor,
        cols: usize,
        records: &wgpu::Buffer,
    ) -> Result<bool, Error> {
        let head_dim = self.cache.as_ref().map_or(0, |c| c.head_dim as usize);
        match self.pending_attention.take() {
            Some(a) if a.tensors[3] == x && a.n_heads * head_dim == cols => {
                self.record_attention_now(a, Some(records.clone()))?;
                Ok(true)
            }
            other => {
                self.pending_attention = other;
                Ok(false)
            }
        }
    }

    fn record_attention_now(
        &mut self,
        a: PendingAttention,
        records: Option<wgpu::Buffer>,
    ) -> Result<(), Error> {
        let PendingAttention {
            layer,
            tensors: [q, k, v, out],
            n_heads,
            fold,
            norm,
        } = a;
        let n = self.n_tokens as u32;
        let splits = self.attention_splits;
        let combine_in_attend = self.combine_in_attend;
        let key = Key::Attention(
            layer,
            [q, k, v, out],
            n_heads,
            fold,
            records.is_some(),
            norm.is_some(),
        );
        self.step(key, move |s| {
            let io = AttentionBuffers {
                q: s.buf(q),
                k: s.buf(k),
                v: s.buf(v),
                out: s.buf(out),
                records: records.as_ref(),
                norm: norm.as_ref().map(|n| (&n.record, n.cols as u32)),
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
                splits,
                rope,
                combine_in_attend,
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
