//! The CPU backend: the reference every GPU op is checked against, and the way to run where no
//! GPU exists. It runs a pass's ops exactly as the model wrote them (its plan is the list
//! itself). Weights stay in their file format and are decoded one row at a time inside the
//! matrix products (a 2B-parameter BitNet never exists as f32); the other ops are the
//! definitions in [`crate::cpu::ops`]. Natively the matrix products use every core (rayon); in
//! the browser they run on one thread.

use std::sync::Arc;

use super::{
    check_batch, AttentionScores, AttentionShape, Backend, Batch, Elementwise, KvShape, KvType,
    Limits, Logits, Names, Op, Pass, Readback, Tensor, Tokens, Weight, WeightData,
};
use crate::cpu::bitlinear::quantize_activations;
use crate::cpu::ops;
use crate::error::{BackendError, BatchError};
use crate::ops::RopeConfig;
use crate::pass::Activations;
use crate::quant::{self, q8dot, GgmlType};
use crate::Error;

/// A weight as the file stores it, row by row.
struct CpuWeight {
    name: String,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    /// Bytes of one row.
    row_bytes: usize,
    data: Vec<u8>,
    /// Multiplies every product (I2_S's own `weight_scale`, or a separate `.scale` tensor).
    scale: f32,
}

impl CpuWeight {
    /// Decode row `r` into `out` (`cols` values, before `scale`).
    fn decode_row(&self, r: usize, out: &mut [f32]) -> Result<(), Error> {
        let bytes = &self.data[r * self.row_bytes..][..self.row_bytes];
        quant::dequantize_rows(self.dtype, bytes, out).map_err(|e| match e {
            quant::QuantError::InvalidCode { dtype, index, code } => {
                Error::Quant(quant::QuantError::Invalid(format!(
                    "{}: {dtype} code {code} at row {r}, column {index}",
                    self.name
                )))
            }
            e => e.into(),
        })
    }
}

/// The CPU backend.
pub struct CpuBackend {
    max_batch: usize,
    tensors: Vec<Vec<f32>>,
    names: Vec<String>,
    weights: Vec<CpuWeight>,
    /// Per sequence, per layer `(k, v)`, each `(max_ctx, n_kv_heads, head_dim)`.
    cache: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
    kv: Option<KvShape>,
    rope: Vec<RopeConfig>,
    /// The best candidate of the last pass that read back its top-k (for chained passes).
    best: Option<u32>,
    /// The KV cache type asked for ([`Backend::kv_request`]).
    kv_request: Option<KvType>,
    /// Under [`super::Arithmetic::Fast`], one-token products take int8 activations.
    int8_activations: bool,
    arithmetic: super::Arithmetic,
    /// The quantized activations of [`Activations::Q8`] products, buffers kept between them.
    q8: q8dot::Q8Acts,
}

/// A pass of the CPU backend: its ops and the batch they run over.
pub struct CpuPass {
    ops: Arc<[Op]>,
    batch: Batch,
}

impl CpuBackend {
    /// A backend whose passes take at most `max_batch` tokens.
    pub fn new(max_batch: usize) -> Self {
        CpuBackend {
            max_batch: max_batch.max(1),
            tensors: Vec::new(),
            names: Vec::new(),
            weights: Vec::new(),
            cache: Vec::new(),
            kv: None,
            rope: Vec::new(),
            best: None,
            kv_request: None,
            int8_activations: true,
            arithmetic: super::Arithmetic::Fast,
            q8: q8dot::Q8Acts::default(),
        }
    }

    /// Whether one-token products take int8 activations under [`super::Arithmetic::Fast`]
    /// (on by default, as on a GPU with integer dot products). Before the model loads.
    pub fn set_int8_activations(&mut self, on: bool) {
        self.int8_activations = on;
    }

    /// Choose the KV cache's element type (before the model is loaded; `None`: the model's
    /// default, [`KvType::default_for`]).
    pub fn set_kv_type(&mut self, t: Option<KvType>) {
        self.kv_request = t;
    }

    fn tensor(&self, t: Tensor) -> &[f32] {
        &self.tensors[t.0 as usize]
    }

