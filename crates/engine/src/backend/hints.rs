//! A model's runtime hints (the RDRR manifest's `runtimeOptimizations`, or the caller's) as
//! the session and the backends take them. The seed's precedence rules hold: the device's
//! capabilities always win (a hint never asks for a kernel the device lacks), hints are
//! advisory (one that cannot apply is ignored, with the reason), and no hint changes what a
//! pass computes beyond the rounding of the kernel it picks: every kernel a hint can pick is
//! one the backend already runs somewhere, checked against the CPU by the self-tests.
//!
//! Each hint leaves a [`HintNote`]: `tritium run` prints them (to stderr, or with the plan under
//! `--plan`), the browser's `diagnose()` returns them.

pub use crate::formats::rdrr::RuntimeOptimizations;

/// What became of a hint.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HintOutcome {
    /// It changed the kernels chosen.
    Applied,
    /// What it asks for is what runs anyway here.
    Default,
    /// It cannot apply here (the detail says why); the backend chose as it would without it.
    Ignored,
}

/// One hint and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HintNote {
    /// The hint as the manifest writes it: `preferredKernels.matmul = f32`.
    pub hint: String,
    pub outcome: HintOutcome,
    /// What it changed, or why it changed nothing.
    pub detail: String,
}

impl HintNote {
    pub fn new(hint: impl Into<String>, outcome: HintOutcome, detail: impl Into<String>) -> Self {
        HintNote {
            hint: hint.into(),
            outcome,
            detail: detail.into(),
        }
    }

    pub fn applied(hint: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(hint, HintOutcome::Applied, detail)
    }

    pub fn default(hint: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(hint, HintOutcome::Default, detail)
    }

    pub fn ignored(hint: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(hint, HintOutcome::Ignored, detail)
    }
}

impl std::fmt::Display for HintNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcome = match self.outcome {
            HintOutcome::Applied => "applied",
            HintOutcome::Default => "already so",
            HintOutcome::Ignored => "ignored",
        };
        write!(f, "{}: {outcome}: {}", self.hint, self.detail)
    }
}

/// The hints of `hints` that pick kernels (the backends' part: `preferredKernels`,
/// `workgroupOverrides`, `disableFeatures`, `attentionTier`), each as the manifest writes it.
/// `forceF32Accumulation` and `targetDevice` are the session's.
pub fn kernel_hints(hints: &RuntimeOptimizations) -> Vec<String> {
    let k = &hints.preferred_kernels;
    let mut v = Vec::new();
    let mut kernel = |op: &str, name: Option<&str>| {
        if let Some(name) = name {
            v.push(format!("preferredKernels.{op} = {name}"));
        }
    };
    kernel("matmul", k.matmul.map(|x| x.as_str()));
    kernel("attention", k.attention.map(|x| x.as_str()));
    kernel("rmsnorm", k.rmsnorm.map(|x| x.as_str()));
    kernel("dequant", k.dequant.map(|x| x.as_str()));
    kernel("softmax", k.softmax.map(|x| x.as_str()));
    for (name, [x, y, z]) in &hints.workgroup_overrides {
        v.push(format!("workgroupOverrides.{name} = [{x}, {y}, {z}]"));
    }
    for f in &hints.disable_features {
        v.push(format!("disableFeatures: {}", f.as_str()));
    }
    if let Some(t) = hints.attention_tier {
        v.push(format!("attentionTier = {t}"));
    }
    v
}

/// Every kernel hint ignored by a backend (`who`, its [`super::Backend::describe`]) that has
/// one kernel per op and so nothing for a hint to choose between.
pub fn ignored_by(hints: &RuntimeOptimizations, who: &str, notes: &mut Vec<HintNote>) {
    for hint in kernel_hints(hints) {
        notes.push(HintNote::ignored(
            hint,
            format!("this backend ({who}) has no choice of kernels for hints to steer"),
        ));
    }
}
