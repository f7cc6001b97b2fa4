//! The wgpu backend: every op call of a forward pass is recorded onto a tape, and the whole pass
//! is submitted once, at [`Backend::finish`], with the readback copy in the same submission.
//!
//! A tape is kept per batch size. The first pass of a given size builds each op (its uniforms
//! and bind groups) and stores it with a key of its arguments; later passes find the same key
//! at the same place on the tape and only record the stored op, so a steady decode loop
//! creates no buffers, bind groups or uniforms: advancing to the next token is a write of the
//! token ids and of the shared position uniform. A call whose key differs rebuilds the tape
//! from that point on. At most `tape::MAX_TAPES` tapes are kept (the least recently used goes);
//! the uniforms, scratch and readback buffers of dropped ops return to the context's buffer
//! pool ([`crate::gpu::pool`]), and the ops built next take theirs from it.

use std::collections::HashMap;

mod add_norm;
mod attention;
mod bitlinear_inputs;
mod passes;
mod q8_inputs;
mod tape;

pub use passes::{GpuPending, GpuPrepared};

use super::profile::{OpTime, Profiler};
use super::{
    Backend, Elementwise, KvShape, Logits, NormProducts, Readback, Tensor, Weight, WeightData,
};
use crate::cpu::ops::RopeConfig;
use crate::gpu::bitlinear::BitLinearOp;
use crate::gpu::embedding::EmbeddingOp;
use crate::gpu::matmul::MatmulOp;
use crate::gpu::ops::{KvCache, KvDtype, Position, RopeTable};
use crate::gpu::weights::GpuWeight;
use crate::gpu::{GpuContext, GpuError};
use crate::quant::GgmlType;
use crate::Error;
use add_norm::PendingAdd;
use bitlinear_inputs::PendingNorm;
use q8_inputs::PendingSilu;
use tape::{Key, Step, Tape};

/// Host time spent per phase since the backend was made (seconds), for benchmarks.
#[derive(Copy, Clone, Debug, Default, serde::Serialize)]
pub struct PassTimings {
    pub passes: u64,
    /// Parts of passes submitted before their last part ([`GpuBackend::set_submit_in_parts`]).
    pub parts: u64,
    /// Passes of those encoded before their token was known ([`Backend::prepare`]).
    pub prepared: u64,
    /// Recording the tape into a command buffer (encoding and `finish`).
    pub record_s: f64,
    /// `queue.submit`.
    pub submit_s: f64,
    /// Waiting for readbacks (the GPU finishing, the map).
    pub wait_s: f64,
}

