//! The manifest's descriptive parts: group kinds, model types, tensor layouts, and the
//! optional `quantizationInfo`, `architecture`, `tokenizer`, `moeConfig` and `loraConfig`
//! objects. Unknown extra fields of these objects are kept in `other`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

named_enum! {
    /// A component group's `type`.
    GroupKind {
        /// Token embeddings.
        Embed = "embed",
        /// A whole dense layer (transformer, mamba or rwkv).
        Layer = "layer",
        /// Final norm and LM head.
        Head = "head",
        /// One MoE expert of a layer.
        Expert = "expert",
        /// A layer's shared MoE parts (router, shared experts).
        Shared = "shared",
        /// A Mamba block of a hybrid layer.
        Mamba = "mamba",
        /// An RWKV block.
        Rwkv = "rwkv",
        /// An attention block of a hybrid layer.
        Attn = "attn",
    }
}

impl GroupKind {
    /// The kind, layer index and expert index the spec's group id patterns imply:
    /// `embed`, `head`, `layer.N`, `layer.N.expert.M`, `layer.N.shared`,
    /// `layer.N.shared_expert`, `layer.N.attn`, `layer.N.mamba`, `layer.N.rwkv`.
    pub fn infer_from_id(id: &str) -> Option<(GroupKind, Option<u64>, Option<u64>)> {
        match id {
            "embed" => return Some((GroupKind::Embed, None, None)),
            "head" => return Some((GroupKind::Head, None, None)),
            _ => {}
        }
        let rest = id.strip_prefix("layer.")?;
        let (layer, rest) = match rest.split_once('.') {
            Some((n, rest)) => (n, Some(rest)),
            None => (rest, None),
        };
        let layer: u64 = parse_index(layer)?;
        let kind = match rest {
            None => return Some((GroupKind::Layer, Some(layer), None)),
            Some("shared" | "shared_expert") => GroupKind::Shared,
            Some("attn") => GroupKind::Attn,
            Some("mamba") => GroupKind::Mamba,
            Some("rwkv") => GroupKind::Rwkv,
            Some(other) => {
                let expert = parse_index(other.strip_prefix("expert.")?)?;
                return Some((GroupKind::Expert, Some(layer), Some(expert)));
            }
        };
        Some((kind, Some(layer), None))
    }
}

fn parse_index(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

named_enum! {
    /// How a weight matrix is stored.
    TensorLayout {
        /// Row-major, as the source model has it (the default).
        Row = "row",
        /// Pre-transposed.
        Column = "column",
    }
}

named_enum! {
    /// The kind of adapter an adapter manifest holds.
    AdapterType {
        Lora = "lora",
        Qlora = "qlora",
    }
}

/// The manifest's `modelType`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelType {
    Transformer,
    Mamba,
    Rwkv,
    Mixtral,
    Deepseek,
    Jamba,
    Lora,
    /// A type this reader does not know (the spec allows future extensions).
    Other(String),
}

impl ModelType {
    pub fn parse(name: &str) -> ModelType {
        match name {
            "transformer" => ModelType::Transformer,
            "mamba" => ModelType::Mamba,
            "rwkv" => ModelType::Rwkv,
            "mixtral" => ModelType::Mixtral,
            "deepseek" => ModelType::Deepseek,
            "jamba" => ModelType::Jamba,
            "lora" => ModelType::Lora,
            other => ModelType::Other(other.to_string()),
        }
    }
}

/// `quantizationInfo`: precision per weight group.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuantizationInfo {
    /// Main weights (`q4_k_m`, `f16`, ...). The spec requires it; its absence is tolerated.
    pub weights: Option<String>,
    pub embeddings: Option<String>,
    pub lm_head: Option<String>,
    pub activations: Option<String>,
    pub kv_cache: Option<String>,
    pub compute: Option<String>,
    pub variant_tag: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// The manifest's `architecture`: a name (legacy) or the hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Architecture {
    Name(String),
    Config(ArchitectureConfig),
}

