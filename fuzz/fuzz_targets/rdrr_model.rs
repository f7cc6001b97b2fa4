//! An RDRR folder's whole way in: the tiny BitNet fixture converted to RDRR (once), then
//! changed by a structured list of edits a hostile server or user could make (claimed shard
//! and tensor sizes, spans that repeat or overlap, a tensor listed many times by a group,
//! colliding file names, other shapes and dtypes, changed hyper-parameters, damaged or cut
//! shard bytes). The result goes through `validate`, `verify`, `describe`, `check_layout`, the
//! engine's RDRR open, `ModelConfig`, `Model::load` and a CPU forward pass, and through
//! `download_rdrr` (a pull from an in-memory server into an in-memory store with a quota).
//! Nothing may panic, abort or allocate or hash by a claim.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tritium_core::formats::gguf::GgufFile;
use tritium_core::formats::rdrr::{self, ConvertOptions, Manifest};
use tritium_core::formats::source::MemoryFiles;
use tritium_engine::backend::cpu::CpuBackend;
use tritium_engine::backend::Readback;
use tritium_engine::model::rdrr::RdrrModel;
use tritium_engine::model::{Model, ModelConfig};
use tritium_storage::download::{
    download_rdrr, DownloadOptions, HttpBody, HttpClient, HttpError, HttpResponse, ResponseHeaders,
    RetryPolicy,
};
use tritium_storage::MemoryStore;

const FIXTURE: &[u8] = include_bytes!("../../tests/fixtures/bitnet/tiny-i2s.gguf");

/// The fixture as an RDRR folder, converted once.
fn folder() -> &'static BTreeMap<String, Vec<u8>> {
    static FOLDER: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let bytes = FIXTURE.to_vec();
        let file = GgufFile::read(&bytes).expect("fixture");
        let mut out = MemoryFiles::new();
        let mut options = ConvertOptions::new("tiny");
        options.shard_size = 256 << 10; // three shards
        rdrr::convert_gguf(&bytes, &file, &mut out, &options, &[]).expect("convert");
        out.files
    })
}

#[derive(Arbitrary, Debug)]
enum Name {
    Manifest,
    Tensors,
    Tokenizer,
    Metadata,
    Shard(u8),
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Edit {
    ShardSize {
        shard: u8,
        size: u64,
    },
    ShardOffset {
        shard: u8,
        offset: u64,
    },
    ShardName {
        shard: u8,
        name: Name,
    },
    ShardHash {
        shard: u8,
    },
    ShardByte {
        shard: u8,
        at: u32,
        byte: u8,
    },
    ShardCut {
        shard: u8,
        len: u32,
    },
    TotalSize(u64),
    /// Replace a tensor's placement with `repeat` copies of one span.
    Spans {
        tensor: u8,
        repeat: u16,
        shard: u8,
        offset: u64,
        size: u64,
    },
    TensorSize {
        tensor: u8,
        size: u64,
    },
    TensorOffset {
        tensor: u8,
        offset: u64,
    },
    TensorShape {
        tensor: u8,
        shape: Vec<u64>,
    },
    TensorDtype {
        tensor: u8,
        dtype: String,
    },
    /// List a tensor `times` more times in a group.
    GroupRepeat {
        group: u8,
        tensor: u8,
        times: u16,
    },
    GroupHash {
        group: u8,
    },
    ExtraFile {
        name: Name,
        size: u64,
    },
    /// Set a GGUF metadata value (by index) to a number.
    Metadata {
        key: u8,
        value: f64,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    edits: Vec<Edit>,
    blake3: bool,
    ids: Vec<u8>,
}

fn name_of(files: &BTreeMap<String, Vec<u8>>, manifest: &Value, name: &Name) -> String {
    match name {
        Name::Manifest => "manifest.json".into(),
        Name::Tensors => "tensors.json".into(),
        Name::Tokenizer => "tokenizer.json".into(),
        Name::Metadata => "gguf_metadata.json".into(),
        Name::Shard(i) => {
            let shards = manifest["shards"].as_array().map_or(0, Vec::len).max(1);
            format!("shard_{:05}.bin", *i as usize % shards)
        }
        Name::Other(s) => {
            let _ = files;
            s.chars().take(40).collect()
        }
    }
}

/// `v[i % len]` of a JSON array or object's values.
fn nth<'a>(v: &'a mut Value, i: u8) -> Option<&'a mut Value> {
    match v {
        Value::Array(a) if !a.is_empty() => {
            let n = a.len();
            a.get_mut(i as usize % n)
        }
        Value::Object(o) if !o.is_empty() => {
            let n = o.len();
            o.values_mut().nth(i as usize % n)
        }
        _ => None,
    }
}

