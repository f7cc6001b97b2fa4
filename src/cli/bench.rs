//! `tritium bench kernels`: kernel speed on this machine's GPU.

use std::process::ExitCode;

use crate::bench::kernels::{self, KernelBenchOptions};
use crate::gpu::{DeviceOptions, GpuContext};
use crate::quant::GgmlType;
use crate::Error;

pub fn kernels(
    quick: bool,
    json: bool,
    dtypes: &[String],
    large_mib: Option<u64>,
    calls: Option<u32>,
) -> Result<ExitCode, Error> {
    let dtypes = dtypes
        .iter()
        .map(|d| GgmlType::from_name(d).ok_or_else(|| Error::Usage(format!("unknown dtype {d}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let mut opts = KernelBenchOptions {
        quick,
        dtypes,
        ..KernelBenchOptions::default()
    };
    if let Some(m) = large_mib {
        opts.large_bytes = m << 20;
    }
    if let Some(c) = calls {
        opts.calls = c.max(1);
    }
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default()))?;
    let report = kernels::run(&ctx, &opts)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        print!("{}", report.render());
    }
    Ok(ExitCode::SUCCESS)
}
