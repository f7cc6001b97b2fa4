//! Kernel self-tests: every GPU kernel against the CPU reference on seeded random inputs,
//! including sizes that are not multiples of the workgroup or block size, with outputs
//! poisoned beforehand so an unwritten element fails.
//!
//! The checks are library code (async, because readback is asynchronous in the browser), so
//! the very same suite runs natively (`tests/gpu_kernels.rs`, on lavapipe in CI), in headless
//! Chromium on WebGPU, and on a user's own GPU. Each family of kernels contributes its checks.

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

use std::future::Future;
use std::pin::Pin;

use super::GpuContext;

/// What a passing check measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    /// Output elements compared.
    pub elements: u64,
    /// The largest |error| / allowed error over all elements (at most 1 when passing).
    pub worst_ratio: f64,
}

impl Stats {
    pub fn merge(&mut self, other: Stats) {
        self.elements += other.elements;
        self.worst_ratio = self.worst_ratio.max(other.worst_ratio);
    }
}

pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<Stats, String>> + 'a>>;

/// One named check.
pub struct Check {
    /// `family/kernel`, e.g. `legacy/matvec_q4_0`.
    pub name: &'static str,
    pub run: for<'a> fn(&'a GpuContext) -> CheckFuture<'a>,
}

/// The outcome of one check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckResult {
    pub name: String,
    pub passed: bool,
    pub stats: Stats,
    pub error: Option<String>,
}

/// Every check of every family.
pub fn all_checks() -> Vec<&'static Check> {
    legacy::CHECKS
        .iter()
        .chain(ternary::CHECKS)
        .chain(norm_bitlinear::CHECKS)
        .chain(kquants::CHECKS)
        .chain(q8::CHECKS)
        .chain(q8_norm::CHECKS)
        .chain(ops::CHECKS)
        .collect()
}

/// Run the checks whose name starts with `prefix` ("" for all).
pub async fn run(ctx: &GpuContext, prefix: &str) -> Vec<CheckResult> {
    let mut out = Vec::new();
    for check in all_checks()
        .into_iter()
        .filter(|c| c.name.starts_with(prefix))
    {
        let r = (check.run)(ctx).await;
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
