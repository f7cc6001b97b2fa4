//! The GGUF view of an RDRR folder: the header the configuration, tokenizer and chat template
//! are read from, with tensor infos under GGUF names, and where each of those tensors comes
//! from in the folder.
//!
//! - A folder converted from a GGUF by tritium carries `gguf_metadata.json`: the view is that
//!   file's metadata with the manifest's tensors, names unchanged.
//! - A folder written as the seed's converter writes it has none: Hugging Face tensor names
//!   (`model.layers.0.self_attn.q_proj.weight`), the manifest's `architecture` block and a
//!   `tokenizer.json`. The view's metadata is what llama.cpp's converter writes for that
//!   checkpoint ([`hf::gguf_metadata`]), from a `config.json` when the folder has one and the
//!   `architecture` block for what it lacks; each tensor is renamed to its GGUF name.
//!
//! Such a folder holds its weights as the checkpoint does, so Llama's q and k rows are in
//! Hugging Face's order, for rotate-half (NeoX) RoPE, as the seed's runtime applies it. GGUF's
//! `llama` rotates adjacent pairs, so those rows are permuted as they are read, exactly as
//! llama.cpp's converter permutes them ([`hf::permute_rows_for_rope`]). Qwen2 and Qwen3 keep
//! rotate-half RoPE in GGUF too: their rows are read as they are.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use super::gguf_metadata::GgufMetadata;
use super::manifest::Manifest;
use super::metadata::Architecture;
use super::{RdrrError, MANIFEST_FILE, MAX_JSON_BYTES};
use crate::formats::gguf::{GgufFile, TensorInfo, DEFAULT_ALIGNMENT};
use crate::formats::hf::{self, HfArch, HfConfig};
use crate::formats::source::ModelFiles;

/// How a tensor of the view is made from the folder's tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewSource {
    /// The tensor's name in the manifest.
    pub name: String,
    /// Permute its rows for RoPE over this many heads (Llama's q and k from a folder with
    /// Hugging Face names); `None`: the bytes as they are.
    pub rope_heads: Option<u64>,
}

/// Where the view's tensors come from: GGUF name -> the folder's tensor, for the names that
/// differ (a view of a folder with GGUF names maps nothing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ViewSources(BTreeMap<String, ViewSource>);

impl ViewSources {
    /// The manifest's name for the view's tensor `name`.
    pub fn manifest_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.0.get(name).map_or(name, |s| s.name.as_str())
    }

    /// Whether the view's tensor `name` is the folder's bytes unchanged (so its location in
    /// the shards may be read directly).
    pub fn verbatim(&self, name: &str) -> bool {
        self.0.get(name).is_none_or(|s| s.rope_heads.is_none())
    }

    /// The view's bytes of tensor `name` (whose info in the view is `info`), from the bytes of
    /// its manifest tensor.
    pub fn finish(&self, info: &TensorInfo, bytes: Vec<u8>) -> Result<Vec<u8>, RdrrError> {
        let Some(heads) = self.0.get(&info.name).and_then(|s| s.rope_heads) else {
            return Ok(bytes);
        };
        let bad = |message: String| RdrrError::BadTensor {
            name: self.manifest_name(&info.name).to_string(),
            message,
        };
        let (cols, rows) = match info.dims[..] {
            [cols, rows] => (cols, rows),
            _ => return Err(bad(format!("{:?} is not a matrix", info.dims))),
        };
        let row_bytes = info.dtype.tensor_bytes(cols).ok_or_else(|| {
            bad(format!(
                "rows of {cols} are not whole {} blocks",
                info.dtype
            ))
        })?;
        hf::permute_rows_for_rope(&bytes, rows as usize, heads as usize, row_bytes as usize)
            .map_err(bad)
    }
}

/// The GGUF view of an RDRR folder and where its tensors come from.
#[derive(Debug, Clone)]
pub struct RdrrView {
    pub header: GgufFile,
    pub sources: ViewSources,
}

