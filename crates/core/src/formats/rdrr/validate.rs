//! Validation: everything that can be checked without hashing, collected in one pass. Each
//! problem is one [`RdrrIssue`] naming its shard, tensor, group or field.
//!
//! Checks: shard `index` fields are 0..n in order and offsets cumulative; shard, `tensorsFile`
//! and `tokenizer.file` names are plain file names (checked before any shard is opened);
//! shard files exist and their lengths equal the declared sizes; hashes are present (shards)
//! and well-formed hex of their algorithm's length; every tensor span lies inside its shard
//! (both the declared size and the real file length); spans add up to the tensor size; no two
//! spans overlap (within a tensor or across tensors), so the tensors never claim more bytes
//! than the shards hold; a tensor's size matches its dtype and shape (checked arithmetic);
//! tensor groups exist; groups reference existing tensors and shards, and no tensor is listed
//! twice (in one group or in two), so hashing the groups reads each byte at most once; every
//! file the manifest names (shards, `tensorsFile`, tokenizer, `extraFiles`) has a name of its
//! own in the folder; `tensorCount` and `totalSize` agree; `moeConfig` is coherent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use super::gguf_metadata::GGUF_METADATA_FILE;
use super::manifest::{check_plain_file_name, HashAlgorithm, Manifest};
use super::{MANIFEST_FILE, TOKENIZER_FILE};
use crate::formats::source::ModelFiles;
use crate::quant::GgmlType;

/// The check an [`RdrrIssue`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IssueKind {
    /// Contradictory spellings found while normalizing (`fileName` vs `filename`, ...).
    Normalization,
    /// The manifest lists no shards.
    NoShards,
    /// The manifest lists no tensors.
    NoTensors,
    /// A shard's `index` field is not its position in `shards`.
    ShardIndex,
    /// A shard's `offset` is not the sum of the sizes before it.
    ShardOffset,
    /// A shard, `tensorsFile` or tokenizer file name that is missing, or not a plain file name.
    UnsafeFileName,
    /// Two shards name the same file.
    DuplicateShardFile,
    /// Two of the files the manifest names (a shard, `tensorsFile`, the tokenizer, an
    /// `extraFiles` entry, `manifest.json` itself) would be one file in the folder.
    FileNameCollision,
    /// A shard file cannot be opened.
    ShardMissing,
    /// A shard file's length differs from its declared size.
    ShardSize,
    /// A shard has no hash.
    MissingHash,
    /// A hash that is not hex of its algorithm's length.
    MalformedHash,
    /// A shard index (tensor span or group) past the end of `shards`.
    ShardOutOfRange,
    /// Tensor bytes past the end of their shard.
    TensorOutOfBounds,
    /// A tensor's spans do not add up to its size.
    SpanSize,
    /// Two spans (of one tensor, or of two tensors) share bytes of a shard.
    SpanOverlap,
    /// A dtype this reader does not know.
    UnknownDtype,
    /// A tensor's size differs from what its dtype and shape take.
    TensorSize,
    /// A shape whose element count overflows or is not a whole number of blocks.
    TensorShape,
    /// A tensor's `group` is not in `groups`.
    UnknownGroup,
    /// A group lists a tensor that is not in the manifest.
    UnknownTensor,
    /// A group lists a tensor twice, or two groups list the same tensor.
    DuplicateGroupTensor,
    /// `tensorCount` differs from the number of tensors.
    TensorCount,
    /// `totalSize` differs from the sum of the shard sizes.
    TotalSize,
    /// `moeConfig` contradicts itself.
    MoeConfig,
}

/// One problem, naming what it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdrrIssue {
    pub kind: IssueKind,
    /// What the problem is about: `shard 3 (shard_00003.bin)`, `tensor "x"`, `group "layer.0"`,
    /// `field totalSize`.
    pub subject: String,
    pub message: String,
}

impl RdrrIssue {
    pub fn new(kind: IssueKind, subject: &str, message: impl Into<String>) -> RdrrIssue {
        RdrrIssue {
            kind,
            subject: subject.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RdrrIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}

/// Everything [`validate`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationReport {
    pub issues: Vec<RdrrIssue>,
}

impl ValidationReport {
    /// True when nothing was found.
    pub fn is_valid(&self) -> bool {
        self.issues.is_empty()
    }

    /// The issues of the given kinds, as messages.
    pub fn problems_of(&self, kinds: &[IssueKind]) -> Vec<String> {
        self.issues
            .iter()
            .filter(|i| kinds.contains(&i.kind))
            .map(ToString::to_string)
            .collect()
    }

