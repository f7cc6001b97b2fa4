//! `tritium bench generate <model>`: prefill speed at a long prompt, decode speed over many
//! tokens, time to first token and GPU memory, with the decode figure as a fraction of the
//! physical limit: (bytes of weights one token must read) / (copy bandwidth measured in the
//! same run).

use super::kernels::copy_bandwidth;
use crate::backend::gpu::{GpuBackend, Rules};
use crate::backend::Backend;
use crate::cli::Error;
use crate::engine::{Engine, GenerateOptions, TokenControl};
use crate::formats::gguf::GgufFile;
use crate::gpu::GpuContext;
use crate::model::{ModelConfig, TensorSource};
use crate::sampling::SamplerConfig;
use crate::session::{ModelMeta, OpenOptions};

/// What to measure.
#[derive(Clone, Debug)]
pub struct GenerateBenchOptions {
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    /// Most tokens per prefill pass.
    pub batch: usize,
    /// KV cache length (`None`: prompt + decode tokens).
    pub context: Option<usize>,
    /// Untimed runs first (pipelines compiled, tapes built, clocks up).
    pub warmup: bool,
    /// After the timed runs, time every op of the decode passes on the GPU (timestamp
    /// queries around each op; a separate, slower run).
    pub profile: bool,
    /// [`crate::session::Arithmetic::Exact`] (the f32-matvec, unfused and sampled variants
    /// then differ from the main figure only by their fusions and sampling).
    pub exact: bool,
    /// CUDA: a GPU memory budget (blocks beyond it read from storage when used).
    pub vram_budget: Option<crate::session::VramBudget>,
    /// LoRA adapters applied while measuring, with their scales.
    pub lora: Vec<(std::path::PathBuf, f32)>,
}

/// Load `source` on `backend` with `opts`'s adapters applied: the model the benchmark runs.
fn load_model<B: crate::backend::Backend, S: ModelMeta + TensorSource>(
    source: &S,
    backend: B,
    options: &OpenOptions,
    opts: &GenerateBenchOptions,
) -> Result<crate::model::Model<B>, Error> {
    let mut session = crate::session::load(source, backend, options)?;
    let mut active = Vec::new();
    for (path, scale) in &opts.lora {
        active.push((session.load_adapter(path, options)?, *scale));
    }
    session.engine.set_adapters(&active)?;
    Ok(session.engine.model)
}

/// The figures (`--json` prints this).
#[derive(Clone, Debug, serde::Serialize)]
pub struct GenerateBenchReport {
    pub adapter: String,
    pub arch: String,
    /// KV cache length the model was loaded with.
    pub context: usize,
    pub prompt_tokens: usize,
    pub prefill_ms: f64,
    pub prefill_tokens_per_s: f64,
    /// Prefill plus sampling the first token (greedy, top-1 read back).
    pub time_to_first_token_ms: f64,
    pub decode_tokens: usize,
    pub decode_ms: f64,
    pub decode_tokens_per_s: f64,
    /// The same decode with no fusions: integer-dot inputs quantized in their own dispatch
    /// rather than in the RMSNorm before them, RMSNorm, quantization, BitLinear products,
    /// gating and residual adds as separate dispatches, RoPE in its own.
    pub decode_unfused_tokens_per_s: f64,
    /// The same decode with the f32-activation matvecs everywhere (no integer-dot kernels).
    pub decode_f32_matvec_tokens_per_s: f64,
    /// The same decode with every RMSNorm in a dispatch of its own, the other fusions on:
    /// no residual add writes the next norm's record (`GpuBackend::set_fuse_add_norm`).
    pub decode_norm_dispatches_tokens_per_s: f64,
    /// The same decode sampled with llama.cpp's default sampler (temperature 0.8, top-k 40,
    /// top-p 0.95, min-p 0.05; a fixed seed), as chat decodes: each token is drawn on the
    /// host, so passes cannot be chained on the device; the next pass is encoded while the
    /// current one runs instead.
    pub decode_sampled_tokens_per_s: f64,
    /// The same sampled decode with each pass encoded only once its token is drawn.
    pub decode_sampled_unprepared_tokens_per_s: f64,
    /// Bytes the backend holds (weights, activations, KV cache): the peak, since nothing is
    /// allocated after the first passes.
    pub gpu_bytes: u64,
    /// Weight bytes one decoded token reads (every matrix once; the LM head included).
    pub bytes_per_token: u64,
    pub copy_gb_per_s: f64,
    /// `copy_gb_per_s / bytes_per_token`: decode tokens/s if only weight reads cost time.
    pub limit_tokens_per_s: f64,
    pub fraction_of_limit: f64,
    /// Where the host's time went per pass (prefill and decode passes together).
    pub host: HostTimes,
    /// GPU time per op of a decode pass (`--profile`), largest first.
    pub profile: Option<Vec<ProfileRow>>,
    /// GPU time per op of the prefill (`--profile`), per prompt token, largest first.
    pub prefill_profile: Option<Vec<ProfileRow>>,
}

