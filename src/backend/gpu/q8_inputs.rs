//! Integer-dot decode on the GPU backend: a one-token product whose weight format has a
//! `MatvecQ8` kernel ([`crate::gpu::q8`]) reads int8 records of its input, made once per pass
//! and shared by every product that reads the same tensor (q/k/v, gate/up) until an op writes
//! it. When the op that makes the input is an RMSNorm (q/k/v, gate/up after the layer's norms)
//! or a SiluMul (the gated FFN product before `ffn_down`), that op and the quantization are one
//! dispatch; [`crate::backend::Backend::matmul_add`] adds the product to its residual in the
//! product's own dispatch (and Llama's FFN norm goes into that add and the gated product after
//! it: [`super::add_norm`]). Prefill (several tokens) and formats without the kernel keep the
//! f32 matvec/matmul.

use super::add_norm::NormSource;
use super::{GpuBackend, Key, Step};
use crate::backend::{Elementwise, Tensor, Weight};
use crate::gpu::ops::ElementwiseOp;
use crate::gpu::q8::{
    can_pair, has_q8_matvec, q8_matvec, q8_matvec_pair, record_bytes, QuantizeQ8Op,
    RmsNormQuantizeQ8Op,
};
use crate::Error;

/// A one-token SiluMul not recorded yet (`gate = silu(gate) * up` over `len` values): fused
/// into the quantization of the gate when the next op is an integer-dot product of it.
pub(super) struct PendingSilu {
    pub(super) gate: Tensor,
    pub(super) up: Tensor,
    pub(super) len: usize,
    /// Gate and up are products of a norm record whose factor is still to be applied.
    pub(super) norm: Option<NormSource>,
}

impl GpuBackend {
    /// Whether `matmul(w, x, out, rows)` takes the integer-dot path.
    pub(super) fn uses_q8(&self, w: Weight, rows: usize) -> bool {
        let gw = &self.weights[w.0 as usize];
        self.int_dot && rows == 1 && has_q8_matvec(gw.dtype, gw.cols)
    }

    /// Whether one-token products take the integer-dot kernels where they exist (the default
    /// follows [`crate::gpu::GpuContext::int_dot_decode`]).
    pub fn int_dot(&self) -> bool {
        self.int_dot
    }

    /// Use the integer-dot decode kernels where they exist, or the f32 ones everywhere.
    pub fn set_int_dot(&mut self, on: bool) {
        self.int_dot = on;
        self.tapes.clear();
    }

    /// Run two one-token integer-dot products of one input (q and k, gate and up) in one
    /// dispatch where their weights allow (the default; the same bits either way), or each in
    /// its own (for comparisons).
    pub fn set_pair_q8(&mut self, on: bool) {
        self.pair_q8 = on;
        self.tapes.clear();
    }

    /// Record a product held back for a partner, alone.
    pub(super) fn record_q8(&mut self, (w, x, out): (Weight, Tensor, Tensor)) -> Result<(), Error> {
        let cols = self.weights[w.0 as usize].cols as usize;
        let xq = self.q8_records[&(x, cols)].clone();
        self.record_q8_product(w, x, out, xq, false)
    }

    /// Record one product from the records `xq` of `x` (added to `out` with `accumulate`).
    pub(super) fn record_q8_product(
        &mut self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        xq: wgpu::Buffer,
        accumulate: bool,
    ) -> Result<(), Error> {
        self.record_q8_product_from(w, x, out, xq, accumulate, false)
    }

    /// [`Self::record_q8_product`], `from_norm` when `xq` is the norm record of `x`
    /// ([`super::add_norm`]; the same kernel, another tape key).
    pub(super) fn record_q8_product_from(
        &mut self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        xq: wgpu::Buffer,
        accumulate: bool,
        from_norm: bool,
    ) -> Result<(), Error> {
        self.step(Key::MatvecQ8(w, x, out, accumulate, from_norm), move |s| {
            Ok(Step::Matmul(q8_matvec(
                &s.ctx,
                &s.weights[w.0 as usize],
                &xq,
                s.buf(out),
                accumulate,
            )?))
        })
    }