/// The wgpu backend.
pub struct GpuBackend {
    pub ctx: GpuContext,
    max_batch: usize,
    buffers: Vec<wgpu::Buffer>,
    weights: Vec<GpuWeight>,
    cache: Option<KvCache>,
    /// The KV cache's element type; `None`: f16 where the device has `shader-f16`.
    kv_dtype: Option<KvDtype>,
    rope: Option<RopeTable>,
    position: Position,
    /// Token ids of the pass (`max_batch` u32).
    ids: wgpu::Buffer,
    /// Top-k output (`max_batch * k` pairs, grown on demand).
    top: Option<(wgpu::Buffer, usize)>,
    /// The last submitted pass read back its top-k (so its best id is in `ids`).
    chain_ready: bool,
    timings: PassTimings,
    /// Int8 activation records of BitLinear inputs, per (tensor, row length), for `max_batch`
    /// rows: one quantization serves every product with the same input (q/k/v, gate/up).
    records: HashMap<(Tensor, usize), wgpu::Buffer>,
    /// Tensors whose records hold their current values in this pass.
    quantized: Vec<Tensor>,
    pending_norm: Option<PendingNorm>,
    /// A one-token attention not recorded yet: the integer-dot product of its output takes
    /// the output's records from it.
    pending_attention: Option<attention::PendingAttention>,
    /// Write those records in the attention (else a quantization dispatch makes them).
    fuse_attention_q8: bool,
    /// Combine a one-token attention's pieces in its attend dispatch where the platform allows
    /// ([`crate::gpu::ops::AttentionOp::combines_in_attend`]).
    combine_in_attend: bool,
    /// Pieces every attention's context is cut into (`None`: the op chooses).
    attention_splits: Option<u32>,
    /// RoPE calls not recorded yet (tensor, heads): folded into the attention that reads them.
    pending_rope: Vec<(Tensor, usize)>,
    /// A one-token SiluMul not recorded yet: fused into the quantization of the gate when the
    /// next op is an integer-dot product of it.
    pending_silu: Option<PendingSilu>,
    /// Fold the RoPE of q and k into attention.
    fold_rope: bool,
    /// Int8 records (blocks of 32, one token) of the inputs of integer-dot decode products,
    /// per (tensor, row length).
    q8_records: HashMap<(Tensor, usize), wgpu::Buffer>,
    /// Inputs whose q8 records hold their current values in this pass.
    q8_quantized: Vec<(Tensor, usize)>,
    /// Norm records per (normed tensor, row length, eps bits): the input of the products of an
    /// RMSNorm made by the residual add before it ([`add_norm`]).
    norm_records: HashMap<(Tensor, usize, u32), wgpu::Buffer>,
    /// Tensors this pass left unwritten (or unscaled) by folding a norm into its neighbours:
    /// reading them is an error.
    stale: Vec<Tensor>,
    /// A one-token integer-dot product added to its residual, not recorded yet: if the next
    /// op is Llama's gated FFN or attention inputs of the residual, the add also writes its
    /// norm's record.
    pending_add: Option<PendingAdd>,
    /// Fold Llama's norms into the add before them and the gated product or the attention
    /// after them.
    fuse_add_norm: bool,
    /// A one-token integer-dot product not recorded yet (weight, input, output): the next
    /// product of the same input joins it in one dispatch where the weights allow
    /// ([`crate::gpu::q8::can_pair`]); any other op records it first.
    pending_q8: Option<(Weight, Tensor, Tensor)>,
    /// Pair integer-dot products of one input (q and k, gate and up) into one dispatch.
    pair_q8: bool,
    /// Decode through the integer-dot kernels where a format has one.
    int_dot: bool,
    /// Quantize the input of those kernels inside the RMSNorm that makes it, where one does.
    fuse_norm_q8: bool,
    /// Add one-token integer-dot products to their residual in the same dispatch.
    fuse_residual: bool,
    /// Run one-token [`Backend::norm_bitlinear`] calls as one dispatch where the weights allow.
    fuse_bitlinear: bool,
    /// Two small buffers bound where the fused BitLinear kernel has no weight or output.
    spare: Option<[wgpu::Buffer; 2]>,
    /// GPU time per op (benchmarks); passes are not run ahead while it is on.
    profiler: Option<Profiler>,
    tapes: HashMap<usize, Tape>,
    /// Counts passes begun; each tape notes the last pass that used it.
    tape_clock: u64,
    n_tokens: usize,
    cursor: usize,
    /// Steps of this pass already encoded and submitted (a prefill is submitted in parts
    /// while it is recorded: [`GpuBackend::submit_ready`]).
    submitted: usize,
    /// Submit passes of several tokens in parts as they are recorded.
    submit_in_parts: bool,
    bytes: u64,
}

impl GpuBackend {
    /// A backend on `ctx` whose passes take at most `max_batch` tokens.
    pub fn new(ctx: GpuContext, max_batch: usize) -> Result<Self, Error> {
        let max_batch = max_batch.max(1);
        let ids = ctx.storage("tokens", max_batch as u64 * 4)?;
        let position = Position::new(&ctx, 0);
        let int_dot = ctx.int_dot_decode();
        Ok(GpuBackend {
            ctx,
            max_batch,
            buffers: Vec::new(),
            weights: Vec::new(),
            cache: None,
            kv_dtype: None,
            rope: None,
            position,
            ids,
            top: None,
            chain_ready: false,
            timings: PassTimings::default(),
            profiler: None,
            records: HashMap::new(),
            quantized: Vec::new(),
            pending_norm: None,
            pending_attention: None,
            fuse_attention_q8: true,
            combine_in_attend: true,
            attention_splits: None,
            pending_rope: Vec::new(),
            pending_silu: None,
            fold_rope: true,
            q8_records: HashMap::new(),
            q8_quantized: Vec::new(),
            norm_records: HashMap::new(),
            stale: Vec::new(),
            pending_add: None,
            fuse_add_norm: true,
            pending_q8: None,
            pair_q8: true,
            int_dot,
            fuse_norm_q8: true,
            fuse_residual: true,
            fuse_bitlinear: true,
            spare: None,
            tapes: HashMap::new(),
            tape_clock: 0,
            n_tokens: 0,
            cursor: 0,
            submitted: 0,
            submit_in_parts: true,
            bytes: max_batch as u64 * 4,
        })
    }

