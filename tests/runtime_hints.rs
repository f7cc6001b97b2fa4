//! Runtime hints (`runtimeOptimizations`, RDRR's kernel-selection hints) on SmolLM2-135M
//! Q4_K_M, on lavapipe (the wgpu backend; CI's adapter) and the CPU:
//!
//! - each hint that can apply on lavapipe changes the kernels the plan names, and only those
//!   (`=> kernel (hinted: ...)` on the products, norms and attention it chose); each that cannot
//!   (lavapipe has no cooperative matrices; there is no f16 norm or softmax, no other decoder,
//!   no other tunable workgroup) leaves the plan as it was, with a note saying why;
//! - hints come from an RDRR manifest (converted from the GGUF by `tritium convert`) and from
//!   the caller (`OpenOptions::hints`, `tritium run --hints`), the caller's over the model's;
//! - the logits of a prefill (4 tokens) and two decode passes stay within the bound of what the
//!   hint changed:
//!   - hints that keep the arithmetic and change only the order of f32 sums (the attention's
//!     kernel and pieces, the norm's reduction and width): the prefill (f32 products) within
//!     2e-3 of the logit range of the unhinted GPU pass, the bound tests/plan_rules.rs gives
//!     fused kernels that reduce in another order (seen: under 1e-5); the decode passes, whose
//!     products take int8 activations, within 0.1 of it ([`DECODE_REL_TOL`]: a last-bit
//!     difference in a normed row moves an int8 code by a step, and 30 layers carry it); and,
//!     since that bound is loose, the same hint under exact arithmetic (every pass f32) within
//!     2e-3 of the CPU's exact pass;
//!   - hints that leave every product on f32 activations and operands (`matmul = f32`,
//!     `gemv_f16` on lavapipe, which has no cooperative matrices; `forceF32Accumulation`):
//!     within 2e-3 of the logit range of the CPU backend's exact (f32) pass, which computes
//!     the same f32 values in another order (tests/llama_reference.rs holds f32 passes to 2e-3
//!     of the float64 reference; they land within 6e-5 of it).
//!
//! The model comes from scripts/fetch-models.sh; it missing fails the test. Run with the
//! lavapipe driver selected, as CI does (`VK_ICD_FILENAMES=.../lvp_icd.x86_64.json`): the
//! plans asserted here are lavapipe's (no cooperative matrices, subgroups, one attention
//! piece on a CPU adapter).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use tritium::backend::{Backend, Batch, Logits, Readback};
use tritium::session::{
    self, Arithmetic, BackendChoice, HintNote, HintOutcome, OpenOptions, RuntimeOptimizations,
    Session,
};

const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_K_M.gguf";
/// Largest logit difference, as a fraction of the reference's logit range (see the top).
const REL_TOL: f32 = 2e-3;
/// Decode passes on int8 activations against another decode pass that sums in another order:
/// the bound tests/llama_reference.rs gives lavapipe's int8 decode against the CPU's f32 one
/// (seen there: up to 6.3% on this model; a wrong input to a product moves the logits by a
/// large part of the range). A last-bit difference in a normed row moves an int8 code by one
/// step, and 30 layers carry it: seen here up to 1.7% for the norms' other reduction.
const DECODE_REL_TOL: f32 = 0.1;

fn model() -> &'static str {
    assert!(
        Path::new(MODEL).exists(),
        "{MODEL} is missing: run scripts/fetch-models.sh"
    );
    MODEL
}

fn hints(json: &str) -> RuntimeOptimizations {
    RuntimeOptimizations::from_json("test", json).expect("hints parse")
}

fn open(path: &str, backend: BackendChoice, arithmetic: Arithmetic, h: Option<&str>) -> Session {
    let options = OpenOptions {
        backend,
        context: Some(64),
        batch: 8,
        arithmetic,
        hints: h.map(hints),
        ..OpenOptions::default()
    };
    session::open(path, &options).expect("open")
}

fn gpu(h: Option<&str>) -> Session {
    open(model(), BackendChoice::Gpu, Arithmetic::Fast, h)
}

/// The plans (as the backend runs them) of a 4-token prefill and the decode after it.
fn plans(s: &mut Session) -> [Vec<String>; 2] {
    let m = &mut s.engine.model;
    [Batch::one(0, 4), Batch::one(4, 1)].map(|b| m.plan_text(&b, Readback::Last).expect("plan").1)
}

