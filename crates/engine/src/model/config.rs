//! A model's hyper-parameters, read from GGUF metadata (`<arch>.block_count`, ...).

use crate::error::ModelError;
use crate::formats::gguf::GgufFile;
use crate::ops::{RopeConfig, RopeStyle};
use crate::Error;

/// The architectures we run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `llama`: SmolLM2, Llama 2/3.x (grouped KV heads, SiLU-gated FFN, interleaved RoPE since
    /// the converters permute Q/K, tied or separate output).
    Llama,
    /// `bitnet-b1.58`, `bitnet-25`, `bitnet`: BitLinear layers, attention and FFN sub-norms,
    /// ReLU², NeoX RoPE, tied embeddings.
    BitNet,
}

impl Arch {
    /// The architecture a GGUF's `general.architecture` names.
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "bitnet-b1.58" | "bitnet-25" | "bitnet" => Some(Arch::BitNet),
            _ => None,
        }
    }
}

/// Everything a forward pass needs to know about a model's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    /// `general.architecture` as the file says it.
    pub arch_name: String,
    pub n_vocab: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub eps: f32,
    /// The context the model was trained for.
    pub context_length: usize,
    pub rope: RopeConfig,
}

impl ModelConfig {
    /// Read the configuration from GGUF metadata. `n_vocab` comes from the embedding table
    /// (`token_embd.weight`), the authority on how many rows exist.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, Error> {
        let arch_name = file
            .architecture()
            .ok_or(ModelError::NoArchitecture)?
            .to_string();
        let arch =
            Arch::from_name(&arch_name).ok_or_else(|| ModelError::UnsupportedArchitecture {
                name: arch_name.clone(),
            })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let req = |k: &str| -> Result<usize, Error> {
            let v = file.require_u64(&key(k))?;
            usize::try_from(v).ok().filter(|&v| v > 0).ok_or_else(|| {
                ModelError::BadMetadata {
                    key: key(k),
                    value: v,
                }
                .into()
            })
        };
        let dim = req("embedding_length")?;
        let n_layers = req("block_count")?;
        let n_heads = req("attention.head_count")?;
        let n_kv_heads = match file.get_u64(&key("attention.head_count_kv")) {
            Some(v) => v as usize,
            None => n_heads,
        };
        let ffn_dim = req("feed_forward_length")?;
        let context_length = req("context_length")?;
        let head_dim = match file.get_u64(&key("attention.key_length")) {
            Some(v) => v as usize,
            None => dim / n_heads,
        };
        if n_kv_heads == 0 || n_heads % n_kv_heads != 0 || head_dim == 0 {
            return Err(ModelError::BadHeads {
                n_heads,
                n_kv_heads,
                head_dim,
            }
            .into());
        }
        let eps = file
            .get_f64(&key("attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-5) as f32;
        let theta = file.get_f64(&key("rope.freq_base")).unwrap_or(10_000.0);
        let rot_dim = file
            .get_u64(&key("rope.dimension_count"))
            .map_or(head_dim, |v| v as usize);
        if rot_dim == 0 || rot_dim % 2 != 0 || rot_dim > head_dim {
            return Err(ModelError::BadRotaryDims { rot_dim, head_dim }.into());
        }
        let style = match arch {
            Arch::Llama => RopeStyle::Interleaved,
            Arch::BitNet => RopeStyle::NeoX,
        };
        let mut rope = RopeConfig::new(head_dim, theta, style);
        rope.rot_dim = rot_dim;
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor {
                name: "token_embd.weight".into(),
            })?;
        let shape = embd.dims.clone();
        if shape.len() != 2 || shape[0] as usize != dim {
            return Err(ModelError::WrongShape {
                name: "token_embd.weight".into(),
                shape,
                expected: format!("[{dim}, n_vocab]"),
            }
            .into());
        }
        Ok(ModelConfig {
            arch,
            arch_name,
            n_vocab: shape[1] as usize,
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            eps,
            context_length,
            rope,
        })
    }
}
