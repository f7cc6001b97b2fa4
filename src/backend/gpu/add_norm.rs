//! Llama's norms folded into their neighbours (one-token passes on the integer-dot path): the
//! residual add before a norm writes the norm's record, the products of the norm read it,
//! and the op after them applies the norm's factor, so the norm has no dispatch of its own
//! (one dependent dispatch fewer a layer for each norm folded).
//!
//! The norm is `xn = x * w / rms(x)`, and the q8 record of `xn` is that of `x * w` with every
//! block's scale divided by `rms(x)` (the int8 values are the same but where a product lands
//! within a rounding of a half step). So the product that adds into the residual `x` also
//! writes the record of `x * w` and each block's sum of squares of `x` (`q8_matvec_add_norm`:
//! a workgroup owns one q8 block of 32 rows, no workgroup waits for another); the products of
//! that record are those of `xn` times `rms(x)` (plain integer-dot products); and the op that
//! reads them takes `1 / rms(x)` from the blocks' sums and applies it first:
//!
//! - the FFN norm (after the attention output's product): the dispatch that makes
//!   `silu(gate) * up` and its records for `ffn_down` (`QuantizeQ8Op::silu_mul_norm`);
//! - the attention norm (after the previous layer's `ffn_down`; the first layer's follows the
//!   embedding and keeps its dispatch): the decode attention, to q, k and v as it loads them
//!   (`attention_norm.wgsl`), where it combines its pieces in its own dispatch
//!   ([`crate::gpu::ops::AttentionOp::takes_norm`]).
//!
//! The factor is reduced in those dispatches' few workgroups: applied in the products
//! themselves, every one of their thousands of workgroups would reduce it (measured slower
//! than the norm's own dispatch on the H200, BENCHMARKS.md).
//!
//! The backend sees the add before the norm: a one-token integer-dot product added to its
//! residual is held back ([`PendingAdd`]) and recorded plain by whatever op comes next
//! (`flush_pending`, `step`), unless that is a [`crate::backend::Backend::norm_matmul`] of the
//! residual that the fusion fits ([`GpuBackend::fold_of`]). Its normed rows and the products
//! before the factor are then never written in f32, and an op that reads them is an error
//! ([`GpuBackend::check_readable`]); the gate's output holds the gated product, as the
//! unfused ops leave it, and the attention's output is the attention's.

use super::{GpuBackend, Key, Step};
use crate::backend::{Combine, NormProducts, Tensor, Weight};
use crate::gpu::q8::{can_add_norm, can_pair, norm_record_init, q8_matvec_add_norm};
use crate::gpu::GpuError;
use crate::Error;

/// A one-token integer-dot product added to its residual, not recorded yet.
#[derive(Clone)]
pub(super) struct PendingAdd {
    pub(super) w: Weight,
    pub(super) x: Tensor,
    pub(super) residual: Tensor,
    /// The records of `x` it reads.
    pub(super) xq: wgpu::Buffer,
}

/// Where the inputs of a pending gated product came from when they are products of a norm
/// record: the norm's factor is still to be applied to them.
#[derive(Clone)]
pub(super) struct NormSource {
    /// The norm record, of rows of `cols` values.
    pub(super) record: wgpu::Buffer,
    pub(super) cols: usize,
    /// The norm's output (never written), for the tape's key.
    pub(super) normed: Tensor,
}

/// Where a norm folded into the residual add before it applies its factor.
#[derive(Copy, Clone)]
enum Fold {
    /// Llama's gated FFN: the gated product (`SiluMulQuantizeQ8Norm`) applies it to gate
    /// and up.
    GatedFfn { len: usize },
    /// Llama's attention inputs: the decode attention applies it to q, k and v
    /// (`attention_norm.wgsl`).
    Attention {
        layer: usize,
        n_heads: usize,
        n_kv_heads: usize,
        out: Tensor,
    },
}

