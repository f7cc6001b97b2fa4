//! Each of the GPU's fusion rules (crates/engine/src/backend/gpu/rules.rs) on a real pass, on lavapipe: the
//! plan with the rule off and on (printed in full with `--nocapture`), the ops it replaces
//! and the op it makes, and the logits of the same prefill and decode either way, next to the
//! CPU backend's (the reference, which runs the ops as the model wrote them).
//!
//! Models: a small two-layer Llama of Llama-3.2-1B's formats (the synthetic model's Q4_K
//! matrices, Q6_K `attn_v`, `ffn_down` and tied embedding; dim 512, 8 query and 2 KV heads of
//! 64, FFN 1536, 1,024 tokens; random weights), every attention cut into 4 pieces (a CPU adapter
//! otherwise attends in one, which keeps the attention's records and norm in dispatches of
//! their own), and the tiny I2_S BitNet fixture (tests/fixtures/bitnet). Llama's norms folded into their neighbours
//! ([`add_norm`]) and the paired products have tests of their own that hold them to the same
//! bar (tests/add_norm.rs, tests/q8_pairs.rs); here they are shown in the same form as the
//! other rules.
//!
//! Tolerances, as fractions of the logit range of the rule-off pass:
//! - rules that move a step into another kernel with the same arithmetic (the residual add,
//!   the records' quantization in the attention or the gated product, pairing, sharing
//!   records): the same bits;
//! - rules whose fused kernel reduces in another order (the norm's sum of squares inside the
//!   quantization or the BitLinear product, RoPE's rotation inside the attention, the norm's
//!   factor applied after the products): within 2e-3, where an 8-bit quantization of the
//!   normed rows turns a last-bit difference into a rounding step on a few values (seen: up to
//!   8.5e-4 on this model for add_norm, under 2e-7 for the others; tests/add_norm.rs explains
//!   why these random weights amplify it). The rule-off pass is the reference here; it is held
//!   to the CPU and to llama.cpp by tests/llama_reference.rs and tests/bitnet_reference.rs. The
//!   distances to the CPU's logits are printed for both.

#[allow(dead_code)]
mod decode_support;

use std::sync::OnceLock;

use decode_support::relative_diff;
use tritium::backend::cpu::CpuBackend;
use tritium::backend::gpu::{GpuBackend, Rules};
use tritium::backend::{Backend, Batch, Logits, Readback};
use tritium::bench::synth::{self, SynthSpec};
use tritium::formats::gguf::GgufFile;
use tritium::gpu::ops::KvDtype;
use tritium::gpu::{DeviceOptions, GpuContext};
use tritium::model::{GgufTensors, Model, ModelConfig};

/// A plan line's label and how many times it appears.
type Count<'a> = (&'a str, usize);

/// How the logits of the pass with the rule on may differ from those with it off.
#[derive(Copy, Clone, Debug)]
enum Same {
    Bits,
    /// Within this fraction of the logit range.
    Range(f32),
}

/// The small Llama (see the top of the file).
fn llama() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let spec = SynthSpec {
            dim: 512,
            n_heads: 8,
            n_kv_heads: 2,
            ffn: 1536,
            vocab: 1024,
            ..SynthSpec::named("llama-1b-q4k").expect("spec")
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("llama.gguf");
        synth::write(&spec, Some(2), None, &path).expect("synthetic model");
        std::fs::read(&path).expect("model")
    })
}

fn bitnet() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read("tests/fixtures/bitnet/tiny-i2s.gguf").expect("fixture"))
}

/// The logits of a 3-token prefill (every row) and 3 decode passes, and the model.
fn run<B: Backend>(bytes: &[u8], backend: B) -> (Vec<Vec<f32>>, Model<B>) {
    let file = GgufFile::read(&bytes.to_vec()).expect("gguf");
    let config = ModelConfig::from_gguf(&file).expect("config");
    let src = bytes.to_vec();
    let tensors = GgufTensors {
        file: &file,
        src: &src,
    };
    let mut m = Model::load(backend, config, &tensors, 16).expect("load");
    let mut out = Vec::new();
    let passes: [(&[u32], usize); 4] = [(&[1, 2, 3], 0), (&[7], 3), (&[8], 4), (&[9], 5)];
    for (ids, pos) in passes {
        match pollster::block_on(m.forward(ids, pos, Readback::All)).expect("pass") {
            Logits::Full(v) => out.push(v),
            other => panic!("read back {other:?}"),
        }
    }
    (out, m)
}