    /// Fuse the integer-dot kernels' input quantization into the op that makes the input, an
    /// RMSNorm or a SiluMul (the default), or quantize in a dispatch of its own (for
    /// comparisons).
    pub fn set_fuse_norm_q8(&mut self, on: bool) {
        self.fuse_norm_q8 = on;
        self.tapes.clear();
    }

    /// One token through the integer-dot kernel: the records of `x` (fused into a pending
    /// RMSNorm of `x`, reused when current, else quantized now), then the product.
    pub(super) fn matvec_q8(&mut self, w: Weight, x: Tensor, out: Tensor) -> Result<(), Error> {
        self.matvec_q8_into(w, x, out, false)
    }

    /// Record an elementwise op (the pending SiluMul when no product fuses it).
    pub(super) fn record_elementwise(
        &mut self,
        f: Elementwise,
        out: Tensor,
        first: Option<Tensor>,
        second: Option<Tensor>,
        len: usize,
    ) -> Result<(), Error> {
        self.step(Key::Elementwise(f, out, first, second, len), |s| {
            Ok(Step::Elementwise(ElementwiseOp::new(
                &s.ctx,
                f,
                s.buf(out),
                first.map(|t| s.buf(t)),
                second.map(|t| s.buf(t)),
                len as u32,
            )?))
        })
    }

    /// Two products of `x` from its records `xq` in one dispatch (check [`can_pair`]).
    pub(super) fn record_q8_pair(
        &mut self,
        first: Weight,
        second: Weight,
        x: Tensor,
        (fout, out): (Tensor, Tensor),
        xq: wgpu::Buffer,
        from_norm: bool,
    ) -> Result<(), Error> {
        let key = Key::MatvecQ8Pair(first, second, x, fout, out, from_norm);
        self.step(key, move |s| {
            let pair = (&s.weights[first.0 as usize], &s.weights[second.0 as usize]);
            Ok(Step::Matmul(q8_matvec_pair(
                &s.ctx,
                pair,
                &xq,
                s.buf(fout),
                s.buf(out),
            )?))
        })
    }

    /// Record the pending SiluMul as a plain elementwise op (or, for products of a norm
    /// record, as the fused op whose records nothing reads: the factor must be applied).
    pub(super) fn flush_silu(&mut self) -> Result<(), Error> {
        match self.pending_silu.take() {
            Some(PendingSilu {
                gate,
                up,
                len,
                norm: None,
            }) => self.record_elementwise(Elementwise::SiluMul, gate, None, Some(up), len),
            Some(p) => {
                let records = self.q8_record_buffer(p.gate, p.len)?;
                self.record_silu_q8(p, records)
            }
            None => Ok(()),
        }
    }

    /// The records buffer of `x` (rows of `cols`), made on first use.
    fn q8_record_buffer(&mut self, x: Tensor, cols: usize) -> Result<wgpu::Buffer, Error> {
        if let Some(b) = self.q8_records.get(&(x, cols)) {
            return Ok(b.clone());
        }
        let b = self.ctx.storage("q8.records", record_bytes(cols as u32))?;
        self.bytes += b.size();
        self.q8_records.insert((x, cols), b.clone());
        Ok(b)
    }

    /// The SiluMul `p` and the gate's records into `records`, in one dispatch.
    fn record_silu_q8(&mut self, p: PendingSilu, records: wgpu::Buffer) -> Result<(), Error> {
        let PendingSilu {
            gate,
            up,
            len,
            norm,
        } = p;
        let source = norm.as_ref().map(|n| (n.normed, n.cols));
        self.step(Key::SiluMulQuantizeQ8(gate, up, len, source), move |s| {
            let (g, u) = (s.buf(gate), s.buf(up));
            Ok(Step::QuantizeQ8(match &norm {
                None => QuantizeQ8Op::silu_mul(&s.ctx, g, u, &records, len as u32, 1)?,
                Some(n) => QuantizeQ8Op::silu_mul_norm(
                    &s.ctx,
                    (g, u),
                    (&n.record, n.cols as u32),
                    &records,
                    len as u32,
                )?,
            }))
        })?;
        // The gate holds the gated product now, as the plain SiluMul leaves it.
        self.stale.retain(|t| *t != gate);
        self.q8_quantized.push((gate, len));
        Ok(())
    }