    fn need(&self, t: Tensor, len: usize, what: &'static str) -> Result<(), Error> {
        let have = self.tensors.get(t.0 as usize).map_or(0, Vec::len);
        if have < len {
            return Err(BackendError::BufferTooSmall {
                what,
                buffer: self.names.get(t.0 as usize).cloned().unwrap_or_default(),
                have,
                need: len,
            }
            .into());
        }
        Ok(())
    }

    fn weight(&self, w: Weight) -> Result<&CpuWeight, Error> {
        self.weights.get(w.0 as usize).ok_or_else(|| {
            BackendError::UnknownHandle {
                what: "weight",
                id: w.0,
            }
            .into()
        })
    }

    fn kv(&self) -> Result<KvShape, Error> {
        self.kv
            .ok_or_else(|| BackendError::NoCache("attention").into())
    }

    /// `y[t, r] = f(row r of W, t)` for `n` tokens, rows in parallel natively.
    fn rows_product(
        &self,
        w: &CpuWeight,
        n: usize,
        dot: impl Fn(&[f32], usize) -> f32 + Sync,
    ) -> Result<Vec<f32>, Error> {
        self.rows_apply(w, n, |r, row, out| {
            w.decode_row(r, row)?;
            for (t, o) in out.iter_mut().enumerate() {
                *o = dot(row, t);
            }
            Ok(())
        })
    }

    /// `y[t, r]` for `n` tokens, where `per_row(r, scratch, y[.., r])` writes row `r`'s value
    /// for every token (`scratch`: `cols` f32 to decode into), rows in parallel natively.
    fn rows_apply(
        &self,
        w: &CpuWeight,
        n: usize,
        per_row: impl Fn(usize, &mut [f32], &mut [f32]) -> Result<(), Error> + Sync,
    ) -> Result<Vec<f32>, Error> {
        self.rows_apply_with(
            w,
            n,
            || vec![0f32; w.cols],
            |r, row, out| per_row(r, row, out),
        )
    }

    /// [`Self::rows_apply`] with scratch of any kind: `scratch()` makes one per worker (per
    /// rayon split natively, one in all in the browser), which `per_row(r, scratch, y[.., r])`
    /// reuses from row to row.
    fn rows_apply_with<S>(
        &self,
        w: &CpuWeight,
        n: usize,
        scratch: impl Fn() -> S + Sync,
        per_row: impl Fn(usize, &mut S, &mut [f32]) -> Result<(), Error> + Sync,
    ) -> Result<Vec<f32>, Error> {
        let block_rows = 32;
        let blocks: Vec<usize> = (0..w.rows.div_ceil(block_rows)).collect();
        let run = |(row, col): &mut (S, Vec<f32>), &b: &usize| -> Result<Vec<f32>, Error> {
            let r0 = b * block_rows;
            let r1 = (r0 + block_rows).min(w.rows);
            // (token, row within block)
            let mut out = vec![0f32; n * (r1 - r0)];
            for r in r0..r1 {
                per_row(r, row, col)?;
                for (t, &v) in col.iter().enumerate() {
                    out[t * (r1 - r0) + (r - r0)] = v;
                }
            }
            Ok(out)
        };
        let init = || (scratch(), vec![0f32; n]);
        #[cfg(not(target_arch = "wasm32"))]
        let parts: Vec<Result<Vec<f32>, Error>> = {
            use rayon::prelude::*;
            blocks.par_iter().map_init(init, run).collect()
        };
        #[cfg(target_arch = "wasm32")]
        let parts: Vec<Result<Vec<f32>, Error>> = {
            let mut state = init();
            blocks.iter().map(|b| run(&mut state, b)).collect()
        };
        let mut y = vec![0f32; n * w.rows];
        for (b, part) in parts.into_iter().enumerate() {
            let part = part?;
            let r0 = b * block_rows;
            let width = part.len() / n.max(1);
            for t in 0..n {
                y[t * w.rows + r0..][..width].copy_from_slice(&part[t * width..][..width]);
            }
        }
        Ok(y)
    }