/// One op label of the decode profile.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProfileRow {
    pub op: String,
    pub calls_per_token: f64,
    pub us_per_call: f64,
    pub us_per_token: f64,
}

/// A profile's rows (label, calls, seconds) per token of `tokens`.
fn profile_rows(
    rows: impl IntoIterator<Item = (String, u64, f64)>,
    tokens: usize,
) -> Vec<ProfileRow> {
    let tokens = tokens.max(1) as f64;
    rows.into_iter()
        .map(|(op, calls, seconds)| ProfileRow {
            op,
            calls_per_token: calls as f64 / tokens,
            us_per_call: seconds / calls.max(1) as f64 * 1e6,
            us_per_token: seconds / tokens * 1e6,
        })
        .collect()
}

/// Host time per submitted pass, microseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HostTimes {
    /// Recording the pass's ops into a command encoder.
    pub record_us_per_pass: f64,
    /// `queue.submit`.
    pub submit_us_per_pass: f64,
    /// Waiting for the readback (GPU time not hidden behind recording).
    pub wait_us_per_pass: f64,
}

/// Weight bytes a decode step reads: every 2-D tensor, except an embedding that is only
/// gathered (a separate `output.weight` exists).
pub fn bytes_per_token(file: &GgufFile) -> u64 {
    let untied = file.tensor("output.weight").is_some();
    file.tensors
        .iter()
        .filter(|t| t.dims.len() == 2 && !(untied && t.name == "token_embd.weight"))
        .map(|t| t.n_bytes)
        .sum()
}

/// Greedy, no stop ids: exactly `max_tokens` tokens.
fn engine_options(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplerConfig::greedy(),
        stop_ids: Vec::new(),
    }
}

