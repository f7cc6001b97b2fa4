//! The `tritium` binary end to end: inspect, validate, verify and dump on real files and on
//! folders written to disk. Dumps of the real SmolLM2 GGUF are compared with gguf-py's
//! dequantization (tests/goldens/gen_smollm2_dumps.py).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};
use tritium::formats::rdrr::{RdrrWriter, WriterOptions};
use tritium::quant::{quantize, GgmlType};
use tritium::storage::DirFiles;

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn tritium(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .expect("runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn smollm2() -> &'static str {
    assert!(
        Path::new(SMOLLM2).exists(),
        "{SMOLLM2} is missing: run scripts/fetch-models.sh"
    );
    SMOLLM2
}

#[test]
fn inspect_smollm2_shows_272_tensors_and_llama_hyper_parameters() {
    let o = tritium(&["inspect", smollm2()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    assert!(text.contains("architecture: llama"), "{text}");
    assert!(text.contains("gpt2 (pre-tokenizer smollm)"), "{text}");
    for line in [
        "embedding_length",
        "block_count",
        "attention.head_count_kv",
        "rope.freq_base",
    ] {
        assert!(text.contains(line), "{line} missing");
    }
    assert!(text.contains("total: 272 tensors"), "{text}");
    assert!(
        text.contains("attention.layer_norm_rms_epsilon  0.00001"),
        "{text}"
    );

    let o = tritium(&["inspect", "--json", smollm2()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tensor_count"], 272);
    assert_eq!(v["architecture"], "llama");
    let hyper: std::collections::HashMap<String, serde_json::Value> =
        serde_json::from_value(v["hyper_parameters"].clone()).unwrap_or_else(|_| {
            v["hyper_parameters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_str().unwrap().to_string(), p[1].clone()))
                .collect()
        });
    assert_eq!(hyper["embedding_length"], 576);
    assert_eq!(hyper["block_count"], 30);
    assert_eq!(hyper["attention.head_count"], 9);
    assert_eq!(hyper["attention.head_count_kv"], 3);
    let t = &v["tensors"][0];
    assert_eq!(t["name"], "token_embd.weight");
    assert_eq!(t["dtype"], "Q8_0");
    assert_eq!(t["shape"], serde_json::json!([49152, 576]));
}

#[test]
fn dump_matches_gguf_py_on_the_real_model() {
    let goldens: serde_json::Value =
        serde_json::from_slice(&std::fs::read("tests/goldens/smollm2_dumps.json").unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, g) in goldens.as_object().unwrap() {
        let out = dir.path().join(format!("{name}.f32"));
        let o = tritium(&["dump", smollm2(), name, "-o", out.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(
            bytes.len() as u64,
            4 * g["n_elements"].as_u64().unwrap(),
            "{name}"
        );
        let hash = hex::encode(Sha256::digest(&bytes));
        assert_eq!(
            hash,
            g["sha256"].as_str().unwrap(),
            "{name} ({}) differs from gguf-py",
            g["dtype"]
        );
    }
}

#[test]
fn dump_of_a_missing_tensor_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.f32");
    let o = tritium(&["dump", smollm2(), "blk.0.attn", "-o", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no tensor named 'blk.0.attn'") && err.contains("similar"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "a file was left behind"
    );
}

#[test]
fn bad_files_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"definitely not gguf").unwrap();
    let o = tritium(&["inspect", junk.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a GGUF file"));

    // A truncated copy of the real model names the tensor that runs past the end.
    let real = std::fs::read(smollm2()).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &real[..real.len() / 2]).unwrap();
    let o = tritium(&["inspect", cut.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("past the end of the file"), "{err}");

    let o = tritium(&["validate", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a GGUF file, an RDRR folder"));
}

/// A small RDRR model written straight to disk: a Q8_0 tensor spanning three 8 KiB shards, then
/// an F32 one.
fn rdrr_model(dir: &Path) -> Vec<f32> {
    let mut files = DirFiles::new(dir);
    let mut opts = WriterOptions::new("tiny");
    opts.shard_size = 8 * 1024;
    let mut w = RdrrWriter::new(opts).unwrap();
    let embed: Vec<f32> = (0..64 * 256)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
        .collect();
    let q = quantize(GgmlType::Q8_0, &embed).unwrap();
    w.add_tensor(
        &mut files,
        "model.embed_tokens.weight",
        "Q8_0",
        &[64, 256],
        Some("embed"),
        &q,
    )
    .unwrap();
    let norm: Vec<u8> = (0..256).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor(
        &mut files,
        "model.layers.0.input_layernorm.weight",
        "F32",
        &[256],
        Some("layer.0"),
        &norm,
    )
    .unwrap();
    w.finish(&mut files).unwrap();
    tritium::quant::dequantize(GgmlType::Q8_0, &q, embed.len()).unwrap()
}

#[test]
fn rdrr_validate_verify_and_dump() {
    let dir = tempfile::tempdir().unwrap();
    let expected = rdrr_model(dir.path());
    let d = dir.path().to_str().unwrap();
    let o = tritium(&["validate", d]);
    assert!(
        o.status.success(),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let o = tritium(&["verify", d]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("verified"));
    let o = tritium(&["inspect", d]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("RDRR v1") && stdout(&o).contains("total: 2 tensors"),
        "{}",
        stdout(&o)
    );

    let out = dir.path().join("embed.f32");
    let o = tritium(&[
        "dump",
        d,
        "model.embed_tokens.weight",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<f32> = std::fs::read(&out)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, expected);

    // Flip one byte of the second shard: verify names that shard and fails.
    let shard: PathBuf = dir.path().join("shard_00001.bin");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&shard, bytes).unwrap();
    let o = tritium(&["verify", d]);
    assert!(!o.status.success());
    assert!(stdout(&o).contains("shard_00001.bin"), "{}", stdout(&o));
    let o = tritium(&["verify", "--json", d]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["shards"][1]["ok"], false);
    assert_eq!(v["shards"][0]["ok"], true);

    // A shard that disappears fails validation.
    std::fs::remove_file(dir.path().join("shard_00002.bin")).unwrap();
    let o = tritium(&["validate", d]);
    assert!(!o.status.success());
    assert!(stdout(&o).contains("shard_00002.bin"), "{}", stdout(&o));
}

#[test]
fn trellis_validate_inspect_and_dump() {
    let v3 = "tests/fixtures/trellis/v3";
    let o = tritium(&["validate", v3]);
    assert!(o.status.success(), "{}", stdout(&o));
    let o = tritium(&["validate", "--json", "tests/fixtures/trellis/v2"]);
    assert!(o.status.success(), "{}", stdout(&o));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.f32");
    let o = tritium(&[
        "dump",
        v3,
        "model.layers.0.self_attn.k_proj.weight",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 4 * 24 * 128);

    // Remove one shard from a copy: validation fails and names it.
    let copy = dir.path().join("broken");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(v3).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "model-00002-of-00002.safetensors" {
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
    }
    let o = tritium(&["validate", copy.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stdout(&o).contains("model-00002-of-00002.safetensors"),
        "{}",
        stdout(&o)
    );
}

/// `tritium run --plan`: a prefill and a decode pass of the tiny BitNet fixture, as the model
/// writes them (the same on both backends) and as each backend runs them: the CPU as written,
/// the GPU (lavapipe) with its fusions, one `rms_norm+bitlinear` dispatch per norm and its
/// products in the decode pass.
#[test]
fn run_plan_prints_a_prefill_and_a_decode_pass_as_written_and_as_run() {
    let model = "tests/fixtures/bitnet/tiny-i2s.gguf";
    let plan = |backend: &str| {
        let o = tritium(&[
            "run",
            model,
            "--plan",
            "--ids",
            "1,2,3",
            "--temperature",
            "0",
            "--backend",
            backend,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        stdout(&o)
    };
    let (cpu, gpu) = (plan("cpu"), plan("gpu"));
    for out in [&cpu, &gpu] {
        assert!(
            out.contains("prefill: 3 tokens at position 0, reading back top-1"),
            "{out}"
        );
        assert!(
            out.contains("decode: 1 token at position 3, reading back top-1"),
            "{out}"
        );
        // 2 layers of 17 ops, the embedding, and the head (a copy of the last row first in
        // the prefill).
        assert!(out.contains("as the model writes it (39 ops):"), "{out}");
        assert!(out.contains("as the model writes it (38 ops):"), "{out}");
        assert!(
            out.contains("rms_norm x * blk.0.attn_norm.weight -> xb (1x256)"),
            "{out}"
        );
        assert!(
            out.contains(
                "bitlinear blk.1.ffn_down.weight I2_S 256x512 . hb_normed -> xb2 (3 rows)"
            ),
            "{out}"
        );
    }
    assert!(cpu.contains("as the backend runs it (39 steps):"), "{cpu}");
    assert!(!cpu.contains("rms_norm+bitlinear"), "{cpu}");
    // The decode: the embedding, per layer the fused attention inputs, the attention with
    // RoPE folded in, and three more fused norms; the head's norm, product, top-1 and read.
    assert!(gpu.contains("as the backend runs it (15 steps):"), "{gpu}");
    let fused = gpu.matches("rms_norm+bitlinear").count();
    assert_eq!(fused, 8, "{gpu}");
    assert!(
        gpu.contains("attention+rope 1x4 heads: q, k, v -> att"),
        "{gpu}"
    );
}

/// On a machine without CUDA (CI's), `--backend cuda` fails with one sentence that says what
/// is missing, and `auto` runs on what there is. Where a CUDA driver exists this test only
/// checks that auto runs.
#[test]
fn cuda_backend_without_cuda_fails_clearly_and_auto_falls_back() {
    let model = "tests/fixtures/bitnet/tiny-i2s.gguf";
    let args = [
        "run",
        model,
        "--ids",
        "1,2,3",
        "--max-tokens",
        "4",
        "--temperature",
        "0",
    ];
    let o = tritium(&[&args[..], &["--backend", "auto"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    if Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists() {
        return;
    }
    let o = tritium(&[&args[..], &["--backend", "cuda"]].concat());
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no CUDA driver: libcuda.so.1 was not found"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A GPU memory budget is for the CUDA backend: elsewhere it is refused in one sentence, not
/// ignored.
#[test]
fn vram_budget_needs_the_cuda_backend() {
    let o = tritium(&[
        "run",
        "tests/fixtures/bitnet/tiny-i2s.gguf",
        "--ids",
        "1,2,3",
        "--max-tokens",
        "2",
        "--backend",
        "cpu",
        "--vram-budget",
        "1GB",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--vram-budget) needs the CUDA backend"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let o = tritium(&[
        "run",
        "tests/fixtures/bitnet/tiny-i2s.gguf",
        "--ids",
        "1,2,3",
        "--backend",
        "cpu",
        "--vram-budget",
        "auto",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("needs the CUDA backend"), "{err}");
    let o = tritium(&["run", "x.gguf", "--vram-budget", "lots"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not a budget: give auto, bytes"), "{err}");
}

/// `bench gds` names a missing file, and without CUDA says so in one sentence.
#[test]
fn gds_bench_without_cuda_or_file_fails_clearly() {
    let o = tritium(&["bench", "gds", "/nonexistent/model.gguf"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/model.gguf: open"), "{err}");
    if Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists() {
        return;
    }
    let o = tritium(&["bench", "gds", "tests/fixtures/bitnet/tiny-i2s.gguf"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no CUDA driver: libcuda.so.1 was not found"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
