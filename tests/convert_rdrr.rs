//! `tritium convert` between GGUF and RDRR, and running RDRR folders, end to end through the
//! binary on real files: SmolLM2-135M Q4_1 and the tiny BitNet fixtures (I2_S and TQ2_0).
//!
//! - GGUF -> RDRR (shards small enough that many tensors span shards) -> GGUF gives back the
//!   original file byte for byte (SHA-256 pinned by scripts/fetch-models.sh and
//!   tests/fixtures/bitnet/fixtures.json): same metadata, tensor names, types, shapes and bytes.
//!   (tests/goldens/check_rdrr_vs_gguf.py checks the same folders with gguf-py as the GGUF reader
//!   and its own RDRR reader; run by hand, it needs the Python venv.)
//! - The RDRR folder is what the spec describes: groups `embed`, `layer.N`, `head`, tensors at
//!   4 KiB-aligned offsets, SHA-256 (or BLAKE3) per shard and group that verify,
//!   quantizationInfo and architecture filled in, tokenizer.json that re-loads and encodes as
//!   the GGUF tokenizer does.
//! - A GGUF and its RDRR conversion give identical greedy tokens (`run --json`) and identical
//!   logits bytes (`logits`) on the CPU backend: exact equality, no tolerance, since the same
//!   bytes go through the same code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};
use tritium::formats::rdrr::{self, Manifest};
use tritium::formats::source::ModelFiles;
use tritium::storage::DirFiles;
use tritium::text::Tokenizer;

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const SMOLLM2_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const TINY_I2S: &str = "tests/fixtures/bitnet/tiny-i2s.gguf";
const TINY_TQ2: &str = "tests/fixtures/bitnet/tiny-tq2_0.gguf";

fn tritium(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .expect("runs")
}

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn sha256_file(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

fn fixture_sha256(name: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read("tests/fixtures/bitnet/fixtures.json").unwrap())
            .unwrap();
    v["files"][name].as_str().unwrap().to_string()
}

fn smollm2() -> &'static str {
    assert!(
        Path::new(SMOLLM2).exists(),
        "{SMOLLM2} is missing: run scripts/fetch-models.sh"
    );
    SMOLLM2
}

/// Convert `gguf` into `dir/rdrr` with `shard_size`, and back into `dir/back.gguf`.
fn round_trip(gguf: &str, dir: &Path, shard_size: &str, extra: &[&str]) -> (PathBuf, PathBuf) {
    let rdrr = dir.join("rdrr");
    let back = dir.join("back.gguf");
    let mut args = vec!["convert", gguf, path(&rdrr), "--shard-size", shard_size];
    args.extend_from_slice(extra);
    ok(tritium(&args));
    ok(tritium(&["convert", path(&rdrr), path(&back)]));
    (rdrr, back)
}

/// The structure the spec asks for, checked on the manifest as our reader normalizes it.
fn check_structure(rdrr: &Path, layers: u64) -> Manifest {
    let files = DirFiles::new(rdrr);
    let m = Manifest::load(&files).unwrap();
    assert_eq!(m.format_name(), "RDRR v1");
    let report = rdrr::verify(&m, &files, None);
    assert!(report.is_ok(), "{:?}", report.problems());
    assert!(report.groups.len() as u64 == layers + 2);
    for (name, t) in &m.tensors {
        assert_eq!(t.spans[0].offset % 4096, 0, "{name} is not 4 KiB-aligned");
        let group = t.group.as_deref().unwrap();
        let want = match name.strip_prefix("blk.") {
            Some(rest) => format!("layer.{}", rest.split('.').next().unwrap()),
            None if name.starts_with("output") => "head".into(),
            None => "embed".into(),
        };
        assert_eq!(group, want, "{name}");
        assert!(m.groups[group].tensors.contains(name));
    }
    for i in 0..layers {
        assert_eq!(m.groups[&format!("layer.{i}")].layer_index, Some(i));
    }
    assert!(m.shards.iter().all(|s| s.filename.starts_with("shard_")));
    let roles: Vec<_> = m.extra_files.iter().map(|f| f.role.clone()).collect();
    assert!(roles.contains(&Some("gguf-metadata".into())), "{roles:?}");
    m
}