/// Run the benchmark on `ctx` (the model is loaded with a context of prompt + decode tokens).
pub fn run<S: ModelMeta + TensorSource>(
    ctx: GpuContext,
    source: &S,
    opts: &GenerateBenchOptions,
) -> Result<GenerateBenchReport, Error> {
    let file = source.header()?;
    let config = ModelConfig::from_gguf(file)?;
    let copy_bytes = (256u64 << 20).min(ctx.max_binding_bytes()) & !15;
    let copy = copy_bandwidth(&ctx, copy_bytes, 20, 3)?.best();
    let adapter = format!("{} ({})", ctx.adapter.name, ctx.adapter.backend);
    let backend = GpuBackend::new(ctx, opts.batch.max(1))?;
    let total = opts.prompt_tokens + opts.decode_tokens;
    let context = opts.context.unwrap_or(total);
    if context < total {
        return Err(Error::Usage(format!(
            "a context of {context} tokens cannot hold {} prompt and {} decoded tokens",
            opts.prompt_tokens, opts.decode_tokens
        )));
    }
    let options = OpenOptions {
        context: Some(context),
        batch: opts.batch.max(1),
        arithmetic: match opts.exact {
            true => crate::session::Arithmetic::Exact,
            false => crate::session::Arithmetic::Fast,
        },
        ..OpenOptions::default()
    };
    let model = load_model(source, backend, &options, opts)?;
    // Token ids spread over the vocabulary (the values do not change the work).
    let prompt: Vec<u32> = (0..opts.prompt_tokens)
        .map(|i| ((i as u64 * 7919 + 13) % config.n_vocab as u64) as u32)
        .collect();
    let mut engine = Engine::new(model);
    // Greedy, no stop ids: exactly `decode_tokens` passes after the prefill (which gives the
    // first token), the way `tritium run` decodes (passes submitted ahead on the device).
    let generate = |engine: &mut Engine<GpuBackend>, max_tokens| {
        let o = engine_options(max_tokens);
        pollster::block_on(engine.generate(&prompt, &o, |_| TokenControl::Continue))
    };
    let run = |engine: &mut Engine<GpuBackend>, decode: usize| {
        engine.reset();
        generate(engine, decode + 1)
    };
    if opts.warmup {
        run(&mut engine, opts.decode_tokens.min(16))?;
    }
    let before = engine.model.backend.timings();
    let g = run(&mut engine, opts.decode_tokens)?;
    let after = engine.model.backend.timings();
    let u = &g.usage;
    let (prefill_ms, ttft, decode_ms) = (u.prefill_ms, u.time_to_first_token_ms, u.decode_ms);
    let passes = (after.passes - before.passes).max(1) as f64;
    let host = HostTimes {
        record_us_per_pass: (after.record_s - before.record_s) / passes * 1e6,
        submit_us_per_pass: (after.submit_s - before.submit_s) / passes * 1e6,
        wait_us_per_pass: (after.wait_s - before.wait_s) / passes * 1e6,
    };
    // The same decode through the other decode paths, for comparison (then back).
    let int_dot = engine.model.backend.int_dot();
    let other = |engine: &mut Engine<GpuBackend>, int_dot, fuse| {
        let b = &mut engine.model.backend;
        // Unfused: every fusion off but the pairing of products (one kernel either way) and
        // the sharing of quantized inputs and of prefill products' f16 inputs.
        b.set_rules(match fuse {
            true => Rules::all(int_dot),
            false => Rules {
                pair_q8: true,
                shared_records: true,
                norm_quantize: true,
                share_f16_input: true,
                ..Rules::none(int_dot)
            },
        });
        b.set_combine_in_attend(fuse);
        engine.model.clear_plans();
        if opts.warmup {
            run(engine, opts.decode_tokens.min(16))?;
        }
        run(engine, opts.decode_tokens).map(|g| g.usage.decode_tokens_per_s)
    };
    let sampled = |engine: &mut Engine<GpuBackend>, prepare: bool| {
        engine.set_prepare_ahead(prepare);
        let run = |engine: &mut Engine<GpuBackend>, max_tokens: usize| {
            engine.reset();
            let o = GenerateOptions {
                max_tokens,
                sampling: SamplerConfig::default(),
                stop_ids: Vec::new(),
            };
            pollster::block_on(engine.generate(&prompt, &o, |_| TokenControl::Continue))
        };
        if opts.warmup {
            run(engine, opts.decode_tokens.min(16))?;
        }
        let tps = run(engine, opts.decode_tokens + 1)?
            .usage
            .decode_tokens_per_s;
        engine.set_prepare_ahead(true);
        Ok::<f64, Error>(tps)
    };
    let sampled_unprepared_tps = sampled(&mut engine, false)?;
    let sampled_tps = sampled(&mut engine, true)?;
    let norm_dispatch_tps = {
        engine.model.backend.set_fuse_add_norm(false);
        engine.model.clear_plans();
        if opts.warmup {
            run(&mut engine, opts.decode_tokens.min(16))?;
        }
        let tps = run(&mut engine, opts.decode_tokens)?
            .usage
            .decode_tokens_per_s;
        engine.model.backend.set_fuse_add_norm(true);
        engine.model.clear_plans();
        tps
    };
    let unfused_tps = other(&mut engine, true, false)?;
    let f32_tps = other(&mut engine, false, true)?;
    engine.model.backend.set_int_dot(int_dot);
    engine.model.clear_plans();
    let per_token = |rows: Vec<(String, crate::backend::profile::OpTime)>, tokens: usize| {
        profile_rows(
            rows.into_iter().map(|(op, t)| (op, t.calls, t.seconds)),
            tokens,
        )
    };
    let (profile, prefill_profile) = if opts.profile && engine.model.backend.enable_profile() {
        // The prefill alone (its pass gives the first token), then the same prompt again: one
        // pass for its last token (the rest is cached) and the decode passes, each op timed.
        engine.reset();
        engine.model.backend.clear_profile();
        generate(&mut engine, 1)?;
        let prefill = engine.model.backend.profile();
        engine.model.backend.clear_profile();
        generate(&mut engine, opts.decode_tokens + 1)?;
        let decode = engine.model.backend.profile();
        (
            decode.map(|rows| per_token(rows, opts.decode_tokens + 1)),
            prefill.map(|rows| per_token(rows, opts.prompt_tokens)),
        )
    } else {
        (None, None)
    };
    let model = &engine.model;
    let bpt = bytes_per_token(file);
    let decode_tps = u.decode_tokens_per_s;
    let limit = copy * 1e9 / bpt as f64;
    Ok(GenerateBenchReport {
        adapter,
        arch: config.arch_name,
        context,
        prompt_tokens: opts.prompt_tokens,
        prefill_ms,
        prefill_tokens_per_s: opts.prompt_tokens as f64 / (prefill_ms / 1e3),
        time_to_first_token_ms: ttft,
        decode_tokens: u.generated_tokens.saturating_sub(1),
        decode_ms,
        decode_tokens_per_s: decode_tps,
        decode_unfused_tokens_per_s: unfused_tps,
        decode_f32_matvec_tokens_per_s: f32_tps,
        decode_norm_dispatches_tokens_per_s: norm_dispatch_tps,
        decode_sampled_tokens_per_s: sampled_tps,
        decode_sampled_unprepared_tokens_per_s: sampled_unprepared_tps,
        gpu_bytes: model.backend.bytes_used(),
        bytes_per_token: bpt,
        copy_gb_per_s: copy,
        limit_tokens_per_s: limit,
        fraction_of_limit: decode_tps / limit,
        host,
        profile,
        prefill_profile,
    })
}