fn edit(files: &mut BTreeMap<String, Vec<u8>>, input: &Input) {
    let mut manifest: Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    let mut tensors: Value = serde_json::from_slice(&files["tensors.json"]).unwrap();
    let mut metadata: Value = serde_json::from_slice(&files["gguf_metadata.json"]).unwrap();
    for e in input.edits.iter().take(16) {
        match e {
            Edit::ShardSize { shard, size } => {
                if let Some(s) = nth(&mut manifest["shards"], *shard) {
                    s["size"] = json!(size);
                }
            }
            Edit::ShardOffset { shard, offset } => {
                if let Some(s) = nth(&mut manifest["shards"], *shard) {
                    s["offset"] = json!(offset);
                }
            }
            Edit::ShardName { shard, name } => {
                let name = name_of(files, &manifest, name);
                if let Some(s) = nth(&mut manifest["shards"], *shard) {
                    s["fileName"] = json!(name);
                }
            }
            Edit::ShardHash { shard } => {
                if let Some(s) = nth(&mut manifest["shards"], *shard) {
                    s["hash"] = json!("0".repeat(64));
                }
            }
            Edit::ShardByte { shard, at, byte } => {
                let name = name_of(files, &manifest, &Name::Shard(*shard));
                if let Some(b) = files.get_mut(&name) {
                    if !b.is_empty() {
                        let n = b.len();
                        b[*at as usize % n] = *byte;
                    }
                }
            }
            Edit::ShardCut { shard, len } => {
                let name = name_of(files, &manifest, &Name::Shard(*shard));
                if let Some(b) = files.get_mut(&name) {
                    b.truncate(*len as usize);
                }
            }
            Edit::TotalSize(size) => manifest["totalSize"] = json!(size),
            Edit::Spans {
                tensor,
                repeat,
                shard,
                offset,
                size,
            } => {
                if let Some(t) = nth(&mut tensors, *tensor) {
                    let span = json!({"shardIndex": shard, "offset": offset, "size": size});
                    t["spans"] = Value::Array(vec![span; (*repeat as usize).min(4096)]);
                }
            }
            Edit::TensorSize { tensor, size } => {
                if let Some(t) = nth(&mut tensors, *tensor) {
                    t["size"] = json!(size);
                }
            }
            Edit::TensorOffset { tensor, offset } => {
                if let Some(t) = nth(&mut tensors, *tensor) {
                    t["offset"] = json!(offset);
                }
            }
            Edit::TensorShape { tensor, shape } => {
                if let Some(t) = nth(&mut tensors, *tensor) {
                    t["shape"] = json!(shape.iter().take(5).collect::<Vec<_>>());
                }
            }
            Edit::TensorDtype { tensor, dtype } => {
                if let Some(t) = nth(&mut tensors, *tensor) {
                    t["dtype"] = json!(dtype.chars().take(12).collect::<String>());
                }
            }
            Edit::GroupRepeat {
                group,
                tensor,
                times,
            } => {
                let tensor_name = tensors
                    .as_object()
                    .and_then(|o| o.keys().nth(*tensor as usize % o.len().max(1)))
                    .cloned();
                if let (Some(g), Some(name)) = (nth(&mut manifest["groups"], *group), tensor_name) {
                    if let Some(list) = g["tensors"].as_array_mut() {
                        list.extend(std::iter::repeat_n(
                            json!(name),
                            (*times as usize).min(1 << 14),
                        ));
                    }
                }
            }
            Edit::GroupHash { group } => {
                if let Some(g) = nth(&mut manifest["groups"], *group) {
                    g["hash"] = json!("f".repeat(64));
                }
            }
            Edit::ExtraFile { name, size } => {
                let name = name_of(files, &manifest, name);
                if let Some(list) = manifest["extraFiles"].as_array_mut() {
                    list.push(json!({"fileName": name, "size": size, "hash": "0".repeat(64)}));
                }
            }
            Edit::Metadata { key, value } => {
                if let Some(entry) = nth(&mut metadata["metadata"], *key) {
                    // A number of the entry's own type, so the claim reaches the model's
                    // configuration rather than stopping at the JSON reader.
                    entry["value"] = match entry["type"].as_str() {
                        Some("f32" | "f64") => json!(value),
                        _ => json!(*value as u64),
                    };
                }
            }
        }
    }
    if input.blake3 {
        manifest["hashAlgorithm"] = json!("blake3");
    }
    files.insert(
        "manifest.json".into(),
        serde_json::to_vec(&manifest).unwrap(),
    );
    files.insert("tensors.json".into(), serde_json::to_vec(&tensors).unwrap());
    files.insert(
        "gguf_metadata.json".into(),
        serde_json::to_vec(&metadata).unwrap(),
    );
}

