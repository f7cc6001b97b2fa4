//! `tritium bench kernels`: kernel speed on this machine's GPU.

use std::process::ExitCode;

use crate::bench::kernels::{self, KernelBenchOptions};
use crate::cli::Error;
use crate::gpu::{DeviceOptions, GpuContext};
use crate::quant::GgmlType;

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

/// `tritium bench generate`.
pub fn generate(
    backend: super::selftest::SelftestBackend,
    model: &std::path::Path,
    opts: &crate::bench::generate::GenerateBenchOptions,
    json: bool,
) -> Result<ExitCode, Error> {
    let path = crate::session::resolve(model, &crate::session::OpenOptions::default())?;
    let opened = crate::session::open_path(&path)?;
    if backend == super::selftest::SelftestBackend::Cuda {
        return generate_cuda(model, &opened, opts, json);
    }
    if opts.vram_budget.is_some() {
        return Err(Error::Usage(
            "--vram-budget applies to --backend cuda".into(),
        ));
    }
    let ctx = pollster::block_on(GpuContext::new(&DeviceOptions::default()))?;
    let r = crate::bench::generate::run(ctx, &opened, opts).map_err(|e| e.at(model))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        println!(
            "{} on {}, a context of {} tokens",
            model.display(),
            r.adapter,
            r.context
        );
        println!(
            "prefill  {:>6} tokens  {:>9.1} ms  {:>9.1} tokens/s  (time to first token {:.1} ms)",
            r.prompt_tokens, r.prefill_ms, r.prefill_tokens_per_s, r.time_to_first_token_ms
        );
        println!(
            "decode   {:>6} tokens  {:>9.1} ms  {:>9.1} tokens/s  = {:.1}% of the limit {:.0} tokens/s",
            r.decode_tokens,
            r.decode_ms,
            r.decode_tokens_per_s,
            100.0 * r.fraction_of_limit,
            r.limit_tokens_per_s
        );
        println!(
            "decode sampled (llama.cpp's default sampler, drawn on the host): {:.1} tokens/s \
             ({:.1} with each pass encoded after its token is drawn)",
            r.decode_sampled_tokens_per_s, r.decode_sampled_unprepared_tokens_per_s
        );
        println!(
            "decode with every RMSNorm in its own dispatch: {:.1} tokens/s; with no fusions: \
             {:.1}; f32 matvecs: {:.1}",
            r.decode_norm_dispatches_tokens_per_s,
            r.decode_unfused_tokens_per_s,
            r.decode_f32_matvec_tokens_per_s
        );
        println!(
            "limit: {} weight bytes per token at {:.0} GB/s copy bandwidth; GPU memory {}",
            r.bytes_per_token,
            r.copy_gb_per_s,
            super::human_bytes(r.gpu_bytes)
        );
        println!(
            "host per pass: record {:.0} us, submit {:.0} us, wait {:.0} us",
            r.host.record_us_per_pass, r.host.submit_us_per_pass, r.host.wait_us_per_pass
        );
        print_profiles(&r.prefill_profile, &r.profile, "timestamp queries");
    }
    Ok(ExitCode::SUCCESS)
}

/// `--profile`'s tables: GPU time per op of the prefill and of the decode.
fn print_profiles(
    prefill: &Option<Vec<crate::bench::generate::ProfileRow>>,
    decode: &Option<Vec<crate::bench::generate::ProfileRow>>,
    how: &str,
) {
    let print = |what: &str, rows: &[crate::bench::generate::ProfileRow]| {
        let total: f64 = rows.iter().map(|p| p.us_per_token).sum();
        println!("GPU time per {what} by op ({how}, {total:.1} us in all):");
        println!(
            "  {:<44} {:>8} {:>10} {:>10} {:>6}",
            "op", "calls", "us/call", "us/token", "share"
        );
        for p in rows {
            println!(
                "  {:<44} {:>8.3} {:>10.2} {:>10.2} {:>5.1}%",
                p.op,
                p.calls_per_token,
                p.us_per_call,
                p.us_per_token,
                100.0 * p.us_per_token / total
            );
        }
    };
    if let Some(rows) = prefill {
        print("prompt token of the prefill", rows);
    }
    if let Some(rows) = decode {
        print("decoded token", rows);
    }
}