/// The CUDA backend's figures (`bench generate --backend cuda`).
#[cfg(feature = "gds")]
#[derive(Clone, Debug, serde::Serialize)]
pub struct CudaGenerateReport {
    pub device: String,
    pub arch: String,
    pub context: usize,
    /// Opening the model and placing its weights on the device (file reads included), ms.
    pub load_ms: f64,
    pub prompt_tokens: usize,
    pub prefill_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub time_to_first_token_ms: f64,
    pub decode_tokens: usize,
    pub decode_ms: f64,
    /// Greedy, each pass chained on the device (its token taken from the pass before).
    pub decode_tokens_per_s: f64,
    /// The same decode with every op launched on its own (no CUDA graphs).
    pub decode_no_graphs_tokens_per_s: f64,
    /// llama.cpp's default sampler, drawn on the host.
    pub decode_sampled_tokens_per_s: f64,
    /// Bytes the backend allocated (weights, activations, KV cache, scratch).
    pub backend_bytes: u64,
    /// Device memory in use after the runs, by the driver's count (all of this process:
    /// context, kernels, cuBLAS workspace included).
    pub device_bytes_used: u64,
    pub bytes_per_token: u64,
    /// Decode tokens/s if only the weight reads at the device's peak bandwidth cost time
    /// (`--peak-gbs`, 0: not given).
    pub limit_tokens_per_s: f64,
    /// GPU time per kernel of the decode passes (`--profile`, launched op by op), largest
    /// first.
    pub profile: Option<Vec<ProfileRow>>,
    /// GPU time per kernel of the prefill (`--profile`), per prompt token, largest first.
    pub prefill_profile: Option<Vec<ProfileRow>>,
    /// Under `--vram-budget`: the schedule, the GPU bytes it holds for the blocks, and the
    /// bytes read from storage per decoded token.
    pub streaming: Option<StreamingReport>,
}

