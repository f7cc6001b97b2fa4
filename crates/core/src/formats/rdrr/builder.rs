//! Writing RDRR: tensors go into fixed-size shards at 4 KiB-aligned offsets, each shard and
//! group hashed, then `tensors.json` and `manifest.json` last. Pure: files are handed to a
//! [`ModelWriter`] (memory in tests, a folder on disk in the CLI), a shard as soon as it is
//! full, so memory holds at most one shard plus the tensor being added.
//!
//! Placement follows the reference converter: a tensor that does not fit in what is left of
//! the current shard starts a new one; a tensor larger than a whole shard is split across
//! consecutive shards with `spans`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::manifest::{HashAlgorithm, Manifest};
use super::metadata::GroupKind;
use super::verify::{hash_hex, StreamHasher};
use super::{ggml_type_for_dtype, RdrrError, DEFAULT_SHARD_SIZE, MANIFEST_FILE, TENSOR_ALIGNMENT};
use crate::formats::source::ModelWriter;
use crate::quant::GgmlType;

/// What to write.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    pub model_id: String,
    /// `transformer`, `mamba`, `rwkv`, `mixtral`, `deepseek`, `jamba`, `lora`, ...
    pub model_type: String,
    /// The model's quantization (`Q4_K_M`, `F16`, ...).
    pub quantization: String,
    pub hash_algorithm: HashAlgorithm,
    /// Bytes per shard (the last one may be smaller). Default 64 MiB.
    pub shard_size: u64,
    /// Tensor start alignment inside a shard, a power of two. Default 4096.
    pub alignment: u64,
    /// Write the deprecated 0.x form (tensors inline in `manifest.json`) instead of v1.
    pub inline_tensors: bool,
    /// Further top-level manifest fields, written as given (`architecture`, `tokenizer`,
    /// `quantizationInfo`, `runtimeOptimizations`, `loraConfig`, ...). The writer's own fields
    /// take precedence.
    pub extra: Map<String, Value>,
}

impl WriterOptions {
    pub fn new(model_id: impl Into<String>) -> WriterOptions {
        WriterOptions {
            model_id: model_id.into(),
            model_type: "transformer".to_string(),
            quantization: "F32".to_string(),
            hash_algorithm: HashAlgorithm::Sha256,
            shard_size: DEFAULT_SHARD_SIZE,
            alignment: TENSOR_ALIGNMENT,
            inline_tensors: false,
            extra: Map::new(),
        }
    }
}

struct PendingGroup {
    kind: GroupKind,
    layer_index: Option<u64>,
    expert_index: Option<u64>,
    tensors: Vec<String>,
    shards: BTreeSet<usize>,
    hasher: StreamHasher,
}

/// Writes one RDRR model: [`RdrrWriter::add_tensor`] for each tensor, then
/// [`RdrrWriter::finish`].
pub struct RdrrWriter {
    options: WriterOptions,
    shard_entries: Vec<Value>,
    /// Sum of the finished shards' sizes.
    written: u64,
    current: Vec<u8>,
    /// True when a tensor (perhaps an empty one) points into the current shard.
    current_referenced: bool,
    tensors: Map<String, Value>,
    groups: BTreeMap<String, PendingGroup>,
}

impl RdrrWriter {
    pub fn new(options: WriterOptions) -> Result<RdrrWriter, RdrrError> {
        if options.shard_size == 0 || usize::try_from(options.shard_size).is_err() {
            return Err(RdrrError::Writer(format!(
                "shard size {} is not usable",
                options.shard_size
            )));
        }
        if !options.alignment.is_power_of_two() {
            return Err(RdrrError::Writer(format!(
                "alignment {} is not a power of two",
                options.alignment
            )));
        }
        Ok(RdrrWriter {
            options,
            shard_entries: Vec::new(),
            written: 0,
            current: Vec::new(),
            current_referenced: false,
            tensors: Map::new(),
            groups: BTreeMap::new(),
        })
    }

