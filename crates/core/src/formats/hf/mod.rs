//! Hugging Face checkpoints (`config.json`, `model.safetensors` or sharded with
//! `model.safetensors.index.json`, `tokenizer.json`, `tokenizer_config.json`), read through
//! [`ModelFiles`], and their conversion plan to GGUF tensors (see [`plan`]).
//!
//! Supported: `LlamaForCausalLM` (SiLU-gated FFN, RMS norms, no biases, plain RoPE) and
//! `BitNetForCausalLM` (BitNet b1.58: ternary linear layers with a per-tensor weight scale,
//! attention and FFN sub-norms, ReLU²), whether its linear weights are dense floats (ternarized
//! here as BitNet's converter does) or transformers' packed 2-bit form with `weight_scale`.

mod plan;

pub use plan::{
    gguf_metadata, permute_for_rope, permute_rows_for_rope, plan, renamed, tensor_bytes,
    unpack_ternary, OutputTensor, Quantization, QuantizeFn, TensorRecipe, TokenizerSettings,
};

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value as Json;

use super::safetensors::{self, Dtype, SafetensorsError, SafetensorsHeader};
use super::source::{ModelFiles, SourceError};
use crate::quant::QuantError;

/// The largest `config.json`, index or tokenizer config we read.
const MAX_JSON_BYTES: u64 = 64 << 20;

/// Errors reading or converting a Hugging Face checkpoint; each names the file or tensor.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    #[error("{file}: {message}")]
    Json { file: String, message: String },
    #[error("config.json: {0}")]
    Config(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("the checkpoint has no tensor {0}")]
    MissingTensor(String),
    #[error("tensor {name}: {message}")]
    Tensor { name: String, message: String },
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Quant(#[from] QuantError),
}

/// The model families we convert.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HfArch {
    Llama,
    BitNet,
    /// Qwen2 / Qwen2.5: biases on q, k and v.
    Qwen2,
    /// Qwen3: an RMSNorm over each head of q and k.
    Qwen3,
    /// Phi-3 / Phi-3.5 / Phi-4: q/k/v in one matrix (`qkv_proj`), gate/up in one
    /// (`gate_up_proj`), longrope factors in the config.
    Phi3,
    /// Gemma 2: norms before and after attention and the FFN (stored as `w`, computing
    /// `1 + w`), GELU gating, soft caps, a sliding window on every other layer.
    Gemma2,
    /// Gemma 3: Gemma 2's block with per-head q/k norms, no soft caps, five of six layers
    /// windowed with their own RoPE base.
    Gemma3,
}

impl HfArch {
    pub fn is_gemma(self) -> bool {
        matches!(self, HfArch::Gemma2 | HfArch::Gemma3)
    }
}

/// `config.json`, the fields the conversion reads.
#[derive(Debug, Clone)]
pub struct HfConfig {
    pub architectures: Vec<String>,
    pub model_type: Option<String>,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_hidden_layers: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub vocab_size: u64,
    pub max_position_embeddings: Option<u64>,
    pub rope_theta: Option<f64>,
    /// transformers 5 keeps `rope_theta` here.
    pub rope_parameters: Option<Json>,
    pub rope_scaling: Option<Json>,
    /// Phi-3: the context the RoPE frequencies were trained for (longrope's short factors).
    pub original_max_position_embeddings: Option<u64>,
    /// The fraction of each head that RoPE rotates (Phi-4-mini: 0.75).
    pub partial_rotary_factor: Option<f64>,
    pub rms_norm_eps: Option<f64>,
    pub tie_word_embeddings: Option<bool>,
    pub hidden_act: Option<String>,
    /// Gemma's name for `hidden_act`.
    pub hidden_activation: Option<String>,
    /// Gemma: the window of the local layers, their period (Gemma 3; or the per-layer
    /// `layer_types`), their RoPE base (Gemma 3), the soft caps (Gemma 2).
    pub sliding_window: Option<u64>,
    pub sliding_window_pattern: Option<u64>,
    pub layer_types: Option<Vec<String>>,
    pub rope_local_base_freq: Option<f64>,
    pub attn_logit_softcapping: Option<f64>,
    pub final_logit_softcapping: Option<f64>,
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub bos_token_id: Option<Json>,
    pub eos_token_id: Option<Json>,
    pub quantization_config: Option<Json>,
    /// `_name_or_path`.
    pub name_or_path: Option<String>,
}

