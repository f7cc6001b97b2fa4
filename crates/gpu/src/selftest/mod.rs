//! Kernel self-tests: every GPU kernel against the CPU reference on seeded random inputs,
//! including sizes that are not multiples of the workgroup or block size, with outputs
//! poisoned beforehand so an unwritten element fails.
//!
//! The checks are library code (async, because readback is asynchronous in the browser), so
//! the very same suite runs natively (`tests/gpu_kernels.rs`, on lavapipe in CI), in headless
//! Chromium on WebGPU, and on a user's own GPU. Each family of kernels contributes its checks;
//! a check of a weight kernel runs for every dtype of the registry that has the kernel
//! ([`PerDtype`]), so a new dtype is checked with no list to extend.

mod attention;
mod harness;
mod kquants;
mod legacy;
mod norm_bitlinear;
mod ops;
mod q8;
mod q8_norm;
mod ternary;

pub use harness::*;

use std::borrow::Cow;
use std::sync::OnceLock;

use super::GpuContext;
use crate::quant::{dtypes, GgmlType};

/// What a passing check measured.
pub struct SuiteCheck {
    pub name: &'static str,
    run: Run,
}

/// A check of the suite: a [`Check`], or a [`PerDtype`] check of one dtype.
enum Run {
    Plain(for<'a> fn(&'a GpuContext) -> CheckFuture<'a>),
    Dtype(
        for<'a> fn(&'a GpuContext, GgmlType) -> CheckFuture<'a>,
        GgmlType,
    ),
}

impl SuiteCheck {
    /// Start the check on `ctx`.
    pub fn run<'a>(&self, ctx: &'a GpuContext) -> CheckFuture<'a> {
        match self.run {
            Run::Plain(f) => f(ctx),
            Run::Dtype(f, t) => f(ctx, t),
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckResult {
    pub name: String,
    pub passed: bool,
    pub stats: Stats,
    pub error: Option<String>,
}

/// Every family's checks: its own, then its checks per dtype.
const FAMILIES: [(&[Check], &[PerDtype]); 7] = [
    (&[], legacy::PER_DTYPE),
    (ternary::CHECKS, ternary::PER_DTYPE),
    (norm_bitlinear::CHECKS, &[]),
    (&[], kquants::PER_DTYPE),
    (q8::CHECKS, q8::PER_DTYPE),
    (&[], q8_norm::PER_DTYPE),
    (ops::CHECKS, &[]),
];

/// The suite in order, each check's name and how to run it.
fn suite() -> impl Iterator<Item = (Cow<'static, str>, Run)> {
    FAMILIES.into_iter().flat_map(|(checks, per_dtype)| {
        let plain = checks
            .iter()
            .map(|c| (Cow::Borrowed(c.name), Run::Plain(c.run)));
        let by_dtype = per_dtype.iter().flat_map(|p| {
            dtypes::all()
                .iter()
                .map(|d| d.ggml())
                .filter(|&t| (p.applies)(t))
                .map(|t| {
                    let name = format!("{}{}", p.prefix, t.name().to_lowercase());
                    (Cow::Owned(name), Run::Dtype(p.run, t))
                })
        });
        plain.chain(by_dtype)
    })
}

/// Every check of every family (listed once, on first use).
pub fn all_checks() -> &'static [SuiteCheck] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    static ALL: OnceLock<Vec<SuiteCheck>> = OnceLock::new();
    ALL.get_or_init(|| {
        let names = NAMES.get_or_init(|| suite().map(|(name, _)| name.into_owned()).collect());
        suite()
            .zip(names.iter())
            .map(|((_, run), name)| SuiteCheck {
                name: name.as_str(),
                run,
            })
            .collect()
    })
}

/// Run the checks whose name starts with `prefix` ("" for all).
pub async fn run(ctx: &GpuContext, prefix: &str) -> Vec<CheckResult> {
    let mut out = Vec::new();
    for check in all_checks().iter().filter(|c| c.name.starts_with(prefix)) {
        let r = check.run(ctx).await;
        out.push(match r {
            Ok(stats) => CheckResult {
                name: check.name.into(),
                passed: true,
                stats,
                error: None,
            },
            Err(e) => CheckResult {
                name: check.name.into(),
                passed: false,
                stats: Stats::default(),
                error: Some(e),
            },
        });
    }
    out
}