    /// Add a one-token integer-dot product to a residual in the product's dispatch (the
    /// default), or record the product and the add separately (for comparisons).
    pub fn set_fuse_residual(&mut self, on: bool) {
        self.fuse_residual = on;
        self.tapes.clear();
    }

    /// [`Self::matvec_q8`] into `out`, or with `accumulate` added to what `out` holds.
    pub(super) fn matvec_q8_into(
        &mut self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        accumulate: bool,
    ) -> Result<(), Error> {
        let cols = self.weights[w.0 as usize].cols as usize;
        // The partner of a held-back product: both in one dispatch (the input's records are
        // current: nothing was recorded since the first was held back).
        if let Some((first, fx, fout)) = self.pending_q8 {
            let pairs = !accumulate
                && fx == x
                && out != fout
                && out != x
                && self.q8_quantized.contains(&(x, cols))
                && can_pair(&self.weights[first.0 as usize], &self.weights[w.0 as usize]);
            if pairs {
                self.pending_q8 = None;
                self.wrote(out);
                let xq = self.q8_records[&(x, cols)].clone();
                return self.record_q8_pair(first, w, x, (fout, out), xq, false);
            }
        }
        let xq = self.q8_record_buffer(x, cols)?;
        // The SiluMul that makes `x`: one dispatch writes `x` and its records.
        if let Some(p) = self.pending_silu.take_if(|p| p.gate == x && p.len == cols) {
            self.record_silu_q8(p, xq.clone())?;
        }
        // The attention that makes `x`: its combine writes the records.
        if self.attention_into_records(x, cols, &xq)? {
            self.q8_quantized.push((x, cols));
        }
        match self.pending_norm {
            // The norm that makes `x`: one dispatch writes `x` and its records.
            Some(n) if self.fuse_norm_q8 && n.out == x && n.dim == cols && n.rows == 1 => {
                self.pending_norm = None;
                let key = Key::RmsNormQuantizeQ8(n.x, n.weight, n.out, n.dim, n.eps.to_bits());
                let records = xq.clone();
                self.step(key, move |s| {
                    Ok(Step::RmsNormQuantizeQ8(RmsNormQuantizeQ8Op::new(
                        &s.ctx,
                        s.buf(n.x),
                        s.buf(n.weight),
                        s.buf(n.out),
                        &records,
                        1,
                        n.dim as u32,
                        n.eps,
                    )?))
                })?;
                self.wrote(x);
                self.q8_quantized.push((x, cols));
            }
            _ => self.flush_pending()?,
        }
        if !self.q8_quantized.contains(&(x, cols)) {
            self.check_readable(x)?;
            let records = xq.clone();
            self.step(Key::QuantizeQ8(x, cols), move |s| {
                Ok(Step::QuantizeQ8(QuantizeQ8Op::new(
                    &s.ctx,
                    s.buf(x),
                    &records,
                    cols as u32,
                    1,
                )?))
            })?;
            self.q8_quantized.push((x, cols));
        }
        // Records made (or current): a product held back earlier that did not pair goes first.
        if let Some(p) = self.pending_q8.take() {
            self.record_q8(p)?;
        }
        self.wrote(out);
        if !accumulate && self.pair_q8 {
            self.pending_q8 = Some((w, x, out));
            return Ok(());
        }
        // Held back: the next op may be a norm that its dispatch can make the record of.
        if accumulate && self.hold_add(w, x, out, &xq) {
            return Ok(());
        }
        self.record_q8_product(w, x, out, xq, accumulate)
    }
}
