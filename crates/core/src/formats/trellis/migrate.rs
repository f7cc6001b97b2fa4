//! Trellis v2 -> v3 migration, as the reference tool does it (`trellis.md`):
//!
//! 1. walk the `layer_XXXX/` directories in order and rename each part to `{name}.{part}`
//!    (`model__layers__0__mlp__gate_proj__weight__indices` ->
//!    `model.layers.0.mlp.gate_proj.weight.indices`), copying the bytes unchanged (header byte
//!    included);
//! 2. start a new shard when the current one is non-empty and the next tensor would take it
//!    past the size limit (default 2 GiB); name shards `model-{i:05}-of-{N:05}.safetensors`;
//! 3. write `model.safetensors.index.json` (true `total_size`: the bytes of every mapped
//!    tensor) and `quantization_config.json` (`tensor_metadata`: shape `[out, in]`, bits, mse);
//! 4. copy every other root file unchanged: config, tokenizer, `quantization_index.json`, and
//!    `base_weights.safetensors` / `router_weights.safetensors`, whose tensors the weight map
//!    points at in place;
//! 5. read the result back: every tensor's name, dtype, shape and bytes must match, and the
//!    new folder must pass [`validate`].
//!
//! Output goes through [`ModelWriter`], so the same code writes to a folder on disk (the CLI,
//! `DirFiles`) or to [`MemoryFiles`](crate::formats::source::MemoryFiles) (tests); the output
//! must also be [`ModelFiles`], as it is read back. Tensors are streamed one at a time; no
//! shard is held in memory.

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Map, Value};

use super::index::{
    GlobalConfig, QuantizationConfig, TensorMetadata, WeightIndex, BASE_WEIGHTS_FILE, INDEX_FILE,
    QUANT_CONFIG_FILE, ROUTER_WEIGHTS_FILE,
};
use super::model::{split_part_key, Layout, TensorRef, TrellisModel};
use super::validate::{validate, Issue};
use super::TrellisError;
use crate::formats::safetensors::encode_header;
use crate::formats::source::{ModelFiles, ModelWriter};

/// Default shard size limit: 2 GiB (the spec's "2GB", `2 * 1024**3`).
pub const DEFAULT_SHARD_SIZE: u64 = 2 * 1024 * 1024 * 1024;

/// Bytes copied per read when copying whole files.
const COPY_CHUNK: u64 = 16 * 1024 * 1024;

/// Options of [`migrate_v2_to_v3`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrateOptions {
    /// Largest tensor data per shard, in bytes (a single larger tensor gets a shard of its own).
    pub shard_size: u64,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        Self {
            shard_size: DEFAULT_SHARD_SIZE,
        }
    }
}

/// Parse a shard size: plain bytes (`"1000000"`) or a number with `KB`/`MB`/`GB`/`TB` (powers
/// of 1024, as the spec's `2GB = 2 * 1024**3`; `KiB`/`MiB`/`GiB`/`TiB` too). `None` if invalid
/// or zero.
pub fn parse_shard_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let scale: u64 = match unit.as_str() {
        "" | "b" => 1,
        "kb" | "kib" | "k" => 1 << 10,
        "mb" | "mib" | "m" => 1 << 20,
        "gb" | "gib" | "g" => 1 << 30,
        "tb" | "tib" | "t" => 1 << 40,
        _ => return None,
    };
    let bytes = if let Ok(n) = number.parse::<u64>() {
        n.checked_mul(scale)?
    } else {
        let f = number.parse::<f64>().ok()? * scale as f64;
        if !f.is_finite() || f >= u64::MAX as f64 {
            return None;
        }
        f as u64
    };
    (bytes > 0).then_some(bytes)
}

/// What a migration wrote.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MigrationReport {
    /// Shard file names, in order.
    pub shards: Vec<String>,
    /// Tensors in the weight map.
    pub tensors: usize,
    /// `metadata.total_size` written.
    pub total_size: u64,
    /// Root files copied unchanged.
    pub copied_files: Vec<String>,
    /// Warnings of the validation of the written folder.
    pub warnings: Vec<Issue>,
}

/// A tensor of the new layout and where its bytes come from.
struct Planned<'a> {
    name: String,
    file: String,
    source: &'a TensorRef,
}

fn migration_error(problem: impl Into<String>) -> TrellisError {
    TrellisError::Migration {
        problem: problem.into(),
    }
}

