//! What the tiny-model reference tests share (tests/arch_reference.rs, tests/quant_presets.rs):
//! the goldens written by tests/goldens/gen_arch_goldens.py and gen_quant_mix_goldens.py, the
//! CLI runs, and the comparisons with their bounds (each test file's docs state what must hold).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tritium::formats::gguf::{GgufFile, GgufWriter};
use tritium::quant::GgmlType;

/// Largest difference from the float64 reference's logits (`--exact`, CPU and GPU).
pub const F64_TOL: f32 = 2e-3;
/// Largest difference from llama.cpp's logits (its f16 activations: up to 0.072 here).
pub const LLAMA_TOL: f32 = 0.15;
/// llama.cpp's top-1/top-2 margin from which our argmax and greedy tokens must agree: above
/// twice llama.cpp's largest distance from the exact logits.
pub const MARGIN: f32 = 0.2;
/// Every run's context: llama.cpp's n_ctx in the goldens (Phi-3's RoPE factors depend on it).
pub const CTX: &str = "128";

pub struct Summary {
    pub argmax: Vec<u32>,
    pub margin: Vec<f32>,
    pub probe: Vec<Vec<f32>>,
}

pub struct Case {
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
    pub greedy_step_margin: Vec<f32>,
    pub llama: Summary,
    pub f64: Summary,
    /// llama.cpp's largest distance from the float64 logits over the case.
    pub llama_vs_f64: f32,
}

pub struct Golden {
    pub arch: String,
    pub file: PathBuf,
    pub sha256: String,
    pub n_vocab: usize,
    pub eos: u32,
    pub probe_ids: Vec<usize>,
    pub cases: Vec<Case>,
}

pub fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

pub fn summary(v: &Value) -> Summary {
    Summary {
        argmax: u32s(&v["argmax"]),
        margin: f32s(&v["margin"]),
        probe: v["probe"].as_array().unwrap().iter().map(f32s).collect(),
    }
}

pub fn root() -> PathBuf {
    std::env::var_os("TRITIUM_REPO")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn golden(arch: &str) -> Golden {
    let mut g = golden_from(&root().join(format!("tests/goldens/arch/{arch}.json")));
    g.arch = arch.to_string();
    g
}

/// The goldens at `path` (gen_arch_goldens.py's layout; gen_lora_goldens.py adds to it), named
/// by the file's stem.
pub fn golden_from(path: &Path) -> Golden {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap();
    Golden {
        arch: path.file_stem().unwrap().to_string_lossy().into_owned(),
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

pub fn tritium(args: &[&str]) -> Output {
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
pub fn tritium_output(args: &[&str]) -> Output {
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

/// `o`, which must be a success (its output in the message otherwise).
pub fn succeeded(o: Output) -> Output {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The stderr of `o`, which must have failed, and without a panic.
pub fn failed(o: Output) -> String {
    assert!(!o.status.success(), "succeeded");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    err
}

pub fn run_json(args: &[&str]) -> Value {
    let o = tritium(args);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "tritium {}: stdout is not JSON ({e}): {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

pub fn ids_arg(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Every position's logits of one batch, `[ids.len()][n_vocab]`.
pub fn logits(model: &Path, ids: &[u32], extra: &[&str], n_vocab: usize) -> Vec<Vec<f32>> {
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
pub fn diff(a: f32, b: f32) -> f32 {
    let d = (a - b).abs();
    if d.is_nan() {
        f32::INFINITY
    } else {
        d
    }
}

pub fn argmax(row: &[f32]) -> u32 {
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
pub fn greedy_matches(ours: &[u32], want: &[u32], eos: u32) -> bool {
    ours == want || (want.last() == Some(&eos) && ours == &want[..want.len() - 1])
}

/// Free-running greedy decoding on `backend` over llama.cpp's confident prefix (nothing where
/// its very first step is a near tie).
pub fn greedy(g: &Golden, c: &Case, backend: &str, margin: f32, failures: &mut Vec<String>) {
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
pub fn confident(c: &Case, margin: f32) -> usize {
    c.greedy_step_margin
        .iter()
        .position(|&m| m < margin)
        .unwrap_or(c.greedy_step_margin.len())
}

/// Our logits at every position against a reference's probe logits (within `tol`) and argmax
/// (where its margin is at least `min_margin`).
pub fn against(
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

/// `fixture` rewritten with `edit` applied to each tensor (name, type, shape outermost first,
/// bytes): `None` leaves it out.
#[allow(clippy::type_complexity)]
pub fn rewritten(
    fixture: &str,
    edit: &dyn Fn(&str, GgmlType, Vec<u64>, Vec<u8>) -> Option<(GgmlType, Vec<u64>, Vec<u8>)>,
) -> Vec<u8> {
    rebuilt(
        &root().join(fixture),
        &|_| {},
        &|name, dtype, shape, data| {
            let (dtype, shape, data) = edit(name, dtype, shape, data)?;
            Some((name.to_string(), dtype, shape, data))
        },
    )
}

/// The GGUF at `path` written again: its metadata through `meta`, each tensor through `edit`
/// (which may rename it, or leave it out with `None`).
#[allow(clippy::type_complexity)]
pub fn rebuilt(
    path: &Path,
    meta: &dyn Fn(&mut Vec<(String, tritium::formats::gguf::Value)>),
    edit: &dyn Fn(
        &str,
        GgmlType,
        Vec<u64>,
        Vec<u8>,
    ) -> Option<(String, GgmlType, Vec<u64>, Vec<u8>)>,
) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let file = GgufFile::read(&bytes).unwrap();
    let mut w = GgufWriter::new();
    let mut metadata = file.metadata.clone();
    meta(&mut metadata);
    for (k, v) in metadata {
        w.add(k, v).unwrap();
    }
    for t in &file.tensors {
        let data = file.read_tensor(&bytes, &t.name).unwrap();
        if let Some((name, dtype, shape, data)) = edit(&t.name, t.dtype, t.shape(), data) {
            w.add_tensor(name, dtype, &shape, data).unwrap();
        }
    }
    let mut out = Vec::new();
    w.write(&mut out).unwrap();
    out
}
