//! The wgpu backend. A pass's ops are planned once per shape ([`plan`]: lowered to the GPU's
//! ops, then fused by the rules in [`rules`]); the first pass of a plan builds its tape (each
//! step's uniforms and bind groups, [`exec`]), and every pass after it only records the tape
//! ([`tape`]) and submits it ([`passes`]): a steady decode loop creates no buffers, bind groups
//! or uniforms, and advancing to the next token is a write of the token ids and of the shared
//! position uniform. At most `tape::MAX_TAPES` tapes are kept (the least recently used goes);
//! the uniforms, scratch and readback buffers of dropped steps return to the context's buffer
//! pool ([`crate::gpu::pool`]), and the steps built next take theirs from it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

mod exec;
mod hints;
mod passes;
pub mod plan;
pub mod rules;
mod tape;

pub use passes::{GpuPending, GpuRecorded};
pub use plan::{GpuOp, GpuPlan, Rules};

use super::profile::{OpTime, Profiler};
use super::{Backend, Batch, KvShape, Limits, Logits, Tensor, Tokens, Weight, WeightData};
use crate::error::BackendError;
use crate::gpu::ops::{AttentionOp, KvCache, KvDtype, Position, RopeTable};
use crate::gpu::weights::GpuWeight;
use crate::gpu::{GpuContext, GpuError};
use crate::ops::RopeConfig;
use crate::pass::{Names, Pass};
use crate::Error;
use tape::{Tape, TapeKey};