    /// True when some issue is of `kind`.
    pub fn has(&self, kind: IssueKind) -> bool {
        self.issues.iter().any(|i| i.kind == kind)
    }

    /// `Ok(())`, or every issue.
    pub fn into_result(self) -> Result<(), Vec<RdrrIssue>> {
        if self.issues.is_empty() {
            Ok(())
        } else {
            Err(self.issues)
        }
    }
}

/// Check a manifest against itself and against the model folder (shard files and lengths).
pub fn validate(manifest: &Manifest, files: &dyn ModelFiles) -> ValidationReport {
    run(manifest, Some(files))
}

/// Check a manifest against itself only (no files opened).
pub fn validate_manifest(manifest: &Manifest) -> ValidationReport {
    run(manifest, None)
}

/// Whether `hash` is hex of `alg`'s digest length; the problem if not.
pub(crate) fn check_hex(alg: HashAlgorithm, hash: &str) -> Result<(), String> {
    if !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("hash {hash:?} is not hexadecimal"));
    }
    if hash.len() != alg.hex_len() {
        return Err(format!(
            "hash {hash:?} is {} hex characters; a {} digest is {}",
            hash.len(),
            alg.display_name(),
            alg.hex_len()
        ));
    }
    Ok(())
}

struct Issues(Vec<RdrrIssue>);

impl Issues {
    fn push(&mut self, kind: IssueKind, subject: &str, message: impl Into<String>) {
        self.0.push(RdrrIssue::new(kind, subject, message));
    }
}

fn run(m: &Manifest, files: Option<&dyn ModelFiles>) -> ValidationReport {
    let mut issues = Issues(m.normalization_issues.clone());
    check_top_level(m, &mut issues);
    check_file_names(m, &mut issues);
    let file_lens = check_shards(m, files, &mut issues);
    check_tensors(m, &file_lens, &mut issues);
    check_overlaps(m, &mut issues);
    check_groups(m, &mut issues);
    ValidationReport { issues: issues.0 }
}

fn check_top_level(m: &Manifest, issues: &mut Issues) {
    if m.shards.is_empty() {
        issues.push(IssueKind::NoShards, "manifest", "lists no shards");
    }
    if m.tensors.is_empty() {
        issues.push(
            IssueKind::NoTensors,
            "manifest",
            "lists no tensors (neither a tensorsFile nor inline tensors)",
        );
    }
    if let Some(name) = &m.tensors_file {
        if check_plain_file_name("tensorsFile", name).is_err() {
            issues.push(
                IssueKind::UnsafeFileName,
                "field tensorsFile",
                format!("{name:?} is not a plain file name inside the model folder"),
            );
        }
    }
    if let Some(name) = m.tokenizer.as_ref().and_then(|t| t.file.as_ref()) {
        if check_plain_file_name("tokenizer.file", name).is_err() {
            issues.push(
                IssueKind::UnsafeFileName,
                "field tokenizer.file",
                format!("{name:?} is not a plain file name inside the model folder"),
            );
        }
    }
    if let Some(hash) = &m.blake3_full {
        if let Err(e) = check_hex(HashAlgorithm::Blake3, hash) {
            issues.push(IssueKind::MalformedHash, "field blake3Full", e);
        }
    }
    if let Some(count) = m.tensor_count {
        let actual = m.tensors.len() as u64;
        if count != actual {
            issues.push(
                IssueKind::TensorCount,
                "field tensorCount",
                format!("says {count}, but the manifest lists {actual} tensors"),
            );
        }
    }
    if let Some(total) = m.total_size {
        match m.shard_bytes() {
            Some(sum) if sum == total => {}
            Some(sum) => issues.push(
                IssueKind::TotalSize,
                "field totalSize",
                format!("says {total}, but the shards hold {sum} bytes"),
            ),
            None => issues.push(
                IssueKind::TotalSize,
                "field totalSize",
                "the shard sizes add up past 2^64",
            ),
        }
    }
    if let Some(moe) = &m.moe_config {
        if moe.num_experts == Some(0) {
            issues.push(IssueKind::MoeConfig, "field moeConfig.numExperts", "is 0");
        }
        if let (Some(n), Some(k)) = (moe.num_experts, moe.num_experts_per_token) {
            if k == 0 || k > n {
                issues.push(
                    IssueKind::MoeConfig,
                    "field moeConfig.numExpertsPerToken",
                    format!("is {k}; it must be 1..={n} (numExperts)"),
                );
            }
        }
    }
}