/// `tritium synth`.
pub fn synth(
    kind: &str,
    out: &std::path::Path,
    layers: Option<u64>,
    vocab: Option<&std::path::Path>,
) -> Result<ExitCode, Error> {
    let spec = crate::bench::synth::SynthSpec::named(kind).ok_or_else(|| {
        Error::Usage(format!(
            "unknown synthetic model {kind} (bitnet-2b4t, llama-1b-q4k, qwen3-0.6b-q4k or gemma3-1b-q4k)"
        ))
    })?;
    let vocab = match vocab {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| Error::Io {
                path: p.display().to_string(),
                message: e.to_string(),
            })?;
            Some(
                crate::formats::gguf::GgufFile::read(&bytes)
                    .map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?,
            )
        }
        None => None,
    };
    let bytes = crate::bench::synth::write(&spec, layers, vocab.as_ref(), out)?;
    eprintln!("wrote {} ({})", out.display(), super::human_bytes(bytes));
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "gds")]
fn generate_cuda(
    model: &std::path::Path,
    opened: &crate::session::OpenedModel<crate::storage::DirFiles>,
    opts: &crate::bench::generate::GenerateBenchOptions,
    json: bool,
) -> Result<ExitCode, Error> {
    let r = crate::bench::generate::run_cuda(opened, opts).map_err(|e| e.at(model))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        println!(
            "{} on {} ({}), CUDA, a context of {} tokens",
            model.display(),
            r.device,
            r.arch,
            r.context
        );
        println!(
            "prefill  {:>6} tokens  {:>9.1} ms  {:>9.1} tokens/s  (time to first token {:.1} ms)",
            r.prompt_tokens, r.prefill_ms, r.prefill_tokens_per_s, r.time_to_first_token_ms
        );
        println!(
            "decode   {:>6} tokens  {:>9.1} ms  {:>9.1} tokens/s  (no graphs {:.1}, sampled on the host {:.1})",
            r.decode_tokens,
            r.decode_ms,
            r.decode_tokens_per_s,
            r.decode_no_graphs_tokens_per_s,
            r.decode_sampled_tokens_per_s
        );
        println!(
            "memory: {:.1} MiB allocated by the backend, {:.1} MiB of the device in use",
            r.backend_bytes as f64 / 1048576.0,
            r.device_bytes_used as f64 / 1048576.0
        );
        if let Some(s) = &r.streaming {
            println!(
                "blocks from storage: {}; {:.1} MiB on the device for blocks, {:.1} MiB read per decoded token",
                s.schedule,
                s.block_bytes_on_device as f64 / 1048576.0,
                s.bytes_read_per_decoded_token / 1048576.0
            );
            println!(
                "reads: {}; {:.2} ms reading and {:.2} ms waiting for slots per pass, {:.0} MB/s while reading (decode limit {:.1} tokens/s)",
                s.reader,
                s.read_s_per_pass * 1e3,
                s.slot_wait_s_per_pass * 1e3,
                s.read_bytes_per_s / 1e6,
                s.read_limit_tokens_per_s
            );
            for (l, n, read_ms, wait_ms) in &s.blocks {
                println!(
                    "  block {l:>3}: {n} reads, {read_ms:.2} ms each, {wait_ms:.3} ms slot wait"
                );
            }
        }
        print_profiles(&r.prefill_profile, &r.profile, "CUDA events");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "gds"))]
fn generate_cuda(
    _model: &std::path::Path,
    _opened: &crate::session::OpenedModel<crate::storage::DirFiles>,
    _opts: &crate::bench::generate::GenerateBenchOptions,
    _json: bool,
) -> Result<ExitCode, Error> {
    Err(Error::Usage(
        "this build has no CUDA backend (feature `gds`)".into(),
    ))
}
