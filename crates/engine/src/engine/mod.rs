//! The engine: prefill a prompt in batched passes (reusing the KV cache for a prefix it already
//! holds), then decode one token at a time, sampling from what the backend reads back (a
//! token's top-k candidates when they suffice, the whole logits row otherwise), until a stop
//! id, the caller's callback, the token budget or the context ends it.

use web_time::Instant;

use crate::backend::{Backend, Batch, Logits, Readback, Tokens};
use crate::error::BatchError;
use crate::model::Model;
use crate::sampling::{Sampler, SamplerConfig, Scores};
use crate::Error;

/// Most candidates the GPU's top-k selection returns; beyond it the whole row is read.
const MAX_CANDIDATES: usize = 64;

/// How a generation is run.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens to generate (0: prefill only).
    pub max_tokens: usize,
    pub sampling: SamplerConfig,
    /// Ids that end the generation (not included in the output).
    pub stop_ids: Vec<u32>,
}

/// Why a generation ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop id or stop string.
    Stop,
    /// The token budget or the context was used up.
    Length,
    /// The caller's callback asked to stop.
    Cancelled,
}

/// Token counts and times of one generation.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values were already in the cache.
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// From the call to the first generated token.
    pub time_to_first_token_ms: f64,
    /// Prompt tokens computed per second of prefill.
    pub prefill_tokens_per_s: f64,
    /// Generated tokens per second of decode (the first token comes from the prefill).
    pub decode_tokens_per_s: f64,
}

/// The result of [`Engine::generate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    pub ids: Vec<u32>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
}

/// A model plus what its KV cache holds.
pub struct Engine<B: Backend> {
    pub model: Model<B>,
    /// The tokens whose keys and values the cache holds, in order.
    cached: Vec<u32>,
    /// Encode each sampled pass while the device runs the one before it, where the backend
    /// runs ahead (the default; off for comparisons).
    prepare_ahead: bool,
    counts: PassCounts,
}

/// How the engine's decode passes were submitted, since it was made.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PassCounts {
    /// Greedy passes submitted before the pass that chose their token was read back, their
    /// token taken on the device ([`Tokens::Chained`]).
    pub chained: u64,
    /// Sampled passes recorded while the pass before them ran, submitted once their token
    /// was drawn.
    pub prepared: u64,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

impl<B: Backend> Engine<B> {
    pub fn new(model: Model<B>) -> Self {
        Engine {
            model,
            cached: Vec::new(),
            prepare_ahead: true,
            counts: PassCounts::default(),
        }
    }

    /// How decode passes were submitted so far.
    pub fn pass_counts(&self) -> PassCounts {
        self.counts
    }

    /// Whether sampled decoding records each next pass while the device runs the current one
    /// (the default), or only once its token is drawn.
    pub fn set_prepare_ahead(&mut self, on: bool) {
        self.prepare_ahead = on;
    }

    /// Forget the cache's contents (the next prompt is computed from scratch).
    pub fn reset(&mut self) {
        self.cached.clear();
    }

    /// The logits at every position of `ids` (from position 0), `ids.len() * n_vocab`
    /// values, computed in passes of the backend's batch size.
    pub async fn logits_all(&mut self, ids: &[u32]) -> Result<Vec<f32>, Error> {
        self.check_fits(ids.len())?;
        self.cached.clear();
        let mut out = Vec::with_capacity(ids.len() * self.model.config.n_vocab);
        // The backend's batch, or fewer where its logits would not fit one binding.
        let batch = self.model.state.logits_rows;
        for (i, chunk) in ids.chunks(batch).enumerate() {
            match self.model.forward(chunk, i * batch, Readback::All).await? {
                Logits::Full(v) => out.extend_from_slice(&v),
                other => {
                    return Err(BatchError::NoLogits {
                        what: format!("{other:?}"),
                    }
                    .into())
                }
            }
            self.cached.extend_from_slice(chunk);
        }
        Ok(out)
    }