/// Every file the manifest names must be a file of its own in the model folder. A shard named
/// like `tensors.json`, or an `extraFiles` entry named like a shard, would be written over by
/// the other in a download, and read as the wrong thing by the loader. Reserved besides what
/// the manifest names: `manifest.json`, and the names the loader falls back on
/// (`tokenizer.json`, `gguf_metadata.json`). The tokenizer and the GGUF metadata may be listed
/// in `extraFiles` as well (that is how a download checks them): one file, named twice on
/// purpose. Names are compared without case, as case-insensitive file systems store them.
/// Shards that share a name with each other are [`IssueKind::DuplicateShardFile`]s.
fn check_file_names(m: &Manifest, issues: &mut Issues) {
    // Lowercased name -> what claimed it first.
    let mut claimed: HashMap<String, String> = HashMap::new();
    let mut claim = |name: &str, what: String, issues: &mut Issues| {
        use std::collections::hash_map::Entry;
        match claimed.entry(name.to_lowercase()) {
            Entry::Occupied(first) => issues.push(
                IssueKind::FileNameCollision,
                &what,
                format!(
                    "is named {name:?}, which is the name of {} too",
                    first.get()
                ),
            ),
            Entry::Vacant(slot) => {
                slot.insert(what);
            }
        }
    };
    claim(MANIFEST_FILE, "the manifest".to_string(), issues);
    if let Some(name) = &m.tensors_file {
        claim(name, "field tensorsFile".to_string(), issues);
    }
    let mut extras: HashSet<String> = HashSet::new();
    for (i, f) in m.extra_files.iter().enumerate() {
        extras.insert(f.file_name.to_lowercase());
        claim(
            &f.file_name,
            format!("extraFiles[{i}] ({})", f.file_name),
            issues,
        );
    }
    let mut conventional = vec![
        (TOKENIZER_FILE, "the tokenizer".to_string()),
        (GGUF_METADATA_FILE, "the GGUF metadata".to_string()),
    ];
    if let Some(file) = m.tokenizer.as_ref().and_then(|t| t.file.as_deref()) {
        if !file.eq_ignore_ascii_case(TOKENIZER_FILE) {
            conventional.push((file, "field tokenizer.file".to_string()));
        }
    }
    for (name, what) in conventional {
        if !extras.contains(&name.to_lowercase()) {
            claim(name, what, issues);
        }
    }
    for (i, shard) in m.shards.iter().enumerate() {
        let name = shard.filename.as_str();
        // Missing and unsafe names are reported by `check_shards`.
        if name.is_empty() || check_plain_file_name("fileName", name).is_err() {
            continue;
        }
        if let Some(first) = claimed.get(&name.to_lowercase()) {
            issues.push(
                IssueKind::FileNameCollision,
                &format!("shard {i} ({name})"),
                format!("is named {name:?}, which is the name of {first} too"),
            );
        }
    }
}

/// Shard checks; returns each shard file's real length where it could be opened.
fn check_shards(
    m: &Manifest,
    files: Option<&dyn ModelFiles>,
    issues: &mut Issues,
) -> Vec<Option<u64>> {
    let n = m.shards.len();
    let mut file_lens = vec![None; n];
    let mut cumulative = Some(0u64);
    // By lowercased name: case-insensitive file systems (macOS, Windows) hold one file for both.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, shard) in m.shards.iter().enumerate() {
        let subject = if shard.filename.is_empty() {
            format!("shard {i}")
        } else {
            format!("shard {i} ({})", shard.filename)
        };
        if let Some(d) = shard.declared_index {
            if d != i as u64 {
                issues.push(IssueKind::ShardIndex, &subject, format!("has index {d}, but is entry {i} of shards (indices must be 0..{n} in order)"));
            }
        }
        if let Some(offset) = shard.declared_offset {
            if cumulative != Some(offset) {
                let before = cumulative.map_or("more than 2^64".to_string(), |c| c.to_string());
                issues.push(
                    IssueKind::ShardOffset,
                    &subject,
                    format!("has offset {offset}, but the shards before it hold {before} bytes"),
                );
            }
        }
        cumulative = cumulative.and_then(|c| c.checked_add(shard.size));
        match &shard.hash {
            None => issues.push(
                IssueKind::MissingHash,
                &subject,
                "has no hash (neither `hash` nor `blake3`)",
            ),
            Some(hash) => {
                if let Err(e) = check_hex(shard.hash_algorithm, hash) {
                    issues.push(IssueKind::MalformedHash, &subject, e);
                }
            }
        }
        let name = shard.filename.as_str();
        if name.is_empty() {
            issues.push(IssueKind::UnsafeFileName, &subject, "has no fileName");
            continue;
        }
        if check_plain_file_name("fileName", name).is_err() {
            issues.push(IssueKind::UnsafeFileName, &subject, format!("file name {name:?} is not a plain file name inside the model folder; it will not be opened"));
            continue;
        }
        if let Some(first) = seen.insert(name.to_lowercase(), i) {
            issues.push(
                IssueKind::DuplicateShardFile,
                &subject,
                format!("uses the same file as shard {first}"),
            );
        }
        let Some(files) = files else { continue };
        match files.open(name) {
            Ok(source) => {
                let len = source.len();
                file_lens[i] = Some(len);
                if len != shard.size {
                    issues.push(
                        IssueKind::ShardSize,
                        &subject,
                        format!("declares {} bytes, but the file holds {len}", shard.size),
                    );
                }
            }
            Err(e) => issues.push(
                IssueKind::ShardMissing,
                &subject,
                format!("cannot be opened: {e}"),
            ),
        }
    }
    file_lens
}

