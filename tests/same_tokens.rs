//! Every backend computes the same tokens: `tritium run` on the CPU and on the GPU (lavapipe
//! natively) generates the same token ids (64, or up to the end-of-sequence token), greedy and seeded (`--seed 7`, the default
//! sampler, with and without a repeat penalty), for each model of the suite and for prompts
//! that were not picked to pass.
//!
//! The op list fixes each op's arithmetic for every backend: one-token products over a weight
//! format with an integer form take int8 activations on both backends (`Activations::Q8`: the
//! GPU's records and integer sums, on the CPU the same records and exact integer sums), and
//! the KV cache has one element type for both (`KvType`).
//!
//! **Ignored: this does not hold yet.** Rounding to int8 is discontinuous: where the f32
//! values before a quantization differ by an ulp (a reduction in another order, another
//! `exp`), a value within that ulp of a `.5` tie takes the neighbouring code, which moves the
//! product's output by a whole code step; the next quantizations then see differences far
//! above an ulp and more codes change (a cascade). The first one-token pass of SmolLM2 Q4_1
//! agrees to ulps on both backends, every later one (where attention's softmax runs over
//! several positions) differs by the int8 rounding noise itself, while with f32 activations
//! on both backends every pass agrees to ulps. Token streams therefore split wherever two
//! candidates are closer than that noise. The same holds for the TQ2_0 BitLinear path.
//! Run with `--ignored` to see where each case splits.
//!
//! Runtime: the SmolLM2 models decode on lavapipe at a few tokens a second, so each SmolLM2
//! model runs one prompt in the three modes and the Q4_1 model a second prompt greedily;
//! the BitNet fixtures (tiny) run three prompts in every mode.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const TOKENS: &str = "64";

/// The sampling modes: greedy, seeded with the default sampler, seeded with a repeat penalty.
const MODES: [(&str, &[&str]); 3] = [
    ("greedy", &["--temperature", "0"]),
    ("seed 7", &["--seed", "7"]),
    (
        "seed 7, repeat penalty",
        &["--seed", "7", "--repeat-penalty", "1.1"],
    ),
];

/// `tritium run --json` on `backend`; the generated ids (failing the test on any error).
fn generate(model: &str, prompt: &[&str], backend: &str, mode: &[&str]) -> Vec<u64> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tritium"));
    cmd.args(["run", model, "--backend", backend, "--max-tokens", TOKENS]);
    cmd.arg("--json").args(prompt).args(mode);
    // lavapipe unless the caller chose a Vulkan driver (scripts/test.sh sets it up).
    let lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
    if std::env::var_os("VK_ICD_FILENAMES").is_none() && Path::new(lvp).exists() {
        cmd.env("VK_ICD_FILENAMES", lvp);
    }
    let o = cmd.output().expect("the tritium binary runs");
    assert!(
        o.status.success(),
        "tritium run {model} {prompt:?} {mode:?} on {backend} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert!(
        v["backend"].as_str().unwrap_or("").starts_with(backend),
        "ran on {}, not {backend}",
        v["backend"]
    );
    v["generated_ids"]
        .as_array()
        .expect("generated_ids")
        .iter()
        .map(|x| x.as_u64().expect("an id"))
        .collect()
}

/// The CPU's and the GPU's ids for each prompt and mode; the cases that differ, with the
/// first differing position.
fn compare(model: &str, prompts: &[&[&str]], modes: &[(&str, &[&str])]) -> Vec<String> {
    assert!(Path::new(model).exists(), "{model} is missing");
    let mut failures = Vec::new();
    for prompt in prompts {
        for (name, mode) in modes {
            let cpu = generate(model, prompt, "cpu", mode);
            let gpu = generate(model, prompt, "gpu", mode);
            let first = cpu.iter().zip(&gpu).position(|(a, b)| a != b);
            println!(
                "{model} {prompt:?} {name}: {} tokens, first difference {first:?}",
                cpu.len()
            );
            if cpu != gpu {
                failures.push(format!(
                    "{model} {prompt:?} {name}: first difference at token {}\n  cpu {cpu:?}\n  gpu {gpu:?}",
                    first.unwrap_or(cpu.len().min(gpu.len()))
                ));
            }
        }
    }
    failures
}

fn smollm(variant: &str) -> String {
    format!("models/SmolLM2-135M-Instruct.{variant}.gguf")
}

fn check(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "issue 45: int8 activation rounding amplifies ulp differences (module docs)"]
fn smollm2_q4_1() {
    check(compare(
        &smollm("Q4_1"),
        &[&["--prompt", "robot learns to paint"]],
        &MODES,
    ));
    check(compare(
        &smollm("Q4_1"),
        &[&["--prompt", "Why do onions make people cry?"]],
        &MODES[..1],
    ));
}

#[test]
#[ignore = "issue 45: int8 activation rounding amplifies ulp differences (module docs)"]
fn smollm2_q4_k_m() {
    check(compare(
        &smollm("Q4_K_M"),
        &[&["--prompt", "A short history of the bicycle:"]],
        &MODES,
    ));
}

#[test]
#[ignore = "issue 45: int8 activation rounding amplifies ulp differences (module docs)"]
fn smollm2_q6_k() {
    check(compare(
        &smollm("Q6_K"),
        &[&["--prompt", "The lighthouse keeper opened the door and"]],
        &MODES,
    ));
}

#[test]
#[ignore = "issue 45: int8 activation rounding amplifies ulp differences (module docs)"]
fn smollm2_q8_0() {
    check(compare(
        &smollm("Q8_0"),
        &[&["--prompt", "Three facts about octopuses:"]],
        &MODES,
    ));
}

/// Token ids of the tiny BitNet fixtures (vocabulary 512, no tokenizer), not picked to pass.
const BITNET_PROMPTS: [&[&str]; 3] = [
    &["--ids", "1,17,300,42"],
    &["--ids", "5,499,6,250,128,77,3"],
    &["--ids", "400"],
];

#[test]
#[ignore = "issue 45: int8 activation rounding amplifies ulp differences (module docs)"]
fn bitnet_i2s() {
    check(compare(
        "tests/fixtures/bitnet/tiny-i2s.gguf",
        &BITNET_PROMPTS,
        &MODES,
    ));
}

#[test]
#[ignore = "issue 45: int8 activation rounding amplifies ulp differences (module docs)"]
fn bitnet_tq2_0() {
    check(compare(
        "tests/fixtures/bitnet/tiny-tq2_0.gguf",
        &BITNET_PROMPTS,
        &MODES,
    ));
}