    fn check_fits(&self, n: usize) -> Result<(), Error> {
        if n == 0 {
            return Err(BatchError::EmptyPrompt.into());
        }
        if n > self.model.ctx {
            return Err(BatchError::PromptTooLong {
                tokens: n,
                context: self.model.ctx,
            }
            .into());
        }
        Ok(())
    }

    /// What a decode pass reads back for a sampler configured as `config`, before any
    /// history (a repetition penalty may later ask for whole rows).
    pub fn readback_for_config(config: &SamplerConfig, n_vocab: usize) -> Readback {
        match Sampler::new(*config) {
            Ok(s) => Self::readback_for(&s, &[], n_vocab),
            Err(_) => Readback::Last,
        }
    }

    /// What to read back for sampling the next token.
    fn readback_for(sampler: &Sampler, history: &[u32], n_vocab: usize) -> Readback {
        match sampler.candidates_needed_for(history) {
            Some(k) if k.min(n_vocab) <= MAX_CANDIDATES => Readback::TopK(k.min(n_vocab)),
            _ => Readback::Last,
        }
    }

    /// Compute the prompt's keys and values (the part not already cached) and return what
    /// sampling the first token needs; the number of cached tokens reused.
    async fn prefill(
        &mut self,
        prompt: &[u32],
        readback: Readback,
    ) -> Result<(Logits, usize), Error> {
        // Reuse the longest cached prefix, but always compute at least the last token.
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        self.cached.truncate(common);
        let batch = self.model.backend.limits().max_batch;
        let rest = &prompt[common..];
        let mut logits = Logits::None;
        let n_chunks = rest.len().div_ceil(batch);
        for (i, chunk) in rest.chunks(batch).enumerate() {
            let rb = if i + 1 == n_chunks {
                readback
            } else {
                Readback::Nothing
            };
            logits = self.model.forward(chunk, common + i * batch, rb).await?;
            self.cached.extend_from_slice(chunk);
        }
        Ok((logits, common))
    }