fn check_tensors(m: &Manifest, file_lens: &[Option<u64>], issues: &mut Issues) {
    let n = m.shards.len();
    for (name, t) in &m.tensors {
        let subject = format!("tensor {name:?}");
        if let Some(group) = &t.group {
            if !m.groups.contains_key(group) {
                issues.push(
                    IssueKind::UnknownGroup,
                    &subject,
                    format!("belongs to group {group:?}, which the manifest does not define"),
                );
            }
        }
        match t.ggml_type() {
            Err(_) => issues.push(
                IssueKind::UnknownDtype,
                &subject,
                format!("has unknown dtype {:?}", t.dtype),
            ),
            Ok(ty) => check_tensor_size(t.size, &t.shape, &t.dtype, ty, &subject, issues),
        }
        let spans_total = t
            .spans
            .iter()
            .try_fold(0u64, |acc, s| acc.checked_add(s.size));
        if spans_total != Some(t.size) {
            let held = spans_total.map_or("more than 2^64".to_string(), |s| s.to_string());
            issues.push(
                IssueKind::SpanSize,
                &subject,
                format!("is {} bytes, but its spans hold {held}", t.size),
            );
        }
        for (k, span) in t.spans.iter().enumerate() {
            let what = if t.spans.len() > 1 {
                format!("{subject} span {k}")
            } else {
                subject.clone()
            };
            let Some(shard) = m.shards.get(span.shard) else {
                issues.push(
                    IssueKind::ShardOutOfRange,
                    &what,
                    format!(
                        "refers to shard {}, but the manifest lists {n} shards",
                        span.shard
                    ),
                );
                continue;
            };
            let Some(end) = span.offset.checked_add(span.size) else {
                issues.push(
                    IssueKind::TensorOutOfBounds,
                    &what,
                    format!("offset {} + size {} overflows", span.offset, span.size),
                );
                continue;
            };
            if end > shard.size {
                issues.push(
                    IssueKind::TensorOutOfBounds,
                    &what,
                    format!(
                        "bytes {}..{end} lie past the end of shard {} ({}, {} bytes declared)",
                        span.offset, span.shard, shard.filename, shard.size
                    ),
                );
            } else if let Some(len) = file_lens
                .get(span.shard)
                .copied()
                .flatten()
                .filter(|&len| end > len)
            {
                issues.push(
                    IssueKind::TensorOutOfBounds,
                    &what,
                    format!(
                        "bytes {}..{end} lie past the end of the file {} ({len} bytes)",
                        span.offset, shard.filename
                    ),
                );
            }
        }
    }
}