impl HfConfig {
    /// Read from the JSON object's fields (absent and `null` alike are `None`; a field of the
    /// wrong type is an error naming it; others are ignored). By hand rather than derived:
    /// the browser's build carries this, and a derived struct visitor is several times the code.
    pub fn parse(bytes: &[u8]) -> Result<HfConfig, HfError> {
        let bad = |message: String| HfError::Json {
            file: "config.json".into(),
            message,
        };
        let v: Json = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let o = v
            .as_object()
            .ok_or_else(|| bad("the file is not a JSON object".into()))?;
        let field = |k: &str| o.get(k).filter(|x| !x.is_null());
        let wrong = |k: &str, want: &str| bad(format!("`{k}` must be {want}"));
        let u = |k: &str| -> Result<Option<u64>, HfError> {
            field(k)
                .map(|x| x.as_u64().ok_or_else(|| wrong(k, "a whole number")))
                .transpose()
        };
        let need = |k: &str| -> Result<u64, HfError> {
            u(k)?.ok_or_else(|| bad(format!("missing field `{k}`")))
        };
        let f = |k: &str| -> Result<Option<f64>, HfError> {
            field(k)
                .map(|x| x.as_f64().ok_or_else(|| wrong(k, "a number")))
                .transpose()
        };
        let b = |k: &str| -> Result<Option<bool>, HfError> {
            field(k)
                .map(|x| x.as_bool().ok_or_else(|| wrong(k, "true or false")))
                .transpose()
        };
        let text = |k: &str| -> Result<Option<String>, HfError> {
            field(k)
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| wrong(k, "a string"))
                })
                .transpose()
        };
        let texts = |k: &str| -> Result<Option<Vec<String>>, HfError> {
            field(k)
                .map(|x| {
                    x.as_array()
                        .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect())
                        .ok_or_else(|| wrong(k, "a list of strings"))
                })
                .transpose()
        };
        let json = |k: &str| field(k).cloned();
        Ok(HfConfig {
            architectures: texts("architectures")?.unwrap_or_default(),
            model_type: text("model_type")?,
            hidden_size: need("hidden_size")?,
            intermediate_size: need("intermediate_size")?,
            num_hidden_layers: need("num_hidden_layers")?,
            num_attention_heads: need("num_attention_heads")?,
            num_key_value_heads: u("num_key_value_heads")?,
            head_dim: u("head_dim")?,
            vocab_size: need("vocab_size")?,
            max_position_embeddings: u("max_position_embeddings")?,
            rope_theta: f("rope_theta")?,
            rope_parameters: json("rope_parameters"),
            rope_scaling: json("rope_scaling"),
            original_max_position_embeddings: u("original_max_position_embeddings")?,
            partial_rotary_factor: f("partial_rotary_factor")?,
            rms_norm_eps: f("rms_norm_eps")?,
            tie_word_embeddings: b("tie_word_embeddings")?,
            hidden_act: text("hidden_act")?,
            hidden_activation: text("hidden_activation")?,
            sliding_window: u("sliding_window")?,
            sliding_window_pattern: u("sliding_window_pattern")?,
            layer_types: texts("layer_types")?,
            rope_local_base_freq: f("rope_local_base_freq")?,
            attn_logit_softcapping: f("attn_logit_softcapping")?,
            final_logit_softcapping: f("final_logit_softcapping")?,
            attention_bias: b("attention_bias")?,
            mlp_bias: b("mlp_bias")?,
            bos_token_id: json("bos_token_id"),
            eos_token_id: json("eos_token_id"),
            quantization_config: json("quantization_config"),
            name_or_path: text("_name_or_path")?,
        })
    }

    /// The family `architectures[0]` names.
    pub fn arch(&self) -> Result<HfArch, HfError> {
        match self.architectures.first().map(String::as_str) {
            Some("LlamaForCausalLM") => Ok(HfArch::Llama),
            Some("BitNetForCausalLM") => Ok(HfArch::BitNet),
            Some("Qwen2ForCausalLM") => Ok(HfArch::Qwen2),
            Some("Qwen3ForCausalLM") => Ok(HfArch::Qwen3),
            Some("Phi3ForCausalLM") => Ok(HfArch::Phi3),
            Some("Gemma2ForCausalLM") => Ok(HfArch::Gemma2),
            Some("Gemma3ForCausalLM") => Ok(HfArch::Gemma3),
            Some(other) => Err(HfError::Unsupported(format!(
                "config.json: architecture {other} is not supported (LlamaForCausalLM, \
                 BitNetForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, \
                 Gemma2ForCausalLM, Gemma3ForCausalLM)"
            ))),
            None => Err(HfError::Config("no `architectures`".into())),
        }
    }

    pub fn n_kv_heads(&self) -> u64 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// `rope_scaling`, or transformers 5's `rope_parameters`.
    fn scaling(&self) -> Option<&Json> {
        self.rope_scaling
            .as_ref()
            .filter(|v| !v.is_null())
            .or(self.rope_parameters.as_ref())
    }

    /// A number of the config, at the top level or in the RoPE scaling object.
    fn scaling_number(&self, key: &str, top: Option<f64>) -> Option<f64> {
        top.or_else(|| self.scaling()?.get(key)?.as_f64())
    }

    /// The rotated dimensions of each head.
    pub fn rope_dims(&self) -> u64 {
        match self.scaling_number("partial_rotary_factor", self.partial_rotary_factor) {
            Some(f) => (f * self.hidden_size as f64) as u64 / self.num_attention_heads.max(1),
            None => self.head_dim(),
        }
    }

    /// Longrope's (short, long) per-pair frequency factors and original context, where the
    /// config has them.
    pub fn longrope(&self) -> Option<(Vec<f32>, Vec<f32>, u64)> {
        let s = self.scaling()?;
        let list = |k: &str| -> Option<Vec<f32>> {
            s.get(k)?
                .as_array()?
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect()
        };
        let orig = self
            .scaling_number(
                "original_max_position_embeddings",
                self.original_max_position_embeddings.map(|v| v as f64),
            )
            .map(|v| v as u64)?;
        Some((list("short_factor")?, list("long_factor")?, orig))
    }

    /// RoPE base frequency: `rope_theta`, or `rope_parameters.rope_theta` (Gemma 3 in
    /// transformers 5: `rope_parameters.full_attention.rope_theta`), default 10000.
    pub fn rope_theta(&self) -> f64 {
        let p = self.rope_parameters.as_ref();
        self.rope_theta
            .or_else(|| p?.get("rope_theta")?.as_f64())
            .or_else(|| p?.get("full_attention")?.get("rope_theta")?.as_f64())
            .unwrap_or(10_000.0)
    }

    /// Linear RoPE scaling's factor (`rope_scaling: {rope_type: linear, factor}`; Gemma 3's
    /// global layers), where the config has it.
    pub fn linear_rope_factor(&self) -> Option<f64> {
        let s = self.scaling()?;
        let s = s.get("full_attention").unwrap_or(s);
        let kind = s.get("rope_type").or_else(|| s.get("type"))?.as_str()?;
        (kind == "linear").then(|| s.get("factor")?.as_f64())?
    }

    /// Gemma 3: the RoPE base of the windowed layers (`rope_local_base_freq`, or transformers
    /// 5's `rope_parameters.sliding_attention.rope_theta`).
    pub fn rope_local_base(&self) -> Option<f64> {
        self.rope_local_base_freq.or_else(|| {
            self.rope_parameters
                .as_ref()?
                .get("sliding_attention")?
                .get("rope_theta")?
                .as_f64()
        })
    }

    /// Gemma: which layers attend over the sliding window, where the config says it per layer
    /// (`layer_types`) or by a period (`sliding_window_pattern`).
    pub fn window_layers(&self) -> Option<Vec<bool>> {
        if let Some(types) = &self.layer_types {
            return Some(types.iter().map(|t| t == "sliding_attention").collect());
        }
        let p = self.sliding_window_pattern?.max(1);
        Some((0..self.num_hidden_layers).map(|i| i % p < p - 1).collect())
    }

    /// The first id of `bos_token_id` / `eos_token_id` (a number or a list).
    pub fn token_id(value: &Option<Json>) -> Option<u32> {
        let v = match value.as_ref()? {
            Json::Array(list) => list.first()?.as_u64()?,
            v => v.as_u64()?,
        };
        u32::try_from(v).ok()
    }

    /// `quantization_config.<key>` as a string.
    pub fn quantization_field(&self, key: &str) -> Option<&str> {
        self.quantization_config.as_ref()?.get(key)?.as_str()
    }

    /// Refuse what the engine does not compute: biases (but Qwen2's on q, k and v), RoPE
    /// scaling, other activations.
    pub fn check_supported(&self, arch: HfArch) -> Result<(), HfError> {
        let qkv_bias = arch == HfArch::Qwen2;
        if (self.attention_bias == Some(true) && !qkv_bias) || self.mlp_bias == Some(true) {
            return Err(HfError::Unsupported(
                "config.json: attention or MLP biases are not supported".into(),
            ));
        }
        let scaling = self
            .rope_scaling
            .as_ref()
            .filter(|v| !v.is_null())
            .or(self.rope_parameters.as_ref());
        if let Some(kind) = scaling.and_then(|s| s.get("rope_type").or_else(|| s.get("type"))) {
            let longrope = matches!(kind.as_str(), Some("longrope" | "su"));
            if arch == HfArch::Phi3 && longrope && self.longrope().is_none() {
                return Err(HfError::Unsupported(
                    "config.json: longrope without short_factor, long_factor and \
                     original_max_position_embeddings"
                        .into(),
                ));
            }
            let linear = arch == HfArch::Gemma3 && kind.as_str() == Some("linear");
            if kind.as_str() != Some("default") && !(arch == HfArch::Phi3 && longrope) && !linear {
                return Err(HfError::Unsupported(format!(
                    "config.json: RoPE scaling {kind} is not supported"
                )));
            }
        }
        let want = match arch {
            HfArch::Llama | HfArch::Qwen2 | HfArch::Qwen3 | HfArch::Phi3 => "silu",
            HfArch::BitNet => "relu2",
            HfArch::Gemma2 | HfArch::Gemma3 => "gelu_pytorch_tanh",
        };
        match self
            .hidden_activation
            .as_deref()
            .or(self.hidden_act.as_deref())
        {
            None => Ok(()),
            Some(act) if act == want => Ok(()),
            Some(act) => Err(HfError::Unsupported(format!(
                "config.json: hidden_act {act} (this architecture computes {want})"
            ))),
        }
    }
}

