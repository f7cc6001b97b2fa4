//! The RDRR manifest: typed parsing of `manifest.json` (v1 and the deprecated 0.x form with
//! inline tensors) and `tensors.json`, normalized into one [`Manifest`] (see `normalize.rs` for
//! the field normalization table).

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{self, value_at, Obj};
use super::metadata::{
    AdapterType, Architecture, ExtraFile, GroupKind, LoraConfig, ModelType, MoeConfig,
    QuantizationInfo, TensorLayout, TokenizerInfo,
};
use super::normalize::{
    parse_groups, parse_shards, parse_tensors, read_manifest, read_tensors_file, RawManifest,
    RawTensor,
};
use super::runtime_hints::{self, RuntimeOptimizations};
use super::validate::{IssueKind, RdrrIssue};
use super::{ggml_type_for_dtype, RdrrError, MANIFEST_FILE, MAX_JSON_BYTES, TOKENIZER_FILE};
use crate::formats::source::{check_relative_path, ModelFiles};
use crate::quant::GgmlType;

named_enum! {
    /// How shard and group hashes are computed.
    HashAlgorithm {
        Sha256 = "sha256",
        Blake3 = "blake3",
    }
}

impl HashAlgorithm {
    /// Hex characters in a digest.
    pub fn hex_len(self) -> usize {
        64
    }

    /// The conventional display name (`SHA-256`, `BLAKE3`).
    pub fn display_name(self) -> &'static str {
        match self {
            HashAlgorithm::Sha256 => "SHA-256",
            HashAlgorithm::Blake3 => "BLAKE3",
        }
    }

    /// Parse a manifest's spelling: `sha256`, `SHA-256`, `blake3`, `BLAKE3`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "sha256" | "sha-256" => Some(HashAlgorithm::Sha256),
            "blake3" => Some(HashAlgorithm::Blake3),
            _ => None,
        }
    }
}

/// Where a shard's hash algorithm came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithmSource {
    /// The shard entry's own `hashAlgorithm`.
    Shard,
    /// The shard gave its digest only as `blake3`.
    Blake3Field,
    /// The manifest's `hashAlgorithm`.
    Manifest,
    /// Nothing said: SHA-256 assumed.
    Default,
}

/// One shard file, normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Shard {
    /// Position in the manifest's `shards` list: what tensors and groups refer to.
    pub index: usize,
    /// The entry's own `index` field, when it has one (it should equal [`Shard::index`]).
    pub declared_index: Option<u64>,
    /// The file name (from `fileName` or `filename`); empty when the entry has neither.
    pub filename: String,
    /// Declared size in bytes.
    pub size: u64,
    /// Byte position of this shard in the whole model: declared, or the sum of the sizes before.
    pub offset: u64,
    /// The entry's own `offset` field, when it has one.
    pub declared_offset: Option<u64>,
    /// Expected digest (hex), from `hash` or `blake3`.
    pub hash: Option<String>,
    pub hash_algorithm: HashAlgorithm,
    pub hash_algorithm_source: HashAlgorithmSource,
}

/// A component group (v1).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub kind: GroupKind,
    /// Semantic version for hot-swap tracking (`"1.0.0"`).
    pub version: Option<String>,
    /// Indices into [`Manifest::shards`] (kept as written; validation checks the range).
    pub shards: Vec<usize>,
    /// Tensor names, in the order the group hash covers them.
    pub tensors: Vec<String>,
    /// Expected hash of the group's tensor bytes (hex), under the manifest's algorithm.
    pub hash: Option<String>,
    pub layer_index: Option<u64>,
    pub expert_index: Option<u64>,
}

/// A contiguous piece of a tensor inside one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorSpan {
    /// Index into [`Manifest::shards`] (validation checks the range).
    pub shard: usize,
    /// Byte offset inside the shard.
    pub offset: u64,
    pub size: u64,
}

/// Where a tensor's bytes are and what they hold.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorLocation {
    /// Component group id.
    pub group: Option<String>,
    /// The dtype as the manifest spells it (`Q4_K_M`, `F16`, `f32`, ...).
    pub dtype: String,
    /// Dimensions, outermost first.
    pub shape: Vec<u64>,
    /// Total size in bytes.
    pub size: u64,
    pub layout: TensorLayout,
    /// The tensor's pieces in order: its `spans`, or one span from `shard`/`offset`/`size`.
    pub spans: Vec<TensorSpan>,
    /// `originalShape`, for tensors the converter reshaped.
    pub original_shape: Option<Vec<u64>>,
}

impl TensorLocation {
    /// The shard holding the first byte.
    pub fn shard(&self) -> Option<usize> {
        self.spans.first().map(|s| s.shard)
    }