    /// Declare a group whose kind its id does not imply (a `layer.N` group of type `mamba`
    /// or `rwkv`, ...). Groups named as the spec's patterns are created on first use.
    pub fn declare_group(
        &mut self,
        id: &str,
        kind: GroupKind,
        layer_index: Option<u64>,
        expert_index: Option<u64>,
    ) -> Result<(), RdrrError> {
        if self.groups.contains_key(id) {
            return Err(RdrrError::Writer(format!("group {id:?} declared twice")));
        }
        self.groups.insert(
            id.to_string(),
            PendingGroup {
                kind,
                layer_index,
                expert_index,
                tensors: Vec::new(),
                shards: BTreeSet::new(),
                hasher: StreamHasher::new(self.options.hash_algorithm),
            },
        );
        Ok(())
    }

    /// Add a tensor. `dtype` must be a dtype this crate reads and `data` exactly the bytes
    /// its shape takes. Full shards are written to `output` on the way.
    pub fn add_tensor(
        &mut self,
        output: &mut dyn ModelWriter,
        name: &str,
        dtype: &str,
        shape: &[u64],
        group: Option<&str>,
        data: &[u8],
    ) -> Result<(), RdrrError> {
        if self.tensors.contains_key(name) {
            return Err(RdrrError::Writer(format!("tensor {name:?} added twice")));
        }
        let ty = ggml_type_for_dtype(dtype)?;
        let len = data.len() as u64;
        let elements = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        match elements.and_then(|n| ty.tensor_bytes(n)) {
            Some(expected) if expected != len => {
                return Err(RdrrError::Writer(format!(
                    "tensor {name:?}: shape {shape:?} of {dtype} takes {expected} bytes, got {len}"
                )))
            }
            Some(_) => {}
            // TL1's size is kernel-specific: nothing to check against.
            None if ty == GgmlType::TL1 => {}
            None => {
                return Err(RdrrError::Writer(format!(
                    "tensor {name:?}: shape {shape:?} is not a whole number of {ty} blocks"
                )))
            }
        }
        if let Some(id) = group {
            if !self.groups.contains_key(id) {
                let (kind, layer, expert) = GroupKind::infer_from_id(id).ok_or_else(|| {
                    RdrrError::Writer(format!(
                        "group {id:?}: its kind cannot be told from its id; declare it first"
                    ))
                })?;
                self.declare_group(id, kind, layer, expert)?;
            }
        }

        let spans = self.place(output, data)?;

        let mut entry = Map::new();
        if let Some(id) = group {
            entry.insert("group".into(), id.into());
        }
        entry.insert("shard".into(), spans[0].0.into());
        entry.insert("offset".into(), spans[0].1.into());
        entry.insert("size".into(), len.into());
        entry.insert("shape".into(), shape.to_vec().into());
        entry.insert("dtype".into(), dtype.into());
        if spans.len() > 1 {
            let list: Vec<Value> = spans
                .iter()
                .map(|&(shard, offset, size)| json!({"shardIndex": shard, "offset": offset, "size": size}))
                .collect();
            entry.insert("spans".into(), list.into());
        }
        self.tensors.insert(name.to_string(), Value::Object(entry));

        if let Some(g) = group.and_then(|id| self.groups.get_mut(id)) {
            g.tensors.push(name.to_string());
            g.shards.extend(spans.iter().map(|s| s.0));
            g.hasher.update(data);
        }
        Ok(())
    }

