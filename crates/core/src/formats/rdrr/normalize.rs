//! From the JSON as written to the normalized [`Manifest`](super::Manifest) parts.
//!
//! Normalization (the spec's table, plus what the reference converter writes):
//! - shard `fileName` or `filename` -> [`Shard::filename`];
//! - shard `hash`, or `blake3` when `hash` is absent -> [`Shard::hash`]; a shard given only
//!   `blake3` is hashed with BLAKE3;
//! - a shard's missing `offset` (its place in the whole model) is the sum of the sizes before it;
//! - a shard's hash algorithm is its own `hashAlgorithm`, else BLAKE3 for a `blake3`-only
//!   entry, else the manifest's `hashAlgorithm`, else SHA-256 (both digests are 64 hex
//!   characters, so the length cannot tell them apart);
//! - every tensor has one or more [`TensorSpan`]s: its `spans`, or its `shard`/`offset`/`size`.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::json::{self, key_path, read_with, Entries, Failure, Items};
use super::manifest::{
    Group, HashAlgorithm, HashAlgorithmSource, Shard, TensorLocation, TensorSpan,
};
use super::metadata::{GroupKind, TensorLayout};
use super::validate::{IssueKind, RdrrIssue};
use super::{RdrrError, MANIFEST_FILE};

/// The fields of `manifest.json` kept as JSON values (small objects and scalars, read through
/// [`json::Obj`]); `shards`, `groups` and inline `tensors`, which can be large, are read typed;
/// fields nothing reads are skipped without being stored.
const VALUE_FIELDS: &[&str] = &[
    "version",
    "modelId",
    "modelType",
    "quantization",
    "quantizationInfo",
    "hashAlgorithm",
    "architecture",
    "tensorsFile",
    "tensorCount",
    "totalSize",
    "tokenizer",
    "moeConfig",
    "runtimeOptimizations",
    "blake3Full",
    "adapterType",
    "baseModel",
    "loraConfig",
    "extraFiles",
];

/// `manifest.json` as read: its small fields as a JSON object, its large parts typed.
pub(crate) struct RawManifest {
    pub fields: Value,
    pub shards: Option<Vec<RawShard>>,
    pub groups: Option<Vec<(String, RawGroup)>>,
    pub tensors: Option<Vec<(String, RawTensor)>>,
}

/// Read `manifest.json` (see [`VALUE_FIELDS`]); errors name the entry at fault.
pub(crate) fn read_manifest(bytes: &[u8]) -> Result<RawManifest, RdrrError> {
    let failed = Failure::default();
    read_with(bytes, TopLevel { failed: &failed }).map_err(|e| failed.error(MANIFEST_FILE, e))
}

/// Read an external tensors file (`tensorsFile`): an object of tensor entries.
pub(crate) fn read_tensors_file(
    file: &str,
    bytes: &[u8],
) -> Result<Vec<(String, RawTensor)>, RdrrError> {
    let failed = Failure::default();
    let seed = Entries {
        path: String::new(),
        failed: &failed,
        item: PhantomData,
    };
    read_with(bytes, seed)
        .map_err(|e| failed.error(file, e))?
        .ok_or_else(|| RdrrError::Json {
            file: file.to_string(),
            message: "the top level must be an object, found null".to_string(),
        })
}

struct TopLevel<'f> {
    failed: &'f Failure,
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = RawManifest;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object at the top level")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawManifest, A::Error> {
        let failed = self.failed;
        let mut raw = RawManifest {
            fields: Value::Null,
            shards: None,
            groups: None,
            tensors: None,
        };
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // A value of the wrong kind is named by its field (deeper failures first).
            let at = |e: A::Error| {
                failed.note(|| key.clone(), &e);
                e
            };
            let path = key.clone();
            match key.as_str() {
                "shards" => {
                    raw.shards = map
                        .next_value_seed(Items {
                            path,
                            failed,
                            item: PhantomData,
                        })
                        .map_err(at)?
                }
                "groups" => {
                    raw.groups = map
                        .next_value_seed(Entries {
                            path,
                            failed,
                            item: PhantomData,
                        })
                        .map_err(at)?
                }
                "tensors" => {
                    raw.tensors = map
                        .next_value_seed(Entries {
                            path,
                            failed,
                            item: PhantomData,
                        })
                        .map_err(at)?
                }
                k if VALUE_FIELDS.contains(&k) => {
                    let value: Value = map.next_value()?;
                    fields.insert(key, value);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        raw.fields = Value::Object(fields);
        Ok(raw)
    }
}