impl GpuBackend {
    /// Fold Llama's norms into the residual add before them and the op after their products
    /// (the gated product, the decode attention) where the weights and the attention allow
    /// (the default; the same products up to rounding), or keep each in a dispatch of its own
    /// (for comparisons).
    pub fn set_fuse_add_norm(&mut self, on: bool) {
        self.fuse_add_norm = on;
        self.tapes.clear();
    }

    /// Hold back a one-token integer-dot product added to `residual` whose weight could
    /// write a norm record, instead of recording it now: true if held.
    pub(super) fn hold_add(
        &mut self,
        w: Weight,
        x: Tensor,
        residual: Tensor,
        xq: &wgpu::Buffer,
    ) -> bool {
        if !(self.fuse_add_norm && can_add_norm(&self.weights[w.0 as usize])) {
            return false;
        }
        self.pending_add = Some(PendingAdd {
            w,
            x,
            residual,
            xq: xq.clone(),
        });
        true
    }

    /// Record the held residual add as a plain one.
    pub(super) fn flush_add(&mut self) -> Result<(), Error> {
        match self.pending_add.take() {
            Some(a) => self.record_q8_product(a.w, a.x, a.residual, a.xq, true),
            None => Ok(()),
        }
    }

    /// Where the norm of `c` folds, if it does: `c` is a one-token norm_matmul of the held
    /// add's residual (the add's rows the norm's width) whose products are integer-dot ones of
    /// the normed rows, with distinct outputs, and either Llama's gated FFN (a gated product
    /// of whole q8 blocks) or its attention inputs (an attention that takes a norm record).
    fn fold_of(&self, c: &NormProducts<'_>) -> Option<Fold> {
        let a = self.pending_add.as_ref()?;
        let w = |w: &Weight| &self.weights[w.0 as usize];
        let outs_distinct = c
            .outs
            .iter()
            .enumerate()
            .all(|(i, o)| !c.outs[..i].contains(o) && ![c.x, c.norm, c.normed].contains(o));
        let fits = self.fuse_add_norm
            && self.fuse_norm_q8
            && self.n_tokens == 1
            && c.n == 1
            && a.residual == c.x
            && w(&a.w).rows as usize == c.dim
            && c.normed != c.x
            && outs_distinct
            && c.weights.len() == c.outs.len()
            && c.weights
                .iter()
                .all(|p| self.uses_q8(*p, 1) && w(p).cols as usize == c.dim);
        if !fits {
            return None;
        }
        match (c.weights, c.combine) {
            ([gate, up], Combine::SiluMul { len })
                if w(gate).rows == w(up).rows && len == w(gate).rows as usize && len % 32 == 0 =>
            {
                Some(Fold::GatedFfn { len })
            }
            (
                [_, _, _],
                Combine::Attention {
                    layer,
                    n_heads,
                    n_kv_heads,
                    out,
                },
            ) if !c.outs.contains(&out)
                && ![c.x, c.norm, c.normed].contains(&out)
                && self.cache.as_ref().map(|k| k.n_kv_heads as usize) == Some(n_kv_heads)
                && self.attention_takes_norm(n_heads) =>
            {
                Some(Fold::Attention {
                    layer,
                    n_heads,
                    n_kv_heads,
                    out,
                })
            }
            _ => None,
        }
    }