    /// Put `data` into shards; returns its spans as (shard, offset, size).
    fn place(
        &mut self,
        output: &mut dyn ModelWriter,
        data: &[u8],
    ) -> Result<Vec<(usize, u64, u64)>, RdrrError> {
        let shard_size = self.options.shard_size;
        let len = data.len() as u64;
        let mut pos = self.current.len() as u64;
        if pos > 0 {
            let fits = self
                .align(pos)
                .and_then(|a| a.checked_add(len))
                .is_some_and(|end| end <= shard_size);
            if !fits {
                self.flush(output)?;
                pos = 0;
            }
        }
        // pos is 0, or its aligned value plus the tensor fits in the shard.
        let aligned = self.align(pos).unwrap_or(pos);
        self.current.resize(aligned as usize, 0);
        pos = aligned;
        let mut spans = Vec::new();
        let mut rest = data;
        loop {
            // pos <= shard_size, and pos < shard_size whenever rest is non-empty.
            let space = shard_size - pos;
            let n = (rest.len() as u64).min(space) as usize;
            spans.push((self.shard_entries.len(), pos, n as u64));
            self.current.extend_from_slice(&rest[..n]);
            self.current_referenced = true;
            rest = &rest[n..];
            if rest.is_empty() {
                return Ok(spans);
            }
            self.flush(output)?;
            pos = 0;
        }
    }

    fn align(&self, pos: u64) -> Option<u64> {
        let a = self.options.alignment;
        pos.checked_add(a - 1).map(|p| p & !(a - 1))
    }

    /// Hash the current shard and write it to `output`.
    fn flush(&mut self, output: &mut dyn ModelWriter) -> Result<(), RdrrError> {
        let index = self.shard_entries.len();
        let bytes = std::mem::take(&mut self.current);
        let size = bytes.len() as u64;
        let file_name = format!("shard_{index:05}.bin");
        let alg = self.options.hash_algorithm;
        self.shard_entries.push(json!({
            "index": index,
            "fileName": file_name,
            "size": size,
            "offset": self.written,
            "hash": hash_hex(alg, &bytes),
            "hashAlgorithm": alg.as_str(),
        }));
        self.written = self
            .written
            .checked_add(size)
            .ok_or_else(|| RdrrError::Writer("model larger than 2^64 bytes".into()))?;
        self.current_referenced = false;
        output.write_file(&file_name, &bytes)?;
        Ok(())
    }

    /// Write the last shard, `tensors.json` (v1) and `manifest.json`, and return the
    /// manifest as [`Manifest::parse`] reads it back.
    pub fn finish(mut self, output: &mut dyn ModelWriter) -> Result<Manifest, RdrrError> {
        if !self.current.is_empty() || self.current_referenced {
            self.flush(output)?;
        }
        let opts = &self.options;
        let mut groups = Map::new();
        for (id, g) in std::mem::take(&mut self.groups) {
            let mut entry = Map::new();
            entry.insert("type".into(), g.kind.as_str().into());
            entry.insert("version".into(), "1.0.0".into());
            entry.insert(
                "shards".into(),
                g.shards.into_iter().collect::<Vec<_>>().into(),
            );
            entry.insert("tensors".into(), g.tensors.into());
            entry.insert("hash".into(), g.hasher.finalize_hex().into());
            if let Some(i) = g.layer_index {
                entry.insert("layerIndex".into(), i.into());
            }
            if let Some(i) = g.expert_index {
                entry.insert("expertIndex".into(), i.into());
            }
            groups.insert(id, Value::Object(entry));
        }

        let mut m = opts.extra.clone();
        let version: Value = if opts.inline_tensors {
            "1.0".into()
        } else {
            1.into()
        };
        m.insert("version".into(), version);
        m.insert("modelId".into(), opts.model_id.clone().into());
        m.insert("modelType".into(), opts.model_type.clone().into());
        m.insert("quantization".into(), opts.quantization.clone().into());
        m.insert("hashAlgorithm".into(), opts.hash_algorithm.as_str().into());
        if !groups.is_empty() {
            m.insert("groups".into(), Value::Object(groups));
        }
        m.insert(
            "shards".into(),
            std::mem::take(&mut self.shard_entries).into(),
        );
        m.insert("tensorCount".into(), self.tensors.len().into());
        m.insert("totalSize".into(), self.written.into());
        let tensors = Value::Object(std::mem::take(&mut self.tensors));
        let tensors_json = if opts.inline_tensors {
            m.insert("tensors".into(), tensors);
            None
        } else {
            m.insert("tensorsFile".into(), "tensors.json".into());
            Some(to_json(&tensors)?)
        };
        let manifest_json = to_json(&Value::Object(m))?;
        let manifest = Manifest::parse(&manifest_json, tensors_json.as_deref())?;
        if let Some(bytes) = tensors_json {
            output.write_file("tensors.json", &bytes)?;
        }
        output.write_file(MANIFEST_FILE, &manifest_json)?;
        Ok(manifest)
    }
}

