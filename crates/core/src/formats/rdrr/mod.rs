//! RDRR: DOPPLER's sharded model format (`manifest.json`, `tensors.json`, `shard_NNNNN.bin`).
//!
//! Pure: every byte is read through [`ModelFiles`] / [`ByteSource`](super::source::ByteSource).
//!
//! - [`Manifest::load`] reads `manifest.json` (v1, or the deprecated 0.x form with inline
//!   tensors) and the external `tensorsFile`, and normalizes the field spellings the converters
//!   have used over time into one [`Manifest`].
//! - [`validate`] checks the manifest against itself and against the shard files' lengths and
//!   returns every problem it finds, each naming its shard, tensor, group or field.
//! - [`verify`] recomputes every shard hash and every group hash (SHA-256 or BLAKE3), streaming.
//! - [`read_tensor`] reads one tensor's bytes; [`describe`] summarizes the model for `inspect`.
//! - [`RdrrWriter`] writes a model (shards, hashes, groups, manifest) through a
//!   [`ModelWriter`](super::source::ModelWriter).
//!
//! A manifest never makes us touch a file outside the model folder: shard names must be plain
//! file names, checked before any shard is opened.

/// Enums whose variants are fixed strings in the manifest: `as_str`, `from_name`, the list of
/// valid names (for error messages) and `Display`.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $var),+
        }

        impl $name {
            /// Every variant, as the manifest spells it.
            pub const NAMES: &'static [&'static str] = &[$($s),+];

            /// The name as the manifest spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$var => $s),+
                }
            }

            /// The variant spelled `name` (exactly, as the manifest spells it).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($s => Some(Self::$var),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

mod builder;
mod foreign;
mod from_gguf;
mod gguf_metadata;
mod json;
mod manifest;
mod metadata;
mod normalize;
mod runtime_hints;
mod to_gguf;
mod validate;
mod verify;

pub use builder::{RdrrWriter, WriterOptions};
pub use foreign::{view, RdrrView, ViewSource, ViewSources};
pub use from_gguf::{
    convert_gguf, convert_gguf_view, gguf_tensor_group, quantization_summary, ConvertOptions,
    ConvertReport, ExtraFileData,
};
pub use gguf_metadata::{GgufMetadata, GGUF_METADATA_FILE, GGUF_METADATA_FORMAT};
pub use manifest::{
    Group, HashAlgorithm, HashAlgorithmSource, Manifest, Shard, TensorLocation, TensorSpan,
};
pub use metadata::{
    AdapterType, Architecture, ArchitectureConfig, ExtraFile, GroupKind, LoraConfig, ModelType,
    MoeConfig, QuantizationInfo, TensorLayout, TokenizerInfo,
};
pub use runtime_hints::{
    AttentionKernel, AttentionTier, DequantKernel, GpuFeature, MatmulKernel, PreferredKernels,
    RmsNormKernel, RuntimeOptimizations, SoftmaxKernel, KERNEL_OPERATIONS,
};
pub use to_gguf::write_gguf;
pub use validate::{validate, validate_manifest, IssueKind, RdrrIssue, ValidationReport};
pub use verify::{
    blake3_subtree_root, hash_hex, verify, verify_with, GroupVerification, ShardVerification,
    StreamHasher, VerifyOptions, VerifyProgress, VerifyReport, VerifyStage, VerifyStatus,
    BLAKE3_HINT,
};

use super::source::{ModelFiles, SourceError};
use super::{ModelDescription, TensorDescription};
use crate::quant::GgmlType;

/// The manifest's file name inside the model folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The tokenizer file a model folder may hold next to the manifest.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The largest `manifest.json` or `tensors.json` we read.
pub const MAX_JSON_BYTES: u64 = 64 << 20;
/// The converters' default shard size.
pub const DEFAULT_SHARD_SIZE: u64 = 64 << 20;
/// Where tensors start inside a shard (a multiple of this), for OPFS and disk I/O.
pub const TENSOR_ALIGNMENT: u64 = 4096;

