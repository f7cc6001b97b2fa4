//! Qwen2, Qwen3, Phi-3, Gemma 2 and Gemma 3 end to end through the CLI, against llama.cpp and an
//! exact float64 forward pass, on the CPU and the GPU (lavapipe here); llama.cpp's Q3_K_M and
//! IQ4_XS presets of a Qwen3-shaped model on the CPU, the IQ4_XS one on the GPU too
//! (`quantization_presets_match_llama_cpp_and_f64`).
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

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tritium::formats::gguf::{GgufFile, GgufWriter};
use tritium::quant::GgmlType;

/// Largest difference from the float64 reference's logits (`--exact`, CPU and GPU).
const F64_TOL: f32 = 2e-3;
/// Largest difference from llama.cpp's logits (its f16 activations: up to 0.072 here).
const LLAMA_TOL: f32 = 0.15;
/// llama.cpp's top-1/top-2 margin from which our argmax and greedy tokens must agree: above
/// twice llama.cpp's largest distance from the exact logits.
const MARGIN: f32 = 0.2;
/// GPU (default arithmetic) vs CPU: largest difference as a fraction of the logit range. f16
/// rounding of the KV cache and of the operands of several-token products, carried through two
/// blocks, stays well inside; a broken op moves logits by a large part of the range.
const GPU_REL_TOL: f32 = 0.02;
/// Every run's context: llama.cpp's n_ctx in the goldens (Phi-3's RoPE factors depend on it).
const CTX: &str = "128";

struct Summary {
    argmax: Vec<u32>,
    margin: Vec<f32>,
    probe: Vec<Vec<f32>>,
}

struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    greedy_step_margin: Vec<f32>,
    llama: Summary,
    f64: Summary,
    /// llama.cpp's largest distance from the float64 logits over the case.
    llama_vs_f64: f32,
}