/// The folder served from memory: `GET <base>/<file>`, with `Range: bytes=N-`.
struct MemoryServer<'a>(&'a BTreeMap<String, Vec<u8>>);

struct Whole(Option<Bytes>);

impl HttpBody for Whole {
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        Ok(self.0.take())
    }
}

impl HttpClient for MemoryServer<'_> {
    type Body = Whole;

    async fn get(&self, url: &str, from: Option<u64>) -> Result<HttpResponse<Whole>, HttpError> {
        let name = url.rsplit('/').next().unwrap_or_default();
        let Some(bytes) = self.0.get(name) else {
            return Ok(HttpResponse {
                status: 404,
                headers: ResponseHeaders::default(),
                body: Whole(None),
            });
        };
        let len = bytes.len() as u64;
        let start = from.unwrap_or(0).min(len);
        let body = Bytes::copy_from_slice(&bytes[start as usize..]);
        Ok(HttpResponse {
            status: if from.is_some() { 206 } else { 200 },
            headers: ResponseHeaders {
                content_length: Some(len - start),
                content_range: from.map(|_| format!("bytes {start}-{}/{len}", len.max(1) - 1)),
                accept_ranges: Some("bytes".into()),
                etag: None,
            },
            body: Whole(Some(body)),
        })
    }

    async fn sleep(&self, _: Duration) {}
}

fuzz_target!(|input: Input| {
    let mut files = folder().clone();
    edit(&mut files, &input);
    let memory = MemoryFiles {
        files: files.clone(),
    };

    if let Ok(m) = Manifest::load(&memory) {
        let _ = rdrr::validate(&m, &memory);
        let _ = rdrr::verify(&m, &memory, None);
        let _ = rdrr::describe(&m);
        if rdrr::check_layout(&m, &memory).is_ok() {
            if let Ok(model) = RdrrModel::with_manifest(memory.clone(), m) {
                if let Ok(config) = ModelConfig::from_gguf(&model.header) {
                    if let Ok(mut m) = Model::load(CpuBackend::new(2), config, &model, 8) {
                        let ids: Vec<u32> =
                            input.ids.iter().take(2).map(|&b| u32::from(b)).collect();
                        if !ids.is_empty() {
                            let _ = pollster::block_on(m.forward(&ids, 0, Readback::All));
                        }
                    }
                }
            }
        }
    }

    let store = MemoryStore::with_quota(16 << 20);
    let options = DownloadOptions {
        parallel: 1,
        retry: RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        },
        hash_threads: false,
        ..DownloadOptions::default()
    };
    let _ = pollster::block_on(download_rdrr(
        &store,
        &MemoryServer(&files),
        "http://fuzz/model",
        "fuzz",
        &options,
        &|_| {},
    ));
});