    /// Generate from `prompt`. `on_token` sees each generated id as it is produced and
    /// returns `false` to stop (finish reason `Cancelled`, or `Stop` when it reports a stop
    /// string through `stopped`).
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        mut on_token: impl FnMut(u32) -> TokenControl,
    ) -> Result<Generation, Error> {
        self.check_fits(prompt.len())?;
        let mut sampler = Sampler::new(opts.sampling)?;
        let n_vocab = self.model.config.n_vocab;
        let start = Instant::now();
        let mut history = prompt.to_vec();
        let mut usage = Usage {
            prompt_tokens: prompt.len(),
            ..Usage::default()
        };
        let mut ids = Vec::new();
        let done = |ids: Vec<u32>, reason, usage| Generation {
            prompt_ids: prompt.to_vec(),
            ids,
            finish_reason: reason,
            usage,
        };
        let rb = if opts.max_tokens == 0 {
            Readback::Nothing
        } else {
            Self::readback_for(&sampler, &history, n_vocab)
        };
        let (mut logits, cached) = self.prefill(prompt, rb).await?;
        usage.cached_tokens = cached;
        usage.prefill_ms = ms(start);
        usage.prefill_tokens_per_s = per_s(prompt.len() - cached, usage.prefill_ms);
        if opts.max_tokens == 0 {
            return Ok(done(ids, FinishReason::Length, usage));
        }
        let decode_start = Instant::now();
        let mut passes = 0usize;
        // Greedy choices can stay on the device: the pass for token t + 1 is submitted before
        // token t is read back, taking the device's own best candidate as its input, so the
        // host records one pass while the device runs the previous one.
        let runs_ahead = self.model.backend.limits().runs_ahead;
        let chain = sampler.config().candidates_needed() == Some(1) && runs_ahead;
        // Such a pass, submitted ahead: it computes the best candidate of `logits`.
        let mut ahead: Option<B::Pending> = None;
        // Sampled choices: the next pass (at the next position) is recorded while the device
        // runs the current one, and submitted once its token is drawn (with the readback it
        // was recorded for).
        let prepare = self.prepare_ahead && !chain && runs_ahead;
        let mut prepared: Option<(B::Recorded, Readback)> = None;
        let finish = loop {
            let (token, best) = match &logits {
                Logits::Full(row) => (sampler.sample(Scores::Full(row), &history)?, None),
                Logits::Top(rows) => {
                    let top = rows.first().map_or(&[][..], Vec::as_slice);
                    (
                        sampler.sample(Scores::Top(top), &history)?,
                        top.first().map(|c| c.0),
                    )
                }
                Logits::None => {
                    return Err(BatchError::NoLogits {
                        what: "nothing".into(),
                    }
                    .into())
                }
            };
            if ids.is_empty() {
                usage.time_to_first_token_ms = ms(start);
            }
            let pos = self.cached.len();
            let stop = if opts.stop_ids.contains(&token) {
                Some(FinishReason::Stop)
            } else {
                ids.push(token);
                history.push(token);
                match on_token(token) {
                    TokenControl::Continue
                        if ids.len() >= opts.max_tokens || pos >= self.model.ctx =>
                    {
                        Some(FinishReason::Length)
                    }
                    TokenControl::Continue => None,
                    TokenControl::Stop => Some(FinishReason::Stop),
                    TokenControl::Cancel => Some(FinishReason::Cancelled),
                }
            };
            if let Some(reason) = stop {
                if let Some(p) = ahead.take() {
                    // Its result is not needed; its keys and values lie past `cached`.
                    self.model.wait(p).await?;
                }
                break reason;
            }
            let rb = Self::readback_for(&sampler, &history, n_vocab);
            let current = match ahead.take() {
                Some(p) if best == Some(token) => p,
                Some(p) => {
                    self.model.wait(p).await?;
                    self.decode_pass(token, pos, rb)?
                }
                None => match prepared.take() {
                    Some((p, prb)) if prb == rb => {
                        self.counts.prepared += 1;
                        self.model.submit(p, Tokens::Ids(&[token]))?
                    }
                    // Recorded for another readback (the history changed what sampling
                    // needs): dropped unsubmitted.
                    _ => self.decode_pass(token, pos, rb)?,
                },
            };
            self.cached.push(token);
            passes += 1;
            let more = ids.len() + 1 < opts.max_tokens && pos + 1 < self.model.ctx;
            if chain && more {
                let next = self.model.record(&Batch::one(pos + 1, 1), rb)?;
                ahead = Some(self.model.submit(next, Tokens::Chained)?);
                self.counts.chained += 1;
            } else if prepare && more {
                prepared = Some((self.model.record(&Batch::one(pos + 1, 1), rb)?, rb));
            }
            logits = self.model.wait(current).await?;
        };
        usage.generated_tokens = ids.len();
        usage.decode_ms = ms(decode_start);
        usage.decode_tokens_per_s = per_s(passes, usage.decode_ms);
        Ok(done(ids, finish, usage))
    }
}

impl<B: Backend> Engine<B> {
    /// Record and submit a one-token pass of `token` at `pos`.
    fn decode_pass(&mut self, token: u32, pos: usize, rb: Readback) -> Result<B::Pending, Error> {
        let pass = self.model.record(&Batch::one(pos, 1), rb)?;
        self.model.submit(pass, Tokens::Ids(&[token]))
    }
}

/// What the caller of [`Engine::generate`] wants after a token.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TokenControl {
    Continue,
    /// A stop condition of the caller's (a stop string) was met.
    Stop,
    /// The caller cancelled.
    Cancel,
}

fn per_s(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 / (ms / 1e3)
    } else {
        0.0
    }
}