/// The view of the folder: from `gguf_metadata.json` when it has one, else from Hugging Face
/// tensor names, the `architecture` block, `config.json` and `tokenizer_config.json`.
pub fn view(manifest: &Manifest, files: &dyn ModelFiles) -> Result<RdrrView, RdrrError> {
    if let Some(meta) = GgufMetadata::load(manifest, files)? {
        return Ok(RdrrView {
            header: meta.header(manifest)?,
            sources: ViewSources::default(),
        });
    }
    if !manifest.tensors.keys().any(|n| n.starts_with("model.")) {
        return Err(foreign_error(
            "it has no gguf_metadata.json (the GGUF metadata tritium's converter keeps), and its \
             tensors are not named as a Hugging Face checkpoint names them (model.embed_tokens.weight, \
             model.layers.N....), so its architecture is unknown"
                .into(),
        ));
    }
    hf_view(manifest, files)
}

fn foreign_error(message: String) -> RdrrError {
    RdrrError::Field {
        file: MANIFEST_FILE.into(),
        field: "architecture".into(),
        message,
    }
}

/// The `architecture` block's keys and their `config.json` names.
const ARCHITECTURE_KEYS: [(&str, &str); 10] = [
    ("numLayers", "num_hidden_layers"),
    ("hiddenSize", "hidden_size"),
    ("intermediateSize", "intermediate_size"),
    ("numAttentionHeads", "num_attention_heads"),
    ("numKeyValueHeads", "num_key_value_heads"),
    ("headDim", "head_dim"),
    ("vocabSize", "vocab_size"),
    ("maxSeqLen", "max_position_embeddings"),
    ("ropeTheta", "rope_theta"),
    ("rmsNormEps", "rms_norm_eps"),
];

/// The configuration of a folder with Hugging Face names: `config.json` where the folder has
/// one, the `architecture` block for every field it lacks; the family from `architectures`,
/// else from the tensors (q/k/v biases: Qwen2; q/k norms: Qwen3; plain: Llama).
fn hf_config(manifest: &Manifest, files: &dyn ModelFiles) -> Result<(HfConfig, HfArch), RdrrError> {
    let mut config: Map<String, Json> = if files.exists("config.json") {
        let bytes = files.read_small("config.json", MAX_JSON_BYTES)?;
        match super::json::parse("config.json", &bytes)? {
            Json::Object(o) => o,
            _ => {
                return Err(RdrrError::Json {
                    file: "config.json".into(),
                    message: "the top level must be an object".into(),
                })
            }
        }
    } else {
        Map::new()
    };
    match &manifest.architecture {
        Some(Architecture::Config(a)) => {
            let entries: BTreeMap<String, Json> = a.entries().into_iter().collect();
            for (ours, hf) in ARCHITECTURE_KEYS {
                if let (Some(v), false) = (entries.get(ours), config.contains_key(hf)) {
                    config.insert(hf.into(), v.clone());
                }
            }
        }
        _ if config.is_empty() => {
            return Err(foreign_error(
                "the folder has no gguf_metadata.json, no `architecture` object and no \
                 config.json: the model's shape (layers, widths, heads) is unknown"
                    .into(),
            ))
        }
        _ => {}
    }
    for (ours, hf) in &ARCHITECTURE_KEYS[..5] {
        if !config.contains_key(*hf) {
            return Err(foreign_error(format!(
                "{ours} is missing (nor does a config.json give {hf})"
            )));
        }
    }
    let has = |suffix: &str| manifest.tensors.keys().any(|n| n.ends_with(suffix));
    if !config.contains_key("vocab_size") {
        let rows = manifest
            .tensors
            .get("model.embed_tokens.weight")
            .and_then(|t| t.shape.first().copied());
        match rows {
            Some(rows) => config.insert("vocab_size".into(), rows.into()),
            None => return Err(foreign_error("vocabSize is missing".into())),
        };
    }
    if !config.contains_key("architectures") {
        let family = if has(".self_attn.qkv_proj.weight") {
            "Phi3ForCausalLM"
        } else if has(".pre_feedforward_layernorm.weight") {
            "Gemma2ForCausalLM"
        } else if has(".self_attn.q_norm.weight") {
            "Qwen3ForCausalLM"
        } else if has(".self_attn.q_proj.bias") {
            "Qwen2ForCausalLM"
        } else {
            "LlamaForCausalLM"
        };
        config.insert("architectures".into(), Json::from(vec![family]));
    }
    if !config.contains_key("tie_word_embeddings") {
        let tied = !manifest.tensors.contains_key("lm_head.weight");
        config.insert("tie_word_embeddings".into(), tied.into());
    }
    let hf = |e: hf::HfError| foreign_error(e.to_string());
    let config = HfConfig::parse(&serde_json::to_vec(&config).unwrap_or_default()).map_err(hf)?;
    let arch = config.arch().map_err(hf)?;
    if !matches!(arch, HfArch::Llama | HfArch::Qwen2 | HfArch::Qwen3) {
        return Err(foreign_error(format!(
            "{arch:?} folders with Hugging Face tensor names are not supported without \
             gguf_metadata.json (Llama, Qwen2 and Qwen3 are)"
        )));
    }
    config.check_supported(arch).map_err(hf)?;
    Ok((config, arch))
}

