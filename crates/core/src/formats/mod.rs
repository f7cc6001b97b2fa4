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
    /// Total bytes of all tensors (saturating at `u64::MAX`: a manifest can claim any sizes,
    /// and `inspect` shows what it claims).
    pub fn total_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |acc, t| acc.saturating_add(t.bytes))
    }

    /// Total number of elements of all tensors (saturating at `u64::MAX`, as
    /// [`total_bytes`](Self::total_bytes)).
    pub fn total_elements(&self) -> u64 {
        self.tensors.iter().fold(0u64, |acc, t| {
            let n = t.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
            acc.saturating_add(n.unwrap_or(u64::MAX))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_of_claimed_sizes_saturate() {
        let tensor = |shape: Vec<u64>, bytes: u64| TensorDescription {
            name: "t".into(),
            dtype: "F32".into(),
            shape,
            bytes,
            location: String::new(),
        };
        let d = ModelDescription {
            format: "RDRR v1".into(),
            architecture: None,
            hyper_parameters: Vec::new(),
            tokenizer: None,
            tensors: vec![
                tensor(vec![2, 3], 24),
                tensor(vec![1 << 40, 1 << 40], u64::MAX),
                tensor(vec![0, 1 << 40, 1 << 40], 8),
            ],
        };
        assert_eq!(d.total_bytes(), u64::MAX);
        assert_eq!(d.total_elements(), u64::MAX);
        let small = ModelDescription {
            tensors: vec![tensor(vec![2, 3], 24), tensor(vec![4], 16)],
            ..d
        };
        assert_eq!((small.total_bytes(), small.total_elements()), (40, 10));
    }
}
