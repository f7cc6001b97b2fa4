//! Trellis quantized checkpoints: the flat v3 layout (HuggingFace-style shards +
//! `model.safetensors.index.json` + `quantization_config.json`) and the legacy v2 layout
//! (`layer_XXXX/` directories), read through [`ModelFiles`].
//!
//! What is computed follows the reference runtime (`shared/guide/trellis.md`) where it differs
//! from the spec: one header byte per indices tensor, `[out, in]` orientation, scale groups
//! along the input axis, and **no Hadamard transform at run time** even when the config says
//! `hadamard_transform: true` (the reference runtime applies none; matching it keeps outputs
//! equal). The decode itself lives in [`crate::quant::trellis`].
//!
//! Entry points: [`describe`] (for `tritium inspect`), [`validate()`], [`dequantize_tensor`],
//! [`migrate_v2_to_v3`].

pub mod index;
pub mod migrate;
pub mod model;
pub mod resolve;
pub mod run;
pub mod validate;

use serde_json::Value;

pub use index::{QuantizationConfig, TensorMetadata, WeightIndex};
pub use migrate::{
    migrate_v2_to_v3, parse_shard_size, MigrateOptions, MigrationReport, DEFAULT_SHARD_SIZE,
};
pub use model::{detect_layout, Entry, Layout, Part, Severity, TensorRef, TrellisModel};
pub use resolve::ResolvedWeight;
pub use run::TrellisView;
pub use validate::{validate, Issue, ValidationReport};

use super::safetensors::{to_f32, SafetensorsError};
use super::source::{ModelFiles, SourceError};
use super::{ModelDescription, TensorDescription};
use crate::quant::trellis::TrellisQuantError;

/// Errors of the Trellis reader, validator and migration. Each names the file, tensor or
/// field it is about; the validator reports exactly these messages.
#[derive(Debug, thiserror::Error)]
pub enum TrellisError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    #[error("{tensor}: {source}")]
    Decode {
        tensor: String,
        #[source]
        source: TrellisQuantError,
    },
    #[error(
        "not a Trellis model folder: found neither model.safetensors.index.json (v3) nor \
         layer_XXXX/ directories (v2)"
    )]
    UnknownLayout,
    #[error("{file}: {message}")]
    Json { file: String, message: String },
    #[error("config.json: {problem}")]
    Config { problem: String },
    #[error("{file}: {problem}")]
    Layout { file: String, problem: String },
    #[error(
        "model.safetensors.index.json: weight_map maps {key} to {shard:?}, which is not a plain \
         file name in the model folder"
    )]
    UnsafeShardName { key: String, shard: String },
    #[error(
        "{shard}: named in model.safetensors.index.json's weight_map ({count} tensors, such as \
         {key}) but the file does not exist"
    )]
    MissingShard {
        shard: String,
        key: String,
        count: usize,
    },
    #[error("{shard}: has no tensor {key}, which model.safetensors.index.json's weight_map places there")]
    KeyNotInShard { shard: String, key: String },
    #[error("{shard}: tensor {key} is not in model.safetensors.index.json's weight_map (orphan)")]
    OrphanTensor { shard: String, key: String },
    #[error("{file}: tensor {key} is also in {other}")]
    DuplicateTensor {
        key: String,
        file: String,
        other: String,
    },
    #[error("{weight}: quantized weight has no {part} tensor (it has: {present})")]
    MissingPart {
        weight: String,
        part: &'static str,
        present: String,
    },
    #[error(
        "{file}: {tensor} holds int16 indices: that is the retired Trellis v1 format, which is not \
         supported (v3 stores u8 bit-packed indices with a one-byte header)"
    )]
    RetiredV1Indices { file: String, tensor: String },
    #[error("{file}: {tensor} has dtype {dtype}, expected {expected}")]
    PartDtype {
        file: String,
        tensor: String,
        dtype: String,
        expected: &'static str,
    },
    #[error("{file}: {tensor} has shape {shape:?}, expected {expected}")]
    PartShape {
        file: String,
        tensor: String,
        shape: Vec<u64>,
        expected: String,
    },
    #[error(
        "{file}: {tensor} holds {got} bytes; a [{out}, {in_}] weight at {bits} bits needs \
         1 + {tiles_out}*{tiles_in}*32*{bits} = {expected}"
    )]
    IndicesLength {
        file: String,
        tensor: String,
        got: u64,
        out: usize,
        in_: usize,
        bits: u32,
        tiles_out: usize,
        tiles_in: usize,
        expected: u64,
    },
    #[error("{file}: {tensor} header byte is {header}, expected a bit count in 2..8")]
    HeaderOutOfRange {
        file: String,
        tensor: String,
        header: u8,
    },
    #[error("{file}: {tensor} header byte says {header} bits but {meta_file} says {bits}")]
    HeaderMismatch {
        file: String,
        tensor: String,
        header: u8,
        bits: u32,
        meta_file: String,
    },
    #[error("{file}: {tensor} holds a non-finite scale ({value}) at element {index}")]
    NonFiniteScale {
        file: String,
        tensor: String,
        index: u64,
        value: f32,
    },
    #[error(
        "{file}: {tensor} holds {count} values other than +1/-1 (the first is {value} at element \
         {index})"
    )]
    SignsNotUnit {
        file: String,
        tensor: String,
        count: u64,
        index: u64,
        value: f32,
    },
    #[error("{meta_file}: {weight}: bits is {bits}, expected 2..8")]
    MetadataBits {
        meta_file: String,
        weight: String,
        bits: u64,
    },
    #[error("{meta_file}: {weight}: shape {shape:?} is not [out, in]")]
    MetadataShape {
        meta_file: String,
        weight: String,
        shape: Vec<u64>,
    },
    #[error("{meta_file}: has no entry for quantized weight {weight}")]
    NotCovered { meta_file: String, weight: String },
    #[error(
        "model.safetensors.index.json: metadata.total_size is {stated}, but the mapped tensors \
         hold {actual} bytes"
    )]
    TotalSize { stated: u64, actual: u64 },
    #[error("no tensor named {name} in this model")]
    TensorNotFound { name: String },
    #[error("{file}: {tensor} has dtype {dtype}, which cannot be converted to f32")]
    UnsupportedDtype {
        file: String,
        tensor: String,
        dtype: String,
    },
    #[error("migration: {problem}")]
    Migration { problem: String },
    #[error("migration: the written model does not validate: {}", .issues.join("; "))]
    MigratedInvalid { issues: Vec<String> },
}

