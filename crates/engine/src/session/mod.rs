//! One way to open a model: [`open`] resolves a model reference (a GGUF file, an RDRR or
//! Trellis folder, the name of a model in the store, or an `http(s)` URL of a GGUF file or an
//! RDRR folder, downloaded into the store first), detects its format once
//! ([`OpenedModel`]), picks the backend, loads the weights tensor by tensor and returns a
//! [`Session`]: the engine, the tokenizer and the chat template. The browser, which reads
//! models from OPFS and `Blob`s, hands its opened model to [`load_async`]; everything below
//! that is shared.

mod adapter;
mod any;
mod opened;

pub use any::{AnyBackend, Either};
pub use opened::{Format, ModelMeta, OpenedModel};

pub use crate::backend::hints::{HintNote, HintOutcome, RuntimeOptimizations};
use crate::backend::Backend;
pub use crate::backend::{Arithmetic, VramBudget};
use crate::engine::Engine;
use crate::model::{AsyncTensorSource, Model, ModelConfig, TensorSource};
use crate::text::{ChatTemplate, Tokenizer};
use crate::Error;

/// The context a session gets when the caller asks for none: the model's trained context,
/// at most this.
pub const DEFAULT_CONTEXT: usize = 4096;

/// Which backend runs the model.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA where a CUDA device opens (in a build with it), else the wgpu GPU when the
    /// machine has a real one; the CPU when the only adapter is a software rasterizer
    /// (lavapipe, SwiftShader), which is slower than the CPU backend.
    #[default]
    Auto,
    Cpu,
    /// wgpu: Vulkan, Metal or DX12 natively, WebGPU in the browser.
    Gpu,
    /// CUDA on an NVIDIA GPU (native builds with the `gds` feature).
    Cuda,
}

/// The KV cache element type, the same on every backend.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum KvCacheType {
    /// The model's default ([`crate::backend::KvType::default_for`]).
    #[default]
    Auto,
    F16,
    F32,
}

/// How a model is opened.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub backend: BackendChoice,
    /// KV cache positions per sequence; `None`: the model's trained context, at most
    /// [`DEFAULT_CONTEXT`]; never more than the trained context.
    pub context: Option<usize>,
    /// Most tokens per forward pass (the prefill's batch).
    pub batch: usize,
    pub kv_cache: KvCacheType,
    /// What each product's operands and the KV cache are ([`Arithmetic`]).
    pub arithmetic: Arithmetic,
    /// Sequences the KV cache holds.
    pub sequences: usize,
    /// The model store (store names, downloads); `None`: `$TRITIUM_STORE` or the user's cache
    /// folder.
    pub store: Option<std::path::PathBuf>,
    /// Fail before loading any weight when the model's tokenizer does not load (otherwise
    /// the session has none and runs from token ids).
    pub require_tokenizer: bool,
    /// CUDA only: keep the model within this many bytes of GPU memory, reading the
    /// transformer blocks that do not fit from storage when they are used.
    pub vram_budget: Option<VramBudget>,
    /// Runtime hints for kernel selection (`runtimeOptimizations`) given by the caller: they
    /// replace the model's own (an RDRR manifest's), field by field where the caller sets one.
    pub hints: Option<RuntimeOptimizations>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            backend: BackendChoice::Auto,
            context: None,
            batch: 128,
            kv_cache: KvCacheType::Auto,
            arithmetic: Arithmetic::Fast,
            sequences: 1,
            store: None,
            require_tokenizer: false,
            vram_budget: None,
            hints: None,
        }
    }
}

impl OpenOptions {
    /// The context for a model trained on `trained` positions.
    pub fn context_for(&self, config: &ModelConfig) -> usize {
        let trained = config.context_length.max(1);
        self.context
            .unwrap_or(trained.min(DEFAULT_CONTEXT))
            .clamp(1, trained)
    }
}

/// A model loaded and ready to generate.
pub struct Session<B: Backend = AnyBackend> {
    pub engine: Engine<B>,
    /// `None` for a model without tokenizer metadata (it runs from token ids).
    pub tokenizer: Option<Tokenizer>,
    pub template: ChatTemplate,
    /// Why the model's own chat template was not used (ChatML stands in), if it was not.
    pub template_error: Option<String>,
    /// What became of each runtime hint (the model's and the caller's,
    /// [`OpenOptions::hints`]): applied, already so, or ignored and why.
    pub hints: Vec<HintNote>,
}

