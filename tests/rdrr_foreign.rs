//! RDRR folders from other converters: a folder written as the seed's converter writes it
//! (Hugging Face tensor names, the manifest's `architecture` block, `tokenizer.json`,
//! `quantizationInfo`, no `gguf_metadata.json`) runs as the GGUF it came from.
//!
//! The fixtures (tests/fixtures/foreign_rdrr/) are made by tests/goldens/gen_foreign_rdrr.py: a
//! tiny Llama GGUF (Q8_0 linear weights, F16 embedding and output) written with gguf-py as
//! llama.cpp's converter writes one, and that GGUF converted to RDRR by the script's own writer,
//! which follows the RDRR specification and reads the GGUF with gguf-py (nothing of tritium).
//! As a Hugging Face checkpoint holds them, the folder's q and k rows are in rotate-half order;
//! the GGUF's are permuted for interleaved-pair RoPE.
//!
//! What must hold:
//! - The folder verifies (every shard and group SHA-256) and validates with our reader.
//! - Greedy tokens (`run --json`: prompt ids, generated ids and text) and logits (`logits`) of
//!   the folder equal the GGUF's exactly, on the CPU backend and on wgpu (lavapipe here): no
//!   tolerance, since the view hands the engine the GGUF's own bytes (q/k rows permuted back as
//!   llama.cpp's converter permutes them) and the same code runs both.
//! - That permutation is what makes them equal: the same folder holding the GGUF's q/k rows
//!   unpermuted gives other logits.
//! - A folder without an `architecture` block (and no config.json) or a tensor it cannot place
//!   is refused with an error saying so; without `tokenizer.json` it still runs from ids, and a
//!   text prompt is refused naming the missing file. Never a panic.

use std::path::{Path, PathBuf};

use tritium::formats::gguf::GgufFile;
use tritium::formats::rdrr::{self, Manifest};
use tritium::formats::source::ModelFiles;
use tritium::storage::DirFiles;

const GGUF: &str = "tests/fixtures/foreign_rdrr/tiny-llama.gguf";
const RDRR: &str = "tests/fixtures/foreign_rdrr/tiny-llama-rdrr";
const PROMPT: &str = "the capital of france is";
const IDS: &str = "257,316,108,277,102,259,282,283,263,115";

#[path = "common/goldens.rs"]
mod goldens;

use goldens::{failed as fails, succeeded as ok, tritium_output as tritium};

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `run --json` greedy: prompt ids, generated ids, text.
fn run(model: &str, backend: &str) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let o = ok(tritium(&[
        "run",
        model,
        "--backend",
        backend,
        "--json",
        "-p",
        PROMPT,
        "--temperature",
        "0",
        "--max-tokens",
        "8",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["backend"].as_str().unwrap_or("").starts_with(backend),
        "ran on {}",
        v["backend"]
    );
    (
        v["prompt_ids"].clone(),
        v["generated_ids"].clone(),
        v["text"].clone(),
    )
}

/// The logits bytes of every position of [`IDS`].
fn logits(model: &str, backend: &str, out: &Path) -> Vec<u8> {
    ok(tritium(&[
        "logits",
        model,
        "--backend",
        backend,
        "--ids",
        IDS,
        "-o",
        path(out),
    ]));
    let bytes = std::fs::read(out).unwrap();
    assert!(!bytes.is_empty() && bytes.len() % 4 == 0);
    bytes
}

/// A copy of the fixture folder to break.
fn copy_folder(dir: &Path) -> PathBuf {
    let to = dir.join("rdrr");
    std::fs::create_dir(&to).unwrap();
    for e in std::fs::read_dir(RDRR).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&p, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

#[test]
fn the_folder_is_what_the_spec_describes_and_verifies() {
    let files = DirFiles::new(RDRR);
    let m = Manifest::load(&files).unwrap();
    assert!(!files.exists(rdrr::GGUF_METADATA_FILE));
    assert!(m
        .tensors
        .contains_key("model.layers.1.self_attn.q_proj.weight"));
    assert!(m.tensors.values().any(|t| t.is_multi_shard()));
    let report = rdrr::verify(&m, &files, None);
    assert!(report.is_ok(), "{:?}", report.problems());
    let v = rdrr::validate(&m, &files);
    assert!(v.is_valid(), "{:?}", v.issues);
}

#[test]
fn runs_as_its_gguf_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (run(GGUF, "cpu"), run(RDRR, "cpu"));
    assert_eq!(a, b);
    assert_eq!(a.1.as_array().map(Vec::len), Some(8), "{a:?}");
    let la = logits(GGUF, "cpu", &tmp.path().join("a.f32"));
    let lb = logits(RDRR, "cpu", &tmp.path().join("b.f32"));
    assert!(la == lb, "logits differ");
}

#[test]
fn runs_as_its_gguf_on_wgpu() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (run(GGUF, "gpu"), run(RDRR, "gpu"));
    assert_eq!(a, b);
    assert_eq!(a.1.as_array().map(Vec::len), Some(8), "{a:?}");
    let la = logits(GGUF, "gpu", &tmp.path().join("a.f32"));
    let lb = logits(RDRR, "gpu", &tmp.path().join("b.f32"));
    assert!(la == lb, "logits differ");
}