/// Migrate the v2 folder `input` to v3 in `output`; see the module docs.
pub fn migrate_v2_to_v3<W: ModelFiles + ModelWriter>(
    input: &dyn ModelFiles,
    output: &mut W,
    options: &MigrateOptions,
) -> Result<MigrationReport, TrellisError> {
    if options.shard_size == 0 {
        return Err(migration_error("the shard size must be at least 1 byte"));
    }
    let model = TrellisModel::open(input)?;
    if model.layout != Some(Layout::V2) {
        return Err(migration_error("the input is not a Trellis v2 folder (no layer_XXXX/ directories, or it is already v3)"));
    }
    let input_report = validate(input);
    if !input_report.is_valid() {
        let errors: Vec<String> = input_report.errors().map(|i| i.message.clone()).collect();
        return Err(migration_error(format!(
            "the v2 input does not validate: {}",
            errors.join("; ")
        )));
    }

    // Plan: layer tensors renamed, in walk order, cut into shards.
    let mut shards: Vec<Vec<Planned>> = Vec::new();
    let mut current: Vec<Planned> = Vec::new();
    let mut current_size = 0u64;
    let mut names = HashSet::new();
    for t in model
        .tensors
        .iter()
        .filter(|t| t.file.starts_with("layer_"))
    {
        let name = match split_part_key(t.key()) {
            Some((weight, part)) => format!("{weight}.{}", part.suffix()),
            None => t.key().replace("__", "."),
        };
        if !names.insert(name.clone()) {
            return Err(migration_error(format!(
                "two tensors would both be named {name}"
            )));
        }
        let len = t.entry.byte_len();
        if !current.is_empty() && current_size.saturating_add(len) > options.shard_size {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current_size = current_size.saturating_add(len);
        current.push(Planned {
            name,
            file: String::new(),
            source: t,
        });
    }
    if !current.is_empty() {
        shards.push(current);
    }
    let n = shards.len();
    let shard_names: Vec<String> = (1..=n)
        .map(|i| format!("model-{i:05}-of-{n:05}.safetensors"))
        .collect();
    for (planned, shard) in shards.iter_mut().zip(&shard_names) {
        for p in planned.iter_mut() {
            p.file = shard.clone();
        }
    }
    let mut plan: Vec<Planned> = shards.into_iter().flatten().collect();
    for t in model
        .tensors
        .iter()
        .filter(|t| t.file == BASE_WEIGHTS_FILE || t.file == ROUTER_WEIGHTS_FILE)
    {
        if !names.insert(t.key().to_string()) {
            return Err(migration_error(format!(
                "{} holds {}, which a layer tensor is also renamed to",
                t.file,
                t.key()
            )));
        }
        plan.push(Planned {
            name: t.key().to_string(),
            file: t.file.clone(),
            source: t,
        });
    }

    // Shards.
    let pt = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    for shard in &shard_names {
        let members: Vec<&Planned> = plan.iter().filter(|p| &p.file == shard).collect();
        let specs: Vec<(&str, _, &[u64], u64)> = members
            .iter()
            .map(|p| {
                let e = &p.source.entry;
                (p.name.as_str(), e.dtype, e.shape.as_slice(), e.byte_len())
            })
            .collect();
        let header = encode_header(&specs, Some(&pt))?;
        let mut w = output.create_file(shard)?;
        w.write_all(&header)?;
        for p in members {
            w.write_all(&p.source.read(input)?)?;
        }
        w.finish()?;
    }

    // Root files, copied unchanged.
    let mut copied_files = Vec::new();
    for name in input.list("")? {
        if name.starts_with("layer_") || input.list(&name).is_ok() {
            continue; // a directory
        }
        if name == INDEX_FILE || name == QUANT_CONFIG_FILE || shard_names.contains(&name) {
            return Err(migration_error(format!(
                "the v2 folder already holds {name}, which the migration writes"
            )));
        }
        copy_file(input, output, &name)?;
        copied_files.push(name);
    }

    // quantization_config.json and the index.
    let quant_config = quantization_config(&model, input)?;
    let average_bits = quant_config
        .global_config
        .as_ref()
        .and_then(|g| g.average_bits_per_weight);
    let total_size: u64 = plan.iter().map(|p| p.source.entry.byte_len()).sum();
    let mut metadata = Map::new();
    metadata.insert("total_size".into(), json!(total_size));
    metadata.insert("format".into(), json!("trellis_v3"));
    metadata.insert(
        "quantization".into(),
        json!({
            "bits_per_weight": average_bits,
            "method": quant_config.quantization_method,
        }),
    );
    let index = WeightIndex {
        metadata,
        weight_map: plan
            .iter()
            .map(|p| (p.name.clone(), p.file.clone()))
            .collect(),
    };
    write_json(output, QUANT_CONFIG_FILE, &quant_config)?;
    write_json(output, INDEX_FILE, &index)?;

    verify(input, &*output, &plan)?;
    let report = validate(&*output);
    if !report.is_valid() {
        return Err(TrellisError::MigratedInvalid {
            issues: report.errors().map(|i| i.message.clone()).collect(),
        });
    }
    Ok(MigrationReport {
        shards: shard_names,
        tensors: plan.len(),
        total_size,
        copied_files,
        warnings: report.warnings().cloned().collect(),
    })
}

fn copy_file(
    input: &dyn ModelFiles,
    output: &mut dyn ModelWriter,
    name: &str,
) -> Result<(), TrellisError> {
    let src = input.open(name)?;
    let mut w = output.create_file(name)?;
    let mut offset = 0;
    while offset < src.len() {
        let len = COPY_CHUNK.min(src.len() - offset);
        w.write_all(&src.read_vec(offset, len)?)?;
        offset += len;
    }
    w.finish()?;
    Ok(())
}

fn write_json<T: serde::Serialize>(
    output: &mut dyn ModelWriter,
    path: &str,
    value: &T,
) -> Result<(), TrellisError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| TrellisError::Json {
        file: path.to_string(),
        message: e.to_string(),
    })?;
    bytes.push(b'\n');
    output.write_file(path, &bytes)?;
    Ok(())
}

