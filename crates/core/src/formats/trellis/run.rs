//! Running a Trellis checkpoint: its GGUF view (the header the engine reads the configuration
//! from, tensor infos under GGUF names) and each view tensor's bytes.
//!
//! The weights are dequantized as they are loaded, into types every backend takes: a quantized
//! weight becomes F16, which is exactly what the reference runtime computes with (it decodes to
//! f32 and rounds to f16; [`ResolvedWeight::decode`]); plain F32 and F16 tensors stay as they
//! are and BF16 ones are widened to F32 (exact). The configuration comes from `config.json`
//! through the Hugging Face mapping ([`hf::view_metadata`]), tensor names through
//! [`hf::renamed`]; Llama's q and k rows are permuted for GGUF's interleaved-pair RoPE, as
//! llama.cpp's converter permutes a checkpoint's. No Hadamard transform is applied, as in the
//! reference runtime.

use std::collections::BTreeMap;

use half::f16;
use serde_json::Value as Json;

use super::model::{Entry, TensorRef, TrellisModel};
use super::resolve::ResolvedWeight;
use super::TrellisError;
use crate::formats::gguf::{GgufFile, TensorInfo, DEFAULT_ALIGNMENT};
use crate::formats::hf::{self, HfArch, HfConfig};
use crate::formats::safetensors::{to_f32, Dtype};
use crate::formats::source::ModelFiles;
use crate::quant::GgmlType;

/// Where a view tensor comes from.
#[derive(Debug, Clone)]
enum Source {
    Quantized(Box<ResolvedWeight>),
    Plain(TensorRef),
}

/// A view tensor: its source and the heads its rows are permuted over for RoPE.
#[derive(Debug, Clone)]
struct ViewTensor {
    source: Source,
    rope_heads: Option<u64>,
}

/// A Trellis checkpoint opened for running.
#[derive(Debug, Clone)]
pub struct TrellisView {
    pub header: GgufFile,
    tensors: BTreeMap<String, ViewTensor>,
}

fn config_error(problem: String) -> TrellisError {
    TrellisError::Config { problem }
}