impl<B: Backend> Session<B> {
    pub fn config(&self) -> &ModelConfig {
        &self.engine.model.config
    }
}

/// Load an opened model onto `backend`: the configuration, the tokenizer and the chat
/// template, then the weights tensor by tensor.
pub fn load<B: Backend, S: ModelMeta + TensorSource>(
    model: &S,
    backend: B,
    options: &OpenOptions,
) -> Result<Session<B>, Error> {
    crate::model::weights::run_ready(load_async(&Ready(model), backend, options))
}

/// [`load`] from a model whose tensors are read asynchronously (the browser's main thread
/// reads OPFS files and `Blob`s only through promises).
pub async fn load_async<B: Backend, S: ModelMeta + AsyncTensorSource>(
    model: &S,
    mut backend: B,
    options: &OpenOptions,
) -> Result<Session<B>, Error> {
    if options.arithmetic == Arithmetic::Exact && options.kv_cache == KvCacheType::F16 {
        return Err(Error::Options(
            "exact arithmetic keeps the KV cache f32; an f16 cache rounds keys and values",
        ));
    }
    let hints = merged_hints(model.runtime_hints(), options.hints.as_ref());
    let mut notes = Vec::new();
    let arithmetic = match &hints {
        Some(h) => hinted_arithmetic(h, options, &mut notes),
        None => options.arithmetic,
    };
    backend.set_arithmetic(arithmetic);
    if let Some(h) = &hints {
        backend.apply_hints(h, &mut notes);
    }
    let config = ModelConfig::from_gguf(model.header()?)?;
    // A model without tokenizer metadata still runs from token ids.
    let tokenizer = match model.tokenizer() {
        Ok(t) => Some(t),
        Err(e) if options.require_tokenizer => return Err(e),
        Err(_) => None,
    };
    let (template, template_error) = match model.chat_template(tokenizer.as_ref()) {
        Ok(t) => (t, None),
        Err(e) => (ChatTemplate::chatml(), Some(e.to_string())),
    };
    let context = options.context_for(&config);
    let model = Model::load_sequences(backend, config, model, context, options.sequences).await?;
    Ok(Session {
        engine: Engine::new(model),
        tokenizer,
        template,
        template_error,
        hints: notes,
    })
}

/// The model's hints with the caller's over them, field by field: a kernel, feature list,
/// override, flag or tier the caller sets replaces the model's.
fn merged_hints(
    model: Option<&RuntimeOptimizations>,
    caller: Option<&RuntimeOptimizations>,
) -> Option<RuntimeOptimizations> {
    let (mut h, c) = match (model, caller) {
        (None, None) => return None,
        (Some(m), None) => return Some(m.clone()),
        (None, Some(c)) => return Some(c.clone()),
        (Some(m), Some(c)) => (m.clone(), c),
    };
    let (k, ck) = (&mut h.preferred_kernels, &c.preferred_kernels);
    k.matmul = ck.matmul.or(k.matmul);
    k.attention = ck.attention.or(k.attention);
    k.rmsnorm = ck.rmsnorm.or(k.rmsnorm);
    k.dequant = ck.dequant.or(k.dequant);
    k.softmax = ck.softmax.or(k.softmax);
    h.workgroup_overrides
        .extend(c.workgroup_overrides.iter().map(|(k, v)| (k.clone(), *v)));
    if !c.disable_features.is_empty() {
        h.disable_features = c.disable_features.clone();
    }
    h.force_f32_accumulation = c.force_f32_accumulation.or(h.force_f32_accumulation);
    h.attention_tier = c.attention_tier.or(h.attention_tier);
    h.target_device = c.target_device.clone().or(h.target_device);
    Some(h)
}