    /// Submit a pass of several tokens in parts while it is recorded, so the device starts
    /// before the host has recorded the whole pass (the default), or whole, as one command
    /// buffer (for comparisons: the same dispatches in the same order either way).
    pub fn set_submit_in_parts(&mut self, on: bool) {
        self.submit_in_parts = on;
    }

    /// Choose the KV cache's element type (before the model is loaded). f32 keeps keys and
    /// values exactly as computed, for comparisons with f32 references; f16 halves the memory.
    pub fn set_kv_dtype(&mut self, dtype: Option<KvDtype>) {
        self.kv_dtype = dtype;
    }

    fn buf(&self, t: Tensor) -> &wgpu::Buffer {
        &self.buffers[t.0 as usize]
    }

    fn cache(&self) -> Result<&KvCache, GpuError> {
        self.cache
            .as_ref()
            .ok_or_else(|| GpuError::Validation("attention before the KV cache was created".into()))
    }

    /// Start a pass of `n` tokens at `pos0` (the token ids are written by the caller, or
    /// were left in `ids` by the previous pass).
    fn begin_at(&mut self, n: usize, pos0: usize) -> Result<(), Error> {
        let max_ctx = self.cache.as_ref().map(|c| c.max_ctx as usize);
        super::check_pass(n, self.max_batch, pos0, max_ctx)?;
        self.position.set(&self.ctx, pos0 as u32);
        self.tape_clock += 1;
        if let Some(t) = self.tapes.get_mut(&n) {
            t.last_used = self.tape_clock;
        }
        self.n_tokens = n;
        self.cursor = 0;
        self.submitted = 0;
        self.quantized.clear();
        self.q8_quantized.clear();
        self.stale.clear();
        self.pending_add = None;
        self.pending_norm = None;
        self.pending_attention = None;
        self.pending_rope.clear();
        self.pending_silu = None;
        self.pending_q8 = None;
        Ok(())
    }

    /// The top-k output buffer with room for `pairs` `(id, value)` pairs.
    fn top_buffer(&mut self, pairs: usize) -> Result<wgpu::Buffer, GpuError> {
        if self.top.as_ref().is_none_or(|(_, n)| *n < pairs) {
            let b = self.ctx.storage("top_k", pairs as u64 * 8)?;
            self.top = Some((b, pairs));
            // Ops bound to the old buffer must be rebuilt.
            for tape in self.tapes.values_mut() {
                tape.steps.retain(|(key, _)| !matches!(key, Key::TopK(..)));
            }
        }
        self.top
            .as_ref()
            .map(|(b, _)| b.clone())
            .ok_or_else(|| GpuError::Validation("no top-k buffer".into()))
    }

    /// Time every op on the GPU from now on (each in its own compute pass, with timestamp
    /// queries); false where the device has no timestamp queries.
    pub fn enable_profile(&mut self) -> bool {
        self.profiler = Profiler::new(&self.ctx);
        self.profiler.is_some()
    }

    /// GPU time per op label since profiling began or was cleared, largest first.
    pub fn profile(&self) -> Option<Vec<(String, OpTime)>> {
        self.profiler.as_ref().map(Profiler::totals)
    }

    /// Forget the profile's totals (after a warm-up).
    pub fn clear_profile(&mut self) {
        if let Some(p) = self.profiler.as_mut() {
            p.clear();
        }
    }