/// The q/k permutation is load-bearing: the folder with the GGUF's (permuted) q/k bytes in
/// place of its own reads as another model.
#[test]
fn qk_rows_in_gguf_order_give_other_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_folder(tmp.path());
    let gguf_bytes = std::fs::read(GGUF).unwrap();
    let gguf = GgufFile::read(&gguf_bytes).unwrap();
    let m = Manifest::load(&DirFiles::new(&dir)).unwrap();
    for layer in 0..2 {
        for (ours, theirs) in [("q_proj", "attn_q"), ("k_proj", "attn_k")] {
            let name = format!("model.layers.{layer}.self_attn.{ours}.weight");
            let raw = gguf
                .read_tensor(&gguf_bytes, &format!("blk.{layer}.{theirs}.weight"))
                .unwrap();
            let mut at = 0;
            for span in &m.tensors[&name].spans {
                let shard = dir.join(m.shard_file(span.shard).unwrap());
                let mut bytes = std::fs::read(&shard).unwrap();
                let (o, n) = (span.offset as usize, span.size as usize);
                assert_ne!(
                    bytes[o..o + n],
                    raw[at..at + n],
                    "{name}: already GGUF order"
                );
                bytes[o..o + n].copy_from_slice(&raw[at..at + n]);
                std::fs::write(&shard, bytes).unwrap();
                at += n;
            }
            assert_eq!(at, raw.len());
        }
    }
    let want = logits(GGUF, "cpu", &tmp.path().join("a.f32"));
    let got = logits(path(&dir), "cpu", &tmp.path().join("b.f32"));
    assert!(want != got, "the unpermuted rows gave the same logits");
}

#[test]
fn without_architecture_block_or_tokenizer_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_folder(tmp.path());

    // No tokenizer.json: ids still run; a text prompt is refused, naming the file.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    ok(tritium(&[
        "run",
        path(&dir),
        "--backend",
        "cpu",
        "--ids",
        IDS,
        "--max-tokens",
        "2",
    ]));
    let err = fails(tritium(&[
        "run",
        path(&dir),
        "--backend",
        "cpu",
        "-p",
        PROMPT,
        "--max-tokens",
        "2",
    ]));
    assert!(err.contains("tokenizer.json"), "{err}");

    // No architecture block and no config.json: the shape is unknown.
    edit_manifest(&dir, |m| {
        m.as_object_mut().unwrap().remove("architecture");
    });
    let err = fails(tritium(&[
        "run",
        path(&dir),
        "--backend",
        "cpu",
        "--ids",
        IDS,
    ]));
    assert!(
        err.contains("architecture") && err.contains("config.json"),
        "{err}"
    );

    // A block without the layer count.
    let two = tmp.path().join("two");
    std::fs::create_dir(&two).unwrap();
    let dir2 = copy_folder(&two);
    edit_manifest(&dir2, |m| {
        m["architecture"]
            .as_object_mut()
            .unwrap()
            .remove("numLayers");
    });
    let err = fails(tritium(&[
        "run",
        path(&dir2),
        "--backend",
        "cpu",
        "--ids",
        IDS,
    ]));
    assert!(err.contains("numLayers"), "{err}");

    // Fewer layers than the tensors: a tensor with no place.
    edit_manifest(&dir2, |m| m["architecture"]["numLayers"] = 1.into());
    let err = fails(tritium(&[
        "run",
        path(&dir2),
        "--backend",
        "cpu",
        "--ids",
        IDS,
    ]));
    assert!(err.contains("model.layers.1."), "{err}");
}