/// What `tritium inspect` shows of a Trellis folder: format, architecture and
/// hyper-parameters from `config.json`, one row per logical tensor (a quantized weight is one
/// row, dtype `trellis-{b}bit`, shape `[out, in]`, bytes of its four parts together).
pub fn describe(files: &dyn ModelFiles) -> Result<ModelDescription, TrellisError> {
    let model = TrellisModel::open(files)?;
    let layout = model.layout.unwrap_or(Layout::V3);
    let mut hyper_parameters: Vec<(String, Value)> = Vec::new();
    let mut architecture = None;
    if let Some(config) = &model.config {
        architecture = index::architecture(config);
        for key in index::HYPER_PARAMETER_KEYS {
            if let Some(v) = config.get(*key) {
                hyper_parameters.push((key.to_string(), v.clone()));
            }
        }
    }
    if let Some(g) = model
        .quant_config
        .as_ref()
        .and_then(|q| q.global_config.as_ref())
    {
        if let Some(avg) = g.average_bits_per_weight {
            hyper_parameters.push(("trellis.average_bits_per_weight".into(), Value::from(avg)));
        }
        if let Some(h) = g.hadamard_transform {
            // Recorded only: no Hadamard transform is applied at run time.
            hyper_parameters.push(("trellis.hadamard_transform".into(), Value::from(h)));
        }
    }
    let tokenizer = ["tokenizer.json", "tokenizer.model"]
        .into_iter()
        .find(|f| files.exists(f))
        .map(str::to_string);

    let plain_row = |t: &TensorRef| TensorDescription {
        name: t.key().to_string(),
        dtype: t.entry.dtype.to_string(),
        shape: t.entry.shape.clone(),
        bytes: t.entry.byte_len(),
        location: t.file.clone(),
    };
    let mut tensors = Vec::new();
    for entry in &model.entries {
        match *entry {
            Entry::Plain(k) => tensors.extend(model.plain.get(k).map(plain_row)),
            Entry::Quantized(k) => {
                let Some(w) = model.weights.get(k) else {
                    continue;
                };
                match model.resolve(files, w) {
                    Ok(r) => {
                        let mut location = r.indices.file.clone();
                        for t in [&r.scales, &r.su, &r.sv] {
                            if !location.split(", ").any(|f| f == t.file) {
                                location = format!("{location}, {}", t.file);
                            }
                        }
                        tensors.push(TensorDescription {
                            name: r.name.clone(),
                            dtype: format!("trellis-{}bit", r.bits),
                            shape: vec![r.out as u64, r.in_ as u64],
                            bytes: r.byte_len(),
                            location,
                        });
                    }
                    // A broken weight is shown part by part; `validate` says what is wrong.
                    Err(_) => tensors.extend(w.parts.iter().flatten().map(plain_row)),
                }
            }
        }
    }
    Ok(ModelDescription {
        format: layout.label().to_string(),
        architecture,
        hyper_parameters,
        tokenizer,
        tensors,
    })
}

/// Decode one logical tensor to f32, row-major. A quantized weight (named as in
/// [`describe`], with or without `.weight`, `.` or `__` separators) is decoded to f16 exactly
/// as the reference runtime does, then widened; shape `[out, in]`. Plain F32/F16/BF16 tensors
/// are converted.
pub fn dequantize_tensor(files: &dyn ModelFiles, name: &str) -> Result<Vec<f32>, TrellisError> {
    TrellisModel::open(files)?.dequantize(files, name)
}

impl TrellisModel {
    /// See [`dequantize_tensor`]; reuses an opened model.
    pub fn dequantize(&self, files: &dyn ModelFiles, name: &str) -> Result<Vec<f32>, TrellisError> {
        if let Some(w) = self.weight(name) {
            let resolved = self.resolve(files, w)?;
            return Ok(resolved.decode(files)?.into_iter().map(f32::from).collect());
        }
        if let Some(t) = self.plain_tensor(name) {
            let bytes = t.read(files)?;
            return to_f32(t.entry.dtype, &bytes).ok_or_else(|| TrellisError::UnsupportedDtype {
                file: t.file.clone(),
                tensor: t.key().to_string(),
                dtype: t.entry.dtype.to_string(),
            });
        }
        Err(TrellisError::TensorNotFound {
            name: name.to_string(),
        })
    }
}