fn gpu(rules: Rules) -> GpuBackend {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let mut b = GpuBackend::new(ctx, 4).expect("backend");
    b.set_kv_dtype(Some(KvDtype::F32));
    b.set_attention_splits(Some(4));
    b.set_rules(rules);
    b
}

/// The plans of a one-token and a three-token pass.
fn plans<B: Backend>(m: &mut Model<B>) -> [Vec<String>; 2] {
    [1, 3].map(|n| {
        m.plan_text(&Batch::one(0, n), Readback::TopK(1))
            .expect("plan")
            .1
    })
}

/// What every rule is compared with: the CPU's logits, and the GPU's logits and plans with
/// every rule on (made once per model for all the tests).
struct Reference {
    cpu: Vec<Vec<f32>>,
    all: Vec<Vec<f32>>,
    plans: [Vec<String>; 2],
}

fn reference(bytes: &'static [u8]) -> &'static Reference {
    static LLAMA: OnceLock<Reference> = OnceLock::new();
    static BITNET: OnceLock<Reference> = OnceLock::new();
    let cell = if bytes.as_ptr() == llama().as_ptr() {
        &LLAMA
    } else {
        &BITNET
    };
    cell.get_or_init(|| {
        let (cpu, _) = run(bytes, CpuBackend::new(4));
        let (all, mut m) = run(bytes, gpu(all_rules()));
        Reference {
            cpu,
            all,
            plans: plans(&mut m),
        }
    })
}

/// Every rule on, as a new backend has them on this adapter.
fn all_rules() -> Rules {
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
    let rules = GpuBackend::new(ctx, 1).expect("backend").rules();
    assert!(
        rules.int_dot,
        "the integer-dot decode path is off on this adapter"
    );
    rules
}

/// The lines of `plan` that `other` does not have (as many times as they are missing).
fn only_in(plan: &[String], other: &[String]) -> Vec<String> {
    let mut rest: Vec<&String> = other.iter().collect();
    plan.iter()
        .filter(|l| match rest.iter().position(|o| o == l) {
            Some(i) => {
                rest.remove(i);
                false
            }
            None => true,
        })
        .cloned()
        .collect()
}

/// A rule shown on a pass of `tokens` (1 or 3) tokens: the plan with the rule off (`off`
/// turns it off, and may turn off rules that would take its ops further) and with every rule
/// on but those, the labels (each line's start, before its buffers) the rule removes and
/// makes, with their counts, and the logits either way.
fn check_rule(
    bytes: &'static [u8],
    off: impl Fn(&mut Rules),
    also_off: impl Fn(&mut Rules),
    tokens: usize,
    removes: &[Count],
    makes: &[Count],
    same: Same,
) {
    let reference = reference(bytes);
    let mut on_rules = all_rules();
    also_off(&mut on_rules);
    let mut off_rules = on_rules;
    off(&mut off_rules);
    let (without, mut m_off) = run(bytes, gpu(off_rules));
    let (with, plan_on) = if on_rules == all_rules() {
        (reference.all.clone(), reference.plans.clone())
    } else {
        let (with, mut m_on) = run(bytes, gpu(on_rules));
        (with, plans(&mut m_on))
    };
    let at = usize::from(tokens > 1);
    let (plan_on, plan_off) = (&plan_on[at], &plans(&mut m_off)[at]);
    println!(
        "rule off ({} steps):\n  {}",
        plan_off.len(),
        plan_off.join("\n  ")
    );
    println!(
        "rule on ({} steps):\n  {}",
        plan_on.len(),
        plan_on.join("\n  ")
    );
    let (gone, made) = (only_in(plan_off, plan_on), only_in(plan_on, plan_off));
    println!(
        "removed:\n  {}\nmade:\n  {}",
        gone.join("\n  "),
        made.join("\n  ")
    );
    let label = |l: &String| l.split(": ").next().unwrap_or(l).to_string();
    let count = |lines: &[String], what: &str| lines.iter().filter(|l| label(l) == what).count();
    for (what, n) in removes {
        assert_eq!(count(&gone, what), *n, "removed {what}: {gone:#?}");
    }
    for (what, n) in makes {
        assert_eq!(count(&made, what), *n, "made {what}: {made:#?}");
    }
    let expected: usize = removes.iter().chain(makes).map(|r| r.1).sum();
    assert_eq!(
        gone.len() + made.len(),
        expected,
        "the rule changes nothing else"
    );
    for (pass, ((a, b), c)) in without.iter().zip(&with).zip(&reference.cpu).enumerate() {
        let between = relative_diff(a, b);
        let (d_on, d_off) = (relative_diff(c, b), relative_diff(c, a));
        println!("pass {pass}: on vs off {between:.2e}; vs CPU on {d_on:.2e}, off {d_off:.2e}");
        match same {
            Same::Bits => assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "pass {pass}: the logits differ ({between:.2e} of the range)"
            ),
            Same::Range(tol) => {
                assert!(
                    between < tol,
                    "pass {pass}: the logits differ by {between:.2e}"
                )
            }
        }
    }
}