/// No two spans may share a byte of a shard, whether they belong to one tensor (a span
/// repeated) or to two. Then the tensors hold at most the bytes the shards hold: reading or
/// hashing every tensor reads each shard byte at most once, whatever sizes the manifest claims.
/// One issue per tensor; spans of 0 bytes hold nothing, and spans outside their shard are
/// reported by `check_tensors`.
fn check_overlaps(m: &Manifest, issues: &mut Issues) {
    // (shard, offset, end, tensor, span index), in shard and offset order.
    let mut spans: Vec<(usize, u64, u64, &str, usize)> = Vec::new();
    for (name, t) in &m.tensors {
        for (k, s) in t.spans.iter().enumerate() {
            if s.size == 0 || s.shard >= m.shards.len() {
                continue;
            }
            if let Some(end) = s.offset.checked_add(s.size) {
                spans.push((s.shard, s.offset, end, name, k));
            }
        }
    }
    spans.sort_unstable();
    let mut reported: HashSet<&str> = HashSet::new();
    // The span of the current shard that reaches furthest: (shard, end, tensor, span index).
    let mut reach: Option<(usize, u64, &str, usize)> = None;
    for &(shard, offset, end, name, k) in &spans {
        match reach {
            Some((s, far, other, j)) if s == shard && offset < far => {
                if reported.insert(name) {
                    let multi = m.tensors.get(name).is_some_and(|t| t.spans.len() > 1);
                    let subject = if multi {
                        format!("tensor {name:?} span {k}")
                    } else {
                        format!("tensor {name:?}")
                    };
                    let file = &m.shards[shard].filename;
                    let with = if other == name {
                        format!("its own span {j}")
                    } else {
                        format!("tensor {other:?}")
                    };
                    issues.push(
                        IssueKind::SpanOverlap,
                        &subject,
                        format!(
                            "bytes {offset}..{end} of shard {shard} ({file}) overlap {with}: \
                             spans must not share bytes"
                        ),
                    );
                }
                if end > far {
                    reach = Some((shard, end, name, k));
                }
            }
            _ => reach = Some((shard, end, name, k)),
        }
    }
}

fn check_tensor_size(
    size: u64,
    shape: &[u64],
    dtype: &str,
    ty: GgmlType,
    subject: &str,
    issues: &mut Issues,
) {
    if shape.iter().any(|&d| d > i64::MAX as u64) {
        issues.push(
            IssueKind::TensorShape,
            subject,
            format!("shape {shape:?} has a dimension over 2^63 (GGUF's limit)"),
        );
        return;
    }
    let Some(elements) = super::manifest::element_count(shape) else {
        issues.push(
            IssueKind::TensorShape,
            subject,
            format!("shape {shape:?} has more than 2^64 elements"),
        );
        return;
    };
    match ty.tensor_bytes(elements) {
        Some(expected) if expected != size => issues.push(
            IssueKind::TensorSize,
            subject,
            format!("is {size} bytes, but {elements} elements of {dtype} ({ty}) take {expected}"),
        ),
        Some(_) => {}
        // Refused as the GGUF reader refuses it: with no size to check against the shape, the
        // shape could claim any number of elements.
        None if ty == GgmlType::TL1 => issues.push(
            IssueKind::UnknownDtype,
            subject,
            format!(
                "has dtype {dtype:?} (TL1), which is not supported: its layout is \
                 kernel-specific, so its size cannot be checked against its shape (convert the \
                 model to I2_S)"
            ),
        ),
        None => issues.push(
            IssueKind::TensorShape,
            subject,
            format!(
                "shape {shape:?} ({elements} elements) is not a whole number of {ty} blocks of {}",
                ty.row_granularity()
            ),
        ),
    }
}

fn check_groups(m: &Manifest, issues: &mut Issues) {
    let n = m.shards.len();
    let alg = m.group_hash_algorithm();
    // Tensor -> the group that lists it: a group's hash covers each of its tensors once, and
    // each tensor belongs to one group, so checking the group hashes reads every byte once.
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for (id, g) in &m.groups {
        let subject = format!("group {id:?}");
        let mut listed: HashSet<&str> = HashSet::new();
        let mut repeated: HashSet<&str> = HashSet::new();
        for t in &g.tensors {
            if !listed.insert(t) {
                if repeated.insert(t) {
                    issues.push(
                        IssueKind::DuplicateGroupTensor,
                        &subject,
                        format!("lists tensor {t:?} more than once"),
                    );
                }
                continue;
            }
            if !m.tensors.contains_key(t) {
                issues.push(
                    IssueKind::UnknownTensor,
                    &subject,
                    format!("lists tensor {t:?}, which the manifest does not have"),
                );
                continue;
            }
            if let Some(first) = owner.insert(t, id) {
                owner.insert(t, first);
                issues.push(
                    IssueKind::DuplicateGroupTensor,
                    &subject,
                    format!("lists tensor {t:?}, which group {first:?} lists too"),
                );
            }
        }
        for &s in &g.shards {
            if s >= n {
                issues.push(
                    IssueKind::ShardOutOfRange,
                    &subject,
                    format!("lists shard {s}, but the manifest lists {n} shards"),
                );
            }
        }
        if let Some(hash) = &g.hash {
            if let Err(e) = check_hex(alg, hash) {
                issues.push(IssueKind::MalformedHash, &subject, e);
            }
        }
    }
}
