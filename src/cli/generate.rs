//! `tritium run`, `tritium chat` and `tritium logits`: load a model on the CPU or GPU backend
//! and generate (streaming text to the terminal, or one JSON object), converse, or write the
//! logits of one batch.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::backend::{Backend, Batch};
use crate::cli::Error;
use crate::engine::{Engine, FinishReason, GenerateOptions, TokenControl};
use crate::sampling::SamplerConfig;
use crate::session::{self, AnyBackend, KvCacheType, OpenOptions, Session, VramBudget};
use crate::text::{encode_chat, ChatMessage, StopStream, Tokenizer};

/// Which backend runs the model.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CUDA where a CUDA device opens, else the GPU when the machine has a real one; the
    /// CPU when the only adapter is a software rasterizer (lavapipe, SwiftShader), which is
    /// slower than the CPU backend.
    Auto,
    Cpu,
    /// wgpu: Vulkan or Metal.
    Gpu,
    /// CUDA on an NVIDIA GPU (kernels compiled at run time; needs the driver and NVRTC).
    Cuda,
}

/// Options every model-running command takes.
#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// A GGUF file, an RDRR folder, or the name of a model in the store.
    pub model: PathBuf,
    #[command(flatten)]
    pub store: super::store::StoreArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// A LoRA adapter applied to the model at run time: a llama.cpp GGUF adapter or an RDRR
    /// adapter folder (a path, a store name or a URL), with its scale (default 1).
    /// Repeatable: the adapters' updates add up.
    #[arg(long = "lora", value_name = "ADAPTER[:SCALE]", value_parser = parse_lora)]
    pub lora: Vec<LoraArg>,
}

/// `--lora ADAPTER[:SCALE]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraArg {
    pub adapter: PathBuf,
    pub scale: f32,
}

/// `ADAPTER` or `ADAPTER:SCALE` (the scale after the last colon, where that parses as a
/// finite number; a path with colons of its own and no scale stays whole).
pub fn parse_lora(text: &str) -> Result<LoraArg, String> {
    if let Some((path, scale)) = text.rsplit_once(':') {
        if let Ok(s) = scale.parse::<f32>() {
            if !s.is_finite() {
                return Err(format!("{scale} is not a usable scale"));
            }
            if path.is_empty() {
                return Err("give the adapter before its scale (ADAPTER:SCALE)".into());
            }
            return Ok(LoraArg {
                adapter: PathBuf::from(path),
                scale: s,
            });
        }
    }
    if text.is_empty() {
        return Err("give an adapter (ADAPTER or ADAPTER:SCALE)".into());
    }
    Ok(LoraArg {
        adapter: PathBuf::from(text),
        scale: 1.0,
    })
}

/// How a model is loaded and computed: the flags `run`, `chat`, `logits` and `serve` share.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Context (KV cache) size in tokens; default: the model's, capped at 4096.
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Most tokens per forward pass (prefill batch).
    #[arg(long, default_value_t = 128)]
    pub batch: usize,
    /// The KV cache element type, on every backend (auto: f32 for a cache whose f32 form is
    /// at most 256 MiB, else f16).
    #[arg(long, value_enum, default_value = "auto")]
    pub kv_cache: KvChoice,
    /// f32 arithmetic everywhere: no int8 activations, no f16 operands, an f32 KV cache. The
    /// CPU and every GPU then compute the same tokens (slower on GPUs).
    #[arg(long)]
    pub exact: bool,
    /// CUDA: keep the weights and the KV cache within this much GPU memory (6GB, 512MB; the
    /// activations come on top): the transformer blocks that do not fit beside the rest are
    /// read from storage (cuFile, or direct reads) when used.
    #[arg(long, value_name = "SIZE", value_parser = parse_vram_budget)]
    pub vram_budget: Option<VramBudget>,
    /// Runtime hints for kernel selection, as an RDRR manifest's `runtimeOptimizations`
    /// object: inline JSON (`{"attentionTier":"basic"}`) or a file holding it. They override
    /// the model's own hints field by field; any model format takes them.
    #[arg(long, value_name = "JSON|FILE", value_parser = parse_hints)]
    pub hints: Option<session::RuntimeOptimizations>,
}

/// `--hints`: inline JSON (starting with `{`) or the path of a file holding it.
pub fn parse_hints(text: &str) -> Result<session::RuntimeOptimizations, String> {
    let (source, json) = match text.trim_start().starts_with('{') {
        true => ("--hints".to_string(), text.to_string()),
        false => (
            text.to_string(),
            std::fs::read_to_string(text).map_err(|e| format!("cannot read {text}: {e}"))?,
        ),
    };
    session::RuntimeOptimizations::from_json(&source, &json).map_err(|e| e.to_string())
}

