//! Our quantizers and `tritium quantize` against llama.cpp's bytes.
//!
//! - Small rows: ggml's `quantize_row_*_ref` (called through llama-cpp-python 0.3.36's
//!   libggml-base by tests/goldens/gen_llama_quant_rows.py) on 16 rows of 256 values with the
//!   corner cases the K-quant fits reach; our `quant::quantize` must give the same bytes for
//!   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K.
//! - Whole model: llama.cpp's `llama_model_quantize` made Q4_K_M, Q6_K and Q8_0 files from the
//!   SmolLM2 Q4_1 GGUF (tests/goldens/gen_llama_goldens.py recorded every tensor's type and
//!   SHA-256 and the file's SHA-256); `tritium quantize` must write the same tensors, with the
//!   same types, in the same order, and the same file.
//!
//! No tolerance anywhere: these are byte comparisons. The model file is fetched by
//! scripts/fetch-models.sh; the test fails (never skips) when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tritium::formats::gguf::GgufFile;
use tritium::quant::ftype::{plan, FileType, ModelFacts, TensorIn};
use tritium::quant::{quantize, GgmlType};
use tritium::storage::FileSource;

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn goldens() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/llama")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn smollm2() -> &'static Path {
    let p = Path::new(SMOLLM2);
    assert!(
        p.exists(),
        "{SMOLLM2} is missing: run scripts/fetch-models.sh"
    );
    p
}

#[test]
fn small_rows_match_ggml_reference_quantizers() {
    let dir = goldens().join("quant_rows");
    let index = read_json(&dir.join("index.json"));
    let raw = std::fs::read(dir.join("input.f32.bin")).unwrap();
    let input: Vec<f32> = raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let n_per_row = index["n_per_row"].as_u64().unwrap() as usize;
    let rows = index["rows"].as_array().unwrap();
    assert_eq!(input.len(), rows.len() * n_per_row);
    let types = index["types"].as_object().unwrap();
    assert_eq!(types.len(), 8);
    for (name, info) in types {
        let dtype = GgmlType::from_name(name).unwrap();
        assert_eq!(
            u64::from(dtype.id()),
            info["id"].as_u64().unwrap(),
            "{name}"
        );
        let want = std::fs::read(dir.join(format!("{}.bin", name.to_lowercase()))).unwrap();
        assert_eq!(sha256(&want), info["sha256"].as_str().unwrap(), "{name}");
        let ours = quantize(dtype, &input).unwrap();
        assert_eq!(ours.len(), want.len(), "{name}");
        // Row by row, so a failure names the corner case.
        let row_bytes = want.len() / rows.len();
        for (r, desc) in rows.iter().enumerate() {
            let span = r * row_bytes..(r + 1) * row_bytes;
            if ours[span.clone()] != want[span.clone()] {
                let first = (span.start..span.end)
                    .find(|&i| ours[i] != want[i])
                    .unwrap_or(span.start);
                panic!(
                    "{name}, row {r} ({desc}): bytes differ from ggml from offset {} \
                     (ours {:02x?}, ggml {:02x?})",
                    first - span.start,
                    &ours[first..(first + 8).min(span.end)],
                    &want[first..(first + 8).min(span.end)],
                );
            }
        }
    }
}

/// The golden table of one variant: (name, type, sha256) in llama.cpp's file order.
fn golden_tensors(variant: &str) -> (Value, Vec<(String, String, String)>) {
    let doc = read_json(&goldens().join(format!("{}.json", variant.to_lowercase())));
    let rows = doc["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_array().unwrap();
            let s = |i: usize| r[i].as_str().unwrap().to_string();
            (s(0), s(1), s(2))
        })
        .collect();
    (doc, rows)
}

/// The type plan alone (no quantization): every tensor's target type and the write order are
/// llama.cpp's.
#[test]
fn type_choice_matches_llama_cpp() {
    let src = FileSource::open(smollm2()).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let facts = ModelFacts {
        arch: "llama".into(),
        n_layer: 30,
        n_expert: 0,
        n_head: 9,
        n_head_kv: 3,
    };
    let inputs: Vec<TensorIn<'_>> = file
        .tensors
        .iter()
        .map(|t| TensorIn {
            name: &t.name,
            dims: &t.dims,
            dtype: t.dtype,
        })
        .collect();
    for ftype in FileType::ALL {
        let (_, want) = golden_tensors(ftype.name());
        let got = plan(ftype, &facts, &inputs).unwrap();
        let got: Vec<(String, String)> = got
            .iter()
            .map(|p| (p.name.clone(), p.target.name().to_string()))
            .collect();
        let want: Vec<(String, String)> = want.into_iter().map(|(n, t, _)| (n, t)).collect();
        assert_eq!(got, want, "{ftype}");
    }
}

/// `tritium quantize` on the real model, each variant: same tensors, types, bytes and file.
#[test]
fn quantize_cli_reproduces_llama_cpp_files() {
    let input = smollm2();
    let dir = tempfile::tempdir().unwrap();
    for ftype in FileType::ALL {
        let (doc, want) = golden_tensors(ftype.name());
        let out = dir.path().join(format!("{}.gguf", ftype.name()));
        let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
            .arg("quantize")
            .arg(input)
            .arg(&out)
            .args(["--type", &ftype.name().to_lowercase()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!dir
            .path()
            .join(format!("{}.gguf.part", ftype.name()))
            .exists());

        let bytes = std::fs::read(&out).unwrap();
        let src = FileSource::open(&out).unwrap();
        let file = GgufFile::read(&src).unwrap();
        assert_eq!(file.tensors.len(), want.len(), "{ftype}");
        let mut mismatches = Vec::new();
        for (t, (name, dtype, hash)) in file.tensors.iter().zip(&want) {
            let data = file.read_tensor(&src, &t.name).unwrap();
            let got = (t.name.as_str(), t.dtype.name(), sha256(&data));
            if got != (name.as_str(), dtype.as_str(), hash.clone()) {
                mismatches.push(format!("{} {} (llama.cpp: {name} {dtype})", got.0, got.1));
            }
        }
        assert!(
            mismatches.is_empty(),
            "{ftype}: {} of {} tensors differ from llama.cpp's: {:?}",
            mismatches.len(),
            want.len(),
            &mismatches[..mismatches.len().min(10)]
        );
        assert_eq!(
            file.get_u64("general.file_type"),
            Some(u64::from(ftype.id()))
        );
        assert_eq!(
            sha256(&bytes),
            doc["file_sha256"].as_str().unwrap(),
            "{ftype}: every tensor matches, but the file (metadata or layout) differs"
        );
    }
}

#[test]
fn quantize_cli_rejects_unknown_types_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .arg("quantize")
        .arg(SMOLLM2)
        .arg(&out)
        .args(["--type", "q2_k"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("q4_k_m"));
    let o = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .arg("quantize")
        .arg(dir.path().join("missing.gguf"))
        .arg(&out)
        .args(["--type", "q8_0"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}
