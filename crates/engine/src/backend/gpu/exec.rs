//! Building the GPU op of each planned step: its uniforms and bind groups (made once per tape,
//! then only recorded), over the pass's buffers, the int8 records of the inputs that have
//! them (one buffer per tensor and row length, made on first use), and the KV cache of the
//! batch's sequence.

use std::collections::HashMap;

use super::plan::{GpuOp, GpuPlan};
use super::tape::Step;
use super::GpuBackend;
use crate::backend::{Tensor, Weight};
use crate::gpu::bitlinear::{
    activations_bytes, BitLinearOp, NormBitLinearOp, QuantizeActivationsOp, RmsNormQuantizeOp,
};
use crate::gpu::embedding::EmbeddingOp;
use crate::gpu::matmul::MatmulOp;
use crate::gpu::ops::{
    AttentionBuffers, AttentionCall, AttentionOp, ElementwiseOp, RmsNormOp, RopeOp, TopKOp,
};
use crate::gpu::q8::{
    norm_record_init, q8_matvec, q8_matvec_add_norm, q8_matvec_pair, record_bytes, QuantizeQ8Op,
    RmsNormQuantizeQ8Op,
};
use crate::gpu::weights::GpuWeight;
use crate::gpu::GpuError;
use crate::Error;

/// The norm records a tape's ops share, as its building goes through the plan in order: the
/// record each folded norm's add writes (by the norm's output tensor), and which norm each
/// product of a record came from (by the product's output).
#[derive(Default)]
struct NormRecords {
    made: HashMap<Tensor, (wgpu::Buffer, usize)>,
    products: HashMap<Tensor, Tensor>,
}

impl GpuBackend {
    pub(super) fn buf(&self, t: Tensor) -> &wgpu::Buffer {
        &self.buffers[t.0 as usize]
    }

    pub(super) fn weight(&self, w: Weight) -> &GpuWeight {
        &self.weights[w.0 as usize]
    }

    /// The integer-dot records buffer of `x` (a row of `cols`), made on first use.
    fn q8_records(&mut self, x: Tensor, cols: usize) -> Result<wgpu::Buffer, Error> {
        if let Some(b) = self.q8_records.get(&(x, cols)) {
            return Ok(b.clone());
        }
        let b = self.ctx.storage("q8.records", record_bytes(cols as u32))?;
        self.bytes += b.size();
        self.q8_records.insert((x, cols), b.clone());
        Ok(b)
    }

    /// The BitLinear records buffer of `x` (up to `max_batch` rows of `cols`).
    fn bitlinear_records(&mut self, x: Tensor, cols: usize) -> Result<wgpu::Buffer, Error> {
        if let Some(b) = self.records.get(&(x, cols)) {
            return Ok(b.clone());
        }
        let bytes = activations_bytes(cols as u32, self.max_batch as u32);
        let b = self.ctx.storage("bitlinear.records", bytes)?;
        self.bytes += bytes;
        self.records.insert((x, cols), b.clone());
        Ok(b)
    }

    /// The norm record buffer of `x` (rows of `cols`, norm eps `eps`), made on first use.
    fn norm_record(&mut self, x: Tensor, cols: usize, eps: u32) -> Result<wgpu::Buffer, Error> {
        let key = (x, cols, eps);
        if let Some(b) = self.norm_records.get(&key) {
            return Ok(b.clone());
        }
        let b = self.ctx.storage_init(
            "q8.norm_record",
            &norm_record_init(cols as u32, f32::from_bits(eps)),
        )?;
        self.bytes += b.size();
        self.norm_records.insert(key, b.clone());
        Ok(b)
    }

    /// Two small buffers bound where the fused BitLinear kernel has no weight or output.
    fn spare(&mut self) -> Result<[wgpu::Buffer; 2], Error> {
        if self.spare.is_none() {
            let a = self.ctx.storage("norm_bitlinear.spare", 16)?;
            let b = self.ctx.storage("norm_bitlinear.spare", 16)?;
            self.bytes += 32;
            self.spare = Some([a, b]);
        }
        self.spare
            .clone()
            .ok_or_else(|| GpuError::Validation("no spare buffers".into()).into())
    }

    /// The steps of `plan` for sequence `seq`'s cache, in order.
    pub(super) fn build_tape(&mut self, plan: &GpuPlan, seq: usize) -> Result<Vec<Step>, Error> {
        let mut norms = NormRecords::default();
        plan.ops
            .iter()
            .map(|op| self.build(op, plan.tokens, seq, &mut norms))
            .collect()
    }

