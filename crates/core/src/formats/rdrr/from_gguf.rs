//! GGUF to RDRR: the tensors go into shards unchanged (same bytes, same GGML types), grouped as
//! the spec names the groups of a transformer (`embed`, `layer.N`, `head`); the GGUF's whole
//! header is kept losslessly in `gguf_metadata.json` (see [`GgufMetadata`]), so the model runs
//! with the same tokens and converts back to the same GGUF.
//!
//! Streaming: one tensor is read at a time and [`RdrrWriter`] holds at most one shard, so memory
//! stays near the shard size plus the largest tensor, whatever the model's size. Files go
//! through a [`ModelWriter`]: the extra files first, then the shards, `tensors.json`, and
//! `manifest.json` last, so a folder without a manifest is never a finished model.

use serde_json::{json, Map, Value as Json};

use super::builder::{RdrrWriter, WriterOptions};
use super::gguf_metadata::{GgufMetadata, GGUF_METADATA_FILE};
use super::manifest::{HashAlgorithm, Manifest};
use super::verify::hash_hex;
use super::{RdrrError, DEFAULT_SHARD_SIZE};
use crate::formats::gguf::{Array, GgufFile, TensorInfo, Value};
use crate::formats::source::{ByteSource, ModelWriter};
use crate::quant::GgmlType;

/// How to convert.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The manifest's `modelId`.
    pub model_id: String,
    /// Bytes per shard (default 64 MiB).
    pub shard_size: u64,
    /// Shard, group and extra-file hashes (default SHA-256).
    pub hash_algorithm: HashAlgorithm,
}

impl ConvertOptions {
    pub fn new(model_id: impl Into<String>) -> ConvertOptions {
        ConvertOptions {
            model_id: model_id.into(),
            shard_size: DEFAULT_SHARD_SIZE,
            hash_algorithm: HashAlgorithm::Sha256,
        }
    }
}

/// A further file to put into the model folder and list in the manifest's `extraFiles`.
#[derive(Debug, Clone)]
pub struct ExtraFileData {
    /// A plain file name (`tokenizer.json`).
    pub name: String,
    /// What it is for (`tokenizer`, `gguf-metadata`, ...).
    pub role: String,
    pub bytes: Vec<u8>,
}

/// What a conversion wrote.
#[derive(Debug, Clone)]
pub struct ConvertReport {
    /// The manifest as written.
    pub manifest: Manifest,
    pub tensor_count: usize,
    /// Bytes of tensor data (without alignment padding).
    pub tensor_bytes: u64,
    /// Bytes of all shards (with padding).
    pub shard_bytes: u64,
}

/// The component group of a GGUF tensor: `layer.N` for `blk.N.*`, `head` for the final norm
/// and the LM head (`output*`), `embed` for the token embedding and any other global tensor.
pub fn gguf_tensor_group(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("blk.") {
        let index = rest.split('.').next().unwrap_or("");
        if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = index.parse::<u64>() {
                return format!("layer.{n}");
            }
        }
    }
    if name.starts_with("output") {
        "head".to_string()
    } else {
        "embed".to_string()
    }
}

/// `llama_ftype` names (lowercase), for `general.file_type`.
fn file_type_name(id: u64) -> Option<&'static str> {
    Some(match id {
        0 => "f32",
        1 => "f16",
        2 => "q4_0",
        3 => "q4_1",
        7 => "q8_0",
        8 => "q5_0",
        9 => "q5_1",
        10 => "q2_k",
        11 => "q3_k_s",
        12 => "q3_k_m",
        13 => "q3_k_l",
        14 => "q4_k_s",
        15 => "q4_k_m",
        16 => "q5_k_s",
        17 => "q5_k_m",
        18 => "q6_k",
        32 => "bf16",
        36 => "tq1_0",
        37 => "tq2_0",
        _ => return None,
    })
}

