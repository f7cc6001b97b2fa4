//! The library's error: each layer's error joined with `#[from]`. Below the command line there
//! are no free-text usage errors: a model that cannot be opened or loaded is a [`ModelError`],
//! a request the loaded model cannot take is a [`BatchError`], and an op a backend cannot run
//! is a [`BackendError`]; the command line adds its own (`tritium::cli::Error`).

use crate::formats::gguf::GgufError;
use crate::formats::hf::HfError;
use crate::formats::rdrr::RdrrError;
use crate::formats::safetensors::SafetensorsError;
use crate::formats::source::SourceError;
use crate::formats::trellis::TrellisError;
use crate::quant::QuantError;
use crate::sampling::SamplingError;
use crate::storage::download::DownloadError;
use crate::storage::StoreError;
use crate::text::TextError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Rdrr(#[from] RdrrError),
    #[error(transparent)]
    Hf(#[from] HfError),
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    #[error(transparent)]
    Trellis(#[from] TrellisError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Text(#[from] TextError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Boxed: download errors carry URLs and hashes, and `Error` stays small.
    #[error(transparent)]
    Download(#[from] Box<DownloadError>),
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    #[error(transparent)]
    Cuda(#[from] tritium_native_gds::GdsError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A broken invariant of this code (a bug), never the input's fault.
    #[error("internal: {0}")]
    Internal(&'static str),
    /// Options that contradict each other.
    #[error("options: {0}")]
    Options(&'static str),
    /// What this build was compiled without (a Cargo feature).
    #[error("this build has no {0} support (feature `{0}`)")]
    NotCompiled(&'static str),
    /// Any of the above, with the file or folder it came from.
    #[error("{path}: {source}")]
    At {
        path: String,
        #[source]
        source: Box<Error>,
    },
}

impl From<DownloadError> for Error {
    fn from(e: DownloadError) -> Error {
        Error::Download(Box::new(e))
    }
}

impl Error {
    /// Attach the path of the file or folder the error came from.
    pub fn at(self, path: &std::path::Path) -> Error {
        Error::At {
            path: path.display().to_string(),
            source: Box::new(self),
        }
    }
}

/// Why a model cannot be opened, configured or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "not a GGUF file, an RDRR folder (manifest.json) or a Trellis folder \
         (model.safetensors.index.json or quantization_index.json)"
    )]
    UnknownFormat,
    #[error(
        "the model folder has no {file} and its metadata holds no vocabulary: it runs from \
         token ids only"
    )]
    NoTokenizer { file: String },
    #[error("the file has no general.architecture")]
    NoArchitecture,
    #[error("architecture `{name}` is not supported (supported: llama, qwen2, qwen3, phi3, bitnet-b1.58, bitnet-25, bitnet)")]
    UnsupportedArchitecture { name: String },
    #[error("{key}: {value} is not a usable value")]
    BadMetadata { key: String, value: u64 },
    #[error("{key} is {value}; it must be {expected}")]
    BadHyperParameter {
        key: String,
        value: String,
        expected: String,
    },
    #[error("{key} says {n_layers} blocks, but the model has no tensor {name}")]
    MissingLayers {
        key: String,
        n_layers: usize,
        name: String,
    },
    #[error("tensor '{name}' holds {have} bytes; its dtype and shape need exactly {need}")]
    WrongByteLength { name: String, have: u64, need: u64 },
    #[error("tensor '{name}': {elements} elements are not a whole number of {dtype} blocks")]
    PartialBlocks {
        name: String,
        elements: u64,
        dtype: String,
    },
    #[error("{n_heads} attention heads over {n_kv_heads} KV heads of {head_dim} dimensions")]
    BadHeads {
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
    },
    #[error("RoPE over {rot_dim} of {head_dim} dimensions")]
    BadRotaryDims { rot_dim: usize, head_dim: usize },
    #[error("the model has no tensor {name}")]
    MissingTensor { name: String },
    #[error("no tensor named '{name}'{}", similar_names(similar))]
    NoSuchTensor { name: String, similar: Vec<String> },
    #[error("{name} has shape {shape:?}, expected {expected}")]
    WrongShape {
        name: String,
        shape: Vec<u64>,
        expected: String,
    },
    #[error("{name} has {len} values, expected {expected}")]
    WrongLength {
        name: String,
        len: usize,
        expected: usize,
    },
    #[error("{what}: {elements} elements do not fit in memory here")]
    TooLarge { what: String, elements: u64 },
    #[error("tensor '{name}': its shape's element count overflows")]
    ShapeOverflow { name: String },
    #[error("a KV cache of {context} positions for {sequences} sequences")]
    EmptyCache { context: usize, sequences: usize },
    #[error("cannot make a model name from {url}")]
    UnnamedUrl { url: String },
    #[error("the load was aborted")]
    Aborted,
    #[error("{what} is not supported yet")]
    NotSupportedYet { what: String },
    #[error(
        "this is a LoRA adapter, not a model: load it beside its base model (--lora, \
         loadAdapter)"
    )]
    IsAdapter,
    /// A LoRA adapter that does not fit the base model, or a bad choice of adapters.
    #[error("adapter {adapter}: {reason}")]
    Adapter { adapter: String, reason: String },
}