/// Host time spent per phase since the backend was made (seconds), for benchmarks.
#[derive(Copy, Clone, Debug, Default, serde::Serialize)]
pub struct PassTimings {
    pub passes: u64,
    /// Parts of passes submitted before their last part (passes of several tokens).
    pub parts: u64,
    /// Passes whose token was the previous pass's best candidate, taken on the device.
    pub chained: u64,
    /// Recording tapes into command buffers (encoding and `finish`).
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
    /// One cache per sequence.
    caches: Vec<KvCache>,
    kv: Option<KvShape>,
    /// The KV cache's element type; `None`: f16 where the device has `shader-f16`.
    kv_dtype: Option<KvDtype>,
    rope: Vec<RopeTable>,
    position: Position,
    /// Token ids of the pass (`max_batch` u32).
    ids: wgpu::Buffer,
    /// Top-k output (`pairs` grown on demand).
    top: Option<(wgpu::Buffer, usize)>,
    /// The last submitted pass read back its top-k (so its best id is in `ids`).
    chain_ready: bool,
    timings: PassTimings,
    /// BitLinear int8 records, per (tensor, row length), for `max_batch` rows.
    records: HashMap<(Tensor, usize), wgpu::Buffer>,
    /// Integer-dot int8 records (blocks of 32, one token), per (tensor, row length).
    q8_records: HashMap<(Tensor, usize), wgpu::Buffer>,
    /// Norm records per (normed tensor, row length, eps bits) ([`rules::add_norm`]).
    norm_records: HashMap<(Tensor, usize, u32), wgpu::Buffer>,
    /// Two small buffers bound where the fused BitLinear kernel has no weight or output.
    spare: Option<[wgpu::Buffer; 2]>,
    rules: Rules,
    arithmetic: crate::backend::Arithmetic,
    /// Combine a one-token attention's pieces in its attend dispatch where the platform allows
    /// ([`AttentionOp::combines_in_attend`]).
    combine_in_attend: bool,
    /// Pieces every attention's context is cut into (`None`: the op chooses).
    attention_splits: Option<u32>,
    /// GPU time per op (benchmarks); passes are not run ahead while it is on.
    profiler: Option<Profiler>,
    tapes: HashMap<TapeKey, Tape>,
    /// Counts tapes used; each tape notes when it was last used.
    tape_clock: u64,
    /// The id of the next plan.
    plan_ids: AtomicU64,
    /// Submit passes of several tokens in parts as they are encoded.
    submit_in_parts: bool,
    bytes: u64,
    /// The attention tier a runtime hint asked for ([`hints`]).
    attention_tier: Option<crate::formats::rdrr::AttentionTier>,
    /// What became of the runtime hints ([`GpuBackend::hint_notes`]).
    hint_notes: Vec<crate::backend::hints::HintNote>,
    /// The ops whose kernels hints changed, for the plan's lines.
    hint_marks: hints::HintMarks,
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
            caches: Vec::new(),
            kv: None,
            kv_dtype: None,
            rope: Vec::new(),
            position,
            ids,
            top: None,
            chain_ready: false,
            timings: PassTimings::default(),
            records: HashMap::new(),
            q8_records: HashMap::new(),
            norm_records: HashMap::new(),
            spare: None,
            rules: Rules::all(int_dot),
            arithmetic: crate::backend::Arithmetic::Fast,
            combine_in_attend: true,
            attention_splits: None,
            profiler: None,
            tapes: HashMap::new(),
            tape_clock: 0,
            plan_ids: AtomicU64::new(0),
            submit_in_parts: true,
            bytes: max_batch as u64 * 4,
            attention_tier: None,
            hint_notes: Vec::new(),
            hint_marks: Default::default(),
        })
    }

    /// Submit a pass of several tokens in parts while it is encoded, so the device starts
    /// before the host has encoded the whole pass (the default), or whole, as one command
    /// buffer (for comparisons: the same dispatches in the same order either way).
    pub fn set_submit_in_parts(&mut self, on: bool) {
        self.submit_in_parts = on;
    }

    /// Choose the KV cache's element type (before the model is loaded; `None`: the model's
    /// default, [`crate::backend::KvType::default_for`]). f32 keeps keys and values exactly as
    /// computed, for comparisons with f32 references; f16 halves the memory.
    pub fn set_kv_dtype(&mut self, dtype: Option<KvDtype>) {
        self.kv_dtype = dtype;
    }

    /// The fusion rules plans are made with.
    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// Plan with `rules` from now on (for comparisons: plans made before keep their ops, so
    /// a model's plans are cleared with [`crate::model::Model::clear_plans`]).
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = rules;
    }

    /// Whether one-token products take the integer-dot kernels where they exist (the default
    /// follows [`GpuContext::int_dot_decode`]).
    pub fn int_dot(&self) -> bool {
        self.rules.int_dot
    }

    /// [`Rules::int_dot`].
    pub fn set_int_dot(&mut self, on: bool) {
        self.rules.int_dot = on;
    }

    /// [`Rules::pair_q8`].
    pub fn set_pair_q8(&mut self, on: bool) {
        self.rules.pair_q8 = on;
    }

    /// [`Rules::add_norm`].
    pub fn set_fuse_add_norm(&mut self, on: bool) {
        self.rules.add_norm = on;
    }

    /// [`Rules::norm_q8`] and [`Rules::silu_q8`]: the integer-dot products' input
    /// quantization in the op that makes the input.
    pub fn set_fuse_norm_q8(&mut self, on: bool) {
        self.rules.norm_q8 = on;
        self.rules.silu_q8 = on;
    }

    /// [`Rules::residual`].
    pub fn set_fuse_residual(&mut self, on: bool) {
        self.rules.residual = on;
    }

    /// [`Rules::norm_bitlinear`].
    pub fn set_fuse_bitlinear(&mut self, on: bool) {
        self.rules.norm_bitlinear = on;
    }

    /// [`Rules::fold_rope`].
    pub fn set_fold_rope(&mut self, on: bool) {
        self.rules.fold_rope = on;
    }

    /// [`Rules::attention_q8`].
    pub fn set_fuse_attention_q8(&mut self, on: bool) {
        self.rules.attention_q8 = on;
    }

    /// Combine a one-token attention's pieces in its attend dispatch where the platform allows
    /// (the default), or in a dispatch of their own (for comparisons; plans and tapes made
    /// before are dropped).
    pub fn set_combine_in_attend(&mut self, on: bool) {
        self.combine_in_attend = on;
        self.tapes.clear();
    }

    /// Cut every attention's context into `n` pieces (`None`: the op chooses), for tests that
    /// take the split path on CPU adapters, which otherwise attend in one piece.
    pub fn set_attention_splits(&mut self, n: Option<u32>) {
        self.attention_splits = n;
        self.tapes.clear();
    }

    fn next_plan_id(&self) -> u64 {
        self.plan_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// The KV cache of sequence `seq`.
    fn cache(&self, seq: usize) -> Result<&KvCache, GpuError> {
        self.caches.get(seq).ok_or_else(|| {
            GpuError::Validation(format!(
                "attention of sequence {seq}, before the KV cache was created or past its {} sequences",
                self.caches.len()
            ))
        })
    }

    /// The cache's values per head (0 before it exists).
    fn head_dim(&self) -> usize {
        self.kv.map_or(0, |k| k.head_dim)
    }

    fn kv_heads(&self) -> Option<usize> {
        self.kv.map(|k| k.n_kv_heads)
    }

    fn has_rope(&self) -> bool {
        !self.rope.is_empty()
    }

    /// Whether a one-token attention over `n_heads` query heads can take q, k and v as
    /// products of a norm record and apply the norm's factor ([`AttentionOp::takes_norm`]).
    fn attention_takes_norm(&self, n_heads: usize) -> bool {
        self.caches.first().is_some_and(|cache| {
            AttentionOp::takes_norm(
                &self.ctx,
                cache,
                n_heads as u32,
                self.attention_splits_for(cache, 1, n_heads),
                self.combine_in_attend,
            )
        })
    }

    /// Whether a one-token attention over `n_heads` query heads can write the q8 records of
    /// its output (its combine does, [`AttentionOp::quantizes`]).
    fn attention_quantizes(&self, n_heads: usize) -> bool {
        self.caches.first().is_some_and(|cache| {
            let splits = AttentionOp::pieces(
                &self.ctx,
                cache,
                1,
                n_heads as u32,
                self.attention_splits_for(cache, 1, n_heads),
            );
            AttentionOp::quantizes(splits, cache.head_dim)
        })
    }

    /// The top-k output buffer with room for `pairs` `(id, value)` pairs (a larger one drops
    /// every tape: their top-k steps bind the old one).
    fn top_buffer(&mut self, pairs: usize) -> Result<wgpu::Buffer, GpuError> {
        if self.top.as_ref().is_none_or(|(_, n)| *n < pairs) {
            let b = self.ctx.storage("top_k", pairs as u64 * 8)?;
            self.top = Some((b, pairs));
            self.tapes.clear();
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
            .ok_or(BackendError::UnknownHandle {
                what: "activation buffer",
                id: t.0,
            })?;
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
        self.caches.clear();
        self.tapes.clear();
        self.ctx.release();
    }
}

impl Backend for GpuBackend {
    type Plan = GpuPlan;
    type Recorded = GpuRecorded;
    type Pending = GpuPending;

    fn describe(&self) -> String {
        format!(
            "gpu: {} ({})",
            self.ctx.adapter.name, self.ctx.adapter.backend
        )
    }

    fn limits(&self) -> Limits {
        Limits {
            max_batch: self.max_batch,
            max_tensor_len: usize::try_from(self.ctx.max_binding_bytes() / 4).unwrap_or(usize::MAX),
            runs_ahead: self.profiler.is_none(),
            arithmetic: self.arithmetic,
        }
    }

    fn set_arithmetic(&mut self, arithmetic: crate::backend::Arithmetic) {
        use crate::backend::Arithmetic;
        self.arithmetic = arithmetic;
        self.rules.int_dot = arithmetic == Arithmetic::Fast && self.ctx.int_dot_decode();
        if arithmetic == Arithmetic::Exact {
            // The tensor-core products and attention take f16 operands: the f32 kernels
            // instead. Weights are not loaded yet, so nothing was prepared for them.
            self.ctx.features.cooperative_matrix = false;
        }
    }

    fn apply_hints(
        &mut self,
        hints: &crate::backend::hints::RuntimeOptimizations,
        notes: &mut Vec<crate::backend::hints::HintNote>,
    ) {
        self.take_hints(hints, notes)
    }

    fn kv_request(&self) -> Option<crate::backend::KvType> {
        self.kv_dtype.map(|d| match d {
            KvDtype::F16 => crate::backend::KvType::F16,
            KvDtype::F32 => crate::backend::KvType::F32,
        })
    }

    fn activations(&self, w: Weight, rows: usize) -> crate::pass::Activations {
        use crate::pass::Activations;
        let Some(gw) = self.weights.get(w.0 as usize) else {
            return Activations::F32;
        };
        if self.arithmetic == crate::backend::Arithmetic::Exact {
            Activations::F32
        } else if rows == 1
            && self.rules.int_dot
            && crate::gpu::q8::has_q8_matvec(gw.dtype, gw.cols)
        {
            Activations::Q8
        } else if u32::try_from(rows)
            .is_ok_and(|n| crate::gpu::matmul::MatmulOp::takes_coop(&self.ctx, gw, n))
        {
            Activations::F16
        } else {
            Activations::F32
        }
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        let (rows, cols) = (u32::try_from(w.rows), u32::try_from(w.cols));
        let (Ok(rows), Ok(cols)) = (rows, cols) else {
            return Err(BackendError::UnsupportedWeight {
                name: w.name.to_string(),
                why: "too many rows or columns".into(),
            }
            .into());
        };
        if crate::quant::kernels(w.dtype).is_none() {
            return Err(BackendError::UnsupportedWeight {
                name: w.name.to_string(),
                why: format!(
                    "{} weights have no GPU kernels yet (the CPU backend runs them: --backend cpu)",
                    w.dtype
                ),
            }
            .into());
        }
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

    fn write_vector(&mut self, t: Tensor, values: &[f32]) -> Result<(), Error> {
        let b = self
            .buffers
            .get(t.0 as usize)
            .filter(|b| b.size() >= values.len() as u64 * 4)
            .ok_or(Error::Internal("a vector written past its end"))?;
        // Staged by the queue: it lands before the next submission's work.
        self.ctx
            .queue
            .write_buffer(b, 0, bytemuck::cast_slice(values));
        Ok(())
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        let b = self.ctx.storage(name, len as u64 * 4)?;
        self.bytes += b.size();
        self.buffers.push(b);
        Ok(Tensor(self.buffers.len() as u32 - 1))
    }

    fn init_cache(&mut self, kv: KvShape, rope: &[RopeConfig]) -> Result<(), Error> {
        // f16 is stored with pack2x16float, which needs no device feature.
        let dtype = match kv.dtype {
            crate::backend::KvType::F16 => KvDtype::F16,
            crate::backend::KvType::F32 => KvDtype::F32,
        };
        let mut caches = Vec::with_capacity(kv.n_seqs);
        for _ in 0..kv.n_seqs {
            caches.push(KvCache::new(
                &self.ctx,
                kv.n_layers,
                kv.max_ctx as u32,
                kv.n_kv_heads as u32,
                kv.head_dim as u32,
                dtype,
            )?);
        }
        self.bytes += 2
            * (kv.n_seqs * kv.n_layers * kv.max_ctx * kv.n_kv_heads * kv.head_dim) as u64
            * dtype.bytes();
        self.caches = caches;
        self.kv = Some(kv);
        self.rope = rope
            .iter()
            .map(|r| RopeTable::new(&self.ctx, r))
            .collect::<Result<_, _>>()?;
        self.tapes.clear();
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        // The prefill products' shared f16 operands included (made on first use).
        self.bytes + crate::gpu::context::CoopScratch::bytes(&self.ctx)
    }

    fn plan(&self, pass: &Pass) -> Result<GpuPlan, Error> {
        self.make_plan(pass)
    }

    fn plan_lines(&self, plan: &GpuPlan, names: &Names) -> Vec<String> {
        self.describe_plan(plan, names)
    }

    fn record(&mut self, plan: &GpuPlan, batch: &Batch) -> Result<GpuRecorded, Error> {
        self.record_pass(plan, batch)
    }

    fn submit(&mut self, pass: GpuRecorded, tokens: Tokens<'_>) -> Result<GpuPending, Error> {
        self.submit_pass(pass, tokens)
    }

    async fn wait(&mut self, pending: GpuPending) -> Result<Logits, Error> {
        self.read_pass(pending).await
    }
}
