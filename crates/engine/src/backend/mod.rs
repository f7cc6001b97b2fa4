//! Backends: where a planned pass runs. The CPU ([`cpu::CpuBackend`], the reference: it runs a
//! pass's ops exactly as the model wrote them) and wgpu ([`gpu::GpuBackend`], WebGPU in the
//! browser, Vulkan/Metal natively: it fuses neighbouring ops by named rules, records each plan
//! once and replays it).
//!
//! The interface is narrow: buffers and weights ([`Backend::alloc`], [`Backend::load_vector`],
//! [`Backend::load_weight`], [`Backend::init_cache`]), a plan made once per pass shape
//! ([`Backend::plan`]), and one way to run it: [`Backend::record`] a batch, [`Backend::submit`]
//! it with its tokens, [`Backend::wait`] for what it read back. A pass may be recorded (and
//! submitted, with [`Tokens::Chained`]) while the one before it still runs, which is how
//! decoding keeps a GPU busy.

pub mod check;
pub mod cpu;
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
pub mod cuda;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod hints;
#[cfg(feature = "gpu")]
pub mod profile;

use crate::error::BatchError;
pub use crate::pass::{
    AttentionScores, AttentionShape, Batch, Elementwise, Logits, Names, Op, Pass, Readback,
    RopeConfig, Span, Tensor, Tokens, Weight,
};
use crate::quant::GgmlType;

/// A `[rows, cols]` weight as the file stores it.
#[derive(Clone, Copy, Debug)]
pub struct WeightData<'a> {
    pub name: &'a str,
    pub dtype: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// The tensor's bytes (for I2_S including the trailing scale).
    pub bytes: &'a [u8],
    /// A separate per-tensor scale the weight is multiplied by (upstream llama.cpp's
    /// `blk.N.<name>.scale` for TQ1_0/TQ2_0 BitNet files); I2_S carries its own.
    pub scale: Option<f32>,
    /// The transformer block the weight belongs to (`blk.N.`), for backends that keep only
    /// some blocks resident.
    pub layer: Option<usize>,
    /// Where `bytes` lie unchanged in local files ([`crate::model::TensorSource::location`]),
    /// for backends that read weights again from storage.
    pub location: Option<&'a [crate::model::FileSpan]>,
}

/// The KV cache: `n_seqs` sequences of `max_ctx` positions, each layer's keys and values
/// `(max_ctx, n_kv_heads, head_dim)` per sequence, stored as `dtype`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub max_ctx: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_seqs: usize,
    pub dtype: KvType,
}

impl KvShape {
    /// Bytes of keys and values at f32.
    pub fn f32_bytes(&self) -> u64 {
        2 * 4
            * (self.n_seqs * self.n_layers * self.max_ctx * self.n_kv_heads * self.head_dim) as u64
    }
}

/// How the KV cache stores keys and values: part of the attention's arithmetic, the same on
/// every backend (the CPU rounds to f16 and back where the GPU stores f16).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvType {
    /// Each value rounded to the nearest f16 (ties to even) when it is stored. A GPU may also
    /// compute a prefill's attention over this cache on tensor cores with f16 operands (the
    /// pre-scaled q and each softmax weight rounded to f16, f32 sums: wgpu's cooperative-matrix
    /// attention, CUDA's flash attention); the CPU reference keeps them in f32, and the
    /// self-tests bound that difference (`crates/gpu/src/selftest/attention.rs`,
    /// `backend/check.rs`). An f32 cache (`--exact`) never takes f16 operands.
    F16,
    /// Values kept as computed.
    F32,
}

impl KvType {
    /// Caches whose f32 form is at most this take f32 by default.
    pub const SMALL_CACHE_BYTES: u64 = 256 << 20;

    /// The default for a cache of `shape` (its `dtype` ignored): f32 where the f32 cache is
    /// small ([`KvType::SMALL_CACHE_BYTES`]: models of a few hundred million parameters at the
    /// default context, any model at a short one), so that they keep the f32 reference's
    /// precision at little cost; f16 where halving the cache matters. f16 rounding moves
    /// each attention score by about 5e-4 of its size, which a small model with sharp logits
    /// can carry into logit errors beyond its f32 reference's bound.
    pub fn default_for(shape: &KvShape) -> KvType {
        if shape.f32_bytes() <= Self::SMALL_CACHE_BYTES {
            KvType::F32
        } else {
            KvType::F16
        }
    }
}