    /// Run one op of a pass over `batch` with token ids `ids`.
    fn run(&mut self, op: &Op, batch: &Batch, ids: &[u32]) -> Result<Option<Logits>, Error> {
        match *op {
            Op::Embed { table, out } => self.embed(table, out, ids)?,
            Op::RmsNorm {
                x,
                weight,
                out,
                rows,
                dim,
                eps,
            } => self.rms_norm(x, weight, out, rows, dim, eps)?,
            Op::MatMul {
                w,
                x,
                out,
                rows,
                act: Activations::F32,
            } => self.matmul(w, x, out, rows)?,
            Op::MatMul {
                w,
                x,
                out,
                rows,
                act: Activations::Q8,
            } => self.matmul_q8(w, x, out, rows)?,
            Op::MatMul {
                w,
                x,
                out,
                rows,
                act: Activations::F16,
            } => self.matmul_f16(w, x, out, rows)?,
            Op::BitLinear { w, x, out, rows } => self.bitlinear(w, x, out, rows)?,
            Op::Rope { x, heads, table } => self.rope(x, heads, table, batch)?,
            Op::Attention {
                layer,
                q,
                k,
                v,
                out,
                heads,
                scores,
            } => self.attention(layer, [q, k, v, out], heads, scores, batch)?,
            Op::Softcap { x, len, cap } => {
                self.need(x, len, "softcap x")?;
                ops::softcap(&mut self.tensors[x.0 as usize][..len], cap);
            }
            Op::Elementwise {
                f,
                out,
                first,
                second,
                len,
            } => self.elementwise(f, out, first, second, len)?,
            Op::AddBias {
                out,
                bias,
                rows,
                cols,
            } => {
                self.need(out, rows * cols, "add_bias out")?;
                self.need(bias, cols, "add_bias bias")?;
                let b = self.tensor(bias)[..cols].to_vec();
                let y = &mut self.tensors[out.0 as usize][..rows * cols];
                for row in y.chunks_exact_mut(cols) {
                    row.iter_mut().zip(&b).for_each(|(y, b)| *y += b);
                }
            }
            Op::ScaleColumns {
                out,
                scale,
                rows,
                cols,
            } => {
                self.need(out, rows * cols, "scale_columns out")?;
                self.need(scale, cols, "scale_columns scale")?;
                let m = self.tensor(scale)[..cols].to_vec();
                let y = &mut self.tensors[out.0 as usize][..rows * cols];
                for row in y.chunks_exact_mut(cols) {
                    row.iter_mut().zip(&m).for_each(|(y, m)| *y *= m);
                }
            }
            Op::CopyRow {
                src,
                row,
                cols,
                dst,
                dst_row,
            } => {
                self.need(src, (row + 1) * cols, "copy_row src")?;
                self.need(dst, (dst_row + 1) * cols, "copy_row dst")?;
                let v = self.tensor(src)[row * cols..][..cols].to_vec();
                self.tensors[dst.0 as usize][dst_row * cols..][..cols].copy_from_slice(&v);
            }
            Op::Read {
                logits,
                rows,
                vocab,
                what,
            } => return self.read(logits, rows, vocab, what, batch).map(Some),
        }
        Ok(None)
    }