struct Golden {
    arch: String,
    file: PathBuf,
    sha256: String,
    n_vocab: usize,
    eos: u32,
    probe_ids: Vec<usize>,
    cases: Vec<Case>,
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn summary(v: &Value) -> Summary {
    Summary {
        argmax: u32s(&v["argmax"]),
        margin: f32s(&v["margin"]),
        probe: v["probe"].as_array().unwrap().iter().map(f32s).collect(),
    }
}

fn root() -> PathBuf {
    std::env::var_os("TRITIUM_REPO")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

fn golden(arch: &str) -> Golden {
    let path = root().join(format!("tests/goldens/arch/{arch}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap();
    Golden {
        arch: arch.to_string(),
        file: root().join(doc["file"].as_str().unwrap()),
        sha256: doc["file_sha256"].as_str().unwrap().to_string(),
        n_vocab: doc["n_vocab"].as_u64().unwrap() as usize,
        eos: doc["eos"].as_u64().unwrap() as u32,
        probe_ids: u32s(&doc["probe_ids"])
            .into_iter()
            .map(|i| i as usize)
            .collect(),
        cases: doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| Case {
                prompt: c["prompt"].as_str().unwrap().to_string(),
                prompt_ids: u32s(&c["prompt_ids"]),
                greedy_ids: u32s(&c["greedy_ids"]),
                greedy_step_margin: f32s(&c["greedy_step_margin"]),
                llama: summary(&c["llama"]),
                f64: summary(&c["f64"]),
                llama_vs_f64: c["llama_vs_f64"].as_f64().unwrap() as f32,
            })
            .collect(),
    }
}

fn tritium(args: &[&str]) -> Output {
    let o = tritium_output(args);
    assert!(
        o.status.success(),
        "tritium {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The tritium binary's output for `args`, whatever its exit.
fn tritium_output(args: &[&str]) -> Output {
    let bin = std::env::var_os("TRITIUM_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tritium")),
        PathBuf::from,
    );
    let mut cmd = Command::new(bin);
    cmd.args(args);
    let lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
    if std::env::var_os("VK_ICD_FILENAMES").is_none() && Path::new(lvp).exists() {
        cmd.env("VK_ICD_FILENAMES", lvp);
    }
    cmd.output().expect("the tritium binary runs")
}

fn run_json(args: &[&str]) -> Value {
    let o = tritium(args);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "tritium {}: stdout is not JSON ({e}): {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

fn ids_arg(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Every position's logits of one batch, `[ids.len()][n_vocab]`.
fn logits(model: &Path, ids: &[u32], extra: &[&str], n_vocab: usize) -> Vec<Vec<f32>> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.f32");
    let ids = ids_arg(ids);
    let mut args = vec![
        "logits",
        model.to_str().unwrap(),
        "--ids",
        &ids,
        "-o",
        out.to_str().unwrap(),
        "--ctx",
        CTX,
    ];
    args.extend_from_slice(extra);
    tritium(&args);
    let raw = std::fs::read(&out).unwrap();
    assert_eq!(raw.len() % (n_vocab * 4), 0);
    raw.chunks_exact(n_vocab * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect()
}

/// |a - b|, infinite where either is NaN.
fn diff(a: f32, b: f32) -> f32 {
    let d = (a - b).abs();
    if d.is_nan() {
        f32::INFINITY
    } else {
        d
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Our greedy ids against llama.cpp's: equal, where llama.cpp's list may end with the EOS id
/// that stopped both (`run` does not list the stop token).
fn greedy_matches(ours: &[u32], want: &[u32], eos: u32) -> bool {
    ours == want || (want.last() == Some(&eos) && ours == &want[..want.len() - 1])
}

/// Free-running greedy decoding on `backend` over llama.cpp's confident prefix (nothing where
/// its very first step is a near tie).
fn greedy(g: &Golden, c: &Case, backend: &str, margin: f32, failures: &mut Vec<String>) {
    let n = confident(c, margin);
    if n == 0 {
        return;
    }
    let v = run_json(&[
        "run",
        g.file.to_str().unwrap(),
        "--ids",
        &ids_arg(&c.prompt_ids),
        "--temperature",
        "0",
        "--max-tokens",
        &n.to_string(),
        "--backend",
        backend,
        "--ctx",
        CTX,
        "--json",
    ]);
    let ours = u32s(&v["generated_ids"]);
    if !greedy_matches(&ours, &c.greedy_ids[..n], g.eos) {
        failures.push(format!(
            "{} {:?} greedy on {backend}: {ours:?}, llama.cpp's first {n}: {:?}",
            g.arch,
            c.prompt,
            &c.greedy_ids[..n]
        ));
    }
}

/// Greedy steps that must agree: up to llama.cpp's first step below [`MARGIN`].
fn confident(c: &Case, margin: f32) -> usize {
    c.greedy_step_margin
        .iter()
        .position(|&m| m < margin)
        .unwrap_or(c.greedy_step_margin.len())
}

/// Our logits at every position against a reference's probe logits (within `tol`) and argmax
/// (where its margin is at least `min_margin`).
fn against(
    g: &Golden,
    what: &str,
    ours: &[Vec<f32>],
    reference: &Summary,
    tol: f32,
    min_margin: f32,
    failures: &mut Vec<String>,
) {
    let mut worst = (0f32, 0, 0);
    for (pos, row) in ours.iter().enumerate() {
        for (j, &id) in g.probe_ids.iter().enumerate() {
            let d = diff(row[id], reference.probe[pos][j]);
            if d > worst.0 {
                worst = (d, pos, id);
            }
        }
        if reference.margin[pos] >= min_margin && argmax(row) != reference.argmax[pos] {
            failures.push(format!(
                "{what}: position {pos}: argmax {} where the reference's is {} (margin {})",
                argmax(row),
                reference.argmax[pos],
                reference.margin[pos]
            ));
        }
    }
    if worst.0 > tol {
        failures.push(format!(
            "{what}: logit of id {} at position {} off by {} (bound {tol})",
            worst.2, worst.1, worst.0
        ));
    }
}

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

/// `fixture` rewritten with `edit` applied to each tensor (name, type, shape outermost first,
/// bytes): `None` leaves it out.
#[allow(clippy::type_complexity)]
fn rewritten(
    fixture: &str,
    edit: &dyn Fn(&str, GgmlType, Vec<u64>, Vec<u8>) -> Option<(GgmlType, Vec<u64>, Vec<u8>)>,
) -> Vec<u8> {
    let bytes = std::fs::read(root().join(fixture)).unwrap();
    let file = GgufFile::read(&bytes).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        w.add(k.clone(), v.clone()).unwrap();
    }
    for t in &file.tensors {
        let data = file.read_tensor(&bytes, &t.name).unwrap();
        if let Some((dtype, shape, data)) = edit(&t.name, t.dtype, t.shape(), data) {
            w.add_tensor(t.name.clone(), dtype, &shape, data).unwrap();
        }
    }
    let mut out = Vec::new();
    w.write(&mut out).unwrap();
    out
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

/// Qwen2's fixture with its q, k and v matrices in `dtype` (random blocks with tame scales):
/// quantization types the CPU dequantizes that have no quantizer here.
fn with_matrices_in(dtype: GgmlType) -> Vec<u8> {
    rewritten("tests/fixtures/arch/tiny-qwen2.gguf", &|n, d, s, x| {
        if !(n.ends_with("attn_q.weight")
            || n.ends_with("attn_k.weight")
            || n.ends_with("attn_v.weight"))
        {
            return Some((d, s, x));
        }
        let elems: u64 = s.iter().product();
        let mut bytes = vec![0u8; dtype.tensor_bytes(elems).unwrap() as usize];
        let mut state = 0x9e3779b97f4a7c15u64 ^ elems;
        for b in &mut bytes {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (state >> 56) as u8;
        }
        tritium::quant::tame(dtype, &mut bytes);
        if dtype == GgmlType::MXFP4 {
            // Blocks of 17 bytes led by an e8m0 scale, 2^(e - 127): 2^-7 to 2^-4 here.
            for block in bytes.chunks_exact_mut(17) {
                block[0] = 120 + block[0] % 4;
            }
        }
        if dtype == GgmlType::IQ4_NL {
            // Blocks of 18 bytes led by an f16 scale d, its exponent set to 7 or 8 (sign and
            // mantissa kept): |d| in [2^-8, 2^-6), so the weights d * KVALUES[q] stay below 1.8.
            for block in bytes.chunks_exact_mut(18) {
                let bits = u16::from_le_bytes([block[0], block[1]]);
                let bits = (bits & 0x83ff) | ((7 + (bits >> 10) % 2) << 10);
                block[..2].copy_from_slice(&bits.to_le_bytes());
            }
        }
        Some((dtype, s, bytes))
    })
}

/// Files whose matrices are in types the CPU dequantizes (crates/core's gguf-py goldens) that
/// have no quantizer here. IQ4_NL (32-value blocks, so the tiny model's rows of 64 take it)
/// runs on the CPU and on the wgpu backend, which gives the CPU's greedy tokens with `--exact`
/// and runs its int8-activation decode without it. MXFP4 has no GPU kernel yet: the CPU runs
/// it, and the GPU backend refuses it with a message that names the type, never a panic
/// (CUDA's load refuses every type it has no kernel for by name, `format_suffix`; its IQ4_NL
/// products are checked by `tritium selftest --backend cuda`, `backend/check.rs`'s FORMATS).
#[test]
fn new_quantization_types_run_on_the_cpu_and_are_refused_by_name_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let greedy = |model: &str, extra: &[&str]| -> Vec<u64> {
        let mut args = vec![
            "run",
            model,
            "--ids",
            "1,2,3",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
            "--json",
        ];
        args.extend_from_slice(extra);
        let v = run_json(&args);
        let ids: Vec<u64> = v["generated_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), 6, "{model} {extra:?}");
        ids
    };
    for dtype in [GgmlType::IQ4_NL, GgmlType::MXFP4] {
        let path = dir.path().join(format!("{dtype}.gguf"));
        std::fs::write(&path, with_matrices_in(dtype)).unwrap();
        let model = path.to_str().unwrap();
        let cpu = greedy(model, &["--backend", "cpu", "--exact"]);
        if dtype == GgmlType::IQ4_NL {
            let gpu = greedy(model, &["--backend", "gpu", "--exact"]);
            assert_eq!(gpu, cpu, "{dtype}: the GPU's greedy tokens with --exact");
            // The fast arithmetic too (int8 activations in decode, through the table's codes).
            greedy(model, &["--backend", "gpu"]);
            continue;
        }
        let o = tritium_output(&[
            "run",
            model,
            "--ids",
            "1,2,3",
            "--max-tokens",
            "2",
            "--backend",
            "gpu",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{dtype} on the GPU: {err}");
        assert!(
            !err.contains("panicked") && err.contains(&dtype.to_string()),
            "{dtype}: {err}"
        );
    }
}

/// Qwen3's layout quantized by llama.cpp's own quantizer to its Q3_K_M and IQ4_XS presets
/// (tests/goldens/gen_quant_mix_goldens.py: Q3_K with Q4_K, Q5_K and Q6_K; IQ4_XS with Q6_K),
/// on the CPU (the IQ4_XS one on the wgpu backend too; no GPU kernels for Q3_K yet): the prompt
/// ids, `--exact` within
/// [`F64_TOL`] of the float64 pass over the dequantized weights (argmax equal where its margin
/// is twice that), and llama.cpp's logits within twice its own largest distance from the exact
/// ones in that file (0.45-0.64 here: it quantizes activations to 8 bits for these products,
/// and does the same, 0.36-0.41, for a Q8_0 file of this shape), its argmax and greedy tokens
/// ours wherever its margin is above that bound. The IQ4_XS preset also runs on the wgpu
/// backend: `--exact` within [`F64_TOL`] of the float64 pass, and greedy tokens with `--exact`
/// equal to the CPU's (and greedy decoding in its default arithmetic, int8 activations in
/// decode, llama.cpp's over the confident prefix).
#[test]
fn quantization_presets_match_llama_cpp_and_f64() {
    for name in ["qwen3-q3_k_m", "qwen3-iq4_xs"] {
        let g = golden(name);
        let mut h = Sha256::new();
        h.update(std::fs::read(&g.file).unwrap());
        assert_eq!(hex::encode(h.finalize()), g.sha256, "{}", g.file.display());
        let m = g.file.to_str().unwrap();
        let llama_tol = g
            .cases
            .iter()
            .map(|c| 2.0 * c.llama_vs_f64)
            .fold(LLAMA_TOL, f32::max);
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
                failures.push(format!("{name} {p:?}: prompt ids differ from llama.cpp's"));
            }
            let seq: Vec<u32> = c.prompt_ids.iter().chain(&c.greedy_ids).copied().collect();
            let exact = logits(&g.file, &seq, &["--backend", "cpu", "--exact"], g.n_vocab);
            let what = format!("{name} {p:?} cpu --exact vs f64");
            against(
                &g,
                &what,
                &exact,
                &c.f64,
                F64_TOL,
                2.0 * F64_TOL,
                &mut failures,
            );
            let what = format!("{name} {p:?} cpu --exact vs llama.cpp");
            against(
                &g,
                &what,
                &exact,
                &c.llama,
                llama_tol,
                llama_tol,
                &mut failures,
            );
            greedy(&g, c, "cpu", llama_tol, &mut failures);
            if name != "qwen3-iq4_xs" {
                continue;
            }
            let gpu_exact = logits(&g.file, &seq, &["--backend", "gpu", "--exact"], g.n_vocab);
            let what = format!("{name} {p:?} gpu --exact vs f64");
            against(
                &g,
                &what,
                &gpu_exact,
                &c.f64,
                F64_TOL,
                2.0 * F64_TOL,
                &mut failures,
            );
            let (ids, n) = (ids_arg(&c.prompt_ids), c.greedy_ids.len().to_string());
            let tokens = |extra: &[&str]| {
                let mut args = vec![
                    "run",
                    m,
                    "--ids",
                    &ids,
                    "--temperature",
                    "0",
                    "--max-tokens",
                    &n,
                    "--ctx",
                    CTX,
                    "--json",
                ];
                args.extend_from_slice(extra);
                u32s(&run_json(&args)["generated_ids"])
            };
            let cpu = tokens(&["--backend", "cpu", "--exact"]);
            let gpu = tokens(&["--backend", "gpu", "--exact"]);
            if gpu != cpu {
                failures.push(format!(
                    "{name} {p:?}: greedy with --exact on the GPU {gpu:?}, on the CPU {cpu:?}"
                ));
            }
            greedy(&g, c, "gpu", llama_tol, &mut failures);
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