/// `--vram-budget`: `auto` or a size.
pub fn parse_vram_budget(text: &str) -> Result<VramBudget, String> {
    VramBudget::parse(text).ok_or_else(|| {
        format!(
            "{text:?} is not a budget: give auto, bytes or a number with KB, MB, GB or TB (6GB)"
        )
    })
}

impl EngineArgs {
    /// The session options these flags ask for, with the model store `store`.
    pub fn open_options(&self, store: Option<PathBuf>) -> OpenOptions {
        OpenOptions {
            backend: match self.backend {
                BackendChoice::Auto => session::BackendChoice::Auto,
                BackendChoice::Cpu => session::BackendChoice::Cpu,
                BackendChoice::Gpu => session::BackendChoice::Gpu,
                BackendChoice::Cuda => session::BackendChoice::Cuda,
            },
            context: self.ctx,
            batch: self.batch,
            kv_cache: match self.kv_cache {
                KvChoice::Auto => KvCacheType::Auto,
                KvChoice::F16 => KvCacheType::F16,
                KvChoice::F32 => KvCacheType::F32,
            },
            arithmetic: match self.exact {
                true => session::Arithmetic::Exact,
                false => session::Arithmetic::Fast,
            },
            sequences: 1,
            store,
            require_tokenizer: false,
            vram_budget: self.vram_budget,
            hints: self.hints.clone(),
        }
    }
}

/// KV cache element type.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvChoice {
    Auto,
    F16,
    F32,
}

/// Sampling flags.
#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// 0 turns it off.
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// 1 turns it off.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Subtracted from a generated token's score per time it was generated (OpenAI's); 0 = off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Subtracted from the score of every token generated so far (OpenAI's); 0 = off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Text that ends the generation (repeatable; not included in the output).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
}

impl SamplingArgs {
    fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
        }
    }
}

/// `tritium run` arguments.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// The prompt (raw text; BOS added as the model's tokenizer says).
    #[arg(short, long, conflicts_with = "ids")]
    pub prompt: Option<String>,
    /// The prompt as token ids: `1,2,3`.
    #[arg(long, value_delimiter = ',')]
    pub ids: Option<Vec<u32>>,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// One JSON object instead of streamed text.
    #[arg(long)]
    pub json: bool,
    /// Print the ops of a prefill pass (the prompt's first batch, or a full batch without a
    /// prompt) and of a decode pass, as the model writes them and as the backend runs them
    /// (its fusions applied), instead of generating.
    #[arg(long)]
    pub plan: bool,
}

/// Open the model `load` names (a path, a store name or a URL) and load it on the backend it
/// asks for, with a context of at least `min_context` tokens. With `text`, a tokenizer that
/// does not load is an error (saying why) before any weight is read.
fn open_session(load: &LoadArgs, min_context: usize, text: bool) -> Result<Session, Error> {
    let mut options = load.engine.open_options(load.store.store.clone());
    options.require_tokenizer = text;
    options.context = match (load.engine.ctx, min_context) {
        (None, 0) => None,
        (ctx, min) => Some(ctx.unwrap_or(0).max(min)),
    };
    let mut session = crate::session::open(&load.model, &options)?;
    if let Some(e) = &session.template_error {
        eprintln!("warning: the model's chat template does not load ({e}); using ChatML");
    }
    for note in &session.hints {
        eprintln!("runtime hint {note}");
    }
    let mut active = Vec::new();
    for l in &load.lora {
        active.push((session.load_adapter(&l.adapter, &options)?, l.scale));
    }
    session.engine.set_adapters(&active)?;
    Ok(session)
}