    /// The offset of the first byte inside [`TensorLocation::shard`].
    pub fn offset(&self) -> Option<u64> {
        self.spans.first().map(|s| s.offset)
    }

    /// True when the tensor crosses shards.
    pub fn is_multi_shard(&self) -> bool {
        self.spans.len() > 1
    }

    /// The GGML storage type of [`TensorLocation::dtype`].
    pub fn ggml_type(&self) -> Result<GgmlType, RdrrError> {
        ggml_type_for_dtype(&self.dtype)
    }

    /// Number of elements (product of the shape; 1 for a scalar), `None` on overflow (see
    /// [`element_count`]).
    pub fn element_count(&self) -> Option<u64> {
        element_count(&self.shape)
    }

    /// Where the bytes are, for `inspect`: `shard 3 @ 4096` or `shards 0-1`.
    pub fn location(&self) -> String {
        match self.spans.as_slice() {
            [] => "nowhere".to_string(),
            [one] => format!("shard {} @ {}", one.shard, one.offset),
            spans => {
                let first = spans[0].shard;
                let consecutive = spans
                    .iter()
                    .enumerate()
                    .all(|(i, s)| first.checked_add(i) == Some(s.shard));
                if consecutive {
                    format!(
                        "shards {}-{} @ {}",
                        first,
                        first + spans.len() - 1,
                        spans[0].offset
                    )
                } else {
                    let list: Vec<String> = spans.iter().map(|s| s.shard.to_string()).collect();
                    format!("shards {} @ {}", list.join(","), spans[0].offset)
                }
            }
        }
    }
}

/// A parsed and normalized RDRR manifest: what the rest of the program uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Manifest {
    /// `version` as written (`1`, `"1.0"`, `0.5`, ...).
    pub version: Option<String>,
    pub model_id: Option<String>,
    /// `modelType` as written; see [`Manifest::model_kind`].
    pub model_type: Option<String>,
    pub quantization: Option<String>,
    pub quantization_info: Option<QuantizationInfo>,
    /// The manifest's own `hashAlgorithm`, when it declares one.
    pub hash_algorithm: Option<HashAlgorithm>,
    pub architecture: Option<Architecture>,
    pub groups: BTreeMap<String, Group>,
    pub shards: Vec<Shard>,
    /// `tensorsFile` (v1); `None` for the 0.x form with inline tensors.
    pub tensors_file: Option<String>,
    pub tensors: BTreeMap<String, TensorLocation>,
    pub tensor_count: Option<u64>,
    pub total_size: Option<u64>,
    pub tokenizer: Option<TokenizerInfo>,
    pub moe_config: Option<MoeConfig>,
    pub runtime_optimizations: Option<RuntimeOptimizations>,
    pub blake3_full: Option<String>,
    pub adapter_type: Option<AdapterType>,
    pub base_model: Option<String>,
    pub lora_config: Option<LoraConfig>,
    /// `extraFiles` (tritium extension): further files of the model folder, with sizes and
    /// hashes. Every name is a plain file name (checked when parsing).
    pub extra_files: Vec<ExtraFile>,
    /// Whether the model folder holds `tokenizer.json` (set by [`Manifest::load`]).
    pub tokenizer_json_present: bool,
    /// Contradictions found while normalizing (a shard's `fileName` and `filename` disagree,
    /// a tensor's `shard` disagrees with its first span, ...). [`super::validate`] reports them.
    pub normalization_issues: Vec<RdrrIssue>,
}

impl Manifest {
    /// Read `manifest.json` and, for v1, the `tensorsFile` it names. Refuses JSON files over
    /// [`MAX_JSON_BYTES`] and a `tensorsFile` that is not a plain file name.
    pub fn load(files: &dyn ModelFiles) -> Result<Manifest, RdrrError> {
        let manifest_bytes = read_json_file(files, MANIFEST_FILE)?;
        let raw = read_manifest(&manifest_bytes)?;
        let top = Obj::new(MANIFEST_FILE, String::new(), &raw.fields)?;
        let tensors_file: Option<String> = top.get("tensorsFile")?;
        let external = match tensors_file {
            Some(name) => {
                check_plain_file_name("tensorsFile", &name)?;
                let bytes = read_json_file(files, &name)?;
                let entries = read_tensors_file(&name, &bytes)?;
                Some((name, entries))
            }
            None => None,
        };
        let mut manifest = Manifest::from_raw(raw, external)?;
        let tokenizer_file_present = manifest
            .tokenizer
            .as_ref()
            .and_then(|t| t.file.as_deref())
            .is_some_and(|f| check_plain_file_name("tokenizer.file", f).is_ok() && files.exists(f));
        manifest.tokenizer_json_present = tokenizer_file_present || files.exists(TOKENIZER_FILE);
        Ok(manifest)
    }

