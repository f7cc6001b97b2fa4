//! LoRA adapters applied at run time (`--lora ADAPTER[:SCALE]`, `Session::load_adapter`,
//! `Engine::set_adapters`) against llama.cpp and an exact float64 pass, on the CPU and the GPU
//! (lavapipe here).
//!
//! Fixtures (tests/goldens/gen_lora_goldens.py): seeded random low-rank pairs for the tiny
//! Qwen3, Phi-3 and Gemma 3 models of tests/fixtures/arch on every projection of every block
//! (Phi-3's stacked `attn_qkv` and `ffn_up` as one pair each), rank 4 or 8 with lora_alpha 8,
//! plus a second Qwen3 adapter (rank 2, no alpha, q and v only); each written as llama.cpp's
//! GGUF adapter (Qwen3's F32, the others' F16) and as an RDRR adapter folder laid out as the
//! RDRR format document's LoRA extension says (`layers.N.<module>.lora_a` of shape
//! `[cols, rank]`, f32). The goldens hold, per case (one adapter at scale 1, or Qwen3's two at
//! 0.5 and 1.5), llama.cpp's greedy tokens and teacher-forced logits with the adapters applied
//! (`llama_set_adapters_lora`, CPU, F32 KV cache) and a float64 pass over the base weights with
//! the adapters merged in (`W + scale * alpha / rank * B A`). The adapters change the greedy
//! tokens of every prompt, so a dropped or misplaced update cannot pass.
//!
//! What must hold, per case:
//! - the base model and each GGUF adapter are the files the goldens were made from (SHA-256);
//! - CPU and GPU, `--exact`: every probe logit within [`F64_TOL`] (2e-3) of the float64
//!   reference, the argmax identical wherever its margin is at least twice that;
//! - CPU, `--exact`: within twice llama.cpp's own largest distance from the float64 logits
//!   for that case (at least [`LLAMA_TOL`]: llama.cpp rounds activations to f16 for its F16
//!   products, adapters' included: up to 0.149 here), the argmax llama.cpp's wherever its
//!   margin is at least [`MARGIN`];
//! - greedy decoding on the CPU and the GPU (default arithmetic) equal to llama.cpp's up to
//!   its first step with a margin below [`MARGIN`];
//! - the RDRR adapters give exactly the GGUF adapters' logits on the CPU (the same values,
//!   transposed at load).

#[path = "common/goldens.rs"]
mod goldens;

use goldens::*;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tritium::formats::gguf::Value as GgufValue;

struct LoraCase {
    golden: Golden,
    /// Each adapter's GGUF file, RDRR folder (where the goldens have one) and scale.
    adapters: Vec<(PathBuf, Option<PathBuf>, f32)>,
}

fn sha256(path: &Path) -> String {
    let mut h = Sha256::new();
    h.update(std::fs::read(path).unwrap());
    hex::encode(h.finalize())
}

fn lora_case(name: &str) -> LoraCase {
    let path = root().join(format!("tests/goldens/lora/{name}.json"));
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let adapters = doc["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let gguf = root().join(a["gguf"].as_str().unwrap());
            assert_eq!(
                sha256(&gguf),
                a["gguf_sha256"].as_str().unwrap(),
                "{} is not the adapter the goldens were made from",
                gguf.display()
            );
            (
                gguf,
                a["rdrr"].as_str().map(|r| root().join(r)),
                a["scale"].as_f64().unwrap() as f32,
            )
        })
        .collect();
    LoraCase {
        golden: golden_from(&path),
        adapters,
    }
}

/// `--lora` arguments for each adapter: its GGUF file, or its RDRR folder (`None` where an
/// adapter has none).
fn lora_args(c: &LoraCase, rdrr: bool) -> Option<Vec<String>> {
    let mut args = Vec::new();
    for (gguf, folder, scale) in &c.adapters {
        let p = if rdrr { folder.as_ref()? } else { gguf };
        args.extend(["--lora".to_string(), format!("{}:{scale}", p.display())]);
    }
    Some(args)
}

/// The checks above on the CPU and `gpu` (`gpu` for wgpu, `cuda` on the GPU machine).
fn check(name: &str) {
    check_on(name, "gpu");
}