/// The extracted tokenizer.json re-loads and encodes as the GGUF's tokenizer does.
fn check_tokenizer(gguf: &str, rdrr: &Path, texts: &[&str]) {
    let bytes = std::fs::read(gguf).unwrap();
    let file = tritium::formats::gguf::GgufFile::read(&bytes).unwrap();
    let want = Tokenizer::from_gguf(&file).unwrap();
    let json = DirFiles::new(rdrr)
        .read_small("tokenizer.json", 64 << 20)
        .unwrap();
    let got = Tokenizer::from_json(&json).unwrap();
    for text in texts {
        for special in [false, true] {
            assert_eq!(
                got.encode(text, special).unwrap(),
                want.encode(text, special).unwrap(),
                "{text:?} (add_special {special})"
            );
        }
    }
}

/// `run --json` greedy ids and `logits` bytes of two models are identical.
fn check_same_outputs(a: &str, b: &str, prompt: &str, ids: &str, dir: &Path) {
    let run = |model: &str| {
        let o = ok(tritium(&[
            "run",
            model,
            "--backend",
            "cpu",
            "--json",
            "-p",
            prompt,
            "--temperature",
            "0",
            "--max-tokens",
            "6",
        ]));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (
            v["prompt_ids"].clone(),
            v["generated_ids"].clone(),
            v["text"].clone(),
        )
    };
    let (ra, rb) = (run(a), run(b));
    assert_eq!(ra, rb);
    assert_eq!(ra.1.as_array().map(Vec::len), Some(6), "{ra:?}");
    let logits = |model: &str, name: &str| {
        let out = dir.join(name);
        ok(tritium(&[
            "logits",
            model,
            "--backend",
            "cpu",
            "--ids",
            ids,
            "-o",
            path(&out),
        ]));
        std::fs::read(out).unwrap()
    };
    let (la, lb) = (logits(a, "a.f32"), logits(b, "b.f32"));
    assert!(!la.is_empty() && la.len() % 4 == 0);
    assert!(la == lb, "logits differ");
}

#[test]
fn smollm2_converts_to_rdrr_and_back_byte_for_byte_and_runs_identically() {
    let tmp = tempfile::tempdir().unwrap();
    // 512 KiB shards: the 30 MB embedding and every FFN matrix (552,960 bytes) span shards.
    let (rdrr, back) = round_trip(smollm2(), tmp.path(), "512KB", &[]);
    assert_eq!(sha256_file(&back), SMOLLM2_SHA256);

    let m = check_structure(&rdrr, 30);
    let spanning: Vec<&String> = m
        .tensors
        .iter()
        .filter(|(_, t)| t.is_multi_shard())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(spanning.len(), 91, "{spanning:?}");
    assert!(m.tensors["token_embd.weight"].spans.len() > 50);
    assert_eq!(m.quantization.as_deref(), Some("Q4_1"));
    let q = m.quantization_info.as_ref().unwrap();
    assert_eq!(q.weights.as_deref(), Some("q4_1"));
    assert_eq!(q.embeddings.as_deref(), Some("q8_0"));
    assert_eq!(q.lm_head.as_deref(), Some("q8_0"), "tied: the embedding");
    assert_eq!(q.variant_tag.as_deref(), Some("wq4_1-embq8_0"));
    let Some(rdrr::Architecture::Config(a)) = &m.architecture else {
        panic!("no architecture object")
    };
    assert_eq!(
        (a.num_layers, a.hidden_size, a.intermediate_size),
        (Some(30), Some(576), Some(1536))
    );
    assert_eq!(
        (a.num_attention_heads, a.num_key_value_heads, a.head_dim),
        (Some(9), Some(3), Some(64))
    );
    assert_eq!((a.vocab_size, a.max_seq_len), (Some(49152), Some(8192)));
    assert_eq!(a.rope_theta, Some(100000.0));
    assert_eq!(a.rms_norm_eps, Some(1e-5));
    let tok = m.tokenizer.as_ref().unwrap();
    assert_eq!(tok.file.as_deref(), Some("tokenizer.json"));
    assert_eq!(tok.vocab_size, Some(49152));

    check_tokenizer(
        SMOLLM2,
        &rdrr,
        &[
            "The capital of France is",
            "<|im_start|>user\nHello, wörld! 123<|im_end|>\n",
            "  spaces\tand\nnewlines 日本 🎉",
        ],
    );
    check_same_outputs(
        SMOLLM2,
        path(&rdrr),
        "The capital of France is",
        "1,504,3575,282,4649,314",
        tmp.path(),
    );
}

