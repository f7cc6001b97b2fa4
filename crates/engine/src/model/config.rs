//! A model's hyper-parameters, read from GGUF metadata (`<arch>.block_count`, ...).

use crate::error::ModelError;
use crate::formats::gguf::{Array, GgufError, GgufFile, Value};
use crate::ops::{AttentionScores, RopeConfig, RopeStyle};
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
    /// `qwen2` (Qwen2, Qwen2.5): the Llama block with biases on q, k and v, NeoX RoPE (the
    /// converters keep transformers' Q/K row order).
    Qwen2,
    /// `qwen3`: the Llama block with an RMSNorm over each head of q and k before RoPE (NeoX),
    /// no biases, and a head size of its own (`attention.key_length`).
    Qwen3,
    /// `phi3` (Phi-3, Phi-3.5, Phi-4): the Llama block with q, k and v in one matrix
    /// (`attn_qkv`) and gate and up in one (`ffn_up`, gate first), split into separate weights
    /// at load; NeoX RoPE, with the per-pair frequency factors for short or long contexts
    /// (`rope_factors_short`/`_long`) where the file has them.
    Phi3,
    /// `gemma2`: the embedding scaled by sqrt(dim); RMS norms before and after attention and
    /// the FFN (the converters fold Gemma's `1 + w` into the weights); a GELU-gated FFN;
    /// attention scores and final logits soft-capped; every other layer attending over a
    /// sliding window (the even ones); NeoX RoPE.
    Gemma2,
    /// `gemma3`: Gemma 2's block with per-head q/k RMS norms and no soft caps (unless the file
    /// states a final one); five of every six layers attend over a sliding window with their
    /// own RoPE base (`rope.freq_base_swa`, 10,000 by default) and no linear scaling.
    Gemma3,
}

impl Arch {
    /// The architecture a GGUF's `general.architecture` names.
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "bitnet-b1.58" | "bitnet-25" | "bitnet" => Some(Arch::BitNet),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "phi3" => Some(Arch::Phi3),
            "gemma2" => Some(Arch::Gemma2),
            "gemma3" => Some(Arch::Gemma3),
            _ => None,
        }
    }

    /// Whether each head of q and k is RMS-normed before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub fn has_qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }

    /// Gemma's block: norms after attention and the FFN too, GELU gating.
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
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
    /// The context the RoPE frequencies were trained for, where the file states it
    /// (`rope.scaling.original_context_length`): contexts past it take the long factors.
    pub rope_original_context: Option<usize>,
    /// `rope.scaling.attn_factor` (1 where absent): the rotated dimensions of q and k are
    /// scaled by it, so their scores by its square ([`crate::model::llama`] scales q's).
    pub rope_attn_factor: f32,
    /// The RoPE of the layers with a sliding window where it differs from [`Self::rope`]
    /// (Gemma 3's local layers): the session's table 1.
    pub rope_local: Option<RopeConfig>,
    /// The sliding window (`attention.sliding_window`; 0: none) and the layers that attend
    /// over it.
    pub window: usize,
    pub window_layers: Vec<bool>,
    /// Attention scores soft-capped at this (0: not; Gemma 2).
    pub attn_softcap: f32,
    /// The final logits soft-capped at this (0: not; Gemma 2).
    pub final_softcap: f32,
    /// Gemma: the embedding scaled by this (sqrt(dim)).
    pub embed_scale: Option<f32>,
    /// q multiplied by this before attention, beside the attention's own 1/sqrt(head_dim)
    /// (Gemma 2 and 3 27B score by 1/sqrt(dim / n_heads) instead); 1 elsewhere.
    pub q_multiplier: f32,
}

impl ModelConfig {
    /// The RoPE tables a session creates ([`crate::pass::Op::Rope`]'s `table`).
    pub fn ropes(&self) -> Vec<RopeConfig> {
        std::iter::once(self.rope.clone())
            .chain(self.rope_local.clone())
            .collect()
    }

    /// The RoPE table of layer `layer`.
    pub fn rope_table(&self, layer: usize) -> usize {
        usize::from(self.rope_local.is_some() && self.windowed(layer))
    }

    fn windowed(&self, layer: usize) -> bool {
        self.window > 0 && self.window_layers.get(layer).copied().unwrap_or(false)
    }

    /// What layer `layer`'s attention scores see: its window, the soft cap.
    pub fn scores(&self, layer: usize) -> AttentionScores {
        AttentionScores {
            window: if self.windowed(layer) { self.window } else { 0 },
            softcap: self.attn_softcap,
        }
    }
}

