//! Every backend computes the same tokens: `tritium run --exact` on the CPU and on the GPU
//! (lavapipe here; SwiftShader in Chromium runs the same comparison in
//! tests/browser/run-package-options.mjs, the GPU machine on synthetic models in
//! scripts/device-native/exact.sh, BENCHMARKS.md) generates the same token ids (64,
//! or up to the end-of-sequence token), greedy and seeded (`--seed 7`, the default sampler,
//! with and without a repeat penalty), for each SmolLM2 file of the suite, on fixed prompts and
//! on a prompt drawn at random on every run (its seed is printed).
//!
//! Exact arithmetic (`Arithmetic::Exact`) makes every product take f32 activations and
//! operands and the KV cache f32 on every backend, so the backends differ only by the order of
//! f32 additions and their `exp` and square roots: logits agree to a few ulps and no rounding
//! step amplifies that. The default arithmetic (`Fast`) quantizes one-token products' inputs
//! to int8 where the backend has integer dot products, and an ulp of difference before a
//! rounding step can change a code, so its generations can split between backends (the op
//! list states which products do, and the CPU computes the same: `Activations::Q8`).
//!
//! BitNet b1.58 is the exception: its BitLinear quantizes activations to int8 inside the
//! model, on every backend, so exact arithmetic cannot remove the rounding step. The GPU's
//! BitLinear outputs differ from the CPU's by an ulp or two (I2_S applies `weight_scale / s`
//! once to the integer sum where the CPU computes `sum * scale / s`; TQ1_0/TQ2_0 divide each
//! activation by `s` before summing, or scale per block of 32), and where a value before the
//! next quantization lies within that of a rounding boundary its code changes and the
//! difference grows from there. On the tiny fixtures, 20 random prompts of 1 to 11 ids, 64
//! tokens, CPU against lavapipe: I2_S gave the same tokens for 17 greedy and 17 seeded, TQ2_0
//! for 18 greedy and 13 seeded (2026-12-07). The fixed prompts below are
//! regression anchors for the kernels' arithmetic (they split when a kernel's scale or
//! rounding changes), not a claim that BitNet generations never split: the README makes none.
//!
//! Runtime: SmolLM2 decodes on lavapipe with f32 products at about one token a second, so the
//! Q4_1 model runs greedy and seeded on a fixed prompt and greedy on a random one, the other
//! SmolLM2 files greedy on a fixed prompt; the BitNet fixtures (tiny) run every mode on three
//! prompts.

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
fn generate(model: &str, prompt: &[String], backend: &str, mode: &[&str]) -> Vec<u64> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tritium"));
    cmd.args(["run", model, "--backend", backend, "--max-tokens", TOKENS]);
    cmd.args(["--json", "--exact"]).args(prompt).args(mode);
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
fn compare(model: &str, prompts: &[Vec<String>], modes: &[(&str, &[&str])]) -> Vec<String> {
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

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// A generator seeded from the clock, its seed printed so that a failure can be replayed
/// (`SAME_TOKENS_SEED=<seed>`).
fn rng(what: &str) -> impl FnMut(u64) -> u64 {
    let seed = match std::env::var("SAME_TOKENS_SEED") {
        Ok(s) => s.parse().expect("SAME_TOKENS_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    };
    println!("{what}: random prompt seed {seed}");
    let mut x = seed | 1;
    move |n| {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// A prompt of 3 to 8 words drawn at random.
fn random_text() -> Vec<String> {
    const WORDS: [&str; 24] = [
        "the", "river", "quietly", "engine", "purple", "forgot", "seven", "why", "market", "under",
        "a", "glass", "dancing", "winter", "of", "letters", "bright", "told", "stone", "and",
        "music", "clever", "paper", "night",
    ];
    let mut r = rng("text");
    let n = 3 + r(6) as usize;
    let words: Vec<&str> = (0..n)
        .map(|_| WORDS[r(WORDS.len() as u64) as usize])
        .collect();
    args(&["--prompt", &words.join(" ")])
}

#[test]
fn smollm2_q4_1() {
    check(compare(
        &smollm("Q4_1"),
        &[args(&["--prompt", "robot learns to paint"])],
        &MODES[..2],
    ));
    check(compare(&smollm("Q4_1"), &[random_text()], &MODES[..1]));
}

#[test]
fn smollm2_q4_k_m() {
    check(compare(
        &smollm("Q4_K_M"),
        &[args(&["--prompt", "A short history of the bicycle:"])],
        &MODES[..1],
    ));
}

#[test]
fn smollm2_q6_k() {
    check(compare(
        &smollm("Q6_K"),
        &[args(&[
            "--prompt",
            "The lighthouse keeper opened the door and",
        ])],
        &MODES[..1],
    ));
}

#[test]
fn smollm2_q8_0() {
    check(compare(
        &smollm("Q8_0"),
        &[args(&["--prompt", "Three facts about octopuses:"])],
        &MODES[..1],
    ));
}

/// Token ids of the tiny BitNet fixtures (vocabulary 512, no tokenizer): the anchors of the
/// module docs.
fn bitnet_prompts() -> Vec<Vec<String>> {
    vec![
        args(&["--ids", "1,17,300,42"]),
        args(&["--ids", "5,499,6,250,128,77,3"]),
        args(&["--ids", "400"]),
    ]
}

#[test]
fn bitnet_i2s() {
    check(compare(
        "tests/fixtures/bitnet/tiny-i2s.gguf",
        &bitnet_prompts(),
        &MODES,
    ));
}

#[test]
fn bitnet_tq2_0_greedy() {
    check(compare(
        "tests/fixtures/bitnet/tiny-tq2_0.gguf",
        &bitnet_prompts(),
        &MODES[..1],
    ));
}

#[test]
#[ignore = "issue 45: BitNet's in-model int8 quantization turns the TQ kernels' ulps into different codes on these prompts (module docs)"]
fn bitnet_tq2_0_seeded() {
    check(compare(
        "tests/fixtures/bitnet/tiny-tq2_0.gguf",
        &bitnet_prompts(),
        &MODES[1..],
    ));
}