fn none(_: &mut Rules) {}

#[test]
fn norm_bitlinear_runs_a_norm_and_its_bitlinear_products_in_one_dispatch() {
    check_rule(
        bitnet(),
        |r| r.norm_bitlinear = false,
        none,
        1,
        &[
            ("rms_norm+quantize 1x256", 6),
            ("rms_norm+quantize 1x512", 2),
            ("bitlinear I2_S 256x256 (x1)", 4),
            ("bitlinear I2_S 128x256 (x1)", 4),
            ("bitlinear I2_S 512x256 (x1)", 4),
            ("bitlinear I2_S 256x512 (x1)", 2),
            ("Add 256", 4),
            ("ReluSquaredMul 512", 2),
        ],
        &[
            (
                "rms_norm+bitlinear Separate I2_S 256x256 + I2_S 128x256 + I2_S 128x256",
                2,
            ),
            ("rms_norm+bitlinear Residual I2_S 256x256", 2),
            (
                "rms_norm+bitlinear ReluSquaredGate I2_S 512x256 + I2_S 512x256",
                2,
            ),
            ("rms_norm+bitlinear Residual I2_S 256x512", 2),
        ],
        Same::Range(2e-3),
    );
}

#[test]
fn norm_quantize_writes_the_bitlinear_records_in_the_norm() {
    check_rule(
        bitnet(),
        |r| r.norm_quantize = false,
        none,
        3,
        &[
            ("rms_norm 3x256", 6),
            ("rms_norm 3x512", 2),
            ("quantize 3x256", 6),
            ("quantize 3x512", 2),
        ],
        &[
            ("rms_norm+quantize 3x256", 6),
            ("rms_norm+quantize 3x512", 2),
        ],
        Same::Range(2e-3),
    );
}

#[test]
fn residual_add_adds_a_product_to_the_residual_in_its_dispatch() {
    // With Llama's norms in their own dispatches (add_norm takes these adds further).
    check_rule(
        llama(),
        |r| r.residual = false,
        |r| r.add_norm = false,
        1,
        &[
            ("matvec_q8 Q4_K 512x512", 2),
            ("matvec_q8 Q6_K 512x1536", 2),
            ("Add 512", 4),
        ],
        &[
            ("matvec_q8+add Q4_K 512x512", 2),
            ("matvec_q8+add Q6_K 512x1536", 2),
        ],
        Same::Bits,
    );
}

#[test]
fn shared_records_quantize_an_input_once_for_all_its_products() {
    check_rule(
        llama(),
        |r| r.shared_records = false,
        |r| {
            r.pair_q8 = false;
            r.add_norm = false;
        },
        1,
        &[("quantize_q8 1x512", 6)],
        &[],
        Same::Bits,
    );
}

#[test]
fn norm_q8_writes_the_integer_dot_records_in_the_norm() {
    check_rule(
        llama(),
        |r| r.norm_q8 = false,
        |r| r.add_norm = false,
        1,
        &[("rms_norm 1x512", 5), ("quantize_q8 1x512", 5)],
        &[("rms_norm+quantize_q8 1x512", 5)],
        Same::Range(2e-3),
    );
}

#[test]
fn silu_q8_writes_the_records_in_the_gated_product() {
    check_rule(
        llama(),
        |r| r.silu_q8 = false,
        |r| r.add_norm = false,
        1,
        &[("SiluMul 1536", 2), ("quantize_q8 1x1536", 2)],
        &[("silu_mul+quantize_q8 1x1536", 2)],
        Same::Bits,
    );
}

#[test]
fn fold_rope_rotates_q_and_k_in_the_attention() {
    check_rule(
        llama(),
        |r| r.fold_rope = false,
        none,
        3,
        &[
            ("rope 3x8 heads", 2),
            ("rope 3x2 heads", 2),
            ("attention 3x8 heads", 2),
        ],
        &[("attention+rope 3x8 heads", 2)],
        Same::Range(2e-3),
    );
}