/// The arithmetic a session asks of its backend: what each product's operands are and how the
/// KV cache stores keys and values. The pass states it op by op
/// ([`crate::pass::Activations`], [`KvShape::dtype`]), and every backend computes what the
/// pass states, so the choice is the same on the CPU and on any GPU.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
/// GPU memory for the CUDA backend's weights and KV cache; the transformer blocks that do not
/// fit beside the rest are read from storage when used.
pub enum VramBudget {
    Bytes(u64),
    /// The device's free memory once the embeddings, output and KV cache are allocated, less
    /// [`VramBudget::AUTO_RESERVE`] for the activations, scratch and cuBLAS's workspace.
    Auto,
}

impl VramBudget {
    pub const AUTO_RESERVE: u64 = 1 << 30;

    /// `auto`, or a size (bytes, or a number with KB, MB, GB or TB).
    pub fn parse(text: &str) -> Option<VramBudget> {
        match text.trim() {
            "auto" => Some(VramBudget::Auto),
            t => tritium_core::formats::trellis::parse_shard_size(t).map(VramBudget::Bytes),
        }
    }
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Arithmetic {
    /// The backend's fastest arithmetic: one-token products take int8 activations where the
    /// backend has integer dot products ([`crate::pass::Activations::Q8`]), products of
    /// several tokens may round their operands to f16 for a GPU's tensor cores, and the KV
    /// cache is f16 where it is large ([`KvType::default_for`]). Int8 and f16 rounding are
    /// steps: where two backends' f32 results differ by an ulp, a value next to a step takes
    /// the neighbouring code, so long generations can split between backends.
    #[default]
    Fast,
    /// f32 everywhere: every product on f32 activations and f32 operands, the KV cache f32.
    /// Backends then differ only by the order of f32 additions and by their `exp` and square
    /// roots (ulps, no steps to amplify them), and give the same tokens wherever two
    /// candidates are not within that rounding of each other (`tests/same_tokens.rs`).
    /// Costs speed on GPUs (BENCHMARKS.md).
    Exact,
}

/// What a backend can take.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most tokens one pass takes (activation buffers are sized for it).
    pub max_batch: usize,
    /// Most f32 values one tensor may hold (a GPU's largest storage binding).
    pub max_tensor_len: usize,
    /// A submitted pass runs while the host records the next one (a GPU), so submitting
    /// passes ahead ([`Tokens::Chained`], recording before waiting) saves time.
    pub runs_ahead: bool,
    /// The arithmetic set with [`Backend::set_arithmetic`].
    pub arithmetic: Arithmetic,
}