    /// Where the host's time went since the backend was made.
    pub fn timings(&self) -> PassTimings {
        self.timings
    }

    /// The first `len` values of an activation buffer, read back after the last pass
    /// (diagnostics: per-stage statistics of a forward pass).
    pub async fn read_activation(&self, t: Tensor, len: usize) -> Result<Vec<f32>, Error> {
        let buffer = self
            .buffers
            .get(t.0 as usize)
            .ok_or_else(|| Error::Usage(format!("no activation buffer {}", t.0)))?;
        let len = (len as u64).min(buffer.size() / 4);
        Ok(self.ctx.read_f32(buffer, 0, len).await?)
    }

    /// Free every GPU buffer now (WebGPU frees a dropped buffer only when the garbage
    /// collector gets to it): the activations, the token ids, the readback buffers and, by
    /// releasing the context ([`GpuContext::release`]: destroying the device this backend
    /// owns, or each buffer made on a caller's device), the weights, the KV cache and every
    /// other buffer. The backend must not be used afterwards.
    pub fn destroy(&mut self) {
        for b in self.buffers.drain(..) {
            b.destroy();
        }
        for (_, b) in self.records.drain().chain(self.q8_records.drain()) {
            b.destroy();
        }
        for (_, b) in self.norm_records.drain() {
            b.destroy();
        }
        if let Some((b, _)) = self.top.take() {
            b.destroy();
        }
        self.ids.destroy();
        self.weights.clear();
        self.cache = None;
        self.tapes.clear();
        self.ctx.release();
    }
}