#[test]
fn attention_q8_writes_the_records_of_its_output_in_the_attention() {
    check_rule(
        llama(),
        |r| r.attention_q8 = false,
        none,
        1,
        &[
            ("quantize_q8 1x512", 2),
            ("attention+rope 1x8 heads", 1),
            ("rms_norm factor+attention+rope 1x8 heads", 1),
        ],
        &[
            ("attention+rope+quantize_q8 1x8 heads", 1),
            ("rms_norm factor+attention+rope+quantize_q8 1x8 heads", 1),
        ],
        Same::Bits,
    );
}

#[test]
fn pair_q8_runs_two_products_of_one_input_in_one_dispatch() {
    check_rule(
        llama(),
        |r| r.pair_q8 = false,
        none,
        1,
        &[
            ("matvec_q8 Q4_K 512x512", 1),
            ("matvec_q8 Q4_K 128x512", 1),
            ("matvec_q8 Q4_K 512x512 (norm record)", 1),
            ("matvec_q8 Q4_K 128x512 (norm record)", 1),
            ("matvec_q8 Q4_K 1536x512 (norm record)", 4),
        ],
        &[
            ("matvec_q8 Q4_K 512x512 + Q4_K 128x512", 1),
            ("matvec_q8 Q4_K 512x512 + Q4_K 128x512 (norm record)", 1),
            ("matvec_q8 Q4_K 1536x512 + Q4_K 1536x512 (norm record)", 2),
        ],
        Same::Bits,
    );
}

#[test]
fn add_norm_folds_llama_norms_into_the_add_before_and_the_op_after() {
    // The first attention norm follows the embedding and the head's norm the last add: both
    // keep their dispatches.
    check_rule(
        llama(),
        |r| r.add_norm = false,
        none,
        1,
        &[
            ("matvec_q8+add Q4_K 512x512", 2),
            ("matvec_q8+add Q6_K 512x1536", 1),
            ("rms_norm+quantize_q8 1x512", 3),
            ("matvec_q8 Q4_K 512x512 + Q4_K 128x512", 1),
            ("matvec_q8 Q6_K 128x512", 1),
            ("attention+rope+quantize_q8 1x8 heads", 1),
            ("matvec_q8 Q4_K 1536x512 + Q4_K 1536x512", 2),
            ("silu_mul+quantize_q8 1x1536", 2),
        ],
        &[
            ("matvec_q8+add+norm record Q4_K 512x512", 2),
            ("matvec_q8+add+norm record Q6_K 512x1536", 1),
            ("matvec_q8 Q4_K 512x512 + Q4_K 128x512 (norm record)", 1),
            ("matvec_q8 Q6_K 128x512 (norm record)", 1),
            ("rms_norm factor+attention+rope+quantize_q8 1x8 heads", 1),
            ("matvec_q8 Q4_K 1536x512 + Q4_K 1536x512 (norm record)", 2),
            ("rms_norm factor+silu_mul+quantize_q8 1x1536", 2),
        ],
        Same::Range(2e-3),
    );
}

/// share_f16_input takes cooperative matrices (a GPU's tensor cores; not lavapipe): there, the
/// k and v products of a prefill take q's converted f16 input, and up takes gate's (the same
/// values, converted once), so the logits are the same bits. Without them the rule has nothing
/// to do and the plans are the same.
#[test]
fn share_f16_input_converts_a_prefill_input_once_for_its_products() {
    let coop = {
        let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default())).expect("adapter");
        tritium::gpu::matmul::has_coop_subgroups(&ctx)
    };
    let (removes, makes): (&[Count], &[Count]) = if coop {
        (
            &[
                ("matmul Q4_K 128x512 (x3)", 2),
                ("matmul Q6_K 128x512 (x3)", 2),
                ("matmul Q4_K 1536x512 (x3)", 2),
            ],
            &[
                ("matmul Q4_K 128x512 (x3, the f16 input before it)", 2),
                ("matmul Q6_K 128x512 (x3, the f16 input before it)", 2),
                ("matmul Q4_K 1536x512 (x3, the f16 input before it)", 2),
            ],
        )
    } else {
        (&[], &[])
    };
    check_rule(
        llama(),
        |r| r.share_f16_input = false,
        none,
        3,
        removes,
        makes,
        Same::Bits,
    );
}