#[test]
fn tiny_bitnet_fixtures_convert_back_byte_for_byte_and_run_identically() {
    for (gguf, name) in [(TINY_I2S, "tiny-i2s.gguf"), (TINY_TQ2, "tiny-tq2_0.gguf")] {
        let tmp = tempfile::tempdir().unwrap();
        // 16 KiB shards: nearly every ternary matrix and the embedding span shards.
        let (rdrr, back) = round_trip(gguf, tmp.path(), "16KB", &[]);
        assert_eq!(sha256_file(&back), fixture_sha256(name), "{name}");
        let m = check_structure(&rdrr, 2);
        let spanning = m.tensors.values().filter(|t| t.is_multi_shard()).count();
        assert!(spanning >= 10, "{name}: {spanning} tensors span shards");
        check_tokenizer(gguf, &rdrr, &["Hello world, the quick brown fox 42"]);
        if gguf == TINY_I2S {
            assert_eq!(m.quantization.as_deref(), Some("I2_S"));
            check_same_outputs(gguf, path(&rdrr), "Paris is", "509,70,423,281", tmp.path());
        }
    }
}

#[test]
fn blake3_manifests_verify_and_convert_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (rdrr, back) = round_trip(TINY_TQ2, tmp.path(), "64KB", &["--blake3"]);
    let m = check_structure(&rdrr, 2);
    assert_eq!(m.hash_algorithm, Some(rdrr::HashAlgorithm::Blake3));
    assert!(m
        .shards
        .iter()
        .all(|s| s.hash_algorithm == rdrr::HashAlgorithm::Blake3));
    assert_eq!(sha256_file(&back), fixture_sha256("tiny-tq2_0.gguf"));
}

#[test]
fn conversions_refuse_to_overwrite_and_leave_nothing_half_done() {
    let tmp = tempfile::tempdir().unwrap();
    // A non-empty output folder is refused and left as it was.
    let out = tmp.path().join("busy");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"mine").unwrap();
    let o = tritium(&["convert", TINY_I2S, path(&out)]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));
    assert_eq!(std::fs::read(out.join("keep.txt")).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);

    // An empty output folder is fine.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    ok(tritium(&["convert", TINY_I2S, path(&empty)]));
    assert!(empty.join("manifest.json").is_file());

    // A truncated GGUF: an error, and no output folder (or hidden staging folder) left.
    let bytes = std::fs::read(TINY_I2S).unwrap();
    let cut = tmp.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    let o = tritium(&["convert", path(&cut), path(&tmp.path().join("cut"))]);
    assert!(!o.status.success());
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n == "cut" || n.contains("converting")),
        "{names:?}"
    );

    // An RDRR folder without GGUF metadata cannot be written back as GGUF: clear error, no file.
    std::fs::remove_file(empty.join(rdrr::GGUF_METADATA_FILE)).unwrap();
    let gguf = tmp.path().join("x.gguf");
    let o = tritium(&["convert", path(&empty), path(&gguf)]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("gguf_metadata.json"));
    assert!(!gguf.exists() && !tmp.path().join("x.gguf.part").exists());
    // And it does not run either, with an error that says why.
    let o = tritium(&["run", path(&empty), "--backend", "cpu", "--ids", "1,2"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("gguf_metadata.json"));
}