/// `quantization` (e.g. `Q4_K_M`) and the `quantizationInfo` object for a model's tensors:
/// `weights` from the file type when the file states a known one, else the type holding the
/// most bytes of the layers' matrices; `embeddings` and `lmHead` from `token_embd.weight` and
/// `output.weight` (the embedding when the head is tied); `variantTag` as the reference
/// converter spells it (`wq4_k_m-embf16`).
pub fn quantization_summary<'a>(
    tensors: impl Iterator<Item = (&'a str, GgmlType, u64, usize)> + Clone,
    file_type: Option<u64>,
) -> (String, Json) {
    let lower = |t: GgmlType| t.name().to_ascii_lowercase();
    let find = |wanted: &str| {
        tensors
            .clone()
            .find(|(name, ..)| *name == wanted)
            .map(|(_, t, ..)| t)
    };
    let weights = file_type
        .and_then(file_type_name)
        .map(str::to_string)
        .or_else(|| {
            let mut by_type: Vec<(GgmlType, u64)> = Vec::new();
            for (name, t, bytes, n_dims) in tensors.clone() {
                if n_dims >= 2 && name.starts_with("blk.") {
                    match by_type.iter_mut().find(|(x, _)| *x == t) {
                        Some(entry) => entry.1 += bytes,
                        None => by_type.push((t, bytes)),
                    }
                }
            }
            by_type
                .into_iter()
                .max_by_key(|&(_, bytes)| bytes)
                .map(|(t, _)| lower(t))
        })
        .unwrap_or_else(|| "f32".to_string());
    let embeddings = find("token_embd.weight").map(lower);
    let lm_head = find("output.weight").map(lower).or(embeddings.clone());
    let mut info = Map::new();
    info.insert("weights".into(), weights.clone().into());
    let mut tag = format!("w{weights}");
    if let Some(e) = &embeddings {
        info.insert("embeddings".into(), e.clone().into());
        tag.push_str(&format!("-emb{e}"));
    }
    if let Some(h) = lm_head {
        info.insert("lmHead".into(), h.into());
    }
    info.insert("variantTag".into(), tag.into());
    (weights.to_ascii_uppercase(), Json::Object(info))
}

/// The manifest's `architecture` object from GGUF metadata (`{arch}.block_count`, ...), with
/// the GGUF architecture name as `ggufArchitecture`. Fields the file lacks are left out.
fn architecture(file: &GgufFile) -> Json {
    let mut a = Map::new();
    let Some(arch) = file.architecture() else {
        return Json::Object(a);
    };
    let key = |k: &str| format!("{arch}.{k}");
    let num = |k: &str| file.get(&key(k)).map(|v| v.to_json(0));
    let heads = file.get_u64(&key("attention.head_count"));
    let hidden = file.get_u64(&key("embedding_length"));
    let vocab = file
        .tensor("token_embd.weight")
        .and_then(|t| t.dims.get(1).copied())
        .or_else(|| file.get_u64(&key("vocab_size")))
        .or_else(|| match file.get("tokenizer.ggml.tokens") {
            Some(Value::Array(Array::String(t))) => Some(t.len() as u64),
            _ => None,
        });
    let head_dim = file
        .get_u64(&key("attention.key_length"))
        .or_else(|| Some(hidden? / heads.filter(|&h| h > 0)?));
    let fields = [
        ("numLayers", num("block_count")),
        ("hiddenSize", num("embedding_length")),
        ("intermediateSize", num("feed_forward_length")),
        ("numAttentionHeads", num("attention.head_count")),
        (
            "numKeyValueHeads",
            num("attention.head_count_kv").or_else(|| num("attention.head_count")),
        ),
        ("headDim", head_dim.map(Json::from)),
        ("vocabSize", vocab.map(Json::from)),
        ("maxSeqLen", num("context_length")),
        ("ropeTheta", num("rope.freq_base")),
        ("rmsNormEps", num("attention.layer_norm_rms_epsilon")),
    ];
    for (name, value) in fields {
        if let Some(v) = value.filter(|v| v.is_number()) {
            a.insert(name.into(), v);
        }
    }
    a.insert("ggufArchitecture".into(), arch.into());
    Json::Object(a)
}