/// Errors of the RDRR reader, validator, verifier and writer.
#[derive(Debug, thiserror::Error)]
pub enum RdrrError {
    /// The file is not JSON, or not the JSON shape expected at its top level.
    #[error("{file}: not valid JSON: {message}")]
    Json { file: String, message: String },
    /// A field has the wrong type, is missing, or holds an impossible value.
    #[error("{file}: field {field}: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
    /// A field that takes one of a fixed set of names holds another.
    #[error("{file}: field {field}: unknown value {value:?}; expected one of: {expected}")]
    UnknownVariant {
        file: String,
        field: String,
        value: String,
        expected: String,
    },
    #[error("{file}: {len} bytes is more than the {max} bytes allowed for this file")]
    TooLarge { file: String, len: u64, max: u64 },
    /// A file name that could lead outside the model folder (or into a subfolder, for shards).
    #[error("{field}: {name:?} is not a plain file name inside the model folder")]
    UnsafeFileName { field: String, name: String },
    #[error("unknown tensor dtype {dtype:?} (expected a GGML type name such as F32, F16, BF16, Q8_0, Q4_K, Q4_K_M, Q6_K or I2_S)")]
    UnknownDtype { dtype: String },
    #[error("tensor {0:?} is not in the manifest")]
    NoSuchTensor(String),
    #[error("{what}: shard {shard} does not exist (the manifest lists {count} shards)")]
    NoSuchShard {
        what: String,
        shard: usize,
        count: usize,
    },
    #[error("tensor {name:?}: bytes up to {end} lie past the end of shard {shard} ({len} bytes)")]
    TensorOutOfBounds {
        name: String,
        shard: usize,
        end: u64,
        len: u64,
    },
    #[error("tensor {name:?}: its spans hold {spans} bytes but the tensor is {size} bytes")]
    SpanSizeMismatch { name: String, spans: u64, size: u64 },
    #[error("tensor {name:?}: {size} bytes cannot be held in memory on this machine")]
    TensorTooLarge { name: String, size: u64 },
    /// A tensor whose entry contradicts itself (its size, shape and dtype disagree, or its
    /// spans share bytes): reading it would trust a size its bytes do not back.
    #[error("tensor {name:?}: {message}")]
    BadTensor { name: String, message: String },
    /// The manifest's tensor layout does not match itself or the files ([`check_layout`]):
    /// the first few problems, and how many there are.
    #[error("{}", layout_message(problems))]
    Layout { problems: Vec<String> },
    /// The writer was asked for something it cannot write.
    #[error("writer: {0}")]
    Writer(String),
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Writing or reading the GGUF side of a conversion.
    #[error(transparent)]
    Gguf(#[from] crate::formats::gguf::GgufError),
}

/// The GGML storage type of an RDRR dtype string (`Q4_K_M`, `Q4_K`, `F16`, `BF16`, `f32`,
/// `I2_S`, `Q8_0`, ...; case-insensitive). The K-quant mix names `Q*_K_S`, `Q*_K_M` and
/// `Q*_K_L` name how a whole model was quantized, not a block layout: their tensors are stored
/// as plain `Q*_K` blocks.
pub fn ggml_type_for_dtype(dtype: &str) -> Result<GgmlType, RdrrError> {
    let unknown = || RdrrError::UnknownDtype {
        dtype: dtype.to_string(),
    };
    if let Some(t) = GgmlType::from_name(dtype) {
        return Ok(t);
    }
    let upper = dtype.to_ascii_uppercase();
    let base = ["_S", "_M", "_L"]
        .iter()
        .find_map(|suffix| upper.strip_suffix(suffix))
        .filter(|base| base.ends_with("_K"))
        .ok_or_else(unknown)?;
    GgmlType::from_name(base).ok_or_else(unknown)
}

/// The [`IssueKind`]s of [`validate`] that make a model unsafe to read or run: its tensors
/// would claim bytes the files do not hold (spans out of range, overlapping, or not adding up;
/// a size its shape and dtype do not take), or its files are not the ones the manifest
/// describes (missing, of another length, named unsafely or twice). [`check_layout`] refuses a
/// model with any of these; the others (hashes, counts, groups, normalization) do not change
/// what is read.
pub const LAYOUT_ISSUES: &[IssueKind] = &[
    IssueKind::UnsafeFileName,
    IssueKind::DuplicateShardFile,
    IssueKind::FileNameCollision,
    IssueKind::ShardMissing,
    IssueKind::ShardSize,
    IssueKind::ShardOutOfRange,
    IssueKind::TensorOutOfBounds,
    IssueKind::SpanSize,
    IssueKind::SpanOverlap,
    IssueKind::UnknownDtype,
    IssueKind::TensorSize,
    IssueKind::TensorShape,
];

/// Refuse a model whose layout cannot be trusted: every issue of a [`LAYOUT_ISSUES`] kind that
/// [`validate`] finds (it opens each shard for its length and reads nothing). Once this passes,
/// the tensors hold at most the bytes the shard files hold, each tensor's size is what its
/// shape and dtype take, and reading every tensor reads each shard byte at most once: what
/// runs, dumps or converts a model calls it before allocating anything from the manifest.
pub fn check_layout(manifest: &Manifest, files: &dyn ModelFiles) -> Result<(), RdrrError> {
    let problems = validate(manifest, files).problems_of(LAYOUT_ISSUES);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(RdrrError::Layout { problems })
    }
}