/// The view of a folder with Hugging Face tensor names.
fn hf_view(manifest: &Manifest, files: &dyn ModelFiles) -> Result<RdrrView, RdrrError> {
    let (config, arch) = hf_config(manifest, files)?;
    let name = manifest.model_id.as_deref().unwrap_or("");
    let metadata =
        hf::view_metadata(&config, arch, name, files).map_err(|e| foreign_error(e.to_string()))?;

    let mut renamed: Vec<(String, String, Option<u64>)> = Vec::new();
    for hf_name in manifest.tensors.keys() {
        if hf_name.ends_with("rotary_emb.inv_freq") {
            continue;
        }
        let tied_head = hf_name == "lm_head.weight" && config.tie_word_embeddings == Some(true);
        match hf::renamed(&config, arch, hf_name) {
            Some(_) if tied_head => {}
            Some((gguf, heads)) => renamed.push((gguf, hf_name.clone(), heads)),
            None => {
                return Err(foreign_error(format!(
                    "tensor {hf_name} has no place in a {arch:?} model with {} layers",
                    config.num_hidden_layers
                )))
            }
        }
    }
    renamed.sort_by_cached_key(|(gguf, _, _)| hf::gguf_rank(gguf));

    let mut tensors = Vec::with_capacity(renamed.len());
    let mut sources = BTreeMap::new();
    let mut offset = 0u64;
    for (gguf, hf_name, rope_heads) in renamed {
        let t = &manifest.tensors[&hf_name];
        let dtype = t.ggml_type()?;
        tensors.push(TensorInfo {
            name: gguf.clone(),
            dims: t.shape.iter().rev().copied().collect(),
            dtype,
            offset,
            n_bytes: t.size,
        });
        offset = offset
            .checked_add(t.size)
            .and_then(|end| end.checked_next_multiple_of(DEFAULT_ALIGNMENT))
            .ok_or_else(|| RdrrError::TensorTooLarge {
                name: hf_name.clone(),
                size: t.size,
            })?;
        sources.insert(
            gguf,
            ViewSource {
                name: hf_name,
                rope_heads,
            },
        );
    }
    if !tensors.iter().any(|t| t.name == "token_embd.weight") {
        return Err(foreign_error(
            "the folder has no model.embed_tokens.weight".into(),
        ));
    }
    let header = GgufFile::from_parts(3, metadata, tensors, DEFAULT_ALIGNMENT)?;
    Ok(RdrrView {
        header,
        sources: ViewSources(sources),
    })
}