/// What every backend checks before it runs a batch: `1 ..= max_batch` tokens, spans inside
/// the cache's sequences and positions.
pub fn check_batch(
    batch: &Batch,
    max_batch: usize,
    kv: Option<&KvShape>,
) -> Result<(), crate::Error> {
    let n = batch.tokens();
    if n == 0 || n > max_batch || batch.spans.iter().any(|s| s.len == 0) {
        return Err(BatchError::BadBatch {
            tokens: n,
            spans: batch.spans.len(),
            max_batch,
        }
        .into());
    }
    if let Some(kv) = kv {
        for s in &batch.spans {
            if s.seq >= kv.n_seqs {
                return Err(BatchError::BadSequence {
                    seq: s.seq,
                    n_seqs: kv.n_seqs,
                }
                .into());
            }
            if s.pos0 + s.len > kv.max_ctx {
                return Err(BatchError::PastContext {
                    tokens: s.len,
                    pos0: s.pos0,
                    context: kv.max_ctx,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// A place to run passes. Errors are [`crate::Error`] (an op that cannot be built, a shape
/// the backend does not support); a backend never panics on model data.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// A pass's ops as this backend runs them ([`Backend::plan`]).
    type Plan;
    /// A pass recorded for a batch, not submitted yet.
    type Recorded;
    /// A submitted pass whose readback has not been collected yet.
    type Pending;

    /// A short description (`cpu`, `gpu: NVIDIA H200 (Vulkan)`).
    fn describe(&self) -> String;

    fn limits(&self) -> Limits;

    /// The KV cache type asked for before the model loads (`None`: [`KvType::default_for`]).
    fn kv_request(&self) -> Option<KvType> {
        None
    }

    /// Choose the arithmetic (before the model loads): [`Arithmetic::Exact`] turns off the
    /// int8 activations, f16 operands and f16 KV cache that [`Arithmetic::Fast`] allows.
    fn set_arithmetic(&mut self, arithmetic: Arithmetic);

    /// Take a model's runtime hints (before the model loads, after
    /// [`Backend::set_arithmetic`]): each kernel hint this backend can follow narrows its
    /// choice of kernels, every other is ignored; either way a [`hints::HintNote`] for each is
    /// pushed onto `notes`. A backend with one kernel per op ignores them all (the default).
    fn apply_hints(
        &mut self,
        hints: &hints::RuntimeOptimizations,
        notes: &mut Vec<hints::HintNote>,
    ) {
        hints::ignored_by(hints, &self.describe(), notes)
    }

    /// Turn the backend's own fusions of consecutive ops on (the default) or off, for a
    /// self-test that compares the two; backends that fuse nothing ignore it.
    fn set_fusions(&mut self, _on: bool) {}

    /// Upload a weight in its file format.
    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, crate::Error>;

    /// Whether a block's weight of `dtype` that lies unchanged in local files
    /// ([`WeightData::location`]) is read by the backend itself from there (the CUDA
    /// backend under a GPU memory budget): the loader then reads none of its bytes and
    /// passes `bytes` empty, so that loading reads the file once.
    fn reads_located(&self, _dtype: GgmlType) -> bool {
        false
    }

    /// The operands a product of `rows` tokens through `w` takes
    /// ([`crate::pass::Activations`]): always F32 under [`Arithmetic::Exact`]; under
    /// [`Arithmetic::Fast`] what this backend runs fastest (int8 activations for one token
    /// where its integer dot products pay, f16 operands where a GPU has tensor cores).
    fn activations(&self, w: Weight, rows: usize) -> crate::pass::Activations;

    /// An f32 vector (norm weights) uploaded once.
    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, crate::Error>;

    /// A zeroed activation buffer of `len` f32.
    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, crate::Error>;

    /// Overwrite the first `values.len()` values of `t` (a vector or buffer this backend gave
    /// out): after every pass already submitted, before every pass submitted later.
    fn write_vector(&mut self, t: Tensor, values: &[f32]) -> Result<(), crate::Error>;

    /// Create the KV cache and the RoPE tables (once per model, before the first pass):
    /// [`Op::Rope`]'s `table` indexes `rope`.
    fn init_cache(&mut self, kv: KvShape, rope: &[RopeConfig]) -> Result<(), crate::Error>;

    /// Bytes this backend holds for weights, activations and cache.
    fn bytes_used(&self) -> u64;

    /// Turn a pass's ops into what this backend runs (checked: an op the backend cannot run
    /// is an error here, not when the pass runs). Made once per pass shape.
    fn plan(&self, pass: &Pass) -> Result<Self::Plan, crate::Error>;

    /// A plan written out for people, one line per step (`tritium run --plan`).
    fn plan_lines(&self, plan: &Self::Plan, names: &Names) -> Vec<String>;

    /// Record a planned pass over `batch` (its rows as the plan was made for). The GPU
    /// encodes a one-token pass now, so that it can be submitted the moment its token is
    /// known.
    fn record(&mut self, plan: &Self::Plan, batch: &Batch) -> Result<Self::Recorded, crate::Error>;

    /// Submit a recorded pass with its tokens; passes are submitted in the order they were
    /// recorded, and a recorded pass that is dropped instead never runs.
    fn submit(
        &mut self,
        pass: Self::Recorded,
        tokens: Tokens<'_>,
    ) -> Result<Self::Pending, crate::Error>;

    /// Wait for a submitted pass and return what it read back. Passes are waited for in
    /// submission order.
    async fn wait(&mut self, pending: Self::Pending) -> Result<Logits, crate::Error>;
}

#[cfg(test)]
mod vram_budget_tests {
    use super::VramBudget;

    #[test]
    fn parses_auto_and_sizes() {
        assert_eq!(VramBudget::parse("auto"), Some(VramBudget::Auto));
        assert_eq!(VramBudget::parse("6GB"), Some(VramBudget::Bytes(6 << 30)));
        assert_eq!(
            VramBudget::parse("512MB"),
            Some(VramBudget::Bytes(512 << 20))
        );
        assert_eq!(VramBudget::parse("4096"), Some(VramBudget::Bytes(4096)));
        assert_eq!(VramBudget::parse("lots"), None);
        assert_eq!(VramBudget::parse(""), None);
    }
}