    /// The GPU op of `op` in a pass of `n` tokens of sequence `seq`.
    fn build(
        &mut self,
        op: &GpuOp,
        n: usize,
        seq: usize,
        norms: &mut NormRecords,
    ) -> Result<Step, Error> {
        let label = self.label(op, n);
        // The buffers the op binds that are made on first use.
        let records = match *op {
            GpuOp::QuantizeQ8(x, cols) | GpuOp::RmsNormQuantizeQ8(_, _, x, cols, _) => {
                Some(self.q8_records(x, cols)?)
            }
            GpuOp::SiluMulQuantizeQ8(gate, _, len, _) => Some(self.q8_records(gate, len)?),
            GpuOp::MatvecQ8(w, x, _, _, false) | GpuOp::MatvecQ8Pair(w, _, x, _, _, false) => {
                let cols = self.weight(w).cols as usize;
                Some(self.q8_records(x, cols)?)
            }
            GpuOp::Attention(_, [.., out], heads, _, true, ..) => {
                Some(self.q8_records(out, heads * self.head_dim())?)
            }
            GpuOp::Quantize(x, _, cols) | GpuOp::RmsNormQuantize(_, _, x, _, cols, _) => {
                Some(self.bitlinear_records(x, cols)?)
            }
            GpuOp::BitLinear(w, x, ..)
                if crate::quant::bitlinear_input(self.weight(w).dtype)
                    == Some(crate::quant::BitLinearInput::Records) =>
            {
                let cols = self.weight(w).cols as usize;
                Some(self.bitlinear_records(x, cols)?)
            }
            _ => None,
        };
        // The norm record a folded norm's ops write or read, with its row length.
        let missing = || -> Error {
            GpuError::Validation(format!(
                "{}: no norm record before it in the plan",
                self.label(op, n)
            ))
            .into()
        };
        let norm = match *op {
            GpuOp::MatvecQ8AddNorm(w, _, _, _, normed, eps) => {
                let dim = self.weight(w).rows as usize;
                let record = self.norm_record(normed, dim, eps)?;
                norms.made.insert(normed, (record.clone(), dim));
                Some((record, dim))
            }
            GpuOp::MatvecQ8(_, x, out, _, true) => {
                norms.products.insert(out, x);
                Some(norms.made.get(&x).cloned().ok_or_else(missing)?)
            }
            GpuOp::MatvecQ8Pair(_, _, x, oa, ob, true) => {
                norms.products.insert(oa, x);
                norms.products.insert(ob, x);
                Some(norms.made.get(&x).cloned().ok_or_else(missing)?)
            }
            GpuOp::SiluMulQuantizeQ8(_, _, _, Some((normed, _))) => {
                Some(norms.made.get(&normed).cloned().ok_or_else(missing)?)
            }
            GpuOp::Attention(_, [q, ..], _, _, _, true, _) => {
                let normed = norms.products.get(&q).copied().ok_or_else(missing)?;
                Some(norms.made.get(&normed).cloned().ok_or_else(missing)?)
            }
            _ => None,
        };
        let spare = match op {
            GpuOp::NormBitLinear(..) => Some(self.spare()?),
            _ => None,
        };
        let top = match op {
            GpuOp::TopK(_, rows, _, k) => Some(self.top_buffer(rows * k)?),
            _ => None,
        };
        let s = &*self;
        let step = s.ctx.validated(
            || label.clone(),
            || -> Result<Step, GpuError> {
                let need = |b: Option<&wgpu::Buffer>| {
                    b.cloned()
                        .ok_or_else(|| GpuError::Validation("a buffer of the op is missing".into()))
                };
                Ok(match op {
                    GpuOp::Embed(table, out) => Step::Embed(EmbeddingOp::new(
                        &s.ctx,
                        s.weight(*table),
                        &s.ids,
                        s.buf(*out),
                        n as u32,
                    )?),
                    GpuOp::RmsNorm(x, w, out, rows, dim, eps) => Step::RmsNorm(RmsNormOp::new(
                        &s.ctx,
                        s.buf(*x),
                        s.buf(*w),
                        s.buf(*out),
                        *rows as u32,
                        *dim as u32,
                        f32::from_bits(*eps),
                    )?),
                    GpuOp::Matmul(w, x, out, rows) | GpuOp::MatmulShared(w, x, out, rows) => {
                        let op2 = MatmulOp::new(
                            &s.ctx,
                            s.weight(*w),
                            s.buf(*x),
                            s.buf(*out),
                            *rows as u32,
                        )?;
                        Step::Matmul(match op {
                            GpuOp::MatmulShared(..) => op2.reusing_scaled_input(),
                            _ => op2,
                        })
                    }
                    GpuOp::MatmulAdd(w, x, r, 1) => Step::Matmul(MatmulOp::matvec_add(
                        &s.ctx,
                        s.weight(*w),
                        s.buf(*x),
                        s.buf(*r),
                    )?),
                    GpuOp::MatmulAdd(w, x, r, rows) => Step::Matmul(MatmulOp::coop_add(
                        &s.ctx,
                        s.weight(*w),
                        s.buf(*x),
                        s.buf(*r),
                        *rows as u32,
                    )?),
                    GpuOp::BitLinear(w, x, out, rows) => match records.as_ref() {
                        // I2_S: the product of the records.
                        Some(xq) => Step::Matmul(MatmulOp::new(
                            &s.ctx,
                            s.weight(*w),
                            xq,
                            s.buf(*out),
                            *rows as u32,
                        )?),
                        None => Step::BitLinear(Box::new(BitLinearOp::new(
                            &s.ctx,
                            s.weight(*w),
                            s.buf(*x),
                            s.buf(*out),
                            *rows as u32,
                            s.rules.int_dot,
                        )?)),
                    },
                    GpuOp::Quantize(x, rows, cols) => Step::Quantize(QuantizeActivationsOp::new(
                        &s.ctx,
                        s.buf(*x),
                        &need(records.as_ref())?,
                        *cols as u32,
                        *rows as u32,
                    )?),
                    GpuOp::RmsNormQuantize(x, w, out, rows, dim, eps) => {
                        Step::RmsNormQuantize(RmsNormQuantizeOp::new(
                            &s.ctx,
                            s.buf(*x),
                            s.buf(*w),
                            s.buf(*out),
                            &need(records.as_ref())?,
                            *rows as u32,
                            *dim as u32,
                            f32::from_bits(*eps),
                        )?)
                    }
                    GpuOp::QuantizeQ8(x, cols) => Step::QuantizeQ8(QuantizeQ8Op::new(
                        &s.ctx,
                        s.buf(*x),
                        &need(records.as_ref())?,
                        *cols as u32,
                        1,
                    )?),
                    GpuOp::SiluMulQuantizeQ8(gate, up, len, source) => {
                        let (g, u, r) = (s.buf(*gate), s.buf(*up), need(records.as_ref())?);
                        Step::QuantizeQ8(match (source, norm.as_ref()) {
                            (None, _) => QuantizeQ8Op::silu_mul(&s.ctx, g, u, &r, *len as u32, 1)?,
                            (Some(_), Some((record, cols))) => QuantizeQ8Op::silu_mul_norm(
                                &s.ctx,
                                (g, u),
                                (record, *cols as u32),
                                &r,
                                *len as u32,
                            )?,
                            (Some(_), None) => {
                                return Err(GpuError::Validation(
                                    "a gated product without its norm record".into(),
                                ))
                            }
                        })
                    }
                    GpuOp::RmsNormQuantizeQ8(x, w, out, dim, eps) => {
                        Step::RmsNormQuantizeQ8(RmsNormQuantizeQ8Op::new(
                            &s.ctx,
                            s.buf(*x),
                            s.buf(*w),
                            s.buf(*out),
                            &need(records.as_ref())?,
                            1,
                            *dim as u32,
                            f32::from_bits(*eps),
                        )?)
                    }
                    GpuOp::NormBitLinear(x, norm_w, eps, weights, written, mode) => {
                        let ws: Vec<&GpuWeight> = weights.iter().map(|w| s.weight(*w)).collect();
                        let ys: Vec<&wgpu::Buffer> = written.iter().map(|&t| s.buf(t)).collect();
                        let spare = spare
                            .as_ref()
                            .ok_or_else(|| GpuError::Validation("no spare buffers".into()))?;
                        Step::NormBitLinear(NormBitLinearOp::new(
                            &s.ctx,
                            s.buf(*x),
                            s.buf(*norm_w),
                            f32::from_bits(*eps),
                            &ws,
                            &ys,
                            *mode,
                            [&spare[0], &spare[1]],
                        )?)
                    }
                    GpuOp::MatvecQ8(w, _, out, add, from_norm) => {
                        let xq = match from_norm {
                            true => norm.as_ref().map(|n| n.0.clone()),
                            false => records.clone(),
                        };
                        Step::Matmul(q8_matvec(
                            &s.ctx,
                            s.weight(*w),
                            &need(xq.as_ref())?,
                            s.buf(*out),
                            *add,
                        )?)
                    }
                    GpuOp::MatvecQ8Pair(a, b, _, oa, ob, from_norm) => {
                        let xq = match from_norm {
                            true => norm.as_ref().map(|n| n.0.clone()),
                            false => records.clone(),
                        };
                        Step::Matmul(q8_matvec_pair(
                            &s.ctx,
                            (s.weight(*a), s.weight(*b)),
                            &need(xq.as_ref())?,
                            s.buf(*oa),
                            s.buf(*ob),
                        )?)
                    }
                    GpuOp::MatvecQ8AddNorm(w, x, r, norm_w, _, _) => {
                        let xq = s.q8_records.get(&(*x, s.weight(*w).cols as usize)).cloned();
                        let record = norm.as_ref().map(|n| n.0.clone());
                        Step::Matmul(q8_matvec_add_norm(
                            &s.ctx,
                            s.weight(*w),
                            &need(xq.as_ref())?,
                            s.buf(*r),
                            s.buf(*norm_w),
                            &need(record.as_ref())?,
                        )?)
                    }
                    GpuOp::Rope(x, heads, table) => {
                        let table = s.rope.get(*table).ok_or_else(|| {
                            GpuError::Validation("RoPE before its table was created".into())
                        })?;
                        Step::Rope(RopeOp::new(
                            &s.ctx,
                            table,
                            s.buf(*x),
                            &s.position,
                            n as u32,
                            *heads as u32,
                        )?)
                    }
                    GpuOp::Attention(layer, [q, k, v, out], heads, rope, _, _, scores) => {
                        let io = AttentionBuffers {
                            q: s.buf(*q),
                            k: s.buf(*k),
                            v: s.buf(*v),
                            out: s.buf(*out),
                            records: records.as_ref(),
                            norm: norm.as_ref().map(|(r, cols)| (r, *cols as u32)),
                        };
                        let rope = match rope.map(|t| s.rope.get(t)) {
                            None => None,
                            Some(Some(t)) => Some(t),
                            Some(None) => {
                                return Err(GpuError::Validation(
                                    "RoPE before its table was created".into(),
                                ))
                            }
                        };
                        let cache = s.cache(seq)?;
                        let call = AttentionCall {
                            layer: *layer,
                            n_heads: *heads as u32,
                            n_tokens: n as u32,
                            splits: s.attention_splits_for(cache, n, *heads),
                            rope,
                            combine_in_attend: s.combine_in_attend,
                            scores: scores.scores(),
                        };
                        Step::Attention(AttentionOp::new(&s.ctx, cache, &s.position, io, call)?)
                    }
                    GpuOp::Elementwise(f, out, first, second, len) => {
                        Step::Elementwise(ElementwiseOp::new(
                            &s.ctx,
                            *f,
                            s.buf(*out),
                            first.map(|t| s.buf(t)),
                            second.map(|t| s.buf(t)),
                            *len as u32,
                        )?)
                    }
                    GpuOp::Softcap(x, len, cap) => Step::Elementwise(ElementwiseOp::softcap(
                        &s.ctx,
                        s.buf(*x),
                        *len as u32,
                        f32::from_bits(*cap),
                    )?),
                    GpuOp::AddBias(out, bias, rows, cols) => {
                        Step::Elementwise(ElementwiseOp::add_bias(
                            &s.ctx,
                            s.buf(*out),
                            s.buf(*bias),
                            *rows as u32,
                            *cols as u32,
                        )?)
                    }
                    GpuOp::ScaleColumns(out, scale, rows, cols) => {
                        Step::Elementwise(ElementwiseOp::scale_columns(
                            &s.ctx,
                            s.buf(*out),
                            s.buf(*scale),
                            *rows as u32,
                            *cols as u32,
                        )?)
                    }
                    GpuOp::CopyRow(src, row, cols, dst, dst_row) => {
                        let bytes = *cols as u64 * 4;
                        let (src_offset, dst_offset) =
                            (*row as u64 * bytes, *dst_row as u64 * bytes);
                        if s.buf(*src).size() < src_offset + bytes
                            || s.buf(*dst).size() < dst_offset + bytes
                        {
                            return Err(GpuError::Validation(format!(
                                "copy of row {row} ({cols} values): a buffer is too small"
                            )));
                        }
                        Step::Copy {
                            src: *src,
                            src_offset,
                            dst: *dst,
                            dst_offset,
                            bytes,
                        }
                    }
                    GpuOp::TopK(logits, rows, vocab, k) => Step::TopK(TopKOp::new(
                        &s.ctx,
                        s.buf(*logits),
                        &need(top.as_ref())?,
                        *rows as u32,
                        *vocab as u32,
                        *k as u32,
                    )?),
                })
            },
        )?;
        Ok(step)
    }
}