/// What streaming blocks from storage did in `bench generate --vram-budget`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StreamingReport {
    pub schedule: String,
    /// cuFile, or staged through page-locked memory (and why).
    pub reader: String,
    pub block_bytes_on_device: u64,
    pub bytes_read_per_decoded_token: f64,
    /// Seconds per pass the host spent reading streamed blocks, and waiting for the GPU to
    /// release a slot before a read (the measured greedy run: its prompt pass and decode
    /// passes together, per pass).
    pub read_s_per_pass: f64,
    pub slot_wait_s_per_pass: f64,
    /// Bytes per second while reading (bytes read over read time).
    pub read_bytes_per_s: f64,
    /// Decode tokens/s if the reads were the only cost: `read_bytes_per_s` over the bytes read
    /// per token.
    pub read_limit_tokens_per_s: f64,
    /// Per streamed block over the measured run: its index, reads, mean read and slot-wait
    /// milliseconds.
    pub blocks: Vec<(usize, u64, f64, f64)>,
}

/// `bench generate --backend cuda`: prefill and decode on the CUDA backend, after a warm-up.
#[cfg(feature = "gds")]
pub fn run_cuda<S: ModelMeta + TensorSource>(
    source: &S,
    opts: &GenerateBenchOptions,
) -> Result<CudaGenerateReport, Error> {
    use crate::backend::cuda::CudaBackend;
    let file = source.header()?;
    let config = ModelConfig::from_gguf(file)?;
    let bytes_per_token = bytes_per_token(file);
    let mut backend = CudaBackend::new(0, opts.batch.max(1))?;
    backend.set_vram_budget(opts.vram_budget);
    let info = backend.device().clone();
    let total = opts.prompt_tokens + opts.decode_tokens;
    let context = opts.context.unwrap_or(total);
    if context < total {
        return Err(Error::Usage(format!(
            "a context of {context} tokens cannot hold {} prompt and {} decoded tokens",
            opts.prompt_tokens, opts.decode_tokens
        )));
    }
    let options = OpenOptions {
        context: Some(context),
        batch: opts.batch.max(1),
        arithmetic: match opts.exact {
            true => crate::session::Arithmetic::Exact,
            false => crate::session::Arithmetic::Fast,
        },
        ..OpenOptions::default()
    };
    let load_start = std::time::Instant::now();
    let model = load_model(source, backend, &options, opts)?;
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;
    let prompt: Vec<u32> = (0..opts.prompt_tokens)
        .map(|i| ((i as u64 * 7919 + 13) % config.n_vocab as u64) as u32)
        .collect();
    let mut engine = Engine::new(model);
    let run = |engine: &mut Engine<CudaBackend>, max_tokens: usize, sampling: SamplerConfig| {
        engine.reset();
        let o = GenerateOptions {
            max_tokens,
            sampling,
            stop_ids: Vec::new(),
        };
        pollster::block_on(engine.generate(&prompt, &o, |_| TokenControl::Continue))
    };
    if opts.warmup {
        run(
            &mut engine,
            opts.decode_tokens.min(16),
            SamplerConfig::greedy(),
        )?;
    }
    let read_before = engine.model.backend.streaming().map_or(0, |s| s.bytes_read);
    engine.model.backend.reset_stream_timing();
    let g = run(&mut engine, opts.decode_tokens + 1, SamplerConfig::greedy())?;
    let u = g.usage.clone();
    let streaming = engine.model.backend.streaming().map(|s| {
        // The run's prompt pass reads every streamed block once too.
        let passes = u.generated_tokens.max(1) as f64;
        let read_s: f64 = s.blocks.iter().map(|b| b.1.read_s).sum();
        let wait_s: f64 = s.blocks.iter().map(|b| b.1.slot_wait_s).sum();
        let per_token = (s.bytes_read - read_before) as f64 / passes;
        let rate = match read_s > 0.0 {
            true => (s.bytes_read - read_before) as f64 / read_s,
            false => 0.0,
        };
        let ms = |x: f64, n: u64| 1e3 * x / n.max(1) as f64;
        StreamingReport {
            schedule: s.schedule,
            reader: s.reader,
            block_bytes_on_device: s.block_bytes_on_device,
            bytes_read_per_decoded_token: per_token,
            read_s_per_pass: read_s / passes,
            slot_wait_s_per_pass: wait_s / passes,
            read_bytes_per_s: rate,
            read_limit_tokens_per_s: match per_token > 0.0 {
                true => rate / per_token,
                false => 0.0,
            },
            blocks: s
                .blocks
                .iter()
                .map(|&(l, t)| {
                    (
                        l,
                        t.reads,
                        ms(t.read_s, t.reads),
                        ms(t.slot_wait_s, t.reads),
                    )
                })
                .collect(),
        }
    });
    engine.model.backend.set_graphs(false);
    let no_graphs = run(&mut engine, opts.decode_tokens + 1, SamplerConfig::greedy())?
        .usage
        .decode_tokens_per_s;
    engine.model.backend.set_graphs(true);
    if opts.warmup {
        run(
            &mut engine,
            opts.decode_tokens.min(16),
            SamplerConfig::default(),
        )?;
    }
    let sampled = run(
        &mut engine,
        opts.decode_tokens + 1,
        SamplerConfig::default(),
    )?
    .usage
    .decode_tokens_per_s;
    let (profile, prefill_profile) = if opts.profile {
        // As the wgpu profile: the prefill alone, then the decode passes, every kernel timed.
        let rows = |rows: Vec<(String, u64, f64)>, tokens: usize| profile_rows(rows, tokens);
        engine.model.backend.enable_profile();
        run(&mut engine, 1, SamplerConfig::greedy())?;
        let prefill = engine.model.backend.profile()?;
        engine.model.backend.clear_profile();
        let g = run(&mut engine, opts.decode_tokens + 1, SamplerConfig::greedy())?;
        let decode = engine.model.backend.profile()?;
        // The second run's prompt pass is profiled too; its decode passes dominate.
        let decoded = g.usage.generated_tokens.max(1);
        (
            Some(rows(decode, decoded)),
            Some(rows(prefill, opts.prompt_tokens)),
        )
    } else {
        (None, None)
    };
    let backend_bytes = engine.model.backend.bytes_used();
    let device_bytes_used = engine
        .model
        .backend
        .memory()
        .map(|(free, total)| (total - free) as u64)
        .unwrap_or(0);
    Ok(CudaGenerateReport {
        device: info.name.clone(),
        arch: info.arch(),
        context,
        load_ms,
        prompt_tokens: opts.prompt_tokens,
        prefill_ms: u.prefill_ms,
        prefill_tokens_per_s: u.prefill_tokens_per_s,
        time_to_first_token_ms: u.time_to_first_token_ms,
        decode_tokens: u.generated_tokens.saturating_sub(1),
        decode_ms: u.decode_ms,
        decode_tokens_per_s: u.decode_tokens_per_s,
        decode_no_graphs_tokens_per_s: no_graphs,
        decode_sampled_tokens_per_s: sampled,
        backend_bytes,
        device_bytes_used,
        bytes_per_token,
        limit_tokens_per_s: 0.0,
        profile,
        prefill_profile,
        streaming,
    })
}
