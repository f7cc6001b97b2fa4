//! The checks of `trellis.md`'s "Validation" list, each failure one message naming the file,
//! tensor or field:
//!
//! - every shard in `weight_map` is a plain file name (checked before anything is opened) and
//!   exists; every mapped key is in its shard; no shard key is missing from the map;
//! - every quantized weight has all four parts; indices are u8 (int16 is the retired v1
//!   format); `len == 1 + TO*TI*32*b`; the header is in 2..8 and equals the metadata's bits;
//!   scales/su/sv are f32 `[G, out]`, `[in]`, `[out]`; scales are finite; a warning when su or
//!   sv hold anything but +1/-1;
//! - `quantization_config.json` parses and covers every quantized weight; `config.json` is an
//!   object with `model_type` or `architectures`.
//!
//! v2 folders get the same per-weight checks against their layer `index.json` files.

use serde::Serialize;

use super::index::{INDEX_FILE, QUANT_CONFIG_FILE};
use super::model::{Layout, Severity, TrellisModel};
use super::resolve::inspect_weight;
use super::TrellisError;
use crate::formats::source::ModelFiles;

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    pub severity: Severity,
    pub message: String,
}

impl std::fmt::Display for Issue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{tag}: {}", self.message)
    }
}

/// Everything [`validate`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ValidationReport {
    /// "Trellis v3" / "Trellis v2", when the layout was recognised.
    pub format: Option<String>,
    pub issues: Vec<Issue>,
    /// Quantized weights examined.
    pub quantized_weights: usize,
    /// Plain (unquantized) tensors seen.
    pub plain_tensors: usize,
}

impl ValidationReport {
    /// True when there is no error (warnings allowed).
    pub fn is_valid(&self) -> bool {
        self.errors().next().is_none()
    }

    pub fn errors(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.severity == Severity::Error)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Issue> {
        self.issues
            .iter()
            .filter(|i| i.severity == Severity::Warning)
    }

    fn push(&mut self, severity: Severity, error: &TrellisError) {
        self.issues.push(Issue {
            severity,
            message: error.to_string(),
        });
    }
}

/// Check a Trellis model folder (v3 or v2) and report every problem found.
pub fn validate(files: &dyn ModelFiles) -> ValidationReport {
    let mut report = ValidationReport::default();
    let model = match TrellisModel::open(files) {
        Ok(m) => m,
        Err(e) => {
            report.push(Severity::Error, &e);
            return report;
        }
    };
    report.format = model.layout.map(|l| l.label().to_string());
    for p in &model.problems {
        report.push(p.severity, &p.error);
    }

    for weight in &model.weights {
        let (_, problems) = inspect_weight(&model, files, weight, true);
        for p in &problems {
            report.push(p.severity, &p.error);
        }
        if model.has_metadata && model.meta(&weight.name).is_none() {
            let meta_file = match model.layout {
                Some(Layout::V2) => "the layer index.json files",
                _ => QUANT_CONFIG_FILE,
            };
            report.push(
                Severity::Error,
                &TrellisError::NotCovered {
                    meta_file: meta_file.to_string(),
                    weight: weight.name.clone(),
                },
            );
        }
    }
    // The other direction: metadata for a weight that has no tensors. In v2 the layer index
    // is the list of what the layer holds, so a missing weight is an error; in v3 a stale
    // quantization_config.json entry is only a warning.
    for (name, meta) in model.metadata_entries() {
        if model.weight(name).is_none() {
            let severity = match model.layout {
                Some(Layout::V2) => Severity::Error,
                _ => Severity::Warning,
            };
            report.push(
                severity,
                &TrellisError::Layout {
                    file: meta.file.clone(),
                    problem: format!(
                        "describes quantized weight {name}, but no tensor of it was found"
                    ),
                },
            );
        }
    }
    report.quantized_weights = model.weights.len();
    report.plain_tensors = model.plain.len();

    if let Some(index) = &model.index {
        let actual: u64 = model.tensors.iter().map(|t| t.entry.byte_len()).sum();
        if let Some(stated) = index.total_size() {
            // Only meaningful when every mapped tensor was found.
            if stated != actual && model.problems.is_empty() {
                report.push(
                    Severity::Warning,
                    &TrellisError::TotalSize { stated, actual },
                );
            }
        }
        if let Some(format) = index.format() {
            if format != "trellis_v3" {
                report.push(
                    Severity::Warning,
                    &TrellisError::Layout {
                        file: INDEX_FILE.into(),
                        problem: format!("metadata.format is {format:?}, expected \"trellis_v3\""),
                    },
                );
            }
        }
    }
    report
}