/// [`RdrrError::Layout`]'s message: the first few problems and the count.
fn layout_message(problems: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = format!(
        "the manifest's tensor layout does not match the model's files ({} problem{}): {}",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        problems[..problems.len().min(SHOWN)].join("; ")
    );
    if problems.len() > SHOWN {
        s.push_str(&format!("; and {} more", problems.len() - SHOWN));
    }
    s
}

/// One tensor's entry against itself: its dtype is known, its size is what its shape and dtype
/// take (checked arithmetic), its spans add up to its size and share no bytes. Then the bytes
/// it claims are backed by as many distinct bytes of its shards, once each span is checked to
/// lie inside its shard: what reads a tensor's spans into one buffer calls this first.
pub fn check_tensor(name: &str, tensor: &TensorLocation) -> Result<(), RdrrError> {
    let bad = |message: String| RdrrError::BadTensor {
        name: name.to_string(),
        message,
    };
    let ty = tensor.ggml_type()?;
    let shape = &tensor.shape;
    let elements = tensor
        .element_count()
        .ok_or_else(|| bad(format!("shape {shape:?} has more than 2^64 elements")))?;
    match ty.tensor_bytes(elements) {
        Some(expected) if expected == tensor.size => {}
        Some(expected) => {
            return Err(bad(format!(
                "is {} bytes, but {elements} elements of {} take {expected}",
                tensor.size, tensor.dtype
            )))
        }
        None => {
            return Err(bad(format!(
                "shape {shape:?} of {} has no size this reader can check",
                tensor.dtype
            )))
        }
    }
    let spans_total = tensor
        .spans
        .iter()
        .try_fold(0u64, |acc, s| acc.checked_add(s.size));
    if spans_total != Some(tensor.size) {
        return Err(RdrrError::SpanSizeMismatch {
            name: name.to_string(),
            // u64::MAX stands for "more than 2^64".
            spans: spans_total.unwrap_or(u64::MAX),
            size: tensor.size,
        });
    }
    let mut spans: Vec<&TensorSpan> = tensor.spans.iter().filter(|s| s.size > 0).collect();
    spans.sort_unstable_by_key(|s| (s.shard, s.offset));
    for pair in spans.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.shard == b.shard && a.offset.saturating_add(a.size) > b.offset {
            return Err(bad(format!(
                "two of its spans share bytes of shard {} (at {} and {})",
                a.shard, a.offset, b.offset
            )));
        }
    }
    Ok(())
}

/// Read one tensor's bytes, joining its spans when it crosses shards. The entry is checked
/// against itself first (size, shape and dtype agree; spans add up and share no bytes) and
/// every range against the shard file's real length, before anything is allocated: the
/// allocation is never larger than the distinct bytes of the files it reads.
pub fn read_tensor(
    manifest: &Manifest,
    files: &dyn ModelFiles,
    name: &str,
) -> Result<Vec<u8>, RdrrError> {
    let tensor = manifest
        .tensors
        .get(name)
        .ok_or_else(|| RdrrError::NoSuchTensor(name.to_string()))?;
    check_tensor(name, tensor)?;
    // Open every shard and check every range first, so a corrupt size allocates nothing.
    let mut sources = Vec::with_capacity(tensor.spans.len());
    for span in &tensor.spans {
        if span.shard >= manifest.shards.len() {
            return Err(RdrrError::NoSuchShard {
                what: format!("tensor {name:?}"),
                shard: span.shard,
                count: manifest.shards.len(),
            });
        }
        let file = manifest.shard_file(span.shard)?;
        let source = files.open(file)?;
        let len = source.len();
        match span.offset.checked_add(span.size) {
            Some(end) if end <= len => {}
            end => {
                return Err(RdrrError::TensorOutOfBounds {
                    name: name.to_string(),
                    shard: span.shard,
                    end: end.unwrap_or(u64::MAX),
                    len,
                })
            }
        }
        sources.push(source);
    }
    let total = usize::try_from(tensor.size).map_err(|_| RdrrError::TensorTooLarge {
        name: name.to_string(),
        size: tensor.size,
    })?;
    let mut out = vec![0u8; total];
    let mut at = 0usize;
    for (span, source) in tensor.spans.iter().zip(&sources) {
        // Fits: the span sizes add up to `total`, which fits in usize.
        let len = span.size as usize;
        source.read_at(span.offset, &mut out[at..at + len])?;
        at += len;
    }
    Ok(out)
}