/// `run --plan`: the plans of a prefill pass of `prompt` tokens (at most a batch) and of the
/// decode pass after it.
fn print_plans(args: &RunArgs, session: &mut Session, prompt: usize) -> Result<ExitCode, Error> {
    let prefill = prompt.clamp(1, args.load.engine.batch.max(1));
    let readback = Engine::<AnyBackend>::readback_for_config(
        &args.sampling.config(),
        session.config().n_vocab,
    );
    let model = &mut session.engine.model;
    println!("backend: {}", model.backend.describe());
    if !session.hints.is_empty() {
        println!("runtime hints:");
        for note in &session.hints {
            println!("  {note}");
        }
    }
    let passes = [
        ("prefill", Batch::one(0, prefill)),
        ("decode", Batch::one(prefill, 1)),
    ];
    for (what, batch) in passes {
        let (written, planned) = model.plan_text(&batch, readback)?;
        let n = batch.tokens();
        println!(
            "\n{what}: {n} token{} at position {}, reading back {}",
            if n == 1 { "" } else { "s" },
            batch.spans[0].pos0,
            crate::pass::readback_name(readback)
        );
        println!("  as the model writes it ({} ops):", written.len());
        for line in &written {
            println!("    {line}");
        }
        println!("  as the backend runs it ({} steps):", planned.len());
        for line in &planned {
            println!("    {line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn need_tokenizer(session: &Session) -> Result<&Tokenizer, Error> {
    session.tokenizer.as_ref().ok_or_else(|| {
        Error::Usage("the model has no tokenizer metadata: give the prompt as --ids".into())
    })
}

/// The text of a generation, with stop strings ([`StopStream`]); nothing without a tokenizer
/// (prompts given as `--ids` to a model without tokenizer metadata).
struct Detokenizer<'a> {
    tok: Option<&'a Tokenizer>,
    stream: StopStream,
}

impl<'a> Detokenizer<'a> {
    fn new(tok: Option<&'a Tokenizer>, stop: &[String]) -> Self {
        Detokenizer {
            tok,
            stream: StopStream::new(stop),
        }
    }

    /// Add a token; returns the text that can be shown now and whether a stop string was hit.
    fn push(&mut self, id: u32) -> Result<(String, bool), Error> {
        match self.tok {
            Some(tok) => Ok(self.stream.push(tok, id)?),
            None => Ok((String::new(), false)),
        }
    }

    /// The text held back, at the end of the generation.
    fn finish(&mut self) -> String {
        self.stream.finish()
    }

    /// Everything released so far.
    fn text(&self) -> &str {
        &self.stream.text
    }
}

/// `tritium run`.
pub fn run(args: &RunArgs) -> Result<ExitCode, Error> {
    if !args.plan && args.ids.is_none() && args.prompt.is_none() {
        return Err(Error::Usage("give a prompt: -p TEXT or --ids 1,2,3".into()));
    }
    let mut session = open_session(&args.load, 0, args.prompt.is_some())?;
    let tok = session.tokenizer.as_ref();
    let prompt_ids = match (&args.ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(p)) => {
            let t = need_tokenizer(&session)?;
            if args.chat {
                let rendered = session
                    .template
                    .render(&[ChatMessage::new("user", p.as_str())], true)?;
                encode_chat(t, &rendered)?
            } else {
                t.encode(p, true)?
            }
        }
        (None, None) => Vec::new(),
    };
    if args.plan {
        let n = match prompt_ids.len() {
            0 => args.load.engine.batch,
            n => n,
        };
        return print_plans(args, &mut session, n);
    }
    let opts = GenerateOptions {
        max_tokens: args.sampling.max_tokens,
        sampling: args.sampling.config(),
        stop_ids: tok.map(|t| t.stop_ids().to_vec()).unwrap_or_default(),
    };
    let json = args.json;
    let Session {
        engine, tokenizer, ..
    } = &mut session;
    let tok = tokenizer.as_ref();
    let describe = engine.model.backend.describe();
    {
        let mut detok = Detokenizer::new(tok, &args.sampling.stop);
        let mut stdout = std::io::stdout();
        let mut failure = None;
        let generation =
            pollster::block_on(
                engine.generate(&prompt_ids, &opts, |id| match detok.push(id) {
                    Ok((text, stop)) => {
                        if !json {
                            let _ = stdout.write_all(text.as_bytes());
                            let _ = stdout.flush();
                        }
                        if stop {
                            TokenControl::Stop
                        } else {
                            TokenControl::Continue
                        }
                    }
                    Err(e) => {
                        failure = Some(e);
                        TokenControl::Cancel
                    }
                }),
            )?;
        if let Some(e) = failure {
            return Err(e);
        }
        let tail = detok.finish();
        let u = &generation.usage;
        if json {
            let out = serde_json::json!({
                "backend": describe,
                "prompt_ids": generation.prompt_ids,
                "generated_ids": generation.ids,
                "text": detok.text(),
                "finish_reason": generation.finish_reason,
                "usage": {
                    "prompt_tokens": u.prompt_tokens,
                    "cached_tokens": u.cached_tokens,
                    "completion_tokens": u.generated_tokens,
                    "total_tokens": u.prompt_tokens + u.generated_tokens,
                },
                "timings": {
                    "prefill_ms": u.prefill_ms,
                    "decode_ms": u.decode_ms,
                    "time_to_first_token_ms": u.time_to_first_token_ms,
                    "prefill_tokens_per_s": u.prefill_tokens_per_s,
                    "decode_tokens_per_s": u.decode_tokens_per_s,
                },
            });
            println!("{out}");
        } else {
            println!("{tail}");
            eprintln!(
                "\n[{}] {} prompt tokens ({:.1} tok/s prefill), {} generated ({:.1} tok/s), \
                 first token after {:.0} ms, finish: {:?}",
                describe,
                u.prompt_tokens,
                u.prefill_tokens_per_s,
                u.generated_tokens,
                u.decode_tokens_per_s,
                u.time_to_first_token_ms,
                generation.finish_reason
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `tritium logits`.
pub fn logits(load: &LoadArgs, ids: &[u32], output: &Path) -> Result<ExitCode, Error> {
    let io = |e: std::io::Error| Error::Io {
        path: output.display().to_string(),
        message: e.to_string(),
    };
    // The whole batch must fit the context.
    let mut session = open_session(load, ids.len(), false)?;
    let engine = &mut session.engine;
    let v = pollster::block_on(engine.logits_all(ids))?;
    let part = output.with_extension("part");
    std::fs::write(&part, bytemuck::cast_slice::<f32, u8>(&v)).map_err(io)?;
    std::fs::rename(&part, output).map_err(io)?;
    eprintln!(
        "wrote {} x {} logits to {} ({})",
        ids.len(),
        v.len() / ids.len().max(1),
        output.display(),
        engine.model.backend.describe()
    );
    Ok(ExitCode::SUCCESS)
}

/// `tritium chat`: an interactive conversation on the terminal (an empty line or EOF ends
/// it; `/reset` starts over).
pub fn chat(
    load: &LoadArgs,
    sampling: &SamplingArgs,
    system: Option<&str>,
) -> Result<ExitCode, Error> {
    let mut session = open_session(load, 0, true)?;
    need_tokenizer(&session)?;
    let Session {
        engine,
        tokenizer: Some(tok),
        template,
        ..
    } = &mut session
    else {
        return Err(Error::Usage("the model has no tokenizer metadata".into()));
    };
    let opts = GenerateOptions {
        max_tokens: sampling.max_tokens,
        sampling: sampling.config(),
        stop_ids: tok.stop_ids().to_vec(),
    };
    {
        eprintln!(
            "[{}] type a message; an empty line ends, /reset starts over",
            engine.model.backend.describe()
        );
        let mut messages: Vec<ChatMessage> = system
            .map(|s| vec![ChatMessage::new("system", s)])
            .unwrap_or_default();
        let stdin = std::io::stdin();
        let mut stdout = std::io::stdout();
        loop {
            eprint!("> ");
            let mut line = String::new();
            if stdin.lock().read_line(&mut line).map_err(|e| Error::Io {
                path: "stdin".into(),
                message: e.to_string(),
            })? == 0
            {
                break;
            }
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                break;
            }
            if line == "/reset" {
                messages.retain(|m| m.role == "system");
                continue;
            }
            messages.push(ChatMessage::new("user", line));
            let prompt = encode_chat(tok, &template.render(&messages, true)?)?;
            let mut detok = Detokenizer::new(Some(tok), &sampling.stop);
            let g =
                pollster::block_on(engine.generate(&prompt, &opts, |id| match detok.push(id) {
                    Ok((text, stop)) => {
                        let _ = stdout.write_all(text.as_bytes());
                        let _ = stdout.flush();
                        if stop {
                            TokenControl::Stop
                        } else {
                            TokenControl::Continue
                        }
                    }
                    Err(_) => TokenControl::Cancel,
                }))?;
            println!("{}", detok.finish());
            eprintln!(
                "[{} tokens, {:.1} tok/s, {} prompt tokens reused{}]",
                g.usage.generated_tokens,
                g.usage.decode_tokens_per_s,
                g.usage.cached_tokens,
                if g.finish_reason == FinishReason::Length {
                    ", cut at --max-tokens"
                } else {
                    ""
                }
            );
            messages.push(ChatMessage::new("assistant", detok.text().to_string()));
        }
        Ok(ExitCode::SUCCESS)
    }
}