    /// Parse from bytes: `manifest.json` and, when it names a `tensorsFile`, that file's bytes.
    pub fn parse(manifest_json: &[u8], tensors_json: Option<&[u8]>) -> Result<Manifest, RdrrError> {
        let raw = read_manifest(manifest_json)?;
        let top = Obj::new(MANIFEST_FILE, String::new(), &raw.fields)?;
        let name: Option<String> = top.get("tensorsFile")?;
        let name = name.unwrap_or_else(|| "tensors.json".to_string());
        let external = match tensors_json {
            Some(bytes) => Some((name.clone(), read_tensors_file(&name, bytes)?)),
            None => None,
        };
        Manifest::from_raw(raw, external)
    }

    /// The manifest from what was read: `manifest.json`, and the tensors file's name and
    /// entries when it was given.
    fn from_raw(
        raw: RawManifest,
        external: Option<(String, Vec<(String, RawTensor)>)>,
    ) -> Result<Manifest, RdrrError> {
        let top = Obj::new(MANIFEST_FILE, String::new(), &raw.fields)?;
        let mut m = Manifest {
            version: match top.raw("version") {
                None => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                Some(other) => {
                    let found = json::kind(other);
                    return Err(top.error(
                        "version",
                        format!("expected a number or a string, found {found}"),
                    ));
                }
            },
            model_id: top.get("modelId")?,
            model_type: top.get("modelType")?,
            quantization: top.get("quantization")?,
            quantization_info: top.get("quantizationInfo")?,
            hash_algorithm: match top.get::<String>("hashAlgorithm")? {
                None => None,
                Some(name) => Some(
                    HashAlgorithm::parse(&name)
                        .ok_or_else(|| top.unknown("hashAlgorithm", name, HashAlgorithm::NAMES))?,
                ),
            },
            architecture: match top.raw("architecture") {
                None => None,
                Some(Value::String(s)) => Some(Architecture::Name(s.clone())),
                Some(v @ Value::Object(_)) => Some(Architecture::Config(value_at(
                    MANIFEST_FILE,
                    "architecture",
                    v,
                )?)),
                Some(other) => {
                    let found = json::kind(other);
                    return Err(top.error(
                        "architecture",
                        format!("expected an object or a string, found {found}"),
                    ));
                }
            },
            tensors_file: top.get("tensorsFile")?,
            tensor_count: top.get("tensorCount")?,
            total_size: top.get("totalSize")?,
            tokenizer: top.get("tokenizer")?,
            moe_config: top.get("moeConfig")?,
            runtime_optimizations: runtime_hints::parse(&top, "runtimeOptimizations")?,
            blake3_full: top.get("blake3Full")?,
            adapter_type: top.named("adapterType", AdapterType::from_name, AdapterType::NAMES)?,
            base_model: top.get("baseModel")?,
            lora_config: top.get("loraConfig")?,
            extra_files: top.get("extraFiles")?.unwrap_or_default(),
            ..Manifest::default()
        };
        for (i, f) in m.extra_files.iter().enumerate() {
            check_plain_file_name(&format!("extraFiles[{i}].fileName"), &f.file_name)?;
        }
        m.groups = parse_groups(raw.groups.unwrap_or_default())?;
        m.shards = parse_shards(
            raw.shards.unwrap_or_default(),
            m.hash_algorithm,
            &mut m.normalization_issues,
        )?;

        m.tensors = match (&m.tensors_file, external, raw.tensors) {
            (Some(name), None, _) => {
                return Err(top.error(
                    "tensorsFile",
                    format!("the tensors are in {name:?}, which was not given"),
                ))
            }
            (Some(_), Some((file, entries)), inline) => {
                if inline.is_some() {
                    m.normalization_issues.push(RdrrIssue::new(
                        IssueKind::Normalization,
                        "manifest",
                        "has both tensorsFile and inline tensors; the inline tensors were ignored",
                    ));
                }
                parse_tensors(&file, "", entries, &mut m.normalization_issues)?
            }
            (None, _, Some(entries)) => parse_tensors(
                MANIFEST_FILE,
                "tensors",
                entries,
                &mut m.normalization_issues,
            )?,
            (None, _, None) => BTreeMap::new(),
        };
        Ok(m)
    }

    /// `modelType`, typed.
    pub fn model_kind(&self) -> Option<ModelType> {
        self.model_type.as_deref().map(ModelType::parse)
    }