/// The last row's logits of a 4-token prefill and of two decode passes after it.
fn logits(s: &mut Session) -> Vec<Vec<f32>> {
    let m = &mut s.engine.model;
    let mut out = Vec::new();
    for (ids, pos) in [(&[1u32, 504, 3458, 282][..], 0), (&[253], 4), (&[1345], 5)] {
        match pollster::block_on(m.forward(ids, pos, Readback::Last)).expect("forward") {
            Logits::Full(v) => out.push(v),
            other => panic!("read back {other:?}"),
        }
    }
    out
}

/// The largest |got - want| over the logit range of `want`, over every pass.
fn worst(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let (lo, hi) = w
                .iter()
                .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            let d = g.iter().zip(w).fold(0f32, |m, (a, b)| {
                let d = (a - b).abs();
                if d.is_nan() {
                    f32::INFINITY
                } else {
                    m.max(d)
                }
            });
            d / (hi - lo)
        })
        .fold(0f32, f32::max)
}

/// The unhinted GPU session's plans and logits, and the CPU's exact logits (made once).
struct Reference {
    plans: [Vec<String>; 2],
    gpu: Vec<Vec<f32>>,
    cpu_exact: Vec<Vec<f32>>,
}

fn reference() -> &'static Reference {
    static R: OnceLock<Reference> = OnceLock::new();
    R.get_or_init(|| {
        let mut s = gpu(None);
        assert!(s.hints.is_empty());
        let plans = plans(&mut s);
        let gpu = logits(&mut s);
        let mut cpu = open(model(), BackendChoice::Cpu, Arithmetic::Exact, None);
        Reference {
            plans,
            gpu,
            cpu_exact: logits(&mut cpu),
        }
    })
}

fn note<'a>(s: &'a Session, hint: &str) -> &'a HintNote {
    s.hints
        .iter()
        .find(|n| n.hint == hint)
        .unwrap_or_else(|| panic!("no note for {hint}: {:?}", s.hints))
}

/// Whether a plan line is an integer-dot product (int8 activations).
fn int8(line: &str) -> bool {
    line.starts_with("matvec_q8")
}

/// What a hint's logits are held to (see the top of the file).
#[derive(Copy, Clone, PartialEq, Eq)]
enum Bound {
    /// Every product on f32 operands: every pass within [`REL_TOL`] of the CPU's exact pass.
    CpuExact,
    /// Only the order of sums changes: the prefill within [`REL_TOL`] of the unhinted GPU
    /// pass, the decode passes (int8 activations) within [`DECODE_REL_TOL`] of it, and the same
    /// hint under exact arithmetic within [`REL_TOL`] of the CPU's exact pass.
    Reordered,
}

/// The largest difference of `got` from `want` per pass, checked against `bounds(pass)`.
fn check(
    hint: &str,
    what: &str,
    got: &[Vec<f32>],
    want: &[Vec<f32>],
    bound: &dyn Fn(usize) -> f32,
) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = worst(std::slice::from_ref(g), std::slice::from_ref(w));
        println!("{hint}: pass {i}: {d:.2e} of the logit range from {what}");
        assert!(
            d <= bound(i),
            "{hint}: pass {i}: {d} of the range from {what}"
        );
    }
}

/// A hint that changes kernels: its note says applied, the plans differ from the unhinted
/// ones, some line of each pass is as `expect` says (the kernel the hint picks, named with the
/// hint where it changed it), and the logits are within `bound`.
fn applies(json: &str, hint: &str, expect: [&dyn Fn(&str) -> bool; 2], bound: Bound) {
    let mut s = gpu(Some(json));
    let n = note(&s, hint);
    assert_eq!(n.outcome, HintOutcome::Applied, "{n}");
    let p = plans(&mut s);
    assert_ne!(p, reference().plans, "{hint} changed no kernel");
    for (i, pass) in p.iter().enumerate() {
        let want = pass.iter().filter(|l| expect[i](l)).count();
        assert!(want > 0, "no line of pass {i} as the hint asks: {pass:#?}");
    }
    let got = logits(&mut s);
    drop(s);
    let r = reference();
    match bound {
        Bound::CpuExact => check(hint, "the CPU's exact pass", &got, &r.cpu_exact, &|_| {
            REL_TOL
        }),
        Bound::Reordered => {
            check(hint, "the unhinted GPU pass", &got, &r.gpu, &|i| match i {
                0 => REL_TOL,
                _ => DECODE_REL_TOL,
            });
            let mut exact = open(model(), BackendChoice::Gpu, Arithmetic::Exact, Some(json));
            assert_eq!(note(&exact, hint).outcome, HintOutcome::Applied);
            let got = logits(&mut exact);
            check(
                hint,
                "the CPU's exact pass (exact arithmetic)",
                &got,
                &r.cpu_exact,
                &|_| REL_TOL,
            );
        }
    }
}