fn similar_names(similar: &[String]) -> String {
    match similar.is_empty() {
        true => String::new(),
        false => format!(" (similar: {})", similar.join(", ")),
    }
}

/// A request the loaded model cannot take: a prompt, a batch, token ids.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("an empty prompt")]
    EmptyPrompt,
    #[error(
        "the prompt has {tokens} tokens, more than the context of {context} (ask for a larger \
         context)"
    )]
    PromptTooLong { tokens: usize, context: usize },
    #[error("token id {id} is outside the vocabulary of {n_vocab} tokens")]
    TokenOutOfVocab { id: u32, n_vocab: usize },
    #[error("{tokens} tokens at position {pos0} do not fit the context of {context} tokens")]
    PastContext {
        tokens: usize,
        pos0: usize,
        context: usize,
    },
    #[error("sequence {seq} twice in one pass, or not one of the cache's {n_seqs}")]
    BadSequence { seq: usize, n_seqs: usize },
    #[error("a forward pass of {tokens} tokens in {spans} spans (1 ..= {max_batch} tokens, no empty span)")]
    BadBatch {
        tokens: usize,
        spans: usize,
        max_batch: usize,
    },
    #[error(
        "{tokens} tokens' logits do not fit one pass (at most {max}: the logits of {tokens} \
         tokens would exceed the device's largest buffer binding)"
    )]
    LogitsTooLarge { tokens: usize, max: usize },
    #[error("{ids} token ids for a pass of {tokens} tokens")]
    TokenCount { ids: usize, tokens: usize },
    #[error("a chained pass is one token after a pass that read back its top-k")]
    ChainWithoutTopK,
    #[error("the pass read back {what}, and sampling needs logits")]
    NoLogits { what: String },
}

/// What a backend cannot run.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{name}: {why}")]
    UnsupportedWeight { name: String, why: String },
    #[error("{name}: {have} bytes, a [{rows}, {cols}] {dtype} weight needs {need}")]
    WeightBytes {
        name: String,
        have: usize,
        rows: usize,
        cols: usize,
        dtype: crate::quant::GgmlType,
        need: usize,
    },
    #[error("{what}: buffer {buffer} holds {have} values, the op needs {need}")]
    BufferTooSmall {
        what: &'static str,
        buffer: String,
        have: usize,
        need: usize,
    },
    #[error("no {what} {id}")]
    UnknownHandle { what: &'static str, id: u32 },
    #[error("{0} before the KV cache was created")]
    NoCache(&'static str),
    #[error("attention of layer {layer}: no such cache layer")]
    NoCacheLayer { layer: usize },
    #[error("{op} without its second operand")]
    MissingOperand { op: &'static str },
}