/// Convert the GGUF `file` (bytes from `src`) into an RDRR model written to `out`, with
/// `gguf_metadata.json` and the given extra files (a `tokenizer` role file becomes the
/// manifest's `tokenizer.file`). Tensors keep their names, types, shapes and bytes.
pub fn convert_gguf(
    src: &dyn ByteSource,
    file: &GgufFile,
    out: &mut dyn ModelWriter,
    options: &ConvertOptions,
    extra_files: &[ExtraFileData],
) -> Result<ConvertReport, RdrrError> {
    let mut read = |t: &TensorInfo| -> Result<Vec<u8>, RdrrError> {
        let (start, len) = file.tensor_range(t);
        Ok(src.read_vec(start, len)?)
    };
    convert_gguf_view(file, &mut read, out, options, extra_files)
}

/// As [`convert_gguf`], for a GGUF that exists only as a header (a GGUF view of another
/// model, such as a converted Hugging Face checkpoint): `read` gives each tensor's bytes, one
/// tensor at a time, in the header's order.
pub fn convert_gguf_view(
    file: &GgufFile,
    read: &mut dyn FnMut(&TensorInfo) -> Result<Vec<u8>, RdrrError>,
    out: &mut dyn ModelWriter,
    options: &ConvertOptions,
    extra_files: &[ExtraFileData],
) -> Result<ConvertReport, RdrrError> {
    let metadata = ExtraFileData {
        name: GGUF_METADATA_FILE.to_string(),
        role: "gguf-metadata".to_string(),
        bytes: GgufMetadata::from_gguf(file).to_json()?,
    };
    let mut extra = Map::new();
    let file_type = file.get_u64("general.file_type");
    let (quantization, info) = quantization_summary(
        file.tensors
            .iter()
            .map(|t| (t.name.as_str(), t.dtype, t.n_bytes, t.dims.len())),
        file_type,
    );
    extra.insert("quantizationInfo".into(), info);
    extra.insert("architecture".into(), architecture(file));
    let listed = write_extra_files(
        out,
        std::iter::once(&metadata).chain(extra_files),
        options.hash_algorithm,
    )?;
    if let Some(tok) = extra_files.iter().find(|f| f.role == "tokenizer") {
        let kind = match file.get_str("tokenizer.ggml.model") {
            Some("gpt2") => "bpe",
            Some("llama") => "sentencepiece",
            Some(other) => other,
            None => "json",
        };
        let mut t = Map::new();
        t.insert("type".into(), kind.into());
        t.insert("file".into(), tok.name.clone().into());
        match file.get("tokenizer.ggml.tokens") {
            Some(Value::Array(tokens)) => {
                t.insert("vocabSize".into(), tokens.len().into());
            }
            _ => {
                if let Some(n) = file.tensor("token_embd.weight").and_then(|t| t.dims.get(1)) {
                    t.insert("vocabSize".into(), (*n).into());
                }
            }
        }
        extra.insert("tokenizer".into(), Json::Object(t));
    }
    extra.insert("extraFiles".into(), listed);

    let mut writer = RdrrWriter::new(WriterOptions {
        model_type: "transformer".into(),
        quantization,
        hash_algorithm: options.hash_algorithm,
        shard_size: options.shard_size,
        extra,
        ..WriterOptions::new(options.model_id.clone())
    })?;
    let mut tensor_bytes = 0u64;
    for t in &file.tensors {
        let data = read(t)?;
        let group = gguf_tensor_group(&t.name);
        writer.add_tensor(
            out,
            &t.name,
            t.dtype.name(),
            &t.shape(),
            Some(&group),
            &data,
        )?;
        tensor_bytes += data.len() as u64;
    }
    let manifest = writer.finish(out)?;
    Ok(ConvertReport {
        tensor_count: file.tensors.len(),
        tensor_bytes,
        shard_bytes: manifest.shard_bytes().unwrap_or(u64::MAX),
        manifest,
    })
}