/// `quantization_config.json` for the v2 model: per-weight bits, `[out, in]`, mse.
fn quantization_config(
    model: &TrellisModel,
    files: &dyn ModelFiles,
) -> Result<QuantizationConfig, TrellisError> {
    let mut tensor_metadata = BTreeMap::new();
    let mut layer_allocation: BTreeMap<String, Value> = BTreeMap::new();
    let (mut weighted_bits, mut elements) = (0f64, 0f64);
    for w in &model.weights {
        let r = model.resolve(files, w)?;
        let n = r.out as f64 * r.in_ as f64;
        weighted_bits += f64::from(r.bits) * n;
        elements += n;
        tensor_metadata.insert(
            r.name.clone(),
            TensorMetadata {
                bits: u64::from(r.bits),
                shape: vec![r.out as u64, r.in_ as u64],
                mse: model.meta(&r.name).and_then(|m| m.mse),
                compressed_bytes: Some(r.byte_len()),
                ..Default::default()
            },
        );
        if let Some((layer, module)) = r
            .name
            .strip_prefix("model.layers.")
            .and_then(|rest| rest.split_once('.'))
        {
            let module = module.strip_suffix(".weight").unwrap_or(module);
            if let Value::Object(m) = layer_allocation
                .entry(layer.to_string())
                .or_insert_with(|| json!({}))
            {
                m.insert(module.to_string(), json!(r.bits));
            }
        }
    }
    let qi = model.quant_index.as_ref();
    let hadamard = qi.and_then(|q| q.extra.get("hadamard_transform").and_then(Value::as_bool));
    Ok(QuantizationConfig {
        quantization_version: Some("trellis_v3".into()),
        quantization_method: Some(qi.and_then(|q| q.method()).unwrap_or("trellis").to_string()),
        global_config: Some(GlobalConfig {
            average_bits_per_weight: (elements > 0.0).then(|| weighted_bits / elements),
            hadamard_transform: hadamard,
            tile_size: Some(16),
            ..Default::default()
        }),
        tensor_metadata,
        layer_allocation,
        extra: Map::new(),
    })
}

/// Read the written folder back and compare every tensor with its source.
fn verify(
    input: &dyn ModelFiles,
    output: &dyn ModelFiles,
    plan: &[Planned],
) -> Result<(), TrellisError> {
    let written = TrellisModel::open(output)?;
    let fail = |what: String| migration_error(format!("verification failed: {what}"));
    if written.tensors.len() != plan.len() {
        return Err(fail(format!(
            "{} tensors were written, {} planned",
            written.tensors.len(),
            plan.len()
        )));
    }
    for p in plan {
        let Some(t) = written.tensors.iter().find(|t| t.key() == p.name) else {
            return Err(fail(format!("{} is missing from the output", p.name)));
        };
        let (a, b) = (&p.source.entry, &t.entry);
        if t.file != p.file || a.dtype != b.dtype || a.shape != b.shape {
            return Err(fail(format!(
                "{} is {} {:?} in {}, expected {} {:?} in {}",
                p.name, b.dtype, b.shape, t.file, a.dtype, a.shape, p.file
            )));
        }
        if t.read(output)? != p.source.read(input)? {
            return Err(fail(format!(
                "the bytes of {} differ from {}'s {}",
                p.name,
                p.source.file,
                p.source.key()
            )));
        }
    }
    Ok(())
}