/// What `tritium inspect` shows of an RDRR model.
pub fn describe(manifest: &Manifest) -> ModelDescription {
    let format = manifest.format_name();
    let architecture = match &manifest.architecture {
        Some(Architecture::Name(name)) => Some(name.clone()),
        _ => manifest.model_type.clone(),
    };
    let mut hyper_parameters = Vec::new();
    if let Some(Architecture::Config(config)) = &manifest.architecture {
        hyper_parameters.extend(config.entries());
    }
    if let Some(moe) = &manifest.moe_config {
        hyper_parameters.extend(
            moe.entries()
                .into_iter()
                .map(|(k, v)| (format!("moeConfig.{k}"), v)),
        );
    }
    if let Some(lora) = &manifest.lora_config {
        hyper_parameters.push(("loraConfig.rank".into(), lora.rank.into()));
        if let Some(alpha) = lora.alpha {
            hyper_parameters.push(("loraConfig.alpha".into(), alpha.into()));
        }
        if !lora.target_modules.is_empty() {
            hyper_parameters.push((
                "loraConfig.targetModules".into(),
                lora.target_modules.clone().into(),
            ));
        }
    }
    let tokenizer = match &manifest.tokenizer {
        Some(TokenizerInfo {
            kind: Some(kind), ..
        }) => Some(kind.clone()),
        Some(TokenizerInfo {
            file: Some(file), ..
        }) => Some(file.clone()),
        _ if manifest.tokenizer_json_present => Some(TOKENIZER_FILE.to_string()),
        _ => None,
    };
    let mut rows: Vec<(&String, &TensorLocation)> = manifest.tensors.iter().collect();
    rows.sort_by_key(|(name, t)| (t.shard(), t.offset(), name.as_str()));
    let tensors = rows
        .into_iter()
        .map(|(name, t)| TensorDescription {
            name: name.clone(),
            dtype: t.dtype.clone(),
            shape: t.shape.clone(),
            bytes: t.size,
            location: t.location(),
        })
        .collect();
    ModelDescription {
        format: format.to_string(),
        architecture,
        hyper_parameters,
        tokenizer,
        tensors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_map_to_storage_types() {
        assert_eq!(ggml_type_for_dtype("Q4_K_M").unwrap(), GgmlType::Q4_K);
        assert_eq!(ggml_type_for_dtype("Q4_K_S").unwrap(), GgmlType::Q4_K);
        assert_eq!(ggml_type_for_dtype("q4_k").unwrap(), GgmlType::Q4_K);
        assert_eq!(ggml_type_for_dtype("Q6_K").unwrap(), GgmlType::Q6_K);
        assert_eq!(ggml_type_for_dtype("F16").unwrap(), GgmlType::F16);
        assert_eq!(ggml_type_for_dtype("BF16").unwrap(), GgmlType::BF16);
        assert_eq!(ggml_type_for_dtype("f32").unwrap(), GgmlType::F32);
        assert_eq!(ggml_type_for_dtype("I2_S").unwrap(), GgmlType::I2_S);
        assert_eq!(ggml_type_for_dtype("Q8_0").unwrap(), GgmlType::Q8_0);
        for bad in ["", "Q4", "Q8_0_M", "F16_M", "float8", "_M"] {
            let err = ggml_type_for_dtype(bad).unwrap_err();
            assert!(matches!(err, RdrrError::UnknownDtype { .. }), "{bad:?}");
        }
    }
}