impl Backend for GpuBackend {
    fn describe(&self) -> String {
        format!(
            "gpu: {} ({})",
            self.ctx.adapter.name, self.ctx.adapter.backend
        )
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn max_tensor_len(&self) -> usize {
        usize::try_from(self.ctx.max_binding_bytes() / 4).unwrap_or(usize::MAX)
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        let (rows, cols) = (u32::try_from(w.rows), u32::try_from(w.cols));
        let (Ok(rows), Ok(cols)) = (rows, cols) else {
            return Err(Error::Usage(format!(
                "{}: too many rows or columns",
                w.name
            )));
        };
        let mut gw = self
            .ctx
            .upload_weight(w.name, w.dtype, rows, cols, w.bytes)?;
        if let Some(s) = w.scale {
            gw.scale *= s;
        }
        self.bytes += gw.bytes;
        self.weights.push(gw);
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, Error> {
        let b = self.ctx.storage_init(name, bytemuck::cast_slice(values))?;
        self.bytes += b.size();
        self.buffers.push(b);
        Ok(Tensor(self.buffers.len() as u32 - 1))
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        let b = self.ctx.storage(name, len as u64 * 4)?;
        self.bytes += b.size();
        self.buffers.push(b);
        Ok(Tensor(self.buffers.len() as u32 - 1))
    }

    fn init_cache(&mut self, kv: KvShape, rope: &RopeConfig) -> Result<(), Error> {
        let dtype = self
            .kv_dtype
            .unwrap_or_else(|| KvDtype::preferred(&self.ctx));
        let cache = KvCache::new(
            &self.ctx,
            kv.n_layers,
            kv.max_ctx as u32,
            kv.n_kv_heads as u32,
            kv.head_dim as u32,
            dtype,
        )?;
        self.bytes +=
            2 * (kv.n_layers * kv.max_ctx * kv.n_kv_heads * kv.head_dim) as u64 * dtype.bytes();
        self.cache = Some(cache);
        self.rope = Some(RopeTable::new(&self.ctx, rope)?);
        self.tapes.clear();
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        // The prefill products' shared f16 operands included (made on first use).
        self.bytes + crate::gpu::matmul::CoopScratch::bytes(&self.ctx)
    }

    fn begin(&mut self, ids: &[u32], pos0: usize) -> Result<(), Error> {
        self.begin_at(ids.len(), pos0)?;
        self.ctx.write(&self.ids, 0, ids);
        Ok(())
    }

    fn embed(&mut self, table: Weight, out: Tensor) -> Result<(), Error> {
        self.flush_pending()?;
        self.wrote(out);
        let n = self.n_tokens as u32;
        self.step(Key::Embed(table, out), |s| {
            let w = &s.weights[table.0 as usize];
            Ok(Step::Embed(EmbeddingOp::new(
                &s.ctx,
                w,
                &s.ids,
                s.buf(out),
                n,
            )?))
        })
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
        // Recorded with the next op: fused into it when that is an I2_S BitLinear of `out`.
        self.flush_pending()?;
        self.check_readable(x)?;
        self.pending_norm = Some(PendingNorm {
            x,
            weight,
            out,
            rows,
            dim,
            eps,
        });
        Ok(())
    }

    fn matmul(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        if self.uses_q8(w, rows) {
            return self.matvec_q8(w, x, out);
        }
        self.flush_pending()?;
        self.check_readable(x)?;
        self.wrote(out);
        self.step(Key::Matmul(w, x, out, rows), |s| {
            let gw = &s.weights[w.0 as usize];
            let op = MatmulOp::new(&s.ctx, gw, s.buf(x), s.buf(out), rows as u32)?;
            // Right after a cooperative-matrix product of the same input (q, k, v; gate,
            // up), its scaled f16 inputs are still in the shared scratch.
            let shares = match s.previous_step() {
                Some((Key::Matmul(pw, px, pout, prows), Step::Matmul(prev))) => {
                    *px == x
                        && *prows == rows
                        && *pout != x
                        && s.weights[pw.0 as usize].cols == gw.cols
                        && prev.f16_inputs()
                }
                _ => false,
            };
            Ok(Step::Matmul(match shares {
                true => op.reusing_scaled_input(),
                false => op,
            }))
        })
    }

    fn matmul_add(
        &mut self,
        w: Weight,
        x: Tensor,
        scratch: Tensor,
        residual: Tensor,
        rows: usize,
        len: usize,
    ) -> Result<(), Error> {
        self.check_readable(residual)?;
        let gw = &self.weights[w.0 as usize];
        if self.fuse_residual && residual != x && len == gw.rows as usize {
            if self.uses_q8(w, rows) {
                return self.matvec_q8_into(w, x, residual, true);
            }
            if rows == 1 && MatmulOp::has_matvec_add(gw.dtype) {
                self.flush_pending()?;
                self.check_readable(x)?;
                self.wrote(residual);
                return self.step(Key::MatmulAdd(w, x, residual, 1), |s| {
                    let gw = &s.weights[w.0 as usize];
                    Ok(Step::Matmul(MatmulOp::matvec_add(
                        &s.ctx,
                        gw,
                        s.buf(x),
                        s.buf(residual),
                    )?))
                });
            }
        }
        // Several tokens on cooperative matrices: the add in the product's dispatch.
        let n = rows as u32;
        if self.fuse_residual
            && residual != x
            && len == rows * gw.rows as usize
            && MatmulOp::takes_coop(&self.ctx, gw, n)
        {
            self.flush_pending()?;
            self.check_readable(x)?;
            self.wrote(residual);
            return self.step(Key::MatmulAdd(w, x, residual, rows), |s| {
                let gw = &s.weights[w.0 as usize];
                Ok(Step::Matmul(MatmulOp::coop_add(
                    &s.ctx,
                    gw,
                    s.buf(x),
                    s.buf(residual),
                    n,
                )?))
            });
        }
        self.check_readable(x)?;
        super::matmul_add_steps(self, w, x, scratch, residual, rows, len)
    }

    fn bitlinear(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) -> Result<(), Error> {
        let dtype = self.weights[w.0 as usize].dtype;
        if !matches!(dtype, GgmlType::I2_S | GgmlType::TQ1_0 | GgmlType::TQ2_0) {
            return Err(GpuError::Unsupported(format!(
                "BitLinear over {dtype} weights on the GPU (ternary types only)"
            ))
            .into());
        }
        self.check_readable(x)?;
        if dtype == GgmlType::I2_S {
            return self.bitlinear_i2s(w, x, out, rows);
        }
        self.flush_pending()?;
        self.wrote(out);
        self.step(Key::BitLinear(w, x, out, rows), |s| {
            let gw = &s.weights[w.0 as usize];
            Ok(Step::BitLinear(Box::new(BitLinearOp::new(
                &s.ctx,
                gw,
                s.buf(x),
                s.buf(out),
                rows as u32,
                s.int_dot,
            )?)))
        })
    }

    fn norm_matmul(&mut self, c: NormProducts<'_>) -> Result<(), Error> {
        self.norm_matmul_gpu(&c)
    }

    fn norm_bitlinear(&mut self, c: NormProducts<'_>) -> Result<(), Error> {
        self.check_readable(c.x)?;
        match self.fused_norm_bitlinear_mode(&c) {
            Some(fused) => self.norm_bitlinear_fused(&c, fused),
            None => super::norm_bitlinear_steps(self, &c),
        }
    }

    fn rope(&mut self, x: Tensor, n_heads: usize) -> Result<(), Error> {
        self.check_readable(x)?;
        self.note_rope(x, n_heads)
    }

    fn attention(
        &mut self,
        layer: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        n_heads: usize,
    ) -> Result<(), Error> {
        for t in [q, k, v] {
            self.check_readable(t)?;
        }
        self.record_attention(layer, [q, k, v, out], n_heads, None)
    }

    fn elementwise(
        &mut self,
        f: Elementwise,
        out: Tensor,
        first: Option<Tensor>,
        second: Option<Tensor>,
        len: usize,
    ) -> Result<(), Error> {
        self.flush_pending()?;
        for t in [Some(out), first, second].into_iter().flatten() {
            self.check_readable(t)?;
        }
        self.wrote(out);
        if let (Elementwise::SiluMul, None, Some(up)) = (f, first, second) {
            if self.int_dot && self.fuse_norm_q8 && self.n_tokens == 1 && up != out {
                self.pending_silu = Some(PendingSilu {
                    gate: out,
                    up,
                    len,
                    norm: None,
                });
                return Ok(());
            }
        }
        self.record_elementwise(f, out, first, second, len)
    }

    fn copy_row(&mut self, src: Tensor, row: usize, cols: usize, dst: Tensor) -> Result<(), Error> {
        self.flush_pending()?;
        self.check_readable(src)?;
        self.wrote(dst);
        let bytes = cols as u64 * 4;
        let src_offset = row as u64 * bytes;
        if self.buf(src).size() < src_offset + bytes || self.buf(dst).size() < bytes {
            return Err(GpuError::Validation(format!(
                "copy of row {row} ({cols} values): a buffer is too small"
            ))
            .into());
        }
        self.step(Key::CopyRow(src, row, cols, dst), |_| {
            Ok(Step::Copy {
                src,
                src_offset,
                dst,
                bytes,
            })
        })
    }

    type Pending = GpuPending;
    type Prepared = GpuPrepared;

    fn begin_deferred(&mut self, pos0: usize) -> Result<(), Error> {
        self.begin_at(1, pos0)
    }

    fn prepare(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<GpuPrepared, Error> {
        self.encode_pass(logits, rows, vocab, readback)
    }

    fn submit_prepared(&mut self, prepared: GpuPrepared, id: u32) -> Result<GpuPending, Error> {
        // Staged: written after the passes already submitted, before this one.
        self.ctx.write(&self.ids, 0, &[id]);
        self.timings.prepared += 1;
        Ok(self.submit_encoded(prepared))
    }

    fn runs_ahead(&self) -> bool {
        self.profiler.is_none()
    }

    fn begin_chained(&mut self, pos0: usize) -> Result<(), Error> {
        if !self.chain_ready {
            return Err(Error::Usage(
                "a chained pass needs a previous pass that read back its top-k".into(),
            ));
        }
        self.begin_at(1, pos0)
    }

    fn submit(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<GpuPending, Error> {
        let pass = self.encode_pass(logits, rows, vocab, readback)?;
        Ok(self.submit_encoded(pass))
    }

    async fn wait(&mut self, pending: GpuPending) -> Result<Logits, Error> {
        self.read_pass(pending).await
    }
}