/// The arithmetic a session runs with under `hints`: `forceF32Accumulation` asks for f32 sums,
/// and every kernel of ours sums in f32 already; what it can change is the operands that are
/// rounded before they are summed (int8 activations, f16 operands, an f16 KV cache), which
/// [`Arithmetic::Exact`] keeps f32. A caller's f16 KV cache wins over it (the hint is then
/// ignored, with the reason). `targetDevice` is noted: there are no per-device tables for it.
fn hinted_arithmetic(
    hints: &RuntimeOptimizations,
    options: &OpenOptions,
    notes: &mut Vec<HintNote>,
) -> Arithmetic {
    let mut arithmetic = options.arithmetic;
    if let Some(force) = hints.force_f32_accumulation {
        let hint = format!("forceF32Accumulation = {force}");
        notes.push(match (force, options.arithmetic) {
            (false, _) => HintNote::default(
                hint,
                "every kernel sums in f32; the arithmetic stays as the caller chose",
            ),
            (true, Arithmetic::Exact) => HintNote::default(
                hint,
                "exact arithmetic was asked for already: f32 operands and sums throughout",
            ),
            (true, Arithmetic::Fast) if options.kv_cache == KvCacheType::F16 => HintNote::ignored(
                hint,
                "the caller asked for an f16 KV cache, which exact (f32) arithmetic excludes",
            ),
            (true, Arithmetic::Fast) => {
                arithmetic = Arithmetic::Exact;
                HintNote::applied(
                    hint,
                    "exact arithmetic: every product on f32 activations and f32 operands (no int8 \
                     activations, no f16 tensor-core operands) and an f32 KV cache; every sum \
                     was f32 already",
                )
            }
        });
    }
    if let Some(device) = &hints.target_device {
        notes.push(HintNote::ignored(
            format!("targetDevice = {device}"),
            "no per-device tuning tables: kernels are chosen from the device's own capabilities",
        ));
    }
    arithmetic
}

/// A model with its tokenizer already parsed by the caller (who needed it before the weights:
/// to encode a prompt, or to measure what opening the model cost), handed to the load instead
/// of parsed twice.
pub struct WithTokenizer<'a, S> {
    model: &'a S,
    tokenizer: std::cell::Cell<Option<Tokenizer>>,
}

impl<'a, S> WithTokenizer<'a, S> {
    pub fn new(model: &'a S, tokenizer: Tokenizer) -> Self {
        WithTokenizer {
            model,
            tokenizer: std::cell::Cell::new(Some(tokenizer)),
        }
    }
}

impl<S: ModelMeta> ModelMeta for WithTokenizer<'_, S> {
    fn header(&self) -> Result<&crate::formats::gguf::GgufFile, Error> {
        self.model.header()
    }

    /// The caller's tokenizer (once; the model's own after that).
    fn tokenizer(&self) -> Result<Tokenizer, Error> {
        match self.tokenizer.take() {
            Some(t) => Ok(t),
            None => self.model.tokenizer(),
        }
    }

    fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, Error> {
        self.model.chat_template(tokenizer)
    }

    fn runtime_hints(&self) -> Option<&RuntimeOptimizations> {
        self.model.runtime_hints()
    }
}

impl<S: TensorSource> TensorSource for WithTokenizer<'_, S> {
    fn meta(&self, name: &str) -> Option<(crate::quant::GgmlType, Vec<u64>)> {
        self.model.meta(name)
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        self.model.read(name)
    }

    fn location(&self, name: &str) -> Option<Vec<crate::model::FileSpan>> {
        self.model.location(name)
    }
}

/// A model whose reads are always ready, seen as an asynchronous one.
struct Ready<'a, S>(&'a S);

impl<S: ModelMeta> ModelMeta for Ready<'_, S> {
    fn header(&self) -> Result<&crate::formats::gguf::GgufFile, Error> {
        self.0.header()
    }

    fn tokenizer(&self) -> Result<Tokenizer, Error> {
        self.0.tokenizer()
    }

    fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, Error> {
        self.0.chat_template(tokenizer)
    }

    fn runtime_hints(&self) -> Option<&RuntimeOptimizations> {
        self.0.runtime_hints()
    }
}

impl<S: TensorSource> AsyncTensorSource for Ready<'_, S> {
    fn meta(&self, name: &str) -> Option<(crate::quant::GgmlType, Vec<u64>)> {
        self.0.meta(name)
    }

    async fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        self.0.read(name)
    }

    fn location(&self, name: &str) -> Option<Vec<crate::model::FileSpan>> {
        self.0.location(name)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native;
#[cfg(not(target_arch = "wasm32"))]
pub use native::{backend, open, open_path, resolve};
