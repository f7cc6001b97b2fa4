//! `tritium selftest`: every GPU kernel against the CPU reference on this machine's GPU.

use std::process::ExitCode;

/// Which backend `tritium selftest` checks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SelftestBackend {
    Gpu,
    Cuda,
}

/// The CUDA backend's ops against the CPU backend (`crates/engine/src/backend/check.rs`).
#[cfg(feature = "gds")]
pub fn run_cuda(prefix: &str, json: bool) -> Result<ExitCode, Error> {
    use crate::backend::{check, cuda::CudaBackend};
    let start = std::time::Instant::now();
    let probe = CudaBackend::new(0, 512)?;
    let device = probe.device().clone();
    drop(probe);
    let results = pollster::block_on(check::run(|| async { CudaBackend::new(0, 512) }, prefix));
    let failed = results.iter().filter(|r| !r.passed).count();
    if json {
        let v =
            serde_json::json!({ "device": device.name, "arch": device.arch(), "results": results });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        println!(
            "device: {} ({}), CUDA backend against the CPU backend",
            device.name,
            device.arch()
        );
        for r in &results {
            match &r.error {
                None => println!(
                    "ok    {:34} {:>9} values, worst difference {:.3} of bound",
                    r.name, r.values, r.worst
                ),
                Some(e) => println!("FAIL  {:34} {e}", r.name),
            }
        }
        println!("{:.1} s", start.elapsed().as_secs_f64());
    }
    println!("{} passed, {} failed", results.len() - failed, failed);
    Ok(if failed == 0 && !results.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(not(feature = "gds"))]
pub fn run_cuda(_prefix: &str, _json: bool) -> Result<ExitCode, Error> {
    Err(Error::Usage(
        "this build has no CUDA backend (feature `gds`)".into(),
    ))
}

use crate::cli::Error;
use crate::gpu::{selftest, DeviceOptions, GpuContext};

pub fn run(
    prefix: &str,
    json: bool,
    no_f16: bool,
    no_subgroups: bool,
    no_coop: bool,
) -> Result<ExitCode, Error> {
    let opts = DeviceOptions {
        allow_f16: !no_f16,
        allow_subgroups: !no_subgroups,
        allow_cooperative_matrix: !no_coop,
        ..DeviceOptions::default()
    };
    let ctx = pollster::block_on(GpuContext::new(&opts))?;
    let start = std::time::Instant::now();
    let results = pollster::block_on(selftest::run(&ctx, prefix));
    let failed = results.iter().filter(|r| !r.passed).count();
    if json {
        let v = serde_json::json!({ "adapter": ctx.adapter, "variant": format!("{:?}", ctx.variant()), "results": results });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        let a = &ctx.adapter;
        println!(
            "device: {} ({}, {}), {:?}, subgroup sizes {}..{}, cooperative matrices {}",
            a.name,
            a.backend,
            a.driver,
            ctx.variant(),
            ctx.features.subgroup_min_size,
            ctx.features.subgroup_max_size,
            if ctx.features.cooperative_matrix {
                "16x16x16 f16/f32"
            } else {
                "no"
            }
        );
        for r in &results {
            match &r.error {
                None => println!(
                    "ok    {:34} {:>9} values, worst error {:.3} of bound",
                    r.name, r.stats.elements, r.stats.worst_ratio
                ),
                Some(e) => println!("FAIL  {:34} {e}", r.name),
            }
        }
        println!("{:.1} s", start.elapsed().as_secs_f64());
    }
    println!("{} passed, {} failed", results.len() - failed, failed);
    Ok(if failed == 0 && !results.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