fn check_on(name: &str, gpu: &str) {
    let c = lora_case(name);
    let g = &c.golden;
    assert_eq!(
        sha256(&g.file),
        g.sha256,
        "{} is not the file the goldens were made from",
        g.file.display()
    );
    let gguf_args = lora_args(&c, false).unwrap();
    let rdrr_args = lora_args(&c, true);
    let with = |extra: &[&str], lora: &[String]| -> Vec<String> {
        extra
            .iter()
            .map(|s| s.to_string())
            .chain(lora.iter().cloned())
            .collect()
    };
    let mut failures = Vec::new();
    for case in &g.cases {
        let p = &case.prompt;
        let seq: Vec<u32> = case
            .prompt_ids
            .iter()
            .chain(&case.greedy_ids)
            .copied()
            .collect();
        let run = |extra: &[&str], lora: &[String]| {
            let args = with(extra, lora);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            logits(&g.file, &seq, &args, g.n_vocab)
        };
        let cpu_exact = run(&["--backend", "cpu", "--exact"], &gguf_args);
        let what = format!("{name} {p:?} cpu --exact vs f64");
        against(
            g,
            &what,
            &cpu_exact,
            &case.f64,
            F64_TOL,
            2.0 * F64_TOL,
            &mut failures,
        );
        let tol = LLAMA_TOL.max(2.0 * case.llama_vs_f64);
        let what = format!("{name} {p:?} cpu --exact vs llama.cpp");
        against(
            g,
            &what,
            &cpu_exact,
            &case.llama,
            tol,
            MARGIN,
            &mut failures,
        );
        let gpu_exact = run(&["--backend", gpu, "--exact"], &gguf_args);
        let what = format!("{name} {p:?} {gpu} --exact vs f64");
        against(
            g,
            &what,
            &gpu_exact,
            &case.f64,
            F64_TOL,
            2.0 * F64_TOL,
            &mut failures,
        );
        if let Some(rdrr_args) = &rdrr_args {
            let rdrr = run(&["--backend", "cpu", "--exact"], rdrr_args);
            if rdrr != cpu_exact {
                failures.push(format!(
                    "{name} {p:?}: the RDRR adapters' logits differ from the GGUF adapters'"
                ));
            }
        }
        for backend in ["cpu", gpu] {
            let n = confident(case, MARGIN);
            if n == 0 {
                continue;
            }
            let mut args = vec![
                "run".to_string(),
                g.file.display().to_string(),
                "--ids".into(),
                ids_arg(&case.prompt_ids),
                "--temperature".into(),
                "0".into(),
                "--max-tokens".into(),
                n.to_string(),
                "--backend".into(),
                backend.into(),
                "--ctx".into(),
                CTX.into(),
                "--json".into(),
            ];
            args.extend(gguf_args.iter().cloned());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ours = u32s(&run_json(&args)["generated_ids"]);
            if !greedy_matches(&ours, &case.greedy_ids[..n], g.eos) {
                failures.push(format!(
                    "{name} {p:?} greedy on {backend}: {ours:?}, llama.cpp's first {n}: {:?}",
                    &case.greedy_ids[..n]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{name}: {} prompts checked", g.cases.len());
}

#[test]
fn qwen3_adapter_matches_llama_cpp_and_f64() {
    check("qwen3");
}

#[test]
fn two_qwen3_adapters_at_their_scales_match_llama_cpp_and_f64() {
    check("qwen3-two");
}

#[test]
fn phi3_stacked_adapter_matches_llama_cpp_and_f64() {
    check("phi3");
}

#[test]
fn gemma3_adapter_matches_llama_cpp_and_f64() {
    check("gemma3");
}

/// The CUDA backend (on the GPU machine: `--ignored`, with `TRITIUM_BIN` and `TRITIUM_REPO`;
/// scripts/device-native/lora.sh): every case above with `cuda` in place of `gpu`.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/device-native/lora.sh runs it there)"]
fn adapters_on_cuda_match_llama_cpp_and_f64() {
    for name in ["qwen3", "qwen3-two", "phi3", "gemma3", "peft-qwen3"] {
        check_on(name, "cuda");
    }
}

/// An adapter made by peft 0.22 (transformers' Qwen3 over the tiny Qwen3's weights, r 8, alpha
/// 16, every projection; tests/goldens/gen_peft_goldens.py on the GPU machine; peft's own files
/// in tests/fixtures/lora/peft-qwen3), written as a GGUF adapter by that script (llama.cpp's
/// converter needed a newer gguf-py than the machine had; the goldens' "converter" says which
/// ran): our logits within [`F64_TOL`] of transformers + peft's float64 logits ("f64" and
/// "llama" in these goldens are both peft's), and greedy decoding equal to peft's over its
/// confident prefix.
#[test]
fn peft_adapter_matches_transformers_and_peft() {
    check("peft-qwen3");
}

/// The adapters are swapped between requests on one loaded model: the base model's logits,
/// then the adapter's, then the base's again, then the adapter at half scale, each equal
/// (bit for bit, CPU, f32 throughout) to a fresh process's; a prompt the cache holds from a
/// generation under other adapters is computed again, not reused.
#[test]
fn adapters_swap_between_requests_without_reloading() {
    use tritium::engine::{GenerateOptions, TokenControl};
    use tritium::sampling::SamplerConfig;
    use tritium::session::{Arithmetic, BackendChoice, OpenOptions};

    let c = lora_case("qwen3");
    let g = &c.golden;
    let (adapter, _, _) = &c.adapters[0];
    let ids = &g.cases[0].prompt_ids;
    let options = OpenOptions {
        backend: BackendChoice::Cpu,
        context: Some(128),
        arithmetic: Arithmetic::Exact,
        ..OpenOptions::default()
    };
    let mut s = tritium::session::open(&g.file, &options).unwrap();
    let id = s.load_adapter(adapter, &options).unwrap();
    let fresh = |lora: &[&str]| -> Vec<f32> {
        let mut extra = vec!["--backend", "cpu", "--exact"];
        extra.extend_from_slice(lora);
        logits(&g.file, ids, &extra, g.n_vocab).concat()
    };
    let half = format!("{}:0.5", adapter.display());
    let base = fresh(&[]);
    let adapted = fresh(&["--lora", adapter.to_str().unwrap()]);
    let adapted_half = fresh(&["--lora", &half]);
    assert_ne!(base, adapted, "the adapter changes nothing");
    for (active, want, what) in [
        (vec![], &base, "base"),
        (vec![(id, 1.0)], &adapted, "adapter"),
        (vec![], &base, "base again"),
        (vec![(id, 0.5)], &adapted_half, "adapter at 0.5"),
    ] {
        s.engine.set_adapters(&active).unwrap();
        let got = pollster::block_on(s.engine.logits_all(ids)).unwrap();
        assert!(got == *want, "{what}: logits differ from a fresh process's");
    }
    // Greedy tokens under the adapter, then the same prompt on the base model: the cached
    // prefix was computed with the adapter and must not be reused.
    let opts = GenerateOptions {
        max_tokens: 8,
        sampling: SamplerConfig::greedy(),
        stop_ids: vec![],
    };
    let mut gen = |active: &[(tritium::model::AdapterId, f32)]| {
        s.engine.set_adapters(active).unwrap();
        pollster::block_on(s.engine.generate(ids, &opts, |_| TokenControl::Continue))
            .unwrap()
            .ids
    };
    let with_adapter = gen(&[(id, 1.0)]);
    let base_after = gen(&[]);
    let mut fresh_base = tritium::session::open(&g.file, &options).unwrap();
    let want = pollster::block_on(
        fresh_base
            .engine
            .generate(ids, &opts, |_| TokenControl::Continue),
    )
    .unwrap()
    .ids;
    assert_ne!(with_adapter, want, "the adapter changes no greedy token");
    assert_eq!(
        base_after, want,
        "the base model after the adapter reused stale keys"
    );
    // A scale of 0 is the base model, exactly.
    s.engine.set_adapters(&[(id, 0.0)]).unwrap();
    let zero = pollster::block_on(s.engine.logits_all(ids)).unwrap();
    assert!(zero == base, "scale 0 differs from the base model");
    // An unknown id, the same adapter twice, a scale that is not a number.
    for (active, expect) in [
        (vec![(tritium::model::AdapterId(7), 1.0)], "no such adapter"),
        (vec![(id, 1.0), (id, 0.5)], "given twice"),
        (vec![(id, f32::NAN)], "is not a number"),
    ] {
        let e = s.engine.set_adapters(&active).unwrap_err().to_string();
        assert!(e.contains(expect), "{e}");
    }
}

/// `tritium` with `args`: its stderr, where it must fail.
fn refused(args: &[&str]) -> String {
    failed(tritium_output(args))
}

/// `src` (a GGUF adapter) with metadata `key` set to `value` (`None`: removed) and the tensors
/// `keep` accepts.
fn edited(src: &Path, key: &str, value: Option<GgufValue>, keep: &dyn Fn(&str) -> bool) -> Vec<u8> {
    let meta = |m: &mut Vec<(String, GgufValue)>| {
        m.retain(|(k, _)| k != key);
        m.extend(value.clone().map(|v| (key.to_string(), v)));
    };
    rebuilt(src, &meta, &|name, dtype, shape, data| {
        keep(name).then(|| (name.to_string(), dtype, shape, data))
    })
}

/// `src` (a GGUF adapter) with `from` replaced by `to` in its tensors' names.
fn renamed(src: &Path, from: &str, to: &str) -> Vec<u8> {
    rebuilt(src, &|_| {}, &|name, dtype, shape, data| {
        Some((name.replace(from, to), dtype, shape, data))
    })
}

/// Adapters that do not fit the base model, and adapters and models given in each other's
/// place, are refused with a message that says so; nothing panics.
#[test]
fn adapters_that_do_not_fit_are_refused_by_name() {
    let c = lora_case("qwen3");
    let qwen3 = c.golden.file.to_str().unwrap().to_string();
    let adapter = c.adapters[0].0.clone();
    let fixtures = root().join("tests/fixtures/arch");
    let phi3 = fixtures.join("tiny-phi3.gguf");
    let qwen2 = fixtures.join("tiny-qwen2.gguf");
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: Vec<u8>| -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let run = |model: &str, lora: &str| -> String {
        refused(&[
            "run",
            model,
            "--ids",
            "1,2",
            "--max-tokens",
            "1",
            "--backend",
            "cpu",
            "--lora",
            lora,
        ])
    };
    let a = adapter.to_str().unwrap();
    // Another architecture.
    let e = run(phi3.to_str().unwrap(), a);
    assert!(
        e.contains("architecture qwen3") && e.contains("phi3"),
        "{e}"
    );
    // The same architecture name over other shapes (qwen2's q is 64 wide, qwen3's 128).
    let as_qwen2 = write(
        "as-qwen2.gguf",
        edited(
            &adapter,
            "general.architecture",
            Some(GgufValue::String("qwen2".into())),
            &|_| true,
        ),
    );
    let e = run(qwen2.to_str().unwrap(), &as_qwen2);
    assert!(e.contains("a different base model?"), "{e}");
    // Half a pair.
    let half = write(
        "half.gguf",
        edited(&adapter, "", None, &|n| n != "blk.1.attn_v.weight.lora_b"),
    );
    let e = run(&qwen3, &half);
    assert!(
        e.contains("blk.1.attn_v.weight") && e.contains("only one of"),
        "{e}"
    );
    // A tensor that updates nothing tritium applies adapters to (the LM head).
    let head = write(
        "head.gguf",
        renamed(&adapter, "blk.0.attn_q.weight", "output.weight"),
    );
    let e = run(&qwen3, &head);
    assert!(
        e.contains("output.weight") && e.contains("not a projection"),
        "{e}"
    );
    // A block the base model does not have.
    let deep = write("deep.gguf", renamed(&adapter, "blk.1.", "blk.9."));
    let e = run(&qwen3, &deep);
    assert!(e.contains("block 9") && e.contains("2 blocks"), "{e}");
    // Not an adapter (general.type missing), and a model given as an adapter.
    let untyped = write(
        "untyped.gguf",
        edited(&adapter, "general.type", None, &|_| true),
    );
    let e = run(&qwen3, &untyped);
    assert!(e.contains("not an adapter"), "{e}");
    let e = run(&qwen3, &qwen3);
    assert!(e.contains("not an adapter"), "{e}");
    // An adapter given as the model.
    let e = refused(&[
        "run",
        a,
        "--ids",
        "1,2",
        "--max-tokens",
        "1",
        "--backend",
        "cpu",
    ]);
    assert!(e.contains("LoRA adapter, not a model"), "{e}");
    // A bad scale, and no adapter before the scale.
    for (arg, expect) in [
        (format!("{a}:inf"), "not a usable scale"),
        (":2".into(), "before its scale"),
    ] {
        let e = refused(&["run", &qwen3, "--ids", "1", "--lora", &arg]);
        assert!(e.contains(expect), "{e}");
    }
}
