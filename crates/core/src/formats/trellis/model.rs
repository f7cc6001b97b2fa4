//! A Trellis model folder (v3 or v2) read into one view: every tensor with the file it lives
//! in, quantized weights grouped from their four parts, and the per-weight metadata.
//!
//! Opening is lenient: problems that do not stop us from reading the rest (a missing shard,
//! an orphan tensor, a broken `quantization_config.json`) are recorded in
//! [`TrellisModel::problems`] for the validator; only an unreadable index or an unrecognisable
//! folder is an error.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::index::{
    read_config, read_json, LayerIndex, QuantizationConfig, QuantizationIndex, WeightIndex,
    BASE_WEIGHTS_FILE, INDEX_FILE, QUANT_CONFIG_FILE, QUANT_INDEX_FILE, ROUTER_WEIGHTS_FILE,
};
use super::TrellisError;
use crate::formats::safetensors::{Dtype, SafetensorsHeader, TensorEntry};
use crate::formats::source::{check_relative_path, ModelFiles, SourceError};

/// Which layout a folder uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Flat shards + `model.safetensors.index.json`.
    V3,
    /// `layer_XXXX/` directories + `base_weights.safetensors`.
    V2,
}

impl Layout {
    /// "Trellis v3" / "Trellis v2".
    pub fn label(self) -> &'static str {
        match self {
            Layout::V3 => "Trellis v3",
            Layout::V2 => "Trellis v2",
        }
    }
}

/// Severity of a problem found while reading or validating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One tensor and the file holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorRef {
    /// Path of the safetensors file inside the model folder.
    pub file: String,
    pub entry: TensorEntry,
}

impl TensorRef {
    /// The tensor's key in its file.
    pub fn key(&self) -> &str {
        &self.entry.name
    }

    /// Read the tensor's bytes.
    pub fn read(&self, files: &dyn ModelFiles) -> Result<Vec<u8>, TrellisError> {
        let src = files.open(&self.file)?;
        Ok(src.read_vec(self.entry.start, self.entry.byte_len())?)
    }
}

/// The four parts of a quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Indices,
    Scales,
    Su,
    Sv,
}

impl Part {
    pub const ALL: [Part; 4] = [Part::Indices, Part::Scales, Part::Su, Part::Sv];

    /// The key suffix: `indices`, `scales`, `su`, `sv`.
    pub fn suffix(self) -> &'static str {
        match self {
            Part::Indices => "indices",
            Part::Scales => "scales",
            Part::Su => "su",
            Part::Sv => "sv",
        }
    }
}

/// Split a tensor key into (logical weight name, part), accepting `{name}.indices` and the
/// `__` style `model__layers__0__mlp__gate_proj__weight__indices` (whose name becomes
/// `model.layers.0.mlp.gate_proj.weight`). Other keys are plain tensors.
pub fn split_part_key(key: &str) -> Option<(String, Part)> {
    Part::ALL.iter().find_map(|&part| {
        let dotted = key
            .strip_suffix(part.suffix())
            .and_then(|k| k.strip_suffix('.'));
        if let Some(name) = dotted.filter(|n| !n.is_empty()) {
            return Some((name.to_string(), part));
        }
        key.strip_suffix(part.suffix())
            .and_then(|k| k.strip_suffix("__"))
            .filter(|n| !n.is_empty())
            .map(|name| (name.replace("__", "."), part))
    })
}

