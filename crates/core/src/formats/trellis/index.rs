//! The JSON files of a Trellis model folder, typed.
//!
//! v3: `model.safetensors.index.json` (weight map), `quantization_config.json` (per-weight bits,
//! shape, mse), `config.json` (the HuggingFace model config).
//! v2: `layer_XXXX/index.json` per layer and `quantization_index.json` at the root.
//! Unknown fields are kept (`extra`) so that a migration loses nothing.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::TrellisError;
use crate::formats::source::ModelFiles;

/// The v3 weight map.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Per-weight quantization metadata (v3).
pub const QUANT_CONFIG_FILE: &str = "quantization_config.json";
/// The HuggingFace model config.
pub const CONFIG_FILE: &str = "config.json";
/// The v2 root index of quantized layers (kept by the migration).
pub const QUANT_INDEX_FILE: &str = "quantization_index.json";
/// v2's unquantized tensors (embeddings, norms, head).
pub const BASE_WEIGHTS_FILE: &str = "base_weights.safetensors";
/// v2's optional MoE router tensors.
pub const ROUTER_WEIGHTS_FILE: &str = "router_weights.safetensors";
/// The largest JSON file we read.
pub const MAX_JSON_LEN: u64 = 64 * 1024 * 1024;

/// `model.safetensors.index.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WeightIndex {
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// Tensor key -> shard file name.
    pub weight_map: BTreeMap<String, String>,
}

impl WeightIndex {
    /// `metadata.total_size` (an integer; an integral float is tolerated).
    pub fn total_size(&self) -> Option<u64> {
        let v = self.metadata.get("total_size")?;
        v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        })
    }

    /// `metadata.format` (`trellis_v3`).
    pub fn format(&self) -> Option<&str> {
        self.metadata.get("format").and_then(Value::as_str)
    }

    /// `metadata.quantization`, also under the key `" quantization"` (with a leading space) as
    /// the spec's example writes it.
    pub fn quantization(&self) -> Option<&Value> {
        self.metadata
            .get("quantization")
            .or_else(|| self.metadata.get(" quantization"))
    }
}

/// `quantization_config.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QuantizationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization_version: Option<String>,
    #[serde(default, alias = "method", skip_serializing_if = "Option::is_none")]
    pub quantization_method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_config: Option<GlobalConfig>,
    /// Logical weight name -> metadata.
    #[serde(default)]
    pub tensor_metadata: BTreeMap<String, TensorMetadata>,
    /// Layer number -> (module -> bits); informational.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layer_allocation: BTreeMap<String, Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `quantization_config.json`'s `global_config`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GlobalConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_bits_per_weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_bits: Option<u64>,
    /// Informational only: the reference runtime applies no Hadamard transform at run time,
    /// and neither do we.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hadamard_transform: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codebook_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_groups: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One entry of `tensor_metadata`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TensorMetadata {
    /// Bits per weight (2..8).
    pub bits: u64,
    /// `[out, in]` (files written in the seed's `[in, out]` order are recognised by the reader).
    pub shape: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mse: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compressed_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_ratio: Option<f64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `layer_XXXX/index.json` (v2).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LayerIndex {
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub tensors: Vec<LayerTensor>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One quantized weight of a v2 layer index (or of `quantization_index.json`'s `layers`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LayerTensor {
    pub name: String,
    #[serde(default)]
    pub bits: Option<u64>,
    /// `[out, in]`.
    #[serde(default)]
    pub shape: Option<Vec<u64>>,
    #[serde(default)]
    pub mse: Option<f64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `quantization_index.json` (v2).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QuantizationIndex {
    #[serde(default)]
    pub layers: Vec<LayerTensor>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl QuantizationIndex {
    /// The quantization method, when the index names one.
    pub fn method(&self) -> Option<&str> {
        ["quantization_method", "method"]
            .iter()
            .find_map(|k| self.extra.get(*k).and_then(Value::as_str))
    }
}

/// Read and parse a JSON file of the model folder.
pub fn read_json<T: DeserializeOwned>(
    files: &dyn ModelFiles,
    path: &str,
) -> Result<T, TrellisError> {
    let bytes = files.read_small(path, MAX_JSON_LEN)?;
    serde_json::from_slice(&bytes).map_err(|e| TrellisError::Json {
        file: path.to_string(),
        message: e.to_string(),
    })
}

/// Read `config.json` and check that it is an object with `model_type` or `architectures`.
pub fn read_config(files: &dyn ModelFiles) -> Result<Map<String, Value>, TrellisError> {
    let value: Value = read_json(files, CONFIG_FILE)?;
    let Value::Object(map) = value else {
        return Err(TrellisError::Config {
            problem: "is not a JSON object".into(),
        });
    };
    let has_type = map.get("model_type").is_some_and(Value::is_string);
    let has_arch = map
        .get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(Value::is_string));
    if !has_type && !has_arch {
        return Err(TrellisError::Config {
            problem: "has neither \"model_type\" nor \"architectures\"".into(),
        });
    }
    Ok(map)
}

/// The architecture a config names: `model_type`, else the first of `architectures`.
pub fn architecture(config: &Map<String, Value>) -> Option<String> {
    config
        .get("model_type")
        .and_then(Value::as_str)
        .or_else(|| {
            config
                .get("architectures")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find_map(Value::as_str))
        })
        .map(str::to_string)
}

/// The config keys `tritium inspect` shows as hyper-parameters, in this order.
pub const HYPER_PARAMETER_KEYS: &[&str] = &[
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "tie_word_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "torch_dtype",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_metadata_tolerates_the_leading_space_key() {
        let spaced: WeightIndex = serde_json::from_str(
            r#"{"metadata": {"total_size": 12.0, "format": "trellis_v3",
                " quantization": {"bits_per_weight": 3.0}}, "weight_map": {}}"#,
        )
        .unwrap();
        assert_eq!(spaced.total_size(), Some(12));
        assert_eq!(spaced.format(), Some("trellis_v3"));
        assert_eq!(spaced.quantization().unwrap()["bits_per_weight"], 3.0);
        let plain: WeightIndex = serde_json::from_str(
            r#"{"metadata": {"total_size": 7, "quantization": {"method": "x"}},
                "weight_map": {"a": "b.safetensors"}}"#,
        )
        .unwrap();
        assert_eq!(plain.total_size(), Some(7));
        assert_eq!(plain.quantization().unwrap()["method"], "x");
    }

    #[test]
    fn quantization_config_is_typed() {
        let qc: QuantizationConfig = serde_json::from_str(
            r#"{"quantization_version": "trellis_v3", "quantization_method": "trellis_ldlq",
                "global_config": {"hadamard_transform": true, "tile_size": 16},
                "tensor_metadata": {"w": {"bits": 3, "shape": [4096, 14336], "mse": 0.1}},
                "layer_allocation": {"0": {"mlp.gate_proj": 3}, "...": {}}}"#,
        )
        .unwrap();
        assert_eq!(qc.tensor_metadata["w"].shape, vec![4096, 14336]);
        assert_eq!(qc.global_config.unwrap().hadamard_transform, Some(true));
        assert!(serde_json::from_str::<QuantizationConfig>(r#"{"tensor_metadata": []}"#).is_err());
    }
}