/// The `architecture` object's hyper-parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchitectureConfig {
    pub num_layers: Option<u64>,
    pub hidden_size: Option<u64>,
    pub intermediate_size: Option<u64>,
    pub num_attention_heads: Option<u64>,
    pub num_key_value_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub vocab_size: Option<u64>,
    pub max_seq_len: Option<u64>,
    pub rope_theta: Option<f64>,
    pub rms_norm_eps: Option<f64>,
    /// Every other field, as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl ArchitectureConfig {
    /// Every field present, named as the manifest names it.
    pub fn entries(&self) -> Vec<(String, Value)> {
        let ints = [
            ("numLayers", self.num_layers),
            ("hiddenSize", self.hidden_size),
            ("intermediateSize", self.intermediate_size),
            ("numAttentionHeads", self.num_attention_heads),
            ("numKeyValueHeads", self.num_key_value_heads),
            ("headDim", self.head_dim),
            ("vocabSize", self.vocab_size),
            ("maxSeqLen", self.max_seq_len),
        ];
        let floats = [
            ("ropeTheta", self.rope_theta),
            ("rmsNormEps", self.rms_norm_eps),
        ];
        let mut out: Vec<(String, Value)> = ints
            .iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), Value::from(v))))
            .collect();
        out.extend(
            floats
                .iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), Value::from(v)))),
        );
        out.extend(self.other.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }
}

/// `tokenizer`: `{ "type": "bpe", "file": "tokenizer.json", "vocabSize": 256000 }`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenizerInfo {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub file: Option<String>,
    pub vocab_size: Option<u64>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// One entry of `extraFiles` (a tritium extension): a file of the model folder besides the
/// manifest, `tensors.json` and the shards (`tokenizer.json`, `gguf_metadata.json`, ...), with
/// what a downloader needs to fetch and check it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtraFile {
    /// A plain file name inside the model folder (checked when the manifest is parsed).
    pub file_name: String,
    pub size: u64,
    /// Expected digest (hex).
    pub hash: Option<String>,
    /// `sha256` or `blake3`; the manifest's `hashAlgorithm` when absent.
    pub hash_algorithm: Option<String>,
    /// What the file is for: `tokenizer`, `gguf-metadata`, ...
    pub role: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `moeConfig`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoeConfig {
    pub num_experts: Option<u64>,
    pub num_experts_per_token: Option<u64>,
    pub shared_experts: Option<Vec<u64>>,
    pub expert_bytes: Option<u64>,
    /// `expertShardMap`, `expertTensors` and anything else, as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl MoeConfig {
    /// The numeric fields present, named as the manifest names them.
    pub fn entries(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        if let Some(n) = self.num_experts {
            out.push(("numExperts".to_string(), n.into()));
        }
        if let Some(n) = self.num_experts_per_token {
            out.push(("numExpertsPerToken".to_string(), n.into()));
        }
        if let Some(s) = &self.shared_experts {
            out.push(("sharedExperts".to_string(), s.clone().into()));
        }
        out
    }
}

/// `loraConfig` of a LoRA adapter manifest.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoraConfig {
    pub rank: u64,
    pub alpha: Option<f64>,
    #[serde(default)]
    pub target_modules: Vec<String>,
    pub dropout: Option<f64>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_imply_kinds() {
        use GroupKind::*;
        assert_eq!(GroupKind::infer_from_id("embed"), Some((Embed, None, None)));
        assert_eq!(GroupKind::infer_from_id("head"), Some((Head, None, None)));
        assert_eq!(
            GroupKind::infer_from_id("layer.7"),
            Some((Layer, Some(7), None))
        );
        assert_eq!(
            GroupKind::infer_from_id("layer.2.expert.5"),
            Some((Expert, Some(2), Some(5)))
        );
        assert_eq!(
            GroupKind::infer_from_id("layer.0.shared"),
            Some((Shared, Some(0), None))
        );
        assert_eq!(
            GroupKind::infer_from_id("layer.0.shared_expert"),
            Some((Shared, Some(0), None))
        );
        assert_eq!(
            GroupKind::infer_from_id("layer.3.attn"),
            Some((Attn, Some(3), None))
        );
        assert_eq!(
            GroupKind::infer_from_id("layer.3.mamba"),
            Some((Mamba, Some(3), None))
        );
        for bad in [
            "layer.",
            "layer.x",
            "layer.1.expert.",
            "layer.1.ffn",
            "layer.-1",
            "lm_head",
        ] {
            assert_eq!(GroupKind::infer_from_id(bad), None, "{bad}");
        }
    }
}