    /// "RDRR v1" (external tensors.json) or "RDRR 0.x" (inline tensors).
    pub fn format_name(&self) -> &'static str {
        if self.tensors_file.is_some() {
            "RDRR v1"
        } else {
            "RDRR 0.x"
        }
    }

    /// True for adapter manifests (`adapterType`, `modelType: "lora"` or `loraConfig`).
    pub fn is_adapter(&self) -> bool {
        self.adapter_type.is_some()
            || self.lora_config.is_some()
            || self.model_kind() == Some(ModelType::Lora)
    }

    /// The algorithm of group hashes: the manifest's `hashAlgorithm`; when it declares none,
    /// the shards' algorithm when they all agree; else SHA-256.
    pub fn group_hash_algorithm(&self) -> HashAlgorithm {
        if let Some(alg) = self.hash_algorithm {
            return alg;
        }
        match self.shards.first() {
            Some(first)
                if self
                    .shards
                    .iter()
                    .all(|s| s.hash_algorithm == first.hash_algorithm) =>
            {
                first.hash_algorithm
            }
            _ => HashAlgorithm::Sha256,
        }
    }

    /// The file name of shard `index`, refusing anything but a plain file name.
    pub fn shard_file(&self, index: usize) -> Result<&str, RdrrError> {
        let shard = self
            .shards
            .get(index)
            .ok_or_else(|| RdrrError::NoSuchShard {
                what: "manifest".to_string(),
                shard: index,
                count: self.shards.len(),
            })?;
        check_plain_file_name(&format!("shards[{index}].fileName"), &shard.filename)?;
        Ok(&shard.filename)
    }

    /// Sum of the declared shard sizes, `None` on overflow.
    pub fn shard_bytes(&self) -> Option<u64> {
        self.shards
            .iter()
            .try_fold(0u64, |acc, s| acc.checked_add(s.size))
    }
}

/// The number of elements of `shape` (1 for a scalar), or `None` when the product of its
/// non-zero dimensions passes 2^64: a zero dimension makes the count 0, but code that multiplies
/// the dimensions in another order (innermost first, as GGUF stores them) must not wrap either.
pub(crate) fn element_count(shape: &[u64]) -> Option<u64> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    Some(if shape.contains(&0) { 0 } else { nonzero })
}

/// The longest file name most file systems store (bytes).
const MAX_FILE_NAME: usize = 255;

/// Refuse a file name that is not a plain name inside the model folder: no `/`, `\`, `..`,
/// absolute paths, drive letters or NUL; nor one no file system could store as given (control
/// characters, over 255 bytes).
pub(crate) fn check_plain_file_name(field: &str, name: &str) -> Result<(), RdrrError> {
    if name.contains('/')
        || check_relative_path(name).is_err()
        || name.chars().any(char::is_control)
        || name.len() > MAX_FILE_NAME
    {
        return Err(RdrrError::UnsafeFileName {
            field: field.to_string(),
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Read a JSON file of the model folder, refusing one over [`MAX_JSON_BYTES`].
fn read_json_file(files: &dyn ModelFiles, name: &str) -> Result<Vec<u8>, RdrrError> {
    let source = files.open(name)?;
    let len = source.len();
    if len > MAX_JSON_BYTES {
        return Err(RdrrError::TooLarge {
            file: name.to_string(),
            len,
            max: MAX_JSON_BYTES,
        });
    }
    Ok(source.read_vec(0, len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_file_names_only() {
        let long = "x".repeat(256);
        for bad in [
            "",
            "a/b",
            "../x",
            "/etc/passwd",
            "a\\b",
            "c:x",
            "a\0b",
            "..",
            ".",
            "a\nb.bin",
            "tab\t.bin",
            long.as_str(),
        ] {
            assert!(check_plain_file_name("f", bad).is_err(), "{bad:?}");
        }
        assert!(check_plain_file_name("f", &"x".repeat(255)).is_ok());
        assert!(check_plain_file_name("f", "shard_00000.bin").is_ok());
    }

    #[test]
    fn span_locations_read_well() {
        let mut t = TensorLocation {
            group: None,
            dtype: "F32".into(),
            shape: vec![2],
            size: 8,
            layout: TensorLayout::Row,
            spans: vec![TensorSpan {
                shard: 3,
                offset: 4096,
                size: 8,
            }],
            original_shape: None,
        };
        assert_eq!(t.location(), "shard 3 @ 4096");
        t.spans = vec![
            TensorSpan {
                shard: 0,
                offset: 8192,
                size: 4,
            },
            TensorSpan {
                shard: 1,
                offset: 0,
                size: 4,
            },
        ];
        assert_eq!(t.location(), "shards 0-1 @ 8192");
        t.spans[1].shard = usize::MAX;
        assert!(t.location().starts_with("shards 0,"));
    }
}
