//! The native command-line interface: `tritium inspect | validate | verify | dump | migrate`.
//! Thin: every command parses arguments, calls the library, and prints.

#[cfg(feature = "gpu")]
mod bench;
mod convert;
mod convert_hf;
mod dump;
pub mod error;
#[cfg(feature = "gds")]
mod gds_bench;
mod generate;
mod inspect;
mod migrate;
mod model;
mod quantize;
#[cfg(feature = "gpu")]
mod selftest;
mod serve;
#[cfg(feature = "gpu")]
mod serve_bench;
mod serve_model;
mod store;
#[cfg(feature = "gpu")]
mod store_bench;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use error::Error;

#[derive(Parser)]
#[command(
    name = "tritium",
    version,
    about = "Quantized LLMs on the GPU, natively and in the browser"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a model's architecture, hyper-parameters, tokenizer and tensors.
    Inspect {
        /// A GGUF file, an RDRR folder, a Trellis folder, or the name of a model in the store.
        model: String,
        #[command(flatten)]
        store: store::StoreArgs,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check an RDRR or Trellis folder's structure (exit code 0 only when every check passes).
    Validate {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Run every check of `validate`, then recompute every shard's and group's hash of an RDRR
    /// folder and report mismatches.
    Verify {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check every GPU kernel against the CPU reference on this machine's GPU.
    #[cfg(feature = "gpu")]
    Selftest {
        /// Only checks whose name starts with this (`legacy/`, `ops/attention`, ...).
        #[arg(default_value = "")]
        prefix: String,
        #[arg(long)]
        json: bool,
        /// Do not use shader-f16 even where the device has it.
        #[arg(long)]
        no_f16: bool,
        /// Do not use subgroup operations even where the device has them.
        #[arg(long)]
        no_subgroups: bool,
        /// Do not use cooperative matrices even where the device has them (everywhere:
        /// TRITIUM_COOPERATIVE_MATRIX=0).
        #[arg(long)]
        no_coop: bool,
        /// `gpu`: every wgpu kernel against the CPU reference; `cuda`: every op of the CUDA
        /// backend against the CPU backend running the same passes.
        #[arg(long, value_enum, default_value = "gpu")]
        backend: selftest::SelftestBackend,
    },
    /// Benchmarks (figures for BENCHMARKS.md).
    #[cfg(feature = "gpu")]
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Generate text from a prompt (streamed to the terminal; `--json` for one object).
    Run(generate::RunArgs),
    /// Talk with a model on the terminal (keeps the conversation and reuses its KV cache).
    Chat {
        #[command(flatten)]
        load: generate::LoadArgs,
        #[command(flatten)]
        sampling: generate::SamplingArgs,
        /// A system message to start the conversation with.
        #[arg(long)]
        system: Option<String>,
    },
    /// Write the logits of every position of one batch of token ids as raw little-endian f32,
    /// shape [len(ids), n_vocab].
    Logits {
        #[command(flatten)]
        load: generate::LoadArgs,
        /// Token ids: `1,2,3`.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<u32>,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Write a synthetic GGUF with a real model's shapes and random weights (for benchmarks):
    /// bitnet-2b4t (BitNet b1.58 2B4T, I2_S), llama-1b-q4k (Llama-3.2-1B shapes, Q4_K/Q6_K),
    /// qwen3-0.6b-q4k (Qwen3-0.6B shapes, Q4_K/Q6_K) or gemma3-1b-q4k (Gemma-3-1B shapes,
    /// Q4_K/Q6_K, Q5_0/Q8_0 where rows are not whole 256-value blocks).
    #[cfg(feature = "gpu")]
    Synth {
        kind: String,
        output: PathBuf,
        /// Fewer layers than the real model (quick local checks).
        #[arg(long)]
        layers: Option<u64>,
        /// Take the vocabulary (every `tokenizer.*` key) from this GGUF, whose token count must
        /// be the model's: text prompts and chat then work (servers, side by side with
        /// llama-server). Default: no vocabulary (benchmarks from token ids).
        #[arg(long, value_name = "GGUF")]
        vocab: Option<PathBuf>,
    },
    /// Write one tensor, dequantized on the CPU, as raw little-endian f32 in file element order.
    Dump {
        model: PathBuf,
        tensor: String,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Requantize a GGUF model as llama-quantize does (no importance matrix): Q4_K_M, Q6_K, Q8_0.
    Quantize {
        input: PathBuf,
        output: PathBuf,
        /// The llama.cpp file type: q4_k_m, q6_k or q8_0.
        #[arg(long = "type", value_parser = quantize::parse_type)]
        ftype: crate::quant::ftype::FileType,
    },
    /// Convert a GGUF file to an RDRR folder, an RDRR folder back to GGUF, or a Hugging Face
    /// checkpoint folder to RDRR or GGUF (`--quantize`).
    Convert(convert::ConvertArgs),
    /// Serve an RDRR folder over HTTP (Range, ETag, CORS) for `tritium pull` and browsers; a
    /// GGUF file is converted to RDRR first (once).
    ServeModel(serve_model::ServeModelArgs),
    /// Serve models over HTTP with OpenAI- and Ollama-compatible APIs.
    Serve(serve::ServeArgs),
    /// Stop a running `tritium serve` (SIGTERM; it finishes requests in flight first).
    Stop(serve::StopArgs),
    /// The models a running `tritium serve` has loaded.
    Ps(serve::PsArgs),
    /// A model's architecture, parameters, quantization, context, template and license.
    Show(serve::ShowArgs),
    /// Fetch a model into the model store, verified and resumable: an RDRR model's folder URL
    /// (as `tritium serve-model` serves it) or a GGUF file's URL.
    Pull(store::PullArgs),
    /// List the models in the store (and incomplete downloads).
    List {
        #[command(flatten)]
        store: store::StoreArgs,
        #[arg(long)]
        json: bool,
    },
    /// Remove a model (or an incomplete download) from the store.
    Rm {
        name: String,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long = "yes")]
        yes: bool,
        #[command(flatten)]
        store: store::StoreArgs,
    },
    /// Rewrite a Trellis v2 folder (layer_XXXX/ directories) as v3 in a new or empty folder.
    Migrate {
        /// The Trellis v2 folder.
        input: PathBuf,
        /// Where the v3 folder goes; it must not exist yet or be empty.
        output: PathBuf,
        /// Largest tensor data per shard: bytes, or a number with KB, MB, GB or TB (powers of 1024).
        #[arg(long, default_value = "2GB", value_parser = migrate::parse_shard_size)]
        shard_size: u64,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time every matvec kernel: at a bandwidth-bound size (GB/s and fraction of the measured
    /// copy bandwidth) and at real model shapes (microseconds per call).
    Kernels {
        /// Small shapes only: checks that every dtype runs (lavapipe finishes within a minute).
        #[arg(long)]
        quick: bool,
        #[arg(long)]
        json: bool,
        /// Only these dtypes (repeatable): F16, Q4_K, I2_S, ...
        #[arg(long = "dtype")]
        dtypes: Vec<String>,
        /// Weight MiB of the bandwidth-bound shape (default 256).
        #[arg(long)]
        large_mib: Option<u64>,
        /// Calls recorded per submission (default 20).
        #[arg(long)]
        calls: Option<u32>,
    },
    /// Prefill and decode speed of a model on the GPU, decode as a fraction of the bandwidth
    /// limit (weight bytes per token over the copy bandwidth measured in the same run).
    Generate {
        /// A GGUF file, an RDRR folder or a model in the store (`tritium synth` makes GGUFs
        /// with real shapes).
        model: PathBuf,
        #[command(flatten)]
        store: store::StoreArgs,
        /// Prompt tokens to prefill.
        #[arg(long, default_value_t = 512)]
        prompt: usize,
        /// Tokens to decode.
        #[arg(long, default_value_t = 128)]
        decode: usize,
        /// Most tokens per prefill pass.
        #[arg(long, default_value_t = 512)]
        batch: usize,
        /// KV cache length to allocate (default: prompt + decode tokens; an app's cache is
        /// usually longer than its text, e.g. the npm package's 4096).
        #[arg(long)]
        ctx: Option<usize>,
        /// Also time every op of the decode passes on the GPU (a separate, slower run).
        #[arg(long)]
        profile: bool,
        /// Exact arithmetic (`run --exact`): f32 activations, operands and KV cache.
        #[arg(long)]
        exact: bool,
        /// `gpu` (wgpu) or `cuda`.
        #[arg(long, value_enum, default_value = "gpu")]
        backend: selftest::SelftestBackend,
        /// CUDA: a GPU memory budget (6GB); blocks beyond it are read from storage when used
        /// (the report says how, and the bytes read per token).
        #[arg(long, value_name = "SIZE", value_parser = generate::parse_vram_budget)]
        vram_budget: Option<crate::session::VramBudget>,
        /// A LoRA adapter applied while measuring (as `run --lora`); repeatable.
        #[arg(long = "lora", value_name = "ADAPTER[:SCALE]", value_parser = generate::parse_lora)]
        lora: Vec<generate::LoraArg>,
        #[arg(long)]
        json: bool,
    },
    /// N concurrent streaming clients against an OpenAI-compatible server (`tritium serve`,
    /// llama-server): time to first token and inter-token latency (p50, p99), aggregate
    /// completion tokens per second.
    Serve {
        /// The server's base URL (http://HOST:PORT; a trailing /v1 is fine).
        #[arg(long)]
        url: String,
        /// The model name requests carry.
        #[arg(long)]
        model: String,
        /// Concurrent clients.
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// Requests per client, one after another.
        #[arg(long, default_value_t = 4)]
        requests: usize,
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
        /// The user message of every request.
        #[arg(long, default_value = "Write a short story about a lighthouse keeper.")]
        prompt: String,
        /// Sent as `Authorization: Bearer KEY` (also from $TRITIUM_API_KEY).
        #[arg(long, value_name = "KEY")]
        api_key: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// A file read into GPU memory by the streaming reader (cuFile, or direct reads staged
    /// through page-locked memory) against a direct read of it into host memory, the disk's
    /// own speed, in the same run (GB/s and the ratio).
    #[cfg(feature = "gds")]
    Gds {
        /// A large file on the disk to measure (a GGUF, an RDRR shard).
        file: PathBuf,
        /// The CUDA device.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Staged reads even where cuFile is available.
        #[arg(long)]
        staged: bool,
        /// MiB per read.
        #[arg(long, default_value_t = 64)]
        chunk_mib: u64,
        /// Rounds of each (alternating); the median is reported.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long)]
        json: bool,
    },
    /// SHA-256 and BLAKE3 throughput over a buffer in memory, one thread (MB/s).
    Hash {
        /// MiB hashed.
        #[arg(long, default_value_t = 256)]
        mib: u64,
        #[arg(long)]
        json: bool,
    },
    /// Fetch + verify + store throughput of a synthetic RDRR model served on loopback, as a
    /// fraction of the plain hashing speed measured in the same run.
    Fetch {
        /// Model MiB.
        #[arg(long, default_value_t = 256)]
        mib: u64,
        #[arg(long, default_value_t = 64)]
        shard_mib: u64,
        /// Shards fetched at once.
        #[arg(long, default_value_t = 4)]
        parallel: usize,
        /// sha256 or blake3.
        #[arg(long, default_value = "sha256")]
        hash: String,
        /// Where the store is written (default: the temp folder; a tmpfs such as /dev/shm
        /// takes the disk out of the measurement).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Serve this RDRR folder (`tritium convert`'s output) from memory instead of the
        /// synthetic model (its manifest's hash is measured; --mib, --shard-mib and --hash
        /// do not apply).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Downloads of each kind (with and without group checks, alternating); the median is
        /// reported.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        #[arg(long)]
        json: bool,
    },
}

/// Run the CLI and return the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, store, json } => store
            .resolve(&model)
            .and_then(|path| inspect::run(&path, json)),
        Command::Validate { dir, json } => validate::validate(&dir, json),
        Command::Verify { dir, json } => validate::verify(&dir, json),
        Command::Run(args) => generate::run(&args),
        Command::Chat {
            load,
            sampling,
            system,
        } => generate::chat(&load, &sampling, system.as_deref()),
        Command::Logits { load, ids, output } => generate::logits(&load, &ids, &output),
        Command::Dump {
            model,
            tensor,
            output,
        } => dump::run(&model, &tensor, &output),
        Command::Migrate {
            input,
            output,
            shard_size,
        } => migrate::run(&input, &output, shard_size),
        Command::Convert(args) => convert::run(&args),
        Command::ServeModel(args) => serve_model::run(&args),
        Command::Serve(args) => serve::serve(&args),
        Command::Stop(args) => serve::stop(&args),
        Command::Ps(args) => serve::ps(&args),
        Command::Show(args) => serve::show(&args),
        Command::Pull(args) => store::pull(&args),
        Command::List { store, json } => store::list(&store, json),
        Command::Rm { name, yes, store } => store::rm(&store, &name, yes),
        Command::Quantize {
            input,
            output,
            ftype,
        } => quantize::run(&input, &output, ftype),
        #[cfg(feature = "gpu")]
        Command::Selftest {
            prefix,
            json,
            no_f16,
            no_subgroups,
            no_coop,
            backend: selftest::SelftestBackend::Gpu,
        } => selftest::run(&prefix, json, no_f16, no_subgroups, no_coop),
        Command::Selftest {
            prefix,
            json,
            backend: selftest::SelftestBackend::Cuda,
            ..
        } => selftest::run_cuda(&prefix, json),
        #[cfg(feature = "gpu")]
        Command::Bench {
            what:
                BenchCommand::Kernels {
                    quick,
                    json,
                    dtypes,
                    large_mib,
                    calls,
                },
        } => bench::kernels(quick, json, &dtypes, large_mib, calls),
        #[cfg(feature = "gpu")]
        Command::Bench {
            what:
                BenchCommand::Generate {
                    model,
                    store,
                    prompt,
                    decode,
                    batch,
                    ctx,
                    profile,
                    exact,
                    backend,
                    vram_budget,
                    lora,
                    json,
                },
        } => store.resolve_path(&model).and_then(|model| {
            bench::generate(
                backend,
                &model,
                &crate::bench::generate::GenerateBenchOptions {
                    prompt_tokens: prompt,
                    decode_tokens: decode,
                    batch,
                    context: ctx,
                    warmup: true,
                    profile,
                    exact,
                    vram_budget,
                    lora: lora.iter().map(|l| (l.adapter.clone(), l.scale)).collect(),
                },
                json,
            )
        }),
        #[cfg(feature = "gpu")]
        Command::Bench {
            what:
                BenchCommand::Serve {
                    url,
                    model,
                    clients,
                    requests,
                    max_tokens,
                    prompt,
                    api_key,
                    json,
                },
        } => serve_bench::serve(&serve_bench::ServeBenchArgs {
            url,
            model,
            clients,
            requests,
            max_tokens,
            prompt,
            api_key: api_key.or_else(|| std::env::var(serve::API_KEY_ENV).ok()),
            json,
        }),
        #[cfg(feature = "gpu")]
        Command::Bench {
            what: BenchCommand::Hash { mib, json },
        } => store_bench::hash(mib, json),
        #[cfg(feature = "gds")]
        Command::Bench {
            what:
                BenchCommand::Gds {
                    file,
                    device,
                    staged,
                    chunk_mib,
                    rounds,
                    json,
                },
        } => gds_bench::gds(&gds_bench::GdsBenchArgs {
            file,
            device,
            staged,
            chunk_mib,
            rounds,
            json,
        }),
        #[cfg(feature = "gpu")]
        Command::Bench {
            what:
                BenchCommand::Fetch {
                    mib,
                    shard_mib,
                    parallel,
                    hash,
                    dir,
                    model,
                    rounds,
                    json,
                },
        } => store_bench::fetch(&store_bench::FetchBenchArgs {
            mib,
            shard_mib,
            parallel,
            hash,
            dir,
            model,
            rounds,
            json,
        }),
        #[cfg(feature = "gpu")]
        Command::Synth {
            kind,
            output,
            layers,
            vocab,
        } => bench::synth(&kind, &output, layers, vocab.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Format a byte count for people.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}