/// The names a user may give for a tensor: as written, with `__` read as `.`, and with or
/// without a trailing `.weight`.
pub fn name_candidates(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for base in [name.to_string(), name.replace("__", ".")] {
        let stripped = base.strip_suffix(".weight").map(str::to_string);
        for c in [Some(base.clone()), Some(format!("{base}.weight")), stripped]
            .into_iter()
            .flatten()
        {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// A quantized weight as found in the files: any of its parts may be missing.
#[derive(Debug, Clone)]
pub struct WeightParts {
    /// Logical name (`model.layers.0.mlp.gate_proj.weight`, or without `.weight` where the
    /// producer omitted it).
    pub name: String,
    /// Indexed like [`Part::ALL`].
    pub parts: [Option<TensorRef>; 4],
}

impl WeightParts {
    pub fn part(&self, part: Part) -> Option<&TensorRef> {
        self.parts[part as usize].as_ref()
    }
}

/// Metadata for one quantized weight, from whichever file holds it.
#[derive(Debug, Clone)]
pub struct WeightMeta {
    /// The file the metadata came from (for messages).
    pub file: String,
    pub bits: Option<u64>,
    pub shape: Option<Vec<u64>>,
    pub mse: Option<f64>,
}

/// One logical tensor of the model, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Index into [`TrellisModel::weights`].
    Quantized(usize),
    /// Index into [`TrellisModel::plain`].
    Plain(usize),
}

/// A problem found while reading; the validator reports these.
#[derive(Debug)]
pub struct Problem {
    pub severity: Severity,
    pub error: TrellisError,
}

/// A Trellis model folder, read.
#[derive(Debug, Default)]
pub struct TrellisModel {
    pub layout: Option<Layout>,
    /// `config.json`, when it is a valid object.
    pub config: Option<Map<String, Value>>,
    /// v3's weight map.
    pub index: Option<WeightIndex>,
    /// v3's `quantization_config.json`, when it parses.
    pub quant_config: Option<QuantizationConfig>,
    /// v2's `quantization_index.json`, when present and it parses.
    pub quant_index: Option<QuantizationIndex>,
    /// True when per-weight metadata could be read (so "not covered" can be judged).
    pub has_metadata: bool,
    /// Every tensor that was found, in file order.
    pub tensors: Vec<TensorRef>,
    pub weights: Vec<WeightParts>,
    pub plain: Vec<TensorRef>,
    /// Logical tensors in file order.
    pub entries: Vec<Entry>,
    /// Problems found while reading.
    pub problems: Vec<Problem>,
    /// Metadata by normalized weight name (`__` read as `.`).
    meta: BTreeMap<String, WeightMeta>,
}

/// Which layout `files` holds.
pub fn detect_layout(files: &dyn ModelFiles) -> Result<Layout, TrellisError> {
    if files.exists(INDEX_FILE) {
        return Ok(Layout::V3);
    }
    if !layer_dirs(files)?.is_empty() {
        return Ok(Layout::V2);
    }
    Err(TrellisError::UnknownLayout)
}

/// v2 layer directories (`layer_` + digits, holding an entry), in numeric order.
fn layer_dirs(files: &dyn ModelFiles) -> Result<Vec<String>, TrellisError> {
    let mut dirs: Vec<(u64, String)> = files
        .list("")?
        .into_iter()
        .filter_map(|name| {
            let digits = name.strip_prefix("layer_")?;
            let n = digits.parse::<u64>().ok()?;
            (digits.bytes().all(|b| b.is_ascii_digit()) && files.list(&name).is_ok())
                .then_some((n, name))
        })
        .collect();
    dirs.sort();
    Ok(dirs.into_iter().map(|(_, name)| name).collect())
}

impl TrellisModel {
    /// Read a model folder of either layout.
    pub fn open(files: &dyn ModelFiles) -> Result<Self, TrellisError> {
        let mut model = TrellisModel::default();
        let layout = detect_layout(files)?;
        model.layout = Some(layout);
        match read_config(files) {
            Ok(c) => model.config = Some(c),
            Err(e) => model.error(e),
        }
        match layout {
            Layout::V3 => model.read_v3(files)?,
            Layout::V2 => model.read_v2(files)?,
        }
        model.group();
        Ok(model)
    }

    fn error(&mut self, error: TrellisError) {
        self.problems.push(Problem {
            severity: Severity::Error,
            error,
        });
    }

    fn read_v3(&mut self, files: &dyn ModelFiles) -> Result<(), TrellisError> {
        let index: WeightIndex = read_json(files, INDEX_FILE)?;
        match read_json::<QuantizationConfig>(files, QUANT_CONFIG_FILE) {
            Ok(qc) => {
                for (name, m) in &qc.tensor_metadata {
                    self.add_meta(name, QUANT_CONFIG_FILE, Some(m.bits), Some(&m.shape), m.mse);
                }
                self.has_metadata = true;
                self.quant_config = Some(qc);
            }
            Err(e) => self.error(e),
        }

        // Every shard name is checked before any file is opened.
        let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (key, shard) in &index.weight_map {
            if check_relative_path(shard).is_err() || shard.contains('/') {
                self.error(TrellisError::UnsafeShardName {
                    key: key.clone(),
                    shard: shard.clone(),
                });
            } else {
                by_shard.entry(shard).or_default().push(key);
            }
        }
        for (shard, keys) in by_shard {
            let header = match read_header(files, shard) {
                Ok(h) => h,
                Err(TrellisError::Source(SourceError::NotFound { .. })) => {
                    self.error(TrellisError::MissingShard {
                        shard: shard.to_string(),
                        key: keys.first().map(|k| k.to_string()).unwrap_or_default(),
                        count: keys.len(),
                    });
                    continue;
                }
                Err(e) => {
                    self.error(e);
                    continue;
                }
            };
            for key in &keys {
                if header.tensor(key).is_none() {
                    self.error(TrellisError::KeyNotInShard {
                        shard: shard.to_string(),
                        key: key.to_string(),
                    });
                }
            }
            for entry in &header.tensors {
                if index.weight_map.get(&entry.name).map(String::as_str) == Some(shard) {
                    self.tensors.push(TensorRef {
                        file: shard.to_string(),
                        entry: entry.clone(),
                    });
                } else {
                    self.error(TrellisError::OrphanTensor {
                        shard: shard.to_string(),
                        key: entry.name.clone(),
                    });
                }
            }
        }
        self.index = Some(index);
        Ok(())
    }

    fn read_v2(&mut self, files: &dyn ModelFiles) -> Result<(), TrellisError> {
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut add_file = |model: &mut TrellisModel, path: &str| match read_header(files, path) {
            Ok(h) => {
                for entry in h.tensors {
                    if let Some(other) = seen.get(&entry.name) {
                        model.error(TrellisError::DuplicateTensor {
                            key: entry.name.clone(),
                            file: path.to_string(),
                            other: other.clone(),
                        });
                        continue;
                    }
                    seen.insert(entry.name.clone(), path.to_string());
                    model.tensors.push(TensorRef {
                        file: path.to_string(),
                        entry,
                    });
                }
            }
            Err(e) => model.error(e),
        };

        for dir in layer_dirs(files)? {
            let index_path = format!("{dir}/index.json");
            match read_json::<LayerIndex>(files, &index_path) {
                Ok(li) => {
                    if li.format.as_deref() != Some("trellis_v2") {
                        self.error(TrellisError::Layout {
                            file: index_path.clone(),
                            problem: format!(
                                "format is {:?}, expected \"trellis_v2\"",
                                li.format.as_deref().unwrap_or("(missing)")
                            ),
                        });
                    }
                    for t in &li.tensors {
                        self.add_meta(&t.name, &index_path, t.bits, t.shape.as_deref(), t.mse);
                    }
                    self.has_metadata = true;
                }
                Err(e) => self.error(e),
            }
            for name in files.list(&dir)? {
                if name.ends_with(".safetensors") {
                    add_file(self, &format!("{dir}/{name}"));
                }
            }
        }
        if files.exists(BASE_WEIGHTS_FILE) {
            add_file(self, BASE_WEIGHTS_FILE);
        } else {
            self.error(TrellisError::Layout {
                file: BASE_WEIGHTS_FILE.into(),
                problem: "missing (a v2 folder keeps its unquantized tensors there)".into(),
            });
        }
        if files.exists(ROUTER_WEIGHTS_FILE) {
            add_file(self, ROUTER_WEIGHTS_FILE);
        }
        if files.exists(QUANT_INDEX_FILE) {
            match read_json::<QuantizationIndex>(files, QUANT_INDEX_FILE) {
                Ok(qi) => {
                    for t in &qi.layers {
                        // Layer index files take precedence.
                        if !self.meta.contains_key(&t.name.replace("__", ".")) {
                            self.add_meta(
                                &t.name,
                                QUANT_INDEX_FILE,
                                t.bits,
                                t.shape.as_deref(),
                                t.mse,
                            );
                        }
                    }
                    self.has_metadata = true;
                    self.quant_index = Some(qi);
                }
                Err(e) => self.error(e),
            }
        }
        Ok(())
    }

    fn add_meta(
        &mut self,
        name: &str,
        file: &str,
        bits: Option<u64>,
        shape: Option<&[u64]>,
        mse: Option<f64>,
    ) {
        self.meta.insert(
            name.replace("__", "."),
            WeightMeta {
                file: file.to_string(),
                bits,
                shape: shape.map(<[u64]>::to_vec),
                mse,
            },
        );
    }

    /// Group the tensors into quantized weights and plain tensors, in file order.
    fn group(&mut self) {
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for t in &self.tensors {
            match split_part_key(t.key()) {
                Some((name, part)) => {
                    let k = *by_name.entry(name.clone()).or_insert_with(|| {
                        self.weights.push(WeightParts {
                            name,
                            parts: Default::default(),
                        });
                        self.entries.push(Entry::Quantized(self.weights.len() - 1));
                        self.weights.len() - 1
                    });
                    let slot = &mut self.weights[k].parts[part as usize];
                    if slot.is_none() {
                        *slot = Some(t.clone());
                    }
                }
                None => {
                    self.plain.push(t.clone());
                    self.entries.push(Entry::Plain(self.plain.len() - 1));
                }
            }
        }
    }

    /// Metadata for a weight, trying its name with and without `.weight`.
    pub fn meta(&self, name: &str) -> Option<&WeightMeta> {
        name_candidates(name)
            .iter()
            .find_map(|c| self.meta.get(c.as_str()))
    }

    /// Every weight the metadata describes: (normalized name, metadata).
    pub fn metadata_entries(&self) -> impl Iterator<Item = (&str, &WeightMeta)> {
        self.meta.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The quantized weight called `name` (any of [`name_candidates`]).
    pub fn weight(&self, name: &str) -> Option<&WeightParts> {
        let candidates = name_candidates(name);
        candidates
            .iter()
            .find_map(|c| self.weights.iter().find(|w| &w.name == c))
    }

    /// The plain tensor called `name` (any of [`name_candidates`], or a key read with `__`
    /// as `.`).
    pub fn plain_tensor(&self, name: &str) -> Option<&TensorRef> {
        let candidates = name_candidates(name);
        candidates.iter().find_map(|c| {
            self.plain
                .iter()
                .find(|t| t.key() == c || t.key().replace("__", ".") == *c)
        })
    }

    /// The model's weight file names (shards for v3, every safetensors file for v2).
    pub fn files(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for t in &self.tensors {
            if !out.contains(&t.file.as_str()) {
                out.push(&t.file);
            }
        }
        out
    }
}

/// Open `path` and read its safetensors header.
pub fn read_header(files: &dyn ModelFiles, path: &str) -> Result<SafetensorsHeader, TrellisError> {
    let src = files.open(path)?;
    Ok(SafetensorsHeader::read(src.as_ref())?)
}

/// Read an F32 tensor as f32 values (checked to be F32 by the caller).
pub fn read_f32(files: &dyn ModelFiles, t: &TensorRef) -> Result<Vec<f32>, TrellisError> {
    if t.entry.dtype != Dtype::F32 {
        return Err(TrellisError::PartDtype {
            file: t.file.clone(),
            tensor: t.key().to_string(),
            dtype: t.entry.dtype.to_string(),
            expected: "F32",
        });
    }
    let bytes = t.read(files)?;
    Ok(crate::formats::safetensors::to_f32(Dtype::F32, &bytes).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_keys_in_both_styles() {
        assert_eq!(
            split_part_key("model.layers.0.mlp.gate_proj.weight.indices"),
            Some(("model.layers.0.mlp.gate_proj.weight".into(), Part::Indices))
        );
        assert_eq!(
            split_part_key("model__layers__0__mlp__gate_proj__weight__su"),
            Some(("model.layers.0.mlp.gate_proj.weight".into(), Part::Su))
        );
        assert_eq!(
            split_part_key("model__layers__0__mlp__gate_proj__sv"),
            Some(("model.layers.0.mlp.gate_proj".into(), Part::Sv))
        );
        assert_eq!(split_part_key("model.norm.weight"), None);
        assert_eq!(split_part_key("indices"), None);
        assert_eq!(split_part_key(".scales"), None);
    }

    #[test]
    fn candidates_cover_weight_suffix_and_underscores() {
        let c = name_candidates("model__layers__1__mlp__gate_proj");
        assert!(c.contains(&"model.layers.1.mlp.gate_proj".to_string()));
        assert!(c.contains(&"model.layers.1.mlp.gate_proj.weight".to_string()));
        let c = name_candidates("a.weight");
        assert!(c.contains(&"a".to_string()));
    }
}
