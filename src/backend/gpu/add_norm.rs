//! Llama's FFN norm folded into its neighbours (one-token passes on the integer-dot path):
//! the residual add before the norm writes the norm's record, the gate and up products read
//! it, and the gated product after them applies the norm's factor, so the norm has no dispatch
//! of its own (one dependent dispatch fewer a layer).
//!
//! The norm is `xn = x * w / rms(x)`, and the q8 record of `xn` is that of `x * w` with every
//! block's scale divided by `rms(x)` (the int8 values are the same but where a product lands
//! within a rounding of a half step). So the attention output's product, which adds into the
//! residual `x`, also writes the record of `x * w` and each block's sum of squares of `x`
//! (`q8_matvec_add_norm`: a workgroup owns one q8 block of 32 rows, no workgroup waits for
//! another); the gate and up products of that record are `gate(xn) * rms(x)` and
//! `up(xn) * rms(x)` (plain integer-dot products); and the dispatch that makes `silu(gate) *
//! up` and its records for `ffn_down` takes `1 / rms(x)` from the blocks' sums and applies it
//! to both first (`QuantizeQ8Op::silu_mul_norm`). The factor is reduced in that dispatch's few
//! workgroups: applied in the gate and up products themselves, every one of their thousands of
//! workgroups would reduce it (measured slower than the norm's own dispatch on the H200,
//! BENCHMARKS.md).
//!
//! The backend sees the add before the norm: a one-token integer-dot product added to its
//! residual is held back ([`PendingAdd`]) and recorded plain by whatever op comes next
//! (`flush_pending`, `step`), unless that is a [`crate::backend::Backend::norm_matmul`] of the
//! residual with Llama's gated combination, whose products the fusion fits. Its normed rows and
//! the up product are then never written in f32, and an op that reads them is an error
//! ([`GpuBackend::check_readable`]); the gate's output holds the gated product, as the
//! unfused ops leave it.

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

impl GpuBackend {
    /// Fold the FFN norm into the residual add before it and the gated product after it
    /// where the weights allow (the default; the same products up to rounding), or keep it in
    /// a dispatch of its own (for comparisons).
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

    /// Whether `c` is a one-token gated FFN of the held add's residual that the fusion fits:
    /// integer-dot gate and up products of the normed rows, the add's rows the norm's width, a
    /// gated product of whole q8 blocks.
    fn add_norm_fits(&self, c: &NormProducts<'_>) -> bool {
        let (Some(a), [gate, up], [g, u], Combine::SiluMul { len }) =
            (&self.pending_add, c.weights, c.outs, c.combine)
        else {
            return false;
        };
        let w = |w: &Weight| &self.weights[w.0 as usize];
        let (wg, wu) = (w(gate), w(up));
        self.fuse_add_norm
            && self.fuse_norm_q8
            && self.n_tokens == 1
            && c.n == 1
            && a.residual == c.x
            && w(&a.w).rows as usize == c.dim
            && self.uses_q8(*gate, 1)
            && self.uses_q8(*up, 1)
            && wg.cols as usize == c.dim
            && wu.cols as usize == c.dim
            && wg.rows == wu.rows
            && len == wg.rows as usize
            && len % 32 == 0
            && g != u
            && [c.x, c.norm, c.normed].iter().all(|t| t != g && t != u)
            && c.normed != c.x
    }

    /// [`crate::backend::Backend::norm_matmul`]: fused where [`Self::add_norm_fits`], else as
    /// separate ops.
    pub(super) fn norm_matmul_gpu(&mut self, c: &NormProducts<'_>) -> Result<(), Error> {
        if !self.add_norm_fits(c) {
            return crate::backend::norm_matmul_steps(self, c);
        }
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
        // Gate and up from the record (in one dispatch where they pair).
        let ([gate, up], [g, u]) = (c.weights, c.outs) else {
            return Err(
                GpuError::Validation("a gated norm_matmul without two weights".into()).into(),
            );
        };
        self.wrote(*g);
        self.wrote(*u);
        if self.pair_q8 && can_pair(&self.weights[gate.0 as usize], &self.weights[up.0 as usize]) {
            self.record_q8_pair(*gate, *up, c.normed, (*g, *u), record.clone(), true)?;
        } else {
            self.record_q8_product_from(*gate, c.normed, *g, record.clone(), false, true)?;
            self.record_q8_product_from(*up, c.normed, *u, record.clone(), false, true)?;
        }
        // Both hold products of the unscaled record until the gated product: the gate's is
        // then the gated product, the up's scratch.
        self.stale.extend([*g, *u]);
        let Combine::SiluMul { len } = c.combine else {
            return Err(
                GpuError::Validation("a fused norm_matmul that is not gated".into()).into(),
            );
        };
        self.pending_silu = Some(super::q8_inputs::PendingSilu {
            gate: *g,
            up: *u,
            len,
            norm: Some(NormSource {
                record,
                cols: c.dim,
                normed: c.normed,
            }),
        });
        Ok(())
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