    /// [`crate::backend::Backend::norm_matmul`]: fused where [`Self::fold_of`] finds a fold,
    /// else as separate ops.
    pub(super) fn norm_matmul_gpu(&mut self, c: &NormProducts<'_>) -> Result<(), Error> {
        let Some(fold) = self.fold_of(c) else {
            return crate::backend::norm_matmul_steps(self, c);
        };
        let add = self.pending_add.take().ok_or_else(|| {
            GpuError::Validation("the residual add before a fused norm went missing".into())
        })?;
        self.flush_pending()?;
        // The add writes the norm's record.
        let record = self.norm_record(c.normed, c.dim, c.eps)?;
        let key = Key::MatvecQ8AddNorm(
            add.w,
            add.x,
            add.residual,
            c.norm,
            c.normed,
            c.eps.to_bits(),
        );
        let (buf, xq) = (record.clone(), add.xq);
        self.step(key, move |s| {
            Ok(Step::Matmul(q8_matvec_add_norm(
                &s.ctx,
                &s.weights[add.w.0 as usize],
                &xq,
                s.buf(add.residual),
                s.buf(c.norm),
                &buf,
            )?))
        })?;
        self.wrote(add.residual);
        self.wrote(c.normed);
        self.stale.push(c.normed);
        // The products from the record (the first two in one dispatch where they pair).
        for &o in c.outs {
            self.wrote(o);
        }
        let (first, second) = match (c.weights, c.outs) {
            ([a, b, ..], [oa, ob, ..]) => ((*a, *oa), (*b, *ob)),
            _ => {
                return Err(
                    GpuError::Validation("a fused norm_matmul without two weights".into()).into(),
                )
            }
        };
        let w = |w: Weight| &self.weights[w.0 as usize];
        if self.pair_q8 && can_pair(w(first.0), w(second.0)) {
            self.record_q8_pair(
                first.0,
                second.0,
                c.normed,
                (first.1, second.1),
                record.clone(),
                true,
            )?;
        } else {
            self.record_q8_product_from(first.0, c.normed, first.1, record.clone(), false, true)?;
            self.record_q8_product_from(second.0, c.normed, second.1, record.clone(), false, true)?;
        }
        for (&p, &o) in c.weights.iter().zip(c.outs).skip(2) {
            self.record_q8_product_from(p, c.normed, o, record.clone(), false, true)?;
        }
        // The outputs hold products of the unscaled record (stale: an op that reads them
        // fails) until the op that applies the norm's factor.
        let norm = NormSource {
            record,
            cols: c.dim,
            normed: c.normed,
        };
        match fold {
            // The gated product applies it: the gate's output is then the gated product, the
            // up's scratch.
            Fold::GatedFfn { len } => {
                self.stale.extend(c.outs);
                self.pending_silu = Some(super::q8_inputs::PendingSilu {
                    gate: first.1,
                    up: second.1,
                    len,
                    norm: Some(norm),
                });
                Ok(())
            }
            // The attention applies it to q, k and v as it loads them (RoPE, linear, may come
            // before it); they stay unscaled.
            Fold::Attention {
                layer,
                n_heads,
                n_kv_heads,
                out,
            } => {
                let [q, k, v] = [c.outs[0], c.outs[1], c.outs[2]];
                self.note_rope(q, n_heads)?;
                self.note_rope(k, n_kv_heads)?;
                self.record_attention(layer, [q, k, v, out], n_heads, Some(norm))?;
                self.stale.extend([q, k, v]);
                Ok(())
            }
        }
    }

    /// The norm record buffer of `x` (rows of `cols`, norm eps `eps`), made on first use.
    fn norm_record(&mut self, x: Tensor, cols: usize, eps: f32) -> Result<wgpu::Buffer, Error> {
        let key = (x, cols, eps.to_bits());
        if let Some(b) = self.norm_records.get(&key) {
            return Ok(b.clone());
        }
        let b = self
            .ctx
            .storage_init("q8.norm_record", &norm_record_init(cols as u32, eps))?;
        self.bytes += b.size();
        self.norm_records.insert(key, b.clone());
        Ok(b)
    }

    /// Fail if `t`'s f32 values were never written (the output of a norm folded into its
    /// neighbours, or a product of its record before the norm's factor).
    pub(super) fn check_readable(&self, t: Tensor) -> Result<(), Error> {
        if self.stale.contains(&t) {
            return Err(GpuError::Validation(format!(
                "tensor {} was read, but the RMSNorm folded into the ops around it left it \
                 unwritten (or unscaled)",
                t.0
            ))
            .into());
        }
        Ok(())
    }
}