/// Write each file to `out` and return the manifest's `extraFiles` list for them.
pub(crate) fn write_extra_files<'a>(
    out: &mut dyn ModelWriter,
    files: impl Iterator<Item = &'a ExtraFileData>,
    alg: HashAlgorithm,
) -> Result<Json, RdrrError> {
    let mut listed = Vec::new();
    for f in files {
        super::manifest::check_plain_file_name("extraFiles", &f.name)?;
        out.write_file(&f.name, &f.bytes)?;
        listed.push(json!({
            "fileName": f.name,
            "size": f.bytes.len(),
            "hash": hash_hex(alg, &f.bytes),
            "hashAlgorithm": alg.as_str(),
            "role": f.role,
        }));
    }
    Ok(Json::Array(listed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gguf::GgufWriter;
    use crate::formats::rdrr::read_tensor;
    use crate::formats::source::MemoryFiles;

    #[test]
    fn groups_follow_the_spec_names() {
        assert_eq!(gguf_tensor_group("token_embd.weight"), "embed");
        assert_eq!(gguf_tensor_group("rope_freqs.weight"), "embed");
        assert_eq!(gguf_tensor_group("blk.0.attn_q.weight"), "layer.0");
        assert_eq!(gguf_tensor_group("blk.29.ffn_down.weight"), "layer.29");
        assert_eq!(gguf_tensor_group("blk.007.x"), "layer.7");
        assert_eq!(gguf_tensor_group("blk.x.y"), "embed");
        assert_eq!(gguf_tensor_group("output_norm.weight"), "head");
        assert_eq!(gguf_tensor_group("output.weight"), "head");
    }

    #[test]
    fn quantization_info_names_weights_embeddings_and_head() {
        let tensors = [
            ("token_embd.weight", GgmlType::Q8_0, 100, 2),
            ("blk.0.attn_q.weight", GgmlType::Q4_K, 50, 2),
            ("blk.0.ffn_down.weight", GgmlType::Q6_K, 60, 2),
            ("blk.1.attn_q.weight", GgmlType::Q4_K, 50, 2),
            ("blk.0.attn_norm.weight", GgmlType::F32, 999, 1),
        ];
        let (q, info) = quantization_summary(tensors.iter().copied(), None);
        assert_eq!(q, "Q4_K");
        assert_eq!(info["weights"], "q4_k");
        assert_eq!(info["embeddings"], "q8_0");
        assert_eq!(info["lmHead"], "q8_0");
        assert_eq!(info["variantTag"], "wq4_k-embq8_0");
        let (q, info) = quantization_summary(tensors.iter().copied(), Some(15));
        assert_eq!(q, "Q4_K_M");
        assert_eq!(info["variantTag"], "wq4_k_m-embq8_0");
    }

    #[test]
    fn a_small_gguf_converts_with_spans_and_metadata() {
        let mut w = GgufWriter::new();
        w.add("general.architecture", Value::String("llama".into()))
            .unwrap();
        w.add("llama.block_count", Value::U32(1)).unwrap();
        w.add("llama.embedding_length", Value::U32(8)).unwrap();
        let big: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
        w.add_tensor("token_embd.weight", GgmlType::F32, &[2, 8], vec![1; 64])
            .unwrap();
        w.add_tensor("blk.0.ffn_up.weight", GgmlType::I8, &[9000], big.clone())
            .unwrap();
        w.add_tensor("output_norm.weight", GgmlType::F32, &[8], vec![2; 32])
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        let file = GgufFile::read(&bytes).unwrap();
        let mut out = MemoryFiles::new();
        let opts = ConvertOptions {
            shard_size: 4096,
            ..ConvertOptions::new("tiny")
        };
        let report = convert_gguf(&bytes, &file, &mut out, &opts, &[]).unwrap();
        let m = &report.manifest;
        assert_eq!(report.tensor_count, 3);
        assert!(m.tensors["blk.0.ffn_up.weight"].is_multi_shard());
        assert_eq!(read_tensor(m, &out, "blk.0.ffn_up.weight").unwrap(), big);
        assert_eq!(m.groups["head"].tensors, ["output_norm.weight"]);
        assert_eq!(m.groups["layer.0"].layer_index, Some(0));
        assert_eq!(m.extra_files[0].file_name, GGUF_METADATA_FILE);
        let meta = GgufMetadata::from_json(&out.files[GGUF_METADATA_FILE]).unwrap();
        assert_eq!(meta.metadata, file.metadata);
        let header = meta.header(m).unwrap();
        let names: Vec<&str> = header.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "token_embd.weight",
                "blk.0.ffn_up.weight",
                "output_norm.weight"
            ]
        );
        assert_eq!(header.tensors[0].dims, [8, 2]);
        assert!(crate::formats::rdrr::verify(m, &out, None).is_ok());
    }
}
