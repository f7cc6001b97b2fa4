//! Trellis v3 models generate text: `tritium run` and `tritium logits` on a Trellis folder, the
//! weights dequantized at load to F16 exactly as the reference runtime decodes them (f32
//! arithmetic rounded to f16, no Hadamard transform), the configuration from `config.json`,
//! the tokenizer from `tokenizer.json`.
//!
//! Fixture and reference: tests/goldens/gen_trellis_model.py writes tests/fixtures/trellis/run/
//! (a tiny Llama, 128 wide, 2 blocks, grouped KV heads, tied head; its 14 linear weights
//! quantized at 2 to 8 bits by the numpy quantizer of tests/fixtures/trellis/gen_fixture.py) and
//! tests/goldens/trellis_run.json: greedy ids and every position's logits from a float64
//! forward pass written from transformers' Llama (rotate-half RoPE over the checkpoint's own q/k
//! row order) over numpy's decode of the same weights. That pass shares nothing with ours: not
//! the decode, not the renaming to GGUF names, not the q/k permutation for GGUF's RoPE.
//!
//! What must hold:
//! - With `--exact` (f32 products and KV cache), on the CPU backend and on wgpu (lavapipe
//!   here): every logit within [`F64_TOL`] of the float64 pass. Both compute from the same
//!   f16 weights; ours rounds to f32 along the way, which here moves a logit by well under
//!   1e-3 (logits are of order 10, sums of a few hundred products). The same bound as
//!   tests/arch_reference.rs.
//! - Greedy ids equal the float64 pass's: every step's top-1/top-2 margin in the reference is
//!   above twice the bound (checked), so no rounding within it can flip a choice. The default
//!   arithmetic gives them too on both backends (its error on this model stays well inside the
//!   smallest margin, 0.157).
//! - A text prompt runs through the folder's tokenizer.json.
//! - A folder without config.json, or without tokenizer.json for a text prompt, is refused
//!   with an error naming the file; never a panic.

use serde_json::Value;

const MODEL: &str = "tests/fixtures/trellis/run";
const GOLDEN: &str = "tests/goldens/trellis_run.json";
/// Largest difference from the float64 reference's logits (`--exact`, CPU and GPU).
const F64_TOL: f32 = 2e-3;

#[path = "common/goldens.rs"]
mod goldens;

use goldens::{failed as fails, succeeded as ok, tritium_output as tritium};

fn golden() -> Value {
    serde_json::from_slice(&std::fs::read(GOLDEN).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn join(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Greedy ids of `run --json` from the golden's prompt ids.
fn greedy(model: &str, backend: &str, extra: &[&str]) -> Vec<u64> {
    let g = golden();
    let n = g["greedy_ids"].as_array().unwrap().len().to_string();
    let prompt = join(&ids(&g["prompt_ids"]));
    let mut args = vec![
        "run",
        model,
        "--backend",
        backend,
        "--json",
        "--ids",
        &prompt,
        "--temperature",
        "0",
        "--max-tokens",
        &n,
    ];
    args.extend_from_slice(extra);
    let o = ok(tritium(&args));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["backend"].as_str().unwrap_or("").starts_with(backend),
        "ran on {}",
        v["backend"]
    );
    ids(&v["generated_ids"])
}

/// `--exact` logits of the golden's whole sequence against the float64 pass's; the largest
/// difference.
fn logits_distance(backend: &str) -> f32 {
    let g = golden();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("l.f32");
    let seq = join(&ids(&g["sequence"]));
    ok(tritium(&[
        "logits",
        MODEL,
        "--backend",
        backend,
        "--exact",
        "--ids",
        &seq,
        "-o",
        out.to_str().unwrap(),
    ]));
    let got: Vec<f32> = std::fs::read(&out)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = g["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

fn check_backend(backend: &str) {
    let g = golden();
    let want = ids(&g["greedy_ids"]);
    let margins = g["greedy_step_margin"].as_array().unwrap();
    assert!(
        margins
            .iter()
            .all(|m| m.as_f64().unwrap() as f32 > 2.0 * F64_TOL),
        "a greedy step of the reference is too close to call"
    );
    let d = logits_distance(backend);
    println!("{backend}: largest distance from the float64 logits {d:e}");
    assert!(d <= F64_TOL, "{backend}: logits {d} from the float64 pass");
    assert_eq!(
        greedy(MODEL, backend, &["--exact"]),
        want,
        "{backend} --exact"
    );
    assert_eq!(greedy(MODEL, backend, &[]), want, "{backend}");
}

#[test]
fn trellis_model_matches_the_float64_reference_on_the_cpu() {
    check_backend("cpu");
}

#[test]
fn trellis_model_matches_the_float64_reference_on_wgpu() {
    check_backend("gpu");
}

#[test]
fn trellis_model_runs_text_prompts_and_refuses_what_it_lacks() {
    let o = ok(tritium(&[
        "run",
        MODEL,
        "--backend",
        "cpu",
        "--json",
        "-p",
        "the capital of france is",
        "--temperature",
        "0",
        "--max-tokens",
        "4",
    ]));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ids(&v["prompt_ids"]), ids(&golden()["prompt_ids"]));
    assert_eq!(v["generated_ids"].as_array().map(Vec::len), Some(4));

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(MODEL).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let d = dir.to_str().unwrap();
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    ok(tritium(&[
        "run",
        d,
        "--backend",
        "cpu",
        "--ids",
        "1,2",
        "--max-tokens",
        "2",
    ]));
    let err = fails(tritium(&[
        "run",
        d,
        "--backend",
        "cpu",
        "-p",
        "hello",
        "--max-tokens",
        "2",
    ]));
    assert!(err.contains("tokenizer.json"), "{err}");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let err = fails(tritium(&["run", d, "--backend", "cpu", "--ids", "1,2"]));
    assert!(err.contains("config.json"), "{err}");
}