impl<'de> DeserializeSeed<'de> for TopLevel<'_> {
    type Value = RawManifest;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawManifest, D::Error> {
        d.deserialize_map(self)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawShard {
    index: Option<u64>,
    file_name: Option<String>,
    filename: Option<String>,
    size: u64,
    offset: Option<u64>,
    hash: Option<String>,
    blake3: Option<String>,
    hash_algorithm: Option<String>,
}

pub(crate) fn parse_shards(
    entries: Vec<RawShard>,
    manifest_alg: Option<HashAlgorithm>,
    issues: &mut Vec<RdrrIssue>,
) -> Result<Vec<Shard>, RdrrError> {
    let mut shards = Vec::with_capacity(entries.len());
    let mut cumulative = 0u64;
    for (i, raw) in entries.into_iter().enumerate() {
        let path = format!("shards[{i}]");
        let subject = format!("shard {i}");
        let filename = match (raw.file_name, raw.filename) {
            (Some(a), Some(b)) if a != b => {
                issues.push(RdrrIssue::new(
                    IssueKind::Normalization,
                    &subject,
                    format!("fileName {a:?} and filename {b:?} disagree; using fileName"),
                ));
                a
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => String::new(),
        };
        let declared_alg = match raw.hash_algorithm {
            None => None,
            Some(name) => {
                Some(
                    HashAlgorithm::parse(&name).ok_or_else(|| RdrrError::UnknownVariant {
                        file: MANIFEST_FILE.to_string(),
                        field: format!("{path}.hashAlgorithm"),
                        value: name,
                        expected: HashAlgorithm::NAMES.join(", "),
                    })?,
                )
            }
        };
        let blake3_only = raw.hash.is_none() && raw.blake3.is_some();
        let (hash_algorithm, hash_algorithm_source) = match (declared_alg, manifest_alg) {
            (Some(alg), _) => (alg, HashAlgorithmSource::Shard),
            (None, _) if blake3_only => (HashAlgorithm::Blake3, HashAlgorithmSource::Blake3Field),
            (None, Some(alg)) => (alg, HashAlgorithmSource::Manifest),
            (None, None) => (HashAlgorithm::Sha256, HashAlgorithmSource::Default),
        };
        if blake3_only && hash_algorithm != HashAlgorithm::Blake3 {
            issues.push(RdrrIssue::new(
                IssueKind::Normalization,
                &subject,
                format!("gives its digest as `blake3` but declares hashAlgorithm {hash_algorithm}"),
            ));
        }
        if let (Some(h), Some(b)) = (&raw.hash, &raw.blake3) {
            if hash_algorithm == HashAlgorithm::Blake3 && !h.eq_ignore_ascii_case(b) {
                issues.push(RdrrIssue::new(
                    IssueKind::Normalization,
                    &subject,
                    "`hash` and `blake3` disagree; checking `hash`",
                ));
            }
        }
        shards.push(Shard {
            index: i,
            declared_index: raw.index,
            filename,
            size: raw.size,
            offset: raw.offset.unwrap_or(cumulative),
            declared_offset: raw.offset,
            hash: raw.hash.or(raw.blake3),
            hash_algorithm,
            hash_algorithm_source,
        });
        cumulative = cumulative.saturating_add(raw.size);
    }
    Ok(shards)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawGroup {
    #[serde(rename = "type")]
    kind: String,
    version: Option<Value>,
    #[serde(default)]
    shards: Vec<u64>,
    #[serde(default)]
    tensors: Vec<String>,
    hash: Option<String>,
    layer_index: Option<u64>,
    expert_index: Option<u64>,
}

/// The groups, by id (a repeated id: the last entry, as JSON readers take it).
pub(crate) fn parse_groups(
    entries: Vec<(String, RawGroup)>,
) -> Result<BTreeMap<String, Group>, RdrrError> {
    let mut groups = BTreeMap::new();
    for (id, raw) in entries {
        let path = key_path("groups", &id);
        let kind = GroupKind::from_name(&raw.kind).ok_or_else(|| RdrrError::UnknownVariant {
            file: MANIFEST_FILE.to_string(),
            field: format!("{path}.type"),
            value: raw.kind.clone(),
            expected: GroupKind::NAMES.join(", "),
        })?;
        let version = match raw.version {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(other) => {
                return Err(RdrrError::Field {
                    file: MANIFEST_FILE.to_string(),
                    field: format!("{path}.version"),
                    message: format!("expected a string, found {}", json::kind(&other)),
                })
            }
        };
        groups.insert(
            id,
            Group {
                kind,
                version,
                shards: raw.shards.into_iter().map(to_index).collect(),
                tensors: raw.tensors,
                hash: raw.hash,
                layer_index: raw.layer_index,
                expert_index: raw.expert_index,
            },
        );
    }
    Ok(groups)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTensor {
    group: Option<String>,
    shard: Option<u64>,
    offset: Option<u64>,
    size: u64,
    shape: Vec<u64>,
    dtype: String,
    layout: Option<String>,
    spans: Option<Vec<RawSpan>>,
    original_shape: Option<Vec<u64>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpan {
    #[serde(alias = "shard")]
    shard_index: u64,
    offset: u64,
    size: u64,
}

/// A shard index as written, as a `usize`; an index too large for this machine becomes
/// `usize::MAX`, which validation reports as out of range.
fn to_index(i: u64) -> usize {
    usize::try_from(i).unwrap_or(usize::MAX)
}

/// The tensors of `file` (entries under `prefix`: `tensors` inline, nothing in a tensors
/// file), by name (a repeated name: the last entry, as JSON readers take it).
pub(crate) fn parse_tensors(
    file: &str,
    prefix: &str,
    entries: Vec<(String, RawTensor)>,
    issues: &mut Vec<RdrrIssue>,
) -> Result<BTreeMap<String, TensorLocation>, RdrrError> {
    let mut tensors = BTreeMap::new();
    for (name, raw) in entries {
        let path = key_path(prefix, &name);
        let field = |f: &str, message: &str| RdrrError::Field {
            file: file.to_string(),
            field: format!("{path}.{f}"),
            message: message.to_string(),
        };
        let layout = match raw.layout {
            None => TensorLayout::Row,
            Some(l) => TensorLayout::from_name(&l).ok_or_else(|| RdrrError::UnknownVariant {
                file: file.to_string(),
                field: format!("{path}.layout"),
                value: l,
                expected: TensorLayout::NAMES.join(", "),
            })?,
        };
        let spans: Vec<TensorSpan> = match raw.spans {
            Some(spans) if !spans.is_empty() => {
                let spans: Vec<TensorSpan> = spans
                    .into_iter()
                    .map(|s| TensorSpan {
                        shard: to_index(s.shard_index),
                        offset: s.offset,
                        size: s.size,
                    })
                    .collect();
                let first = spans[0];
                let shard_differs = raw.shard.is_some_and(|s| to_index(s) != first.shard);
                let offset_differs = raw.offset.is_some_and(|o| o != first.offset);
                if shard_differs || offset_differs {
                    issues.push(RdrrIssue::new(
                        IssueKind::Normalization,
                        &format!("tensor {name:?}"),
                        format!(
                            "shard/offset ({}, {}) disagree with its first span ({}, {}); using the spans",
                            raw.shard.map_or("-".to_string(), |s| s.to_string()),
                            raw.offset.map_or("-".to_string(), |o| o.to_string()),
                            first.shard,
                            first.offset
                        ),
                    ));
                }
                spans
            }
            _ => {
                let shard = raw
                    .shard
                    .ok_or_else(|| field("shard", "missing (and no spans)"))?;
                let offset = raw
                    .offset
                    .ok_or_else(|| field("offset", "missing (and no spans)"))?;
                vec![TensorSpan {
                    shard: to_index(shard),
                    offset,
                    size: raw.size,
                }]
            }
        };
        tensors.insert(
            name,
            TensorLocation {
                group: raw.group,
                dtype: raw.dtype,
                shape: raw.shape,
                size: raw.size,
                layout,
                spans,
                original_shape: raw.original_shape,
            },
        );
    }
    Ok(tensors)
}
