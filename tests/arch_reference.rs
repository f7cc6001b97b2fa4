//! Qwen2, Qwen3, Phi-3, Gemma 2 and Gemma 3 end to end through the CLI, against llama.cpp and an
//! exact float64 forward pass, on the CPU and the GPU (lavapipe here); the shared goldens and
//! comparisons are in tests/common/goldens.rs, the quantization presets in tests/quant_presets.rs.
//! Gemma's fixtures (gemma2: a window of 8 on block 0, scores soft-capped at 4 and logits at 8;
//! gemma3: five of six blocks windowed with their own RoPE base, the sixth with linear scaling)
//! are described in tests/goldens/gen_arch_goldens.py.
//!
//! Models: tests/fixtures/arch/tiny-{qwen2,qwen3,phi3}.gguf, written by
//! tests/goldens/gen_arch_goldens.py with gguf-py in llama.cpp's layout for these
//! architectures (qwen2: biases on q, k, v, one KV head shared by two query heads, tied output;
//! qwen3: RMSNorm over each head of q and k, 4 query heads over 2 KV heads of 32, so q is twice
//! the embedding width; phi3: q/k/v stacked in one matrix and gate/up in another, RoPE frequency
//! factors for short and long contexts (the long ones taken: the context is past the stated
//! original one); all NeoX RoPE, F16 matrices, a 320-token byte-level BPE vocabulary with
//! the `qwen2` pre-tokenizer). The same script recorded, per prompt: llama.cpp's prompt ids,
//! its greedy continuation (16 tokens, one decode per token) with each step's top-1/top-2
//! margin, and for prompt + continuation in one batch, at every position, the argmax, the
//! margin and the logits of 35 probe ids, from llama.cpp (llama-cpp-python 0.3.36, CPU, F32 KV
//! cache) and from a float64 numpy forward pass written from the architecture.
//!
//! llama.cpp rounds activations to f16 for its F16 products, so its logits are up to 0.072 from
//! the exact ones here (recorded per case as `llama_vs_f64`), on logit ranges of 18-43.
//!
//! What must hold, for each model:
//! - the fixture is the file the goldens were made from (SHA-256);
//! - prompt ids equal llama.cpp's (`run -p TEXT --json`);
//! - CPU, `--exact` (f32 throughout): every probe logit at every position within [`F64_TOL`]
//!   (2e-3) of the float64 reference (an f32 pass lands within about 1e-5 relative of it; a
//!   wrong bias, norm or RoPE order moves logits by whole units), the argmax identical wherever
//!   the f64 margin is at least twice that; and within [`LLAMA_TOL`] (0.15, twice llama.cpp's
//!   largest distance from the exact logits) of llama.cpp's, its argmax ours wherever its
//!   margin is at least [`MARGIN`] (0.2);
//! - free-running greedy decoding on the CPU (default arithmetic) equals llama.cpp's up to its
//!   first step with a margin below [`MARGIN`];
//! - GPU, `--exact`: the same bound against the float64 reference as the CPU; GPU, default
//!   arithmetic (f16 KV cache, f16 operands in products of several tokens): every logit within
//!   [`GPU_REL_TOL`] (2%) of the position's logit range from the CPU's, and greedy decoding
//!   equal to llama.cpp's over the same confident prefix.

#[path = "common/goldens.rs"]
mod goldens;

use goldens::*;
use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};
use tritium::formats::gguf::{GgufFile, GgufWriter};

/// GPU (default arithmetic) vs CPU: largest difference as a fraction of the logit range. f16
/// rounding of the KV cache and of the operands of several-token products, carried through two
/// blocks, stays well inside; a broken op moves logits by a large part of the range.
const GPU_REL_TOL: f32 = 0.02;