/// An opened checkpoint: its config and the headers of its safetensors files.
pub struct HfCheckpoint<'a> {
    pub files: &'a dyn ModelFiles,
    pub config: HfConfig,
    pub arch: HfArch,
    headers: Vec<(String, SafetensorsHeader)>,
    /// Tensor name -> index into `headers`.
    index: BTreeMap<String, usize>,
}

impl<'a> HfCheckpoint<'a> {
    /// Read `config.json` and the safetensors headers (`model.safetensors`, or the files that
    /// `model.safetensors.index.json` names). Tensor data is read later, one tensor at a time.
    pub fn open(files: &'a dyn ModelFiles) -> Result<Self, HfError> {
        let config = HfConfig::parse(&files.read_small("config.json", MAX_JSON_BYTES)?)?;
        let arch = config.arch()?;
        config.check_supported(arch)?;
        let shard_names: Vec<String> = if files.exists("model.safetensors.index.json") {
            let bytes = files.read_small("model.safetensors.index.json", MAX_JSON_BYTES)?;
            #[derive(Deserialize)]
            struct Index {
                weight_map: BTreeMap<String, String>,
            }
            let index: Index = serde_json::from_slice(&bytes).map_err(|e| HfError::Json {
                file: "model.safetensors.index.json".into(),
                message: e.to_string(),
            })?;
            let mut names: Vec<String> = index.weight_map.into_values().collect();
            names.sort();
            names.dedup();
            names
        } else if files.exists("model.safetensors") {
            vec!["model.safetensors".to_string()]
        } else {
            return Err(HfError::Unsupported(
                "no model.safetensors or model.safetensors.index.json (only safetensors \
                 checkpoints are read)"
                    .into(),
            ));
        };
        let mut headers = Vec::with_capacity(shard_names.len());
        let mut index = BTreeMap::new();
        for name in shard_names {
            let src = files.open(&name)?;
            let header = SafetensorsHeader::read(src.as_ref())?;
            for t in header.names() {
                if index.insert(t.to_string(), headers.len()).is_some() {
                    return Err(HfError::Tensor {
                        name: t.to_string(),
                        message: "appears in two safetensors files".into(),
                    });
                }
            }
            headers.push((name, header));
        }
        Ok(HfCheckpoint {
            files,
            config,
            arch,
            headers,
            index,
        })
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// A tensor's dtype and shape (outermost first).
    pub fn info(&self, name: &str) -> Result<(Dtype, Vec<u64>), HfError> {
        let &i = self
            .index
            .get(name)
            .ok_or_else(|| HfError::MissingTensor(name.to_string()))?;
        let t = self.headers[i].1.require(name)?;
        Ok((t.dtype, t.shape.clone()))
    }

    /// A tensor's raw little-endian bytes.
    pub fn raw(&self, name: &str) -> Result<Vec<u8>, HfError> {
        let &i = self
            .index
            .get(name)
            .ok_or_else(|| HfError::MissingTensor(name.to_string()))?;
        let (file, header) = &self.headers[i];
        let src = self.files.open(file)?;
        Ok(header.read_tensor(src.as_ref(), name)?)
    }

    /// A float tensor (F32, F16 or BF16) widened to f32.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>, HfError> {
        let (dtype, _) = self.info(name)?;
        safetensors::to_f32(dtype, &self.raw(name)?).ok_or_else(|| HfError::Tensor {
            name: name.to_string(),
            message: format!("dtype {dtype:?} is not a float type (F32, F16, BF16)"),
        })
    }
}