/// The largest width (embedding, FFN, attention heads times head size) and layer count a
/// configuration may claim. Far above any released model, and small enough that every
/// product of two of them fits in a `u64`; the tensors' shapes must still match.
const MAX_WIDTH: usize = 1 << 20;
const MAX_LAYERS: usize = 1 << 16;

impl ModelConfig {
    /// Read the configuration from GGUF metadata. `n_vocab` comes from the embedding table
    /// (`token_embd.weight`), the authority on how many rows exist.
    ///
    /// Every hyper-parameter is checked here, once, for every backend: integers positive and
    /// within [`MAX_WIDTH`] / [`MAX_LAYERS`], floats finite and positive, a key of the wrong
    /// type an error rather than a silent default, and the last block's tensors present (a
    /// `block_count` the file does not hold is refused before anything is sized by it).
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
        let bad = |k: &str, value: String, expected: &str| -> Error {
            ModelError::BadHyperParameter {
                key: key(k),
                value,
                expected: expected.to_string(),
            }
            .into()
        };
        // An integer key: absent is `None`; present, it must be an integer in 1..=max.
        let int = |k: &str, max: usize| -> Result<Option<usize>, Error> {
            let Some(v) = file.get(&key(k)) else {
                return Ok(None);
            };
            let expected = format!("an integer from 1 to {max}");
            let n = v
                .as_u64()
                .ok_or_else(|| bad(k, format!("{v:?}"), &expected))?;
            match usize::try_from(n) {
                Ok(n) if n >= 1 && n <= max => Ok(Some(n)),
                _ => Err(bad(k, n.to_string(), &expected)),
            }
        };
        let req = |k: &str, max: usize| -> Result<usize, Error> {
            int(k, max)?.ok_or_else(|| {
                GgufError::Metadata {
                    key: key(k),
                    problem: "missing".into(),
                }
                .into()
            })
        };
        // A float key: absent is `default`; present, finite and positive.
        let float = |k: &str, default: f64| -> Result<f64, Error> {
            let Some(v) = file.get(&key(k)) else {
                return Ok(default);
            };
            let expected = "a finite number above 0";
            match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(x),
                Some(x) => Err(bad(k, x.to_string(), expected)),
                None => Err(bad(k, format!("{v:?}"), expected)),
            }
        };
        let dim = req("embedding_length", MAX_WIDTH)?;
        let n_layers = req("block_count", MAX_LAYERS)?;
        let n_heads = req("attention.head_count", MAX_WIDTH)?;
        let n_kv_heads = int("attention.head_count_kv", MAX_WIDTH)?.unwrap_or(n_heads);
        let ffn_dim = req("feed_forward_length", MAX_WIDTH)?;
        let context_length = req("context_length", usize::MAX)?;
        let head_dim = match int("attention.key_length", MAX_WIDTH)? {
            Some(v) => v,
            None => dim / n_heads,
        };
        // Values as wide as keys: the attention and its cache take one head size.
        if let Some(v) = int("attention.value_length", MAX_WIDTH)? {
            if v != head_dim {
                return Err(bad(
                    "attention.value_length",
                    v.to_string(),
                    &format!("equal to attention.key_length ({head_dim})"),
                ));
            }
        }
        if head_dim == 0 || n_heads % n_kv_heads != 0 || n_heads * head_dim > MAX_WIDTH {
            return Err(ModelError::BadHeads {
                n_heads,
                n_kv_heads,
                head_dim,
            }
            .into());
        }
        let eps = float("attention.layer_norm_rms_epsilon", 1e-5)?;
        if eps >= 1.0 || eps as f32 == 0.0 {
            return Err(bad(
                "attention.layer_norm_rms_epsilon",
                eps.to_string(),
                "above 0 (as an f32) and below 1",
            ));
        }
        let eps = eps as f32;
        let theta = float("rope.freq_base", 10_000.0)?;
        let rot_dim = int("rope.dimension_count", MAX_WIDTH)?.unwrap_or(head_dim);
        if rot_dim % 2 != 0 || rot_dim > head_dim {
            return Err(ModelError::BadRotaryDims { rot_dim, head_dim }.into());
        }
        let style = match arch {
            Arch::Llama => RopeStyle::Interleaved,
            _ => RopeStyle::NeoX,
        };
        // Longrope's attention factor (Phi-3.5, Phi-3-128k, Phi-4-mini): llama.cpp scales the
        // rotated dimensions of q and k by it.
        let rope_attn_factor = float("rope.scaling.attn_factor", 1.0)? as f32;
        let rope_original_context = int("rope.scaling.original_context_length", usize::MAX)?;
        let mut rope = RopeConfig::new(head_dim, theta, style);
        rope.rot_dim = rot_dim;
        // Linear scaling: positions divided by the factor (llama.cpp's freq_scale). YaRN's
        // extrapolation is not implemented: refused rather than run wrong.
        let scaling = file.get(&key("rope.scaling.type")).map(|v| v.as_str());
        match scaling {
            None | Some(Some("linear")) => {
                let factor = float("rope.scaling.factor", 1.0)?;
                rope.freq_scale = 1.0 / factor;
            }
            Some(Some("yarn")) => {
                return Err(bad(
                    "rope.scaling.type",
                    "yarn".into(),
                    "linear or none (YaRN is not supported)",
                ))
            }
            _ => {}
        }
        // Sliding windows: Gemma 2 every other layer (4096 unless stated), Gemma 3 five of six
        // where the file states a window, other architectures every layer where it does; a
        // stated pattern (`attention.sliding_window_pattern`: a period, or a flag per layer)
        // wins.
        let window = match (arch, int("attention.sliding_window", usize::MAX)?) {
            (_, Some(w)) => w,
            (Arch::Gemma2, None) => 4096,
            _ => 0,
        };
        let period = match arch {
            Arch::Gemma2 => 2,
            Arch::Gemma3 => 6,
            _ => 0,
        };
        let window_layers: Vec<bool> = match file.get(&key("attention.sliding_window_pattern")) {
            Some(Value::Array(Array::Bool(flags))) if flags.len() == n_layers => flags.clone(),
            Some(v) if v.as_array().is_some() => {
                return Err(bad(
                    "attention.sliding_window_pattern",
                    "an array".into(),
                    &format!("{n_layers} flags (one per layer) or a period"),
                ))
            }
            found => {
                let period = match found {
                    Some(_) => {
                        int("attention.sliding_window_pattern", MAX_LAYERS)?.unwrap_or(period)
                    }
                    None => period,
                };
                // llama.cpp's rule: with a period p, layer i is windowed where i % p < p - 1.
                (0..n_layers)
                    .map(|i| period == 0 || i % period.max(1) < period - 1)
                    .collect()
            }
        };
        let rope_local = match arch {
            Arch::Gemma3 if window > 0 => {
                let mut local =
                    RopeConfig::new(head_dim, float("rope.freq_base_swa", 10_000.0)?, style);
                local.rot_dim = rot_dim;
                Some(local)
            }
            Arch::Gemma2 => match file.get(&key("rope.freq_base_swa")) {
                Some(_) => {
                    let mut local = rope.clone();
                    local.theta = float("rope.freq_base_swa", theta)?;
                    Some(local)
                }
                None => None,
            },
            _ => None,
        };
        let attn_softcap = match arch {
            Arch::Gemma2 => float("attn_logit_softcapping", 50.0)? as f32,
            _ => 0.0,
        };
        let final_softcap = match arch {
            Arch::Gemma2 => float("final_logit_softcapping", 30.0)? as f32,
            Arch::Gemma3 => float("final_logit_softcapping", f64::INFINITY).map(|c| {
                if c.is_finite() {
                    c as f32
                } else {
                    0.0
                }
            })?,
            _ => 0.0,
        };
        // Gemma 2 27B (46 layers) and Gemma 3 27B (62) score by 1/sqrt(dim / n_heads), as
        // llama.cpp and gemma_pytorch do (query_pre_attn_scalar; GGUF does not carry it).
        let q_multiplier = match (arch, n_layers) {
            (Arch::Gemma2, 46) | (Arch::Gemma3, 62) => {
                ((head_dim as f64) / (dim as f64 / n_heads as f64)).sqrt() as f32
            }
            _ => 1.0,
        };
        let embed_scale = arch.is_gemma().then(|| (dim as f32).sqrt());
        let last_block = format!("blk.{}.attn_norm.weight", n_layers - 1);
        if file.tensor(&last_block).is_none() {
            return Err(ModelError::MissingLayers {
                key: key("block_count"),
                n_layers,
                name: last_block,
            }
            .into());
        }
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor {
                name: "token_embd.weight".into(),
            })?;
        let shape = embd.dims.clone();
        let n_vocab = match shape[..] {
            [d, v] if d == dim as u64 && v >= 1 => usize::try_from(v).ok(),
            _ => None,
        };
        let Some(n_vocab) = n_vocab else {
            return Err(ModelError::WrongShape {
                name: "token_embd.weight".into(),
                shape,
                expected: format!("[{dim}, n_vocab]"),
            }
            .into());
        };
        Ok(ModelConfig {
            arch,
            arch_name,
            n_vocab,
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            eps,
            context_length,
            rope,
            rope_original_context,
            rope_attn_factor,
            rope_local,
            window,
            window_layers,
            attn_softcap,
            final_softcap,
            embed_scale,
            q_multiplier,
        })
    }
}