/// A hint that cannot apply here: its note has `outcome`, and the plans are the unhinted ones.
fn leaves_plans(json: &str, hint: &str, outcome: HintOutcome, why: &str) {
    let mut s = gpu(Some(json));
    let n = note(&s, hint);
    assert_eq!(n.outcome, outcome, "{n}");
    assert!(n.detail.contains(why), "{n}");
    assert_eq!(plans(&mut s), reference().plans);
}

#[test]
fn unhinted_plan_names_the_default_kernels() {
    let [prefill, decode] = &reference().plans;
    let has = |p: &[String], s: &str| p.iter().any(|l| l.contains(s));
    // lavapipe: no cooperative matrices, subgroups, one attention piece on a CPU adapter.
    assert!(has(prefill, "=> matmul_q5_0"), "{prefill:#?}");
    assert!(has(prefill, "=> attentiongroup"), "{prefill:#?}");
    assert!(
        has(prefill, "=> rmsnorm (subgroup reduction), 32 wide"),
        "{prefill:#?}"
    );
    assert!(has(decode, "=> matvec_q8_q5_0"), "{decode:#?}");
    assert!(has(decode, "=> attention"), "{decode:#?}");
    assert!(!has(prefill, "hinted") && !has(decode, "hinted"));
}

#[test]
fn matmul_f32_takes_f32_activations() {
    applies(
        r#"{"preferredKernels":{"matmul":"f32"}}"#,
        "preferredKernels.matmul = f32",
        [&|_| true, &|l| {
            l.ends_with("=> matvec_q5_0 (hinted: preferredKernels.matmul = f32)")
        }],
        Bound::CpuExact,
    );
}