fn check(arch: &str) {
    let g = golden(arch);
    let mut h = Sha256::new();
    h.update(std::fs::read(&g.file).unwrap());
    assert_eq!(
        hex::encode(h.finalize()),
        g.sha256,
        "{} is not the file the goldens were made from",
        g.file.display()
    );
    let m = g.file.to_str().unwrap();
    let mut failures = Vec::new();
    for c in &g.cases {
        let p = &c.prompt;
        let v = run_json(&[
            "run",
            m,
            "-p",
            p,
            "--max-tokens",
            "1",
            "--backend",
            "cpu",
            "--json",
        ]);
        if u32s(&v["prompt_ids"]) != c.prompt_ids {
            failures.push(format!(
                "{arch} {p:?}: prompt ids {:?}, llama.cpp's {:?}",
                u32s(&v["prompt_ids"]),
                c.prompt_ids
            ));
        }
        let seq: Vec<u32> = c.prompt_ids.iter().chain(&c.greedy_ids).copied().collect();
        let cpu_exact = logits(&g.file, &seq, &["--backend", "cpu", "--exact"], g.n_vocab);
        let what = format!("{arch} {p:?} cpu --exact vs f64");
        against(
            &g,
            &what,
            &cpu_exact,
            &c.f64,
            F64_TOL,
            2.0 * F64_TOL,
            &mut failures,
        );
        let what = format!("{arch} {p:?} cpu --exact vs llama.cpp");
        against(
            &g,
            &what,
            &cpu_exact,
            &c.llama,
            LLAMA_TOL,
            MARGIN,
            &mut failures,
        );
        let gpu_exact = logits(&g.file, &seq, &["--backend", "gpu", "--exact"], g.n_vocab);
        let what = format!("{arch} {p:?} gpu --exact vs f64");
        against(
            &g,
            &what,
            &gpu_exact,
            &c.f64,
            F64_TOL,
            2.0 * F64_TOL,
            &mut failures,
        );
        // Default arithmetic: the GPU beside the CPU over the whole vocabulary.
        let cpu = logits(&g.file, &seq, &["--backend", "cpu"], g.n_vocab);
        let gpu = logits(&g.file, &seq, &["--backend", "gpu"], g.n_vocab);
        for (pos, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
            let (lo, hi) = a
                .iter()
                .fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| diff(*x, *y))
                .fold(0f32, f32::max);
            if worst > GPU_REL_TOL * (hi - lo) {
                failures.push(format!(
                    "{arch} {p:?}: gpu vs cpu at position {pos}: {worst} of a range {}",
                    hi - lo
                ));
            }
        }
        for backend in ["cpu", "gpu"] {
            greedy(&g, c, backend, MARGIN, &mut failures);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{}: {} prompts checked", g.arch, g.cases.len());
}

/// The CUDA backend (on the GPU machine: `--ignored`, with `TRITIUM_BIN` and `TRITIUM_REPO`):
/// `--exact` within [`F64_TOL`] of the float64 reference, and greedy decoding (default
/// arithmetic) equal to llama.cpp's over its confident prefix.
fn check_cuda(arch: &str) {
    let g = golden(arch);
    let mut failures = Vec::new();
    for c in &g.cases {
        let p = &c.prompt;
        let seq: Vec<u32> = c.prompt_ids.iter().chain(&c.greedy_ids).copied().collect();
        let exact = logits(&g.file, &seq, &["--backend", "cuda", "--exact"], g.n_vocab);
        let what = format!("{arch} {p:?} cuda --exact vs f64");
        against(
            &g,
            &what,
            &exact,
            &c.f64,
            F64_TOL,
            2.0 * F64_TOL,
            &mut failures,
        );
        greedy(&g, c, "cuda", MARGIN, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/device-native/cuda-full.sh runs it there)"]
fn architectures_on_cuda_match_f64_and_llama_cpp() {
    for arch in ["qwen2", "qwen3", "phi3", "gemma2", "gemma3"] {
        check_cuda(arch);
    }
}

#[test]
fn gemma2_matches_llama_cpp_and_f64() {
    check("gemma2");
}

#[test]
fn gemma3_matches_llama_cpp_and_f64() {
    check("gemma3");
}

#[test]
fn phi3_matches_llama_cpp_and_f64() {
    check("phi3");
}

#[test]
fn qwen2_matches_llama_cpp_and_f64() {
    check("qwen2");
}

#[test]
fn qwen3_matches_llama_cpp_and_f64() {
    check("qwen3");
}

/// `tritium run` on `bytes` with the CPU and the GPU backend: an error exit of one line that
/// contains `expect`.
fn refused(bytes: &[u8], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, bytes).unwrap();
    for backend in ["cpu", "gpu"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tritium"));
        cmd.args([
            "run",
            path.to_str().unwrap(),
            "--ids",
            "1,2,3",
            "--max-tokens",
            "2",
        ])
        .args(["--backend", backend]);
        let lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
        if std::env::var_os("VK_ICD_FILENAMES").is_none() && Path::new(lvp).exists() {
            cmd.env("VK_ICD_FILENAMES", lvp);
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{backend}: accepted");
        assert!(err.contains(expect), "{backend}: {err}");
        assert!(!err.contains("panicked"), "{backend}: {err}");
    }
}

/// The new architectures' own tensors, missing or misshapen, are refused with their names.
#[test]
fn broken_qwen_and_phi3_files_are_refused_by_name() {
    // Qwen3 without one block's k norm.
    let b = rewritten("tests/fixtures/arch/tiny-qwen3.gguf", &|n, d, s, x| {
        (n != "blk.1.attn_k_norm.weight").then_some((d, s, x))
    });
    refused(&b, "blk.1.attn_k_norm.weight");
    // Qwen2 with a q bias of the wrong length.
    let b = rewritten("tests/fixtures/arch/tiny-qwen2.gguf", &|n, d, s, x| {
        Some(match n {
            "blk.0.attn_q.bias" => (d, vec![s[0] - 1], x[..x.len() - 4].to_vec()),
            _ => (d, s, x),
        })
    });
    refused(&b, "blk.0.attn_q.bias");
    // Phi-3 with a stacked q/k/v matrix one row short (F16 rows of 64).
    let b = rewritten("tests/fixtures/arch/tiny-phi3.gguf", &|n, d, s, x| {
        Some(match n {
            "blk.0.attn_qkv.weight" => (d, vec![s[0] - 1, s[1]], x[..x.len() - 128].to_vec()),
            _ => (d, s, x),
        })
    });
    refused(&b, "blk.0.attn_qkv.weight");
    // Phi-3 whose long RoPE factors do not cover the rotated pairs.
    let b = rewritten("tests/fixtures/arch/tiny-phi3.gguf", &|n, d, s, x| {
        Some(match n {
            "rope_factors_long.weight" => (d, vec![s[0] - 1], x[..x.len() - 4].to_vec()),
            _ => (d, s, x),
        })
    });
    refused(&b, "rope_factors_long.weight");
}

/// `fixture` with metadata `key` set to `value` (added where absent), tensors unchanged.
fn with_metadata(fixture: &str, key: &str, value: tritium::formats::gguf::Value) -> GgufFile {
    let bytes = std::fs::read(root().join(fixture)).unwrap();
    let file = GgufFile::read(&bytes).unwrap();
    let mut w = GgufWriter::new();
    let mut seen = false;
    for (k, v) in &file.metadata {
        let v = if k == key {
            seen = true;
            value.clone()
        } else {
            v.clone()
        };
        w.add(k.clone(), v).unwrap();
    }
    if !seen {
        w.add(key.to_string(), value).unwrap();
    }
    for t in &file.tensors {
        let data = file.read_tensor(&bytes, &t.name).unwrap();
        w.add_tensor(t.name.clone(), t.dtype, &t.shape(), data)
            .unwrap();
    }
    let mut out = Vec::new();
    w.write(&mut out).unwrap();
    GgufFile::read(&out).unwrap()
}

/// What the configuration makes of the windows, RoPE tables and soft caps the files state (or
/// leave to each architecture's defaults), which the logits tests above then exercise: Gemma
/// 2's even layers windowed, Gemma 3's five of six with their own table, a file of another
/// architecture that states a window (as Mistral's do) windowed in every layer, and YaRN
/// scaling refused by name.
#[test]
fn windows_tables_and_caps_follow_the_metadata() {
    use tritium::formats::gguf::Value;
    use tritium::model::ModelConfig;
    let config = |f: &GgufFile| ModelConfig::from_gguf(f).unwrap();
    let read = |name: &str| {
        let bytes = std::fs::read(root().join(name)).unwrap();
        GgufFile::read(&bytes).unwrap()
    };
    let g2 = config(&read("tests/fixtures/arch/tiny-gemma2.gguf"));
    assert_eq!(
        (g2.window, g2.window_layers.clone()),
        (8, vec![true, false])
    );
    assert_eq!((g2.attn_softcap, g2.final_softcap), (4.0, 8.0));
    assert_eq!(g2.embed_scale, Some(8.0));
    assert_eq!(g2.ropes().len(), 1, "Gemma 2: one RoPE for every layer");
    assert_eq!((g2.scores(0).window, g2.scores(1).window), (8, 0));

    let g3 = config(&read("tests/fixtures/arch/tiny-gemma3.gguf"));
    assert_eq!(g3.window_layers, vec![true, true, true, true, true, false]);
    assert_eq!((g3.attn_softcap, g3.final_softcap), (0.0, 0.0));
    let ropes = g3.ropes();
    assert_eq!(ropes.len(), 2);
    assert_eq!((ropes[0].theta, ropes[0].freq_scale), (1e6, 1.0 / 8.0));
    assert_eq!((ropes[1].theta, ropes[1].freq_scale), (1e4, 1.0));
    assert_eq!((g3.rope_table(0), g3.rope_table(5)), (1, 0));
    // A stated period wins over the architecture's.
    let g3p = config(&with_metadata(
        "tests/fixtures/arch/tiny-gemma3.gguf",
        "gemma3.attention.sliding_window_pattern",
        Value::U32(2),
    ));
    assert_eq!(
        g3p.window_layers,
        vec![true, false, true, false, true, false]
    );

    // A window stated by a Llama-family file (Mistral's) covers every layer.
    let mistral = config(&with_metadata(
        "tests/fixtures/arch/tiny-qwen2.gguf",
        "qwen2.attention.sliding_window",
        Value::U32(4),
    ));
    assert!(mistral.window_layers.iter().all(|&w| w) && mistral.window == 4);
    assert_eq!(mistral.scores(1).window, 4);
    let plain = config(&read("tests/fixtures/arch/tiny-qwen2.gguf"));
    assert_eq!((plain.window, plain.scores(0).window), (0, 0));

    let yarn = with_metadata(
        "tests/fixtures/arch/tiny-qwen3.gguf",
        "qwen3.rope.scaling.type",
        Value::String("yarn".into()),
    );
    let e = ModelConfig::from_gguf(&yarn).unwrap_err().to_string();
    assert!(e.contains("rope.scaling.type") && e.contains("yarn"), "{e}");
}
