//! BitLinear inputs on the GPU backend: an input's int8 records are made once per pass and
//! shared by every product that reads it (q/k/v, gate/up), and an RMSNorm whose output feeds an
//! I2_S BitLinear is recorded as one dispatch with that quantization. `rms_norm` only notes the
//! norm ([`PendingNorm`]); the next op records it, fused when it can be. A one-token
//! [`crate::backend::Backend::norm_bitlinear`] call goes further: the norm, the quantization and
//! the products (with their gating or residual add) in one dispatch
//! ([`NormBitLinearOp`]).

use super::{GpuBackend, Key, Step};
use crate::backend::{Combine, NormProducts, Tensor, Weight};
use crate::gpu::bitlinear::{
    activations_bytes, NormBitLinearMode, NormBitLinearOp, QuantizeActivationsOp, RmsNormQuantizeOp,
};
use crate::gpu::matmul::MatmulOp;
use crate::gpu::ops::RmsNormOp;
use crate::gpu::weights::GpuWeight;
use crate::Error;

/// An RMSNorm not recorded yet: if the next op is an I2_S BitLinear of its output, the two
/// become one dispatch.
#[derive(Copy, Clone)]
pub(super) struct PendingNorm {
    pub(super) x: Tensor,
    pub(super) weight: Tensor,
    pub(super) out: Tensor,
    pub(super) rows: usize,
    pub(super) dim: usize,
    pub(super) eps: f32,
}

impl GpuBackend {
    /// An op writes `t`: its records, if any, are stale.
    pub(super) fn wrote(&mut self, t: Tensor) {
        self.quantized.retain(|&q| q != t);
        self.q8_quantized.retain(|&(q, _)| q != t);
        self.stale.retain(|&q| q != t);
    }

    /// Record the pending RMSNorm as a plain one.
    pub(super) fn flush_norm(&mut self) -> Result<(), Error> {
        let Some(n) = self.pending_norm.take() else {
            return Ok(());
        };
        let key = Key::RmsNorm(n.x, n.weight, n.out, n.rows, n.dim, n.eps.to_bits());
        self.step(key, |s| {
            Ok(Step::RmsNorm(RmsNormOp::new(
                &s.ctx,
                s.buf(n.x),
                s.buf(n.weight),
                s.buf(n.out),
                n.rows as u32,
                n.dim as u32,
                n.eps,
            )?))
        })?;
        self.wrote(n.out);
        Ok(())
    }

    /// The records buffer of `x` for rows of `cols`.
    fn records(&mut self, x: Tensor, cols: usize) -> Result<wgpu::Buffer, Error> {
        if let Some(b) = self.records.get(&(x, cols)) {
            return Ok(b.clone());
        }
        let bytes = activations_bytes(cols as u32, self.max_batch as u32);
        let b = self.ctx.storage("bitlinear.records", bytes)?;
        self.bytes += bytes;
        self.records.insert((x, cols), b.clone());
        Ok(b)
    }

    /// I2_S BitLinear: the records of `x` (fused into a pending RMSNorm of `x`, reused when
    /// current, else quantized now), then the integer product.
    pub(super) fn bitlinear_i2s(
        &mut self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        rows: usize,
    ) -> Result<(), Error> {
        let cols = self.weights[w.0 as usize].cols as usize;
        let xq = self.records(x, cols)?;
        match self.pending_norm {
            Some(n) if n.out == x && n.dim == cols && n.rows == rows && cols % 4 == 0 => {
                self.pending_norm = None;
                let key =
                    Key::RmsNormQuantize(n.x, n.weight, n.out, n.rows, n.dim, n.eps.to_bits());
                let records = xq.clone();
                self.step(key, move |s| {
                    Ok(Step::RmsNormQuantize(RmsNormQuantizeOp::new(
                        &s.ctx,
                        s.buf(n.x),
                        s.buf(n.weight),
                        s.buf(n.out),
                        &records,
                        n.rows as u32,
                        n.dim as u32,
                        n.eps,
                    )?))
                })?;
                self.wrote(x);
                self.quantized.push(x);
            }
            _ => {
                self.flush_pending()?;
                if !self.quantized.contains(&x) {
                    let records = xq.clone();
                    self.step(Key::Quantize(x, rows, cols), move |s| {
                        Ok(Step::Quantize(QuantizeActivationsOp::new(
                            &s.ctx,
                            s.buf(x),
                            &records,
                            cols as u32,
                            rows as u32,
                        )?))
                    })?;
                    self.quantized.push(x);
                }
            }
        }
        self.step(Key::BitLinear(w, x, out, rows), move |s| {
            Ok(Step::Matmul(MatmulOp::new(
                &s.ctx,
                &s.weights[w.0 as usize],
                &xq,
                s.buf(out),
                rows as u32,
            )?))
        })?;
        self.wrote(out);
        Ok(())
    }