fn to_json(value: &Value) -> Result<Vec<u8>, RdrrError> {
    serde_json::to_vec_pretty(value).map_err(|e| RdrrError::Writer(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::source::MemoryFiles;

    #[test]
    fn tensors_are_aligned_and_split_only_when_larger_than_a_shard() {
        let mut opts = WriterOptions::new("t");
        opts.shard_size = 8192;
        let mut w = RdrrWriter::new(opts).unwrap();
        let mut files = MemoryFiles::new();
        let a = vec![1u8; 100 * 4];
        let b = vec![2u8; 1000 * 4]; // fits after a, at the next 4 KiB boundary
        let c = vec![3u8; 5000 * 4]; // larger than a shard: spans
        w.add_tensor(&mut files, "a", "F32", &[100], Some("embed"), &a)
            .unwrap();
        w.add_tensor(&mut files, "b", "F32", &[1000], Some("layer.0"), &b)
            .unwrap();
        w.add_tensor(&mut files, "c", "F32", &[5000], Some("head"), &c)
            .unwrap();
        let m = w.finish(&mut files).unwrap();
        assert_eq!(m.tensors["a"].spans[0].offset, 0);
        assert_eq!(m.tensors["b"].spans[0].offset, 4096);
        assert_eq!(m.tensors["b"].shard(), Some(0));
        let c = &m.tensors["c"];
        assert!(c.is_multi_shard());
        assert_eq!(c.spans.iter().map(|s| s.size).sum::<u64>(), 20000);
        assert_eq!(c.spans[0].shard, 1);
        assert!(c.spans.iter().skip(1).all(|s| s.offset == 0));
        assert!(m.shards.iter().all(|s| s.size <= 8192));
        assert_eq!(m.groups["layer.0"].layer_index, Some(0));
    }

    #[test]
    fn writer_refuses_what_it_could_not_read_back() {
        let mut w = RdrrWriter::new(WriterOptions::new("t")).unwrap();
        let mut files = MemoryFiles::new();
        let wrong_len = w.add_tensor(&mut files, "a", "F32", &[4], None, &[0; 15]);
        assert!(matches!(wrong_len, Err(RdrrError::Writer(_))));
        let partial = w.add_tensor(&mut files, "b", "Q8_0", &[33], None, &[0; 34]);
        assert!(matches!(partial, Err(RdrrError::Writer(_))));
        let unknown = w.add_tensor(&mut files, "c", "Q9_X", &[1], None, &[0]);
        assert!(matches!(unknown, Err(RdrrError::UnknownDtype { .. })));
        let group = w.add_tensor(&mut files, "d", "F32", &[1], Some("ffn"), &[0; 4]);
        assert!(matches!(group, Err(RdrrError::Writer(_))));
        w.add_tensor(&mut files, "e", "F32", &[1], None, &[0; 4])
            .unwrap();
        let twice = w.add_tensor(&mut files, "e", "F32", &[1], None, &[0; 4]);
        assert!(matches!(twice, Err(RdrrError::Writer(_))));
        assert!(RdrrWriter::new(WriterOptions {
            alignment: 3,
            ..WriterOptions::new("t")
        })
        .is_err());
        assert!(RdrrWriter::new(WriterOptions {
            shard_size: 0,
            ..WriterOptions::new("t")
        })
        .is_err());
    }
}