/// What `tokenizer_config.json` says that the GGUF metadata keeps: the chat template and the
/// texts of BOS and EOS (ids are resolved against the tokenizer by the caller).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenizerConfig {
    pub chat_template: Option<String>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

impl TokenizerConfig {
    /// Parse `tokenizer_config.json`: `chat_template` as a string, or the `default` entry of a
    /// list of named templates; `bos_token`/`eos_token` as strings or `{content}` objects.
    pub fn parse(bytes: &[u8]) -> Result<TokenizerConfig, HfError> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| HfError::Json {
            file: "tokenizer_config.json".into(),
            message: e.to_string(),
        })?;
        let token = |key: &str| -> Option<String> {
            match v.get(key)? {
                Json::String(s) => Some(s.clone()),
                Json::Object(o) => o.get("content")?.as_str().map(str::to_string),
                _ => None,
            }
        };
        let chat_template = match v.get("chat_template") {
            Some(Json::String(s)) => Some(s.clone()),
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            _ => None,
        };
        Ok(TokenizerConfig {
            chat_template,
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
        })
    }
}

/// The GGUF metadata of a model kept with Hugging Face tensor names and run as it is stored
/// (an RDRR folder from another converter, a Trellis checkpoint): [`gguf_metadata`] for
/// `config`, with the chat template of the folder's `tokenizer_config.json` and the BOS/EOS
/// ids of `config.json`. No `general.file_type`: the tensors keep their own types.
pub fn view_metadata(
    config: &HfConfig,
    arch: HfArch,
    name: &str,
    files: &dyn ModelFiles,
) -> Result<Vec<(String, crate::formats::gguf::Value)>, HfError> {
    let mut settings = TokenizerSettings {
        bos_id: HfConfig::token_id(&config.bos_token_id),
        eos_id: HfConfig::token_id(&config.eos_token_id),
        chat_template: None,
    };
    if files.exists("tokenizer_config.json") {
        let bytes = files.read_small("tokenizer_config.json", MAX_JSON_BYTES)?;
        settings.chat_template = TokenizerConfig::parse(&bytes)?.chat_template;
    }
    Ok(
        gguf_metadata(config, arch, Quantization::F16, name, &settings)
            .into_iter()
            .filter(|(k, _)| k != "general.file_type")
            .collect(),
    )
}

/// Where a GGUF tensor name sorts in a GGUF file: the embedding, the blocks in order, then the
/// output tensors.
pub fn gguf_rank(name: &str) -> (u8, u64, String) {
    match name.strip_prefix("blk.").and_then(|r| r.split_once('.')) {
        Some((i, _)) => (1, i.parse().unwrap_or(u64::MAX), String::new()),
        None if name.starts_with("token_embd") => (0, 0, String::new()),
        None => (2, 0, name.to_string()),
    }
}