impl TrellisView {
    /// Open `files` for running: the model's tensors resolved (every quantized weight's parts
    /// consistent), the configuration read, every tensor placed in the architecture.
    pub fn open(files: &dyn ModelFiles) -> Result<TrellisView, TrellisError> {
        let model = TrellisModel::open(files)?;
        let mut config = model.config.clone().ok_or_else(|| {
            config_error("missing or not an object: the architecture is unknown".into())
        })?;
        let has = |name: &str| model.plain_tensor(name).is_some() || model.weight(name).is_some();
        if !config.contains_key("tie_word_embeddings") {
            config.insert(
                "tie_word_embeddings".into(),
                Json::Bool(!has("lm_head.weight")),
            );
        }
        let bytes = serde_json::to_vec(&config).unwrap_or_default();
        let hf_error = |e: hf::HfError| config_error(e.to_string());
        let config = HfConfig::parse(&bytes).map_err(hf_error)?;
        let arch = config.arch().map_err(hf_error)?;
        if !matches!(arch, HfArch::Llama | HfArch::Qwen2 | HfArch::Qwen3) {
            return Err(config_error(format!(
                "running {arch:?} Trellis models is not supported (Llama, Qwen2 and Qwen3 are)"
            )));
        }
        config.check_supported(arch).map_err(hf_error)?;

        let mut found: Vec<(String, ViewTensor, GgmlType, Vec<u64>)> = Vec::new();
        for entry in &model.entries {
            let (name, source, dtype, shape) = match *entry {
                Entry::Quantized(i) => {
                    let w = model.resolve(files, &model.weights[i])?;
                    let shape = vec![w.out as u64, w.in_ as u64];
                    (
                        w.name.clone(),
                        Source::Quantized(Box::new(w)),
                        GgmlType::F16,
                        shape,
                    )
                }
                Entry::Plain(i) => {
                    let t = &model.plain[i];
                    let dtype = match t.entry.dtype {
                        Dtype::F32 | Dtype::BF16 => GgmlType::F32,
                        Dtype::F16 => GgmlType::F16,
                        other => {
                            return Err(TrellisError::UnsupportedDtype {
                                file: t.file.clone(),
                                tensor: t.key().to_string(),
                                dtype: other.to_string(),
                            })
                        }
                    };
                    let name = t.key().replace("__", ".");
                    (name, Source::Plain(t.clone()), dtype, t.entry.shape.clone())
                }
            };
            // Producers may leave `.weight` off a quantized weight's name.
            let hf_name = match name.ends_with(".weight") || name.ends_with(".bias") {
                true => name,
                false => format!("{name}.weight"),
            };
            if hf_name.ends_with("rotary_emb.inv_freq") {
                continue;
            }
            let tied_head = hf_name == "lm_head.weight" && config.tie_word_embeddings == Some(true);
            match hf::renamed(&config, arch, &hf_name) {
                Some(_) if tied_head => {}
                Some((gguf, rope_heads)) => {
                    found.push((gguf, ViewTensor { source, rope_heads }, dtype, shape))
                }
                None => {
                    return Err(config_error(format!(
                        "tensor {hf_name} has no place in a {arch:?} model with {} layers",
                        config.num_hidden_layers
                    )))
                }
            }
        }
        found.sort_by_cached_key(|(gguf, ..)| hf::gguf_rank(gguf));

        let mut infos = Vec::with_capacity(found.len());
        let mut tensors = BTreeMap::new();
        let mut offset = 0u64;
        for (gguf, tensor, dtype, shape) in found {
            let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
            let n_bytes = elements
                .and_then(|n| dtype.tensor_bytes(n))
                .ok_or_else(|| config_error(format!("{gguf}: shape {shape:?} is too large")))?;
            infos.push(TensorInfo {
                name: gguf.clone(),
                dims: shape.iter().rev().copied().collect(),
                dtype,
                offset,
                n_bytes,
            });
            offset = (offset + n_bytes).next_multiple_of(DEFAULT_ALIGNMENT);
            tensors.insert(gguf, tensor);
        }
        if !tensors.contains_key("token_embd.weight") {
            return Err(config_error(
                "the model has no model.embed_tokens.weight".into(),
            ));
        }
        let name = config.name_or_path.clone().unwrap_or_default();
        let metadata = hf::view_metadata(&config, arch, &name, files).map_err(hf_error)?;
        let header = GgufFile::from_parts(3, metadata, infos, DEFAULT_ALIGNMENT)
            .map_err(|e| config_error(e.to_string()))?;
        Ok(TrellisView { header, tensors })
    }

    /// The bytes of the view's tensor `name` (a GGUF name), in the view's type.
    pub fn read(&self, files: &dyn ModelFiles, name: &str) -> Result<Vec<u8>, TrellisError> {
        let missing = || TrellisError::TensorNotFound {
            name: name.to_string(),
        };
        let t = self.tensors.get(name).ok_or_else(missing)?;
        let info = self.header.tensor(name).ok_or_else(missing)?;
        let bytes = match &t.source {
            Source::Quantized(w) => {
                let values: Vec<f16> = w.decode(files)?;
                values.iter().flat_map(|v| v.to_le_bytes()).collect()
            }
            Source::Plain(p) => {
                let raw = p.read(files)?;
                match p.entry.dtype {
                    Dtype::F32 | Dtype::F16 => raw,
                    dtype => to_f32(dtype, &raw)
                        .ok_or_else(|| TrellisError::UnsupportedDtype {
                            file: p.file.clone(),
                            tensor: p.key().to_string(),
                            dtype: dtype.to_string(),
                        })?
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                }
            }
        };
        let Some(heads) = t.rope_heads else {
            return Ok(bytes);
        };
        let (cols, rows) = match info.dims[..] {
            [cols, rows] => (cols, rows),
            _ => {
                return Err(config_error(format!(
                    "{name}: {:?} is not a matrix",
                    info.dims
                )))
            }
        };
        let row_bytes = info.dtype.tensor_bytes(cols).unwrap_or(0) as usize;
        hf::permute_rows_for_rope(&bytes, rows as usize, heads as usize, row_bytes)
            .map_err(|e| config_error(format!("{name}: {e}")))
    }
}