    fn embed(&mut self, table: Weight, out: Tensor, ids: &[u32]) -> Result<(), Error> {
        let w = self.weight(table)?;
        let cols = w.cols;
        self.need(out, ids.len() * cols, "embedding")?;
        let mut y = std::mem::take(&mut self.tensors[out.0 as usize]);
        let w = &self.weights[table.0 as usize];
        let mut result = Ok(());
        for (t, &id) in ids.iter().enumerate() {
            if id as usize >= w.rows {
                result = Err(BatchError::TokenOutOfVocab {
                    id,
                    n_vocab: w.rows,
                }
                .into());
                break;
            }
            let row = &mut y[t * cols..][..cols];
            if let Err(e) = w.decode_row(id as usize, row) {
                result = Err(e);
                break;
            }
            if w.scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= w.scale);
            }
        }
        self.tensors[out.0 as usize] = y;
        result
    }

    fn rms_norm(
        &mut self,
        x: Tensor,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
    ) -> Result<(), Error> {
        self.need(x, rows * dim, "rms_norm x")?;
        self.need(out, rows * dim, "rms_norm out")?;
        self.need(weight, dim, "rms_norm weight")?;
        let y = ops::rms_norm(
            &self.tensor(x)[..rows * dim],
            &self.tensor(weight)[..dim],
            eps,
        );
        self.tensors[out.0 as usize][..rows * dim].copy_from_slice(&y);
        Ok(())
    }

    fn matmul(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let cw = self.weight(w)?;
        self.need(x, rows * cw.cols, "matmul x")?;
        self.need(out, rows * cw.rows, "matmul out")?;
        let xs = &self.tensor(x)[..rows * cw.cols];
        let (cols, scale) = (cw.cols, cw.scale);
        let y = self.rows_product(cw, rows, |row, t| dot(row, &xs[t * cols..][..cols]) * scale)?;
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    /// [`Activations::Q8`]: each token's row quantized to int8 blocks of 32 (once per product,
    /// into buffers kept between products), then per weight row the integer dot products of
    /// [`q8dot::vec_dot_q8`] (exact integer sums per group, combined with the f32 block and
    /// group scales), rounded once to f32, times the weight's scale. [`q8dot::Q8Dot`] computes
    /// them without allocating, equal to the reference bit for bit. The GPU's integer-dot
    /// kernels make the same records bit for bit and the same integer sums; they add the
    /// scaled group terms in f32, which differs from this by the rounding of those additions
    /// only.
    fn matmul_q8(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let mut acts = std::mem::take(&mut self.q8);
        let y = self.matmul_q8_rows(w, x, out, rows, &mut acts);
        self.q8 = acts;
        let y = y?;
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    /// [`Self::matmul_q8`]'s products, with `acts` to quantize the activations into.
    fn matmul_q8_rows(
        &self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        rows: usize,
        acts: &mut q8dot::Q8Acts,
    ) -> Result<Vec<f32>, Error> {
        let cw = self.weight(w)?;
        self.need(x, rows * cw.cols, "matmul x")?;
        self.need(out, rows * cw.rows, "matmul out")?;
        let (cols, scale) = (cw.cols, cw.scale);
        let dot = q8dot::Q8Dot::new(cw.dtype)?;
        acts.quantize(&self.tensor(x)[..rows * cols], cols)?;
        let acts = &*acts;
        self.rows_apply_with(
            cw,
            rows,
            || (q8dot::Q8Scratch::default(), vec![0f64; rows]),
            |r, (scratch, sums), out| {
                let bytes = &cw.data[r * cw.row_bytes..][..cw.row_bytes];
                dot.row(bytes, acts, scratch, sums)?;
                for (o, &sum) in out.iter_mut().zip(sums.iter()) {
                    *o = sum as f32 * scale;
                }
                Ok(())
            },
        )
    }

    fn bitlinear(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let cw = self.weight(w)?;
        self.need(x, rows * cw.cols, "bitlinear x")?;
        self.need(out, rows * cw.rows, "bitlinear out")?;
        let cols = cw.cols;
        let (xq, scales) = quantize_activations(&self.tensor(x)[..rows * cols], cols);
        let xq: Vec<f32> = xq.into_iter().map(f32::from).collect();
        let scale = cw.scale;
        // Ternary weights times int8 values: every product and partial sum is an integer
        // below 2^24, so the f32 sum is exact and the result is `acc * weight_scale / s_t`
        // rounded twice, as transformers computes it in f32.
        let y = self.rows_product(cw, rows, |row, t| {
            dot(row, &xq[t * cols..][..cols]) * scale / scales[t]
        })?;
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    /// [`Activations::F16`]: each token's row scaled by the power of two that brings its
    /// largest magnitude into [1, 2) and rounded to f16, each weight row decoded and rounded
    /// to f16, f32 sums, scaled back by the power's inverse and the weight's scale.
    fn matmul_f16(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let cw = self.weight(w)?;
        self.need(x, rows * cw.cols, "matmul x")?;
        self.need(out, rows * cw.rows, "matmul out")?;
        let cols = cw.cols;
        let mut xh = vec![0f32; rows * cols];
        let mut inv = vec![1f32; rows];
        for ((src, dst), inv) in self.tensor(x)[..rows * cols]
            .chunks_exact(cols)
            .zip(xh.chunks_exact_mut(cols))
            .zip(&mut inv)
        {
            let (scale, back) = ops::f16_operand_scale(src);
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = half::f16::from_f32(v * scale).to_f32();
            }
            *inv = back;
        }
        let scale = cw.scale;
        let y = self.rows_apply(cw, rows, |r, row, col| {
            cw.decode_row(r, row)?;
            for v in row.iter_mut() {
                *v = half::f16::from_f32(*v).to_f32();
            }
            for (t, o) in col.iter_mut().enumerate() {
                *o = dot(row, &xh[t * cols..][..cols]) * inv[t] * scale;
            }
            Ok(())
        })?;
        self.tensors[out.0 as usize][..y.len()].copy_from_slice(&y);
        Ok(())
    }

    fn rope(&mut self, x: Tensor, heads: usize, table: usize, batch: &Batch) -> Result<(), Error> {
        let cfg = self
            .rope
            .get(table)
            .cloned()
            .ok_or_else(|| Error::from(BackendError::NoCache("RoPE")))?;
        let row = heads * cfg.head_dim;
        self.need(x, batch.tokens() * row, "rope x")?;
        let mut start = 0;
        for s in &batch.spans {
            let rows = &mut self.tensors[x.0 as usize][start * row..(start + s.len) * row];
            ops::rope(rows, heads, s.pos0, &cfg);
            start += s.len;
        }
        Ok(())
    }

    fn attention(
        &mut self,
        layer: usize,
        [q, k, v, out]: [Tensor; 4],
        heads: usize,
        scores: AttentionScores,
        batch: &Batch,
    ) -> Result<(), Error> {
        let kv = self.kv()?;
        let n = batch.tokens();
        let (kv_row, q_row) = (kv.n_kv_heads * kv.head_dim, heads * kv.head_dim);
        self.need(q, n * q_row, "attention q")?;
        self.need(k, n * kv_row, "attention k")?;
        self.need(v, n * kv_row, "attention v")?;
        self.need(out, n * q_row, "attention out")?;
        if layer >= kv.n_layers {
            return Err(BackendError::NoCacheLayer { layer }.into());
        }
        let shape = AttentionShape {
            n_heads: heads,
            n_kv_heads: kv.n_kv_heads,
            head_dim: kv.head_dim,
        };
        let mut row0 = 0;
        for s in &batch.spans {
            let rows = row0..row0 + s.len;
            let mut kn =
                self.tensors[k.0 as usize][rows.start * kv_row..rows.end * kv_row].to_vec();
            let mut vn =
                self.tensors[v.0 as usize][rows.start * kv_row..rows.end * kv_row].to_vec();
            if kv.dtype == KvType::F16 {
                // What an f16 cache holds: each value rounded to the nearest f16.
                for x in kn.iter_mut().chain(vn.iter_mut()) {
                    *x = half::f16::from_f32(*x).to_f32();
                }
            }
            let (kc, vc) = &mut self.cache[s.seq][layer];
            let at = s.pos0 * kv_row..(s.pos0 + s.len) * kv_row;
            kc[at.clone()].copy_from_slice(&kn);
            vc[at].copy_from_slice(&vn);
            let (kc, vc) = &self.cache[s.seq][layer];
            let y = ops::attention(
                &self.tensors[q.0 as usize][rows.start * q_row..rows.end * q_row],
                kc,
                vc,
                s.pos0,
                shape,
                scores,
            );
            self.tensors[out.0 as usize][rows.start * q_row..][..y.len()].copy_from_slice(&y);
            row0 += s.len;
        }
        Ok(())
    }

    fn elementwise(
        &mut self,
        f: Elementwise,
        out: Tensor,
        first: Option<Tensor>,
        second: Option<Tensor>,
        len: usize,
    ) -> Result<(), Error> {
        self.need(out, len, "elementwise out")?;
        let first = first.unwrap_or(out);
        self.need(first, len, "elementwise first operand")?;
        let a = &self.tensor(first)[..len];
        let b = match (f.takes_second(), second) {
            (true, Some(s)) => {
                self.need(s, len, "elementwise second operand")?;
                &self.tensor(s)[..len]
            }
            (true, None) => return Err(BackendError::MissingOperand { op: f.name() }.into()),
            (false, _) => a,
        };
        let y = match f {
            Elementwise::Add => ops::add(a, b),
            Elementwise::SiluMul => ops::silu_mul(a, b),
            Elementwise::ReluSquared => ops::relu_squared(a),
            Elementwise::ReluSquaredMul => ops::relu_squared_mul(a, b),
            Elementwise::GeluMul => ops::gelu_mul(a, b),
        };
        self.tensors[out.0 as usize][..len].copy_from_slice(&y);
        Ok(())
    }

    fn read(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        what: Readback,
        batch: &Batch,
    ) -> Result<Logits, Error> {
        self.need(logits, rows * vocab, "logits")?;
        let l = &self.tensor(logits)[..rows * vocab];
        Ok(match what {
            Readback::All | Readback::Last => Logits::Full(l.to_vec()),
            Readback::TopK(k) => {
                let tops: Vec<Vec<(u32, f32)>> = l
                    .chunks(vocab)
                    .map(|row| ops::top_k(row, k.max(1)))
                    .collect();
                self.best = tops.last().and_then(|t| t.first()).map(|c| c.0);
                let _ = batch;
                Logits::Top(
                    tops.into_iter()
                        .map(|t| t.into_iter().take(k).collect())
                        .collect(),
                )
            }
            Readback::Nothing => Logits::None,
        })
    }
}

/// f32 dot product with eight partial sums (the order a vectorizing compiler keeps).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

impl Backend for CpuBackend {
    type Plan = Arc<[Op]>;
    type Recorded = CpuPass;
    /// The CPU runs a pass when it is submitted.
    type Pending = Logits;

    fn describe(&self) -> String {
        #[cfg(not(target_arch = "wasm32"))]
        return format!("cpu ({} threads)", rayon::current_num_threads());
        #[cfg(target_arch = "wasm32")]
        return "cpu".into();
    }

    fn limits(&self) -> Limits {
        Limits {
            max_batch: self.max_batch,
            max_tensor_len: usize::MAX,
            runs_ahead: false,
            arithmetic: self.arithmetic,
        }
    }

    fn kv_request(&self) -> Option<KvType> {
        self.kv_request
    }

    fn set_arithmetic(&mut self, arithmetic: super::Arithmetic) {
        self.arithmetic = arithmetic;
    }

    fn activations(&self, w: Weight, rows: usize) -> Activations {
        let fast = self.arithmetic == super::Arithmetic::Fast && self.int8_activations;
        match self.weights.get(w.0 as usize) {
            Some(c) if fast && Activations::q8_for(c.dtype, c.cols, rows) => Activations::Q8,
            _ => Activations::F32,
        }
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        let n = w.rows as u64 * w.cols as u64;
        let row_bytes = w.dtype.row_bytes(w.cols as u64).ok_or_else(|| {
            Error::from(BackendError::UnsupportedWeight {
                name: w.name.to_string(),
                why: format!("rows of {} {} values are not whole blocks", w.cols, w.dtype),
            })
        })? as usize;
        if !w.dtype.can_dequantize() {
            return Err(quant::QuantError::Unsupported(w.dtype).into());
        }
        let own_scale = quant::tensor_scale(w.dtype, w.bytes, n as usize)?.unwrap_or(1.0);
        let data_len = row_bytes * w.rows;
        if w.bytes.len() < data_len {
            return Err(BackendError::WeightBytes {
                name: w.name.to_string(),
                have: w.bytes.len(),
                rows: w.rows,
                cols: w.cols,
                dtype: w.dtype,
                need: data_len,
            }
            .into());
        }
        self.weights.push(CpuWeight {
            name: w.name.to_string(),
            dtype: w.dtype,
            rows: w.rows,
            cols: w.cols,
            row_bytes,
            data: w.bytes[..data_len].to_vec(),
            scale: own_scale * w.scale.unwrap_or(1.0),
        });
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, Error> {
        self.tensors.push(values.to_vec());
        self.names.push(name.to_string());
        Ok(Tensor(self.tensors.len() as u32 - 1))
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        self.load_vector(name, &vec![0f32; len])
    }

    fn write_vector(&mut self, t: Tensor, values: &[f32]) -> Result<(), Error> {
        let dst = self
            .tensors
            .get_mut(t.0 as usize)
            .and_then(|v| v.get_mut(..values.len()))
            .ok_or(Error::Internal("a vector written past its end"))?;
        dst.copy_from_slice(values);
        Ok(())
    }

    fn init_cache(&mut self, kv: KvShape, rope: &[RopeConfig]) -> Result<(), Error> {
        let len = kv.max_ctx * kv.n_kv_heads * kv.head_dim;
        self.cache = (0..kv.n_seqs)
            .map(|_| {
                (0..kv.n_layers)
                    .map(|_| (vec![0f32; len], vec![0f32; len]))
                    .collect()
            })
            .collect();
        self.kv = Some(kv);
        self.rope = rope.to_vec();
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        let t: usize = self.tensors.iter().map(|t| t.len() * 4).sum();
        let w: usize = self.weights.iter().map(|w| w.data.len()).sum();
        let c: usize = self
            .cache
            .iter()
            .flatten()
            .map(|(k, v)| (k.len() + v.len()) * 4)
            .sum();
        (t + w + c) as u64
    }

    fn plan(&self, pass: &Pass) -> Result<Arc<[Op]>, Error> {
        for op in &pass.ops {
            if let Op::BitLinear { w, .. } = op {
                let cw = self.weight(*w)?;
                if quant::bitlinear_input(cw.dtype).is_none() {
                    return Err(BackendError::UnsupportedWeight {
                        name: cw.name.clone(),
                        why: format!("BitLinear over {} weights (ternary types only)", cw.dtype),
                    }
                    .into());
                }
            }
        }
        Ok(pass.ops.clone().into())
    }

    fn plan_lines(&self, plan: &Arc<[Op]>, names: &Names) -> Vec<String> {
        plan.iter().map(|op| op.describe(names)).collect()
    }

    fn record(&mut self, plan: &Arc<[Op]>, batch: &Batch) -> Result<CpuPass, Error> {
        check_batch(batch, self.max_batch, self.kv.as_ref())?;
        Ok(CpuPass {
            ops: plan.clone(),
            batch: batch.clone(),
        })
    }

    fn submit(&mut self, pass: CpuPass, tokens: Tokens<'_>) -> Result<Logits, Error> {
        let chained;
        let ids = match tokens {
            Tokens::Ids(ids) => ids,
            Tokens::Chained => {
                chained = [self.best.ok_or(BatchError::ChainWithoutTopK)?];
                &chained[..]
            }
        };
        if ids.len() != pass.batch.tokens() {
            return Err(BatchError::TokenCount {
                ids: ids.len(),
                tokens: pass.batch.tokens(),
            }
            .into());
        }
        let mut logits = Logits::None;
        for op in pass.ops.iter() {
            if let Some(l) = self.run(op, &pass.batch, ids)? {
                logits = l;
            }
        }
        Ok(logits)
    }

    async fn wait(&mut self, pending: Logits) -> Result<Logits, Error> {
        Ok(pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Activations::Q8` equals the integer-dot reference ([`q8dot::vec_dot_q8`]) row by row:
    /// the same records and sums, bit for bit once its f64 sum is rounded to f32, and not the
    /// f32 product (the int8 rounding shows).
    #[test]
    fn q8_products_follow_their_definition() {
        let (rows, cols) = (4usize, 256usize);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 29 % 97) as f32 - 48.0) * 0.021)
            .collect();
        for dtype in [GgmlType::Q8_0, GgmlType::Q4_K] {
            let bytes = quant::quantize(dtype, &w).unwrap();
            let mut b = CpuBackend::new(2);
            let wh = b
                .load_weight(WeightData {
                    name: "w",
                    dtype,
                    rows,
                    cols,
                    bytes: &bytes,
                    scale: None,
                    layer: None,
                    location: None,
                })
                .unwrap();
            let xs: Vec<f32> = (0..cols)
                .map(|i| ((i * 53 % 89) as f32 - 44.0) / 9.0)
                .collect();
            let x = b.alloc("x", cols).unwrap();
            let y = b.alloc("y", rows).unwrap();
            b.tensors[x.0 as usize].copy_from_slice(&xs);
            b.matmul_q8(wh, x, y, 1).unwrap();
            let (got_q8, mut f32_out) = (b.tensors[y.0 as usize].clone(), vec![0f32; rows]);
            b.matmul(wh, x, y, 1).unwrap();
            f32_out.copy_from_slice(&b.tensors[y.0 as usize]);
            let record = q8dot::quantize_q8(&xs).unwrap();
            let row_bytes = bytes.len() / rows;
            let mut moved = false;
            for r in 0..rows {
                let (want, mag) =
                    q8dot::vec_dot_q8(dtype, &bytes[r * row_bytes..][..row_bytes], &record)
                        .unwrap();
                let got = f64::from(got_q8[r]);
                assert_eq!(
                    got_q8[r].to_bits(),
                    (want as f32).to_bits(),
                    "{dtype} row {r}: {got} vs {want}"
                );
                moved |= (got - f64::from(f32_out[r])).abs() > mag * 1e-5;
            }
            assert!(moved, "{dtype}: the q8 products equal the f32 ones");
        }
    }

    /// `Activations::F16` against its definition computed here with the `half` crate: both
    /// operands rounded to f16 after the row's power-of-two scale, sums in f64 (the backend's
    /// f32 sums round by at most about `cols` ulps of the magnitude, the bound used), scaled
    /// back. A row of values near 1e-6 survives only because of the scale (plain f16 would
    /// hold them as subnormals with 3 or 4 significant bits).
    #[test]
    fn f16_products_follow_their_definition() {
        let (rows, cols) = (5usize, 96usize);
        let mut b = CpuBackend::new(4);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01234)
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let wh = b
            .load_weight(WeightData {
                name: "w",
                dtype: GgmlType::F32,
                rows,
                cols,
                bytes: &bytes,
                scale: None,
                layer: None,
                location: None,
            })
            .unwrap();
        let xs: Vec<f32> = (0..2 * cols)
            .map(|i| {
                let v = ((i * 53 % 89) as f32 - 44.0) / 7.0;
                if i < cols {
                    v * 300.0
                } else {
                    v * 1.3e-6
                }
            })
            .collect();
        let x = b.alloc("x", xs.len()).unwrap();
        let y = b.alloc("y", 2 * rows).unwrap();
        b.tensors[x.0 as usize].copy_from_slice(&xs);
        b.matmul_f16(wh, x, y, 2).unwrap();
        let h = |v: f32| f64::from(half::f16::from_f32(v).to_f32());
        for t in 0..2 {
            let row = &xs[t * cols..][..cols];
            let m = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let p = 2f32.powi(-(m.log2().floor() as i32));
            assert!((1.0..2.0).contains(&(m * p)));
            for r in 0..rows {
                let wr = &w[r * cols..][..cols];
                let terms: Vec<f64> = wr.iter().zip(row).map(|(&a, &v)| h(a) * h(v * p)).collect();
                let want = terms.iter().sum::<f64>() / f64::from(p);
                let mag = terms.iter().map(|v| v.abs()).sum::<f64>() / f64::from(p);
                let got = f64::from(b.tensors[y.0 as usize][t * rows + r]);
                assert!(
                    (got - want).abs() <= mag * cols as f64 * f64::from(f32::EPSILON),
                    "token {t} row {r}: {got} vs {want}"
                );
                // Not the f32 product: the f16 rounding shows.
                let exact: f64 = wr
                    .iter()
                    .zip(row)
                    .map(|(&a, &v)| f64::from(a) * f64::from(v))
                    .sum();
                assert!(
                    (got - exact).abs() > mag * 1e-6,
                    "token {t} row {r}: no f16 rounding"
                );
            }
        }
    }
}
