//! Bytes to meaning: model file formats. Pure: no I/O, no GPU, no async. Every parser reads
//! through [`source::ByteSource`] / [`source::ModelFiles`].

pub mod gguf;
pub mod hf;
pub mod rdrr;
pub mod safetensors;
pub mod source;
pub mod trellis;

use serde::Serialize;

/// What `tritium inspect` shows of any model, whatever its format.
#[derive(Debug, Clone, Serialize)]
pub struct ModelDescription {
    /// "GGUF v3", "RDRR v1", "Trellis v3", ...
    pub format: String,
    /// Model architecture (`llama`, `bitnet-b1.58`, ...), when the files say.
    pub architecture: Option<String>,
    /// Hyper-parameters by name (`context_length`, `embedding_length`, `block_count`, ...).
    pub hyper_parameters: Vec<(String, serde_json::Value)>,
    /// Tokenizer kind (`gpt2`, `llama`, `tokenizer.json`, ...), when known.
    pub tokenizer: Option<String>,
    pub tensors: Vec<TensorDescription>,
}

/// One tensor row of `tritium inspect`.
#[derive(Debug, Clone, Serialize)]
pub struct TensorDescription {
    pub name: String,
    /// The dtype as the file names it (`Q4_K`, `F16`, `trellis-3bit`, ...).
    pub dtype: String,
    /// Dimensions, outermost first (PyTorch order: `[rows, cols]`).
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// Where the bytes are: `offset 1234`, `shard 3 @ 4096`, `model-00001-of-00002.safetensors`.
    pub location: String,
}

impl ModelDescription {
    /// Total bytes of all tensors.
    pub fn total_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }

    /// Total number of elements of all tensors.
    pub fn total_elements(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.shape.iter().product::<u64>())
            .sum()
    }
}