#[test]
fn matmul_gemv_takes_the_matvec_kernels_for_one_token() {
    let mut s = gpu(Some(r#"{"preferredKernels":{"matmul":"gemv_f16"}}"#));
    let [prefill, decode] = plans(&mut s);
    // Products of several tokens keep their kernels (the prefill's one-row head is a
    // one-token product).
    for line in prefill.iter().filter(|l| l.contains("(x4)")) {
        assert!(reference().plans[0].contains(line), "{line}");
    }
    assert!(!decode.iter().any(|l| int8(l)), "{decode:#?}");
    assert!(decode.iter().any(|l| l.contains("=> matvec_q6_k (hinted")));
    drop(s);
    applies(
        r#"{"preferredKernels":{"matmul":"gemv_f16"}}"#,
        "preferredKernels.matmul = gemv_f16",
        [&|_| true, &|l| l.contains("=> matvec_q5_0 (hinted")],
        Bound::CpuExact,
    );
}

#[test]
fn attention_tiers_pick_the_attention_kernel() {
    applies(
        r#"{"attentionTier":"basic"}"#,
        "attentionTier = basic",
        [
            &|l| l.ends_with("=> attention (hinted: attentionTier = basic)"),
            // One piece per head is what a decode on a CPU adapter takes anyway.
            &|l| l.ends_with("=> attention"),
        ],
        Bound::Reordered,
    );
    applies(
        r#"{"preferredKernels":{"attention":"streaming_f16"}}"#,
        "preferredKernels.attention = streaming_f16",
        [
            &|l| l.contains("=> attentiongroup, 2 pieces + combine (hinted"),
            &|l| l.contains(", 2 pieces") && l.contains("(hinted"),
        ],
        Bound::Reordered,
    );
}

#[test]
fn attention_tier_wins_over_the_preferred_attention_kernel() {
    let s = gpu(Some(
        r#"{"preferredKernels":{"attention":"streaming_f16"},"attentionTier":"basic"}"#,
    ));
    let n = note(&s, "preferredKernels.attention = streaming_f16");
    assert_eq!(n.outcome, HintOutcome::Ignored);
    assert!(n.detail.contains("attentionTier = basic forces"), "{n}");
    assert_eq!(
        note(&s, "attentionTier = basic").outcome,
        HintOutcome::Applied
    );
}

#[test]
fn norm_hints_pick_the_reduction_and_width() {
    applies(
        r#"{"preferredKernels":{"rmsnorm":"f32"}}"#,
        "preferredKernels.rmsnorm = f32",
        [
            &|l| l.contains("=> rmsnorm (workgroup-memory reduction), 32 wide (hinted"),
            &|l| l.contains("=> rmsnormquantizeq8 (workgroup-memory reduction) (hinted"),
        ],
        Bound::Reordered,
    );
    applies(
        r#"{"workgroupOverrides":{"rmsnorm":[128,1,1]}}"#,
        "workgroupOverrides.rmsnorm = [128, 1, 1]",
        [
            &|l| l.contains("=> rmsnorm (subgroup reduction), 128 wide (hinted"),
            &|_| true,
        ],
        Bound::Reordered,
    );
    applies(
        r#"{"disableFeatures":["subgroups"]}"#,
        "disableFeatures: subgroups",
        [
            &|l| l.contains("(workgroup-memory reduction), 32 wide (hinted"),
            &|l| l.contains("(workgroup-memory reduction) (hinted"),
        ],
        Bound::Reordered,
    );
}

#[test]
fn hints_that_cannot_apply_are_ignored_with_the_reason() {
    use HintOutcome::{Default, Ignored};
    let coop = "no cooperative matrices";
    leaves_plans(
        r#"{"preferredKernels":{"matmul":"f16"}}"#,
        "preferredKernels.matmul = f16",
        Ignored,
        coop,
    );
    leaves_plans(
        r#"{"attentionTier":"tiled"}"#,
        "attentionTier = tiled",
        Ignored,
        coop,
    );
    leaves_plans(
        r#"{"preferredKernels":{"matmul":"q4_fused_batched"}}"#,
        "preferredKernels.matmul = q4_fused_batched",
        Default,
        coop,
    );
    leaves_plans(
        r#"{"preferredKernels":{"matmul":"q4_fused"}}"#,
        "preferredKernels.matmul = q4_fused",
        Default,
        "integer dot products",
    );
    leaves_plans(
        r#"{"preferredKernels":{"rmsnorm":"f16"}}"#,
        "preferredKernels.rmsnorm = f16",
        Ignored,
        "no f16 RMSNorm kernel",
    );
    leaves_plans(
        r#"{"preferredKernels":{"softmax":"f16_online"}}"#,
        "preferredKernels.softmax = f16_online",
        Ignored,
        "no f16 softmax",
    );
    leaves_plans(
        r#"{"preferredKernels":{"dequant":"q8"}}"#,
        "preferredKernels.dequant = q8",
        Ignored,
        "its own stored type",
    );
    leaves_plans(
        r#"{"workgroupOverrides":{"rmsnorm":[48,1,1]}}"#,
        "workgroupOverrides.rmsnorm = [48, 1, 1]",
        Ignored,
        "power of two",
    );
    leaves_plans(
        r#"{"workgroupOverrides":{"matmul_f16":[128,1,1]}}"#,
        "workgroupOverrides.matmul_f16 = [128, 1, 1]",
        Ignored,
        "fixed by its layout",
    );
    leaves_plans(
        r#"{"workgroupOverrides":{"no_such_kernel":[64,1,1]}}"#,
        "workgroupOverrides.no_such_kernel = [64, 1, 1]",
        Ignored,
        "no kernel of that name",
    );
    leaves_plans(
        r#"{"disableFeatures":["shader-f16","wavefronts"]}"#,
        "disableFeatures: wavefronts",
        Ignored,
        "not a feature",
    );
    leaves_plans(
        r#"{"targetDevice":"apple-m1"}"#,
        "targetDevice = apple-m1",
        Ignored,
        "no per-device tuning",
    );
    // Turned off first, so a hint that needs subgroups is ignored.
    let s = gpu(Some(
        r#"{"disableFeatures":["subgroups"],"preferredKernels":{"rmsnorm":"f16_subgroup"}}"#,
    ));
    let n = note(&s, "preferredKernels.rmsnorm = f16_subgroup");
    assert_eq!(n.outcome, Ignored, "{n}");
}

#[test]
fn force_f32_accumulation_runs_exact_arithmetic_on_every_backend() {
    let json = r#"{"forceF32Accumulation":true,"preferredKernels":{"matmul":"q4_fused"}}"#;
    let mut s = gpu(Some(json));
    assert_eq!(
        s.engine.model.backend.limits().arithmetic,
        Arithmetic::Exact
    );
    assert_eq!(
        note(&s, "forceF32Accumulation = true").outcome,
        HintOutcome::Applied
    );
    // Exact arithmetic keeps f32 activations: the integer-dot hint cannot apply.
    let n = note(&s, "preferredKernels.matmul = q4_fused");
    assert_eq!(n.outcome, HintOutcome::Ignored, "{n}");
    let [_, decode] = plans(&mut s);
    assert!(!decode.iter().any(|l| int8(l)), "{decode:#?}");
    let w = worst(&logits(&mut s), &reference().cpu_exact);
    println!("forceF32Accumulation: {w:.2e} of the logit range from the CPU's exact logits");
    assert!(w <= REL_TOL, "{w}");
    // The CPU takes it too; its kernel hints are ignored: one kernel per op.
    let cpu = open(model(), BackendChoice::Cpu, Arithmetic::Fast, Some(json));
    assert_eq!(
        cpu.engine.model.backend.limits().arithmetic,
        Arithmetic::Exact
    );
    let n = note(&cpu, "preferredKernels.matmul = q4_fused");
    assert_eq!(n.outcome, HintOutcome::Ignored);
    assert!(n.detail.contains("this backend (cpu"), "{n}");
}

fn tritium(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .expect("runs")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The model converted to RDRR, with `hints` written into its manifest.
fn rdrr_with_hints(dir: &Path, hints: serde_json::Value) -> PathBuf {
    let out = dir.join("rdrr");
    stdout(&tritium(&[
        "convert",
        model(),
        out.to_str().expect("utf-8 path"),
    ]));
    let path = out.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
    manifest["runtimeOptimizations"] = hints;
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).expect("json")).expect("write");
    out
}

#[test]
fn manifest_hints_reach_the_plan_and_the_callers_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rdrr = rdrr_with_hints(
        dir.path(),
        serde_json::json!({
            "preferredKernels": {"matmul": "f32", "attention": "basic_f32"},
            "workgroupOverrides": {"matmul_f16": [64, 4, 1]},
        }),
    );
    let path = rdrr.to_str().expect("utf-8 path");
    let plan = stdout(&tritium(&[
        "run",
        path,
        "--plan",
        "--ids",
        "1,2,3",
        "--backend",
        "gpu",
    ]));
    for want in [
        "runtime hints:",
        "preferredKernels.matmul = f32: applied",
        "preferredKernels.attention = basic_f32: applied",
        "workgroupOverrides.matmul_f16 = [64, 4, 1]: ignored",
        "=> attention (hinted: preferredKernels.attention = basic_f32)",
        "=> matvec_q6_k (hinted: preferredKernels.matmul = f32)",
    ] {
        assert!(plan.contains(want), "{want} missing:\n{plan}");
    }
    assert!(!plan.lines().any(|l| int8(l.trim())), "{plan}");
    // The caller's hints win field by field; the model's others stay.
    let s = open(
        path,
        BackendChoice::Gpu,
        Arithmetic::Fast,
        Some(r#"{"preferredKernels":{"matmul":"q4_fused"}}"#),
    );
    assert!(s
        .hints
        .iter()
        .any(|n| n.hint == "preferredKernels.matmul = q4_fused"));
    assert!(!s
        .hints
        .iter()
        .any(|n| n.hint == "preferredKernels.matmul = f32"));
    assert_eq!(
        note(&s, "preferredKernels.attention = basic_f32").outcome,
        HintOutcome::Applied
    );
    // A generation prints each hint's fate on stderr.
    let o = tritium(&[
        "run",
        path,
        "--ids",
        "1,2,3",
        "--max-tokens",
        "2",
        "--temperature",
        "0",
        "--backend",
        "cpu",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("runtime hint preferredKernels.matmul = f32: ignored: this backend (cpu"),
        "{err}"
    );
}

#[test]
fn bad_hints_from_the_command_line_are_refused_naming_the_field() {
    let o = tritium(&[
        "run",
        model(),
        "--plan",
        "--backend",
        "cpu",
        "--hints",
        r#"{"attentionTier":"fast"}"#,
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("runtimeOptimizations.attentionTier"), "{err}");
    assert!(
        err.contains("tiled, streaming, basic") || err.contains("basic"),
        "{err}"
    );
}