    /// Fuse the norm, the quantization and the products of one-token `norm_bitlinear` calls
    /// into one dispatch (the default), or record them separately (for comparisons).
    pub fn set_fuse_bitlinear(&mut self, on: bool) {
        self.fuse_bitlinear = on;
        self.tapes.clear();
    }

    /// The fused kernel's mode for `c` and the tensors it writes, or `None` where `c` must run
    /// as separate ops: more than one token, weights the kernel does not take, or outputs that
    /// alias the inputs.
    pub(super) fn fused_norm_bitlinear_mode(
        &self,
        c: &NormProducts<'_>,
    ) -> Option<(NormBitLinearMode, Vec<Tensor>)> {
        if !self.fuse_bitlinear || self.n_tokens != 1 || c.n != 1 {
            return None;
        }
        if c.weights.is_empty() || c.weights.len() != c.outs.len() {
            return None;
        }
        let ws: Vec<&GpuWeight> = c
            .weights
            .iter()
            .map(|w| &self.weights[w.0 as usize])
            .collect();
        let (mode, written) = match c.combine {
            Combine::Separate => (NormBitLinearMode::Separate, c.outs.to_vec()),
            Combine::ReluSquaredMul { len } => {
                if len != ws[0].rows as usize {
                    return None;
                }
                (NormBitLinearMode::ReluSquaredGate, vec![c.outs[0]])
            }
            Combine::AddTo { residual, len } => {
                if len != ws[0].rows as usize {
                    return None;
                }
                (NormBitLinearMode::Residual, vec![residual])
            }
            Combine::SiluMul { .. } | Combine::Attention { .. } => return None,
        };
        if NormBitLinearOp::unsupported(&self.ctx, &ws, c.dim as u32, mode).is_some() {
            return None;
        }
        // Every workgroup reads the input while others write the outputs.
        let distinct = written
            .iter()
            .enumerate()
            .all(|(i, t)| *t != c.x && *t != c.norm && !written[..i].contains(t));
        distinct.then_some((mode, written))
    }

    /// Record `c` as one [`NormBitLinearOp`] (after [`Self::fused_norm_bitlinear_mode`]).
    pub(super) fn norm_bitlinear_fused(
        &mut self,
        c: &NormProducts<'_>,
        (mode, written): (NormBitLinearMode, Vec<Tensor>),
    ) -> Result<(), Error> {
        self.flush_pending()?;
        if self.spare.is_none() {
            let a = self.ctx.storage("norm_bitlinear.spare", 16)?;
            let b = self.ctx.storage("norm_bitlinear.spare", 16)?;
            self.bytes += 32;
            self.spare = Some([a, b]);
        }
        let key = Key::NormBitLinear(
            c.x,
            c.norm,
            c.eps.to_bits(),
            c.weights.to_vec(),
            written.clone(),
            mode,
        );
        let (x, norm, eps, weights) = (c.x, c.norm, c.eps, c.weights.to_vec());
        let ys = written.clone();
        self.step(key, move |s| {
            let ws: Vec<&GpuWeight> = weights.iter().map(|w| &s.weights[w.0 as usize]).collect();
            let ys: Vec<&wgpu::Buffer> = ys.iter().map(|&t| s.buf(t)).collect();
            let spare = s
                .spare
                .as_ref()
                .ok_or_else(|| crate::gpu::GpuError::Validation("no spare buffers".into()))?;
            Ok(Step::NormBitLinear(NormBitLinearOp::new(
                &s.ctx,
                s.buf(x),
                s.buf(norm),
                eps,
                &ws,
                &ys,
                mode,
                [&spare[0], &spare[1]],
            )?))
        })?;
        // The normed rows and the scratch outputs are left unspecified: stale records go.
        for t in written.iter().chain(c.outs).chain([&c.normed]) {
            self.wrote(*t);
        }
        Ok(())
    }
}
