//! The engine: prefill a prompt in batched passes (reusing the KV cache for a prefix it already
//! holds), then decode one token at a time, sampling from what the backend reads back (a
//! token's top-k candidates when they suffice, the whole logits row otherwise), until a stop
//! id, the caller's callback, the token budget or the context ends it.
//!
//! Asked for log-probabilities ([`Engine::generate_with_logprobs`]), each decode pass reads
//! its whole last logits row instead (the top-k alone cannot give the softmax's denominator),
//! and the sampled token's log-probability and the best alternatives are taken from it: the
//! model's own distribution, the log-softmax of the raw logits over the whole vocabulary, as
//! OpenAI's API and llama-server (with its default `post_sampling_probs: false`) report them.

use web_time::Instant;

use crate::backend::{Backend, Batch, Logits, Readback, Tokens};
use crate::error::BatchError;
use crate::model::Model;
use crate::ops::select_order;
use crate::sampling::{Sampler, SamplerConfig, Scores};
use crate::Error;

/// Most candidates the GPU's top-k selection returns; beyond it the whole row is read.
const MAX_CANDIDATES: usize = 64;

/// A generated token's log-probability under the model's distribution for its position
/// (log-softmax of the raw logits over the whole vocabulary: before penalties, temperature
/// and filters), with the best alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub id: u32,
    /// Natural log of the token's probability (<= 0).
    pub logprob: f32,
    /// The `n` most likely tokens, `(id, logprob)`, most likely first (equal logits: the lower
    /// id first), the sampled token among them only when it ranks there.
    pub top: Vec<(u32, f32)>,
}

/// The log-probabilities of `id` and the best `n` of `row` (one logits row; NaN logits have
/// no probability). The sums run in f64 from the row's maximum.
pub fn token_logprobs(row: &[f32], id: u32, n: usize) -> TokenLogprobs {
    let max = row
        .iter()
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let max = f64::from(max);
    let sum: f64 = if max.is_finite() {
        row.iter()
            .filter(|x| !x.is_nan())
            .map(|&x| (f64::from(x) - max).exp())
            .sum()
    } else {
        1.0
    };
    let lse = max + sum.ln();
    let lp = |x: f32| (f64::from(x) - lse) as f32;
    // The best `n`, kept sorted while one pass walks the row.
    let mut top: Vec<(usize, f32)> = Vec::with_capacity(n + 1);
    if n > 0 {
        for (i, &x) in row.iter().enumerate() {
            if x.is_nan() {
                continue;
            }
            if top.len() == n && x <= top[n - 1].1 {
                continue;
            }
            let at = top.partition_point(|&c| select_order(c, (i, x)).is_lt());
            top.insert(at, (i, x));
            top.truncate(n);
        }
    }
    TokenLogprobs {
        id,
        logprob: row.get(id as usize).map_or(f32::NEG_INFINITY, |&x| lp(x)),
        top: top.into_iter().map(|(i, x)| (i as u32, lp(x))).collect(),
    }
}

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

    /// Apply these loaded LoRA adapters with their scales from the next prompt on (none: the
    /// base model); the cached prefix is forgotten when the choice changes.
    pub fn set_adapters(&mut self, active: &[(crate::model::AdapterId, f32)]) -> Result<(), Error> {
        if self.model.set_adapters(active)? {
            self.cached.clear();
        }
        Ok(())
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
        let batch = self.model.backend.limits().max_batch;
        let (common, passes) = prefill_plan(&self.cached, prompt, batch);
        self.cached.truncate(common);
        let mut logits = Logits::None;
        let mut start = common;
        for (i, &len) in passes.iter().enumerate() {
            let rb = if i + 1 == passes.len() {
                readback
            } else {
                Readback::Nothing
            };
            let chunk = &prompt[start..start + len];
            logits = self.model.forward(chunk, start, rb).await?;
            self.cached.extend_from_slice(chunk);
            start += len;
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
        self.generate_with_logprobs(prompt, opts, None, |id, _| on_token(id))
            .await
    }

    /// [`Self::generate`], and with `logprobs: Some(n)` each token's [`TokenLogprobs`] with
    /// the best `n` alternatives, passed to `on_token` with the token. Those passes read back
    /// the whole logits row (and greedy passes are not chained on the device); the tokens are
    /// the ones [`Self::generate`] gives.
    pub async fn generate_with_logprobs(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        logprobs: Option<usize>,
        mut on_token: impl FnMut(u32, Option<TokenLogprobs>) -> TokenControl,
    ) -> Result<Generation, Error> {
        self.check_fits(prompt.len())?;
        let n_vocab = self.model.config.n_vocab;
        // The whole row when log-probabilities are asked for.
        let readback_for = |sampler: &Sampler, history: &[u32]| match logprobs {
            Some(_) => Readback::Last,
            None => Self::readback_for(sampler, history, n_vocab),
        };
        let mut sampler = Sampler::new(opts.sampling)?;
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
            readback_for(&sampler, &history)
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
        let chain =
            sampler.config().candidates_needed() == Some(1) && runs_ahead && logprobs.is_none();
        // Such a pass, submitted ahead: it computes the best candidate of `logits`.
        let mut ahead: Option<B::Pending> = None;
        // Sampled choices: the next pass (at the next position) is recorded while the device
        // runs the current one, and submitted once its token is drawn (with the readback it
        // was recorded for).
        let prepare = self.prepare_ahead && !chain && runs_ahead;
        let mut prepared: Option<(B::Recorded, Readback)> = None;
        let finish = loop {
            let mut token_lp = None;
            let (token, best) = match &logits {
                Logits::Full(row) => {
                    let token = sampler.sample(Scores::Full(row), &history)?;
                    if let Some(n) = logprobs {
                        token_lp = Some(token_logprobs(row, token, n));
                    }
                    (token, None)
                }
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
                match on_token(token, token_lp) {
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
            let rb = readback_for(&sampler, &history);
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

/// How a prefill of `prompt` runs after `cached`, in passes of at most `batch` tokens: how many
/// cached tokens it reuses (the longest common prefix, short of the prompt's last token) and
/// the sizes of its passes over the rest.
///
/// A one-token pass takes int8 activations where a pass of several tokens does not
/// ([`crate::pass::Activations::q8_for`]), so the passes include a one-token pass exactly when
/// a prefill of the whole prompt from scratch would (its last, where the prompt is one more
/// than a multiple of `batch`), and then only as the last: where the rest would otherwise end
/// in a lone token, one more cached token is computed again. A prompt the cache holds thus
/// gets the arithmetic of a fresh prefill wherever a row's result does not depend on the
/// other rows of its pass (the CPU backend's).
fn prefill_plan(cached: &[u32], prompt: &[u32], batch: usize) -> (usize, Vec<usize>) {
    let n = prompt.len();
    let mut common = cached
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count()
        .min(n.saturating_sub(1));
    if batch <= 1 {
        return (common, vec![1; n - common]);
    }
    let alone = n % batch == 1;
    let body_end = if alone { n - 1 } else { n };
    if common > 0 && (body_end - common) % batch == 1 {
        common -= 1;
    }
    let mut passes = Vec::new();
    let mut left = body_end - common;
    while left > 0 {
        let k = left.min(batch);
        passes.push(k);
        left -= k;
    }
    if alone {
        passes.push(1);
    }
    (common, passes)
}

fn per_s(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 / (ms / 1e3)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prompt length, batch and cached prefix: the passes cover the rest of the prompt,
    /// none over `batch`, a one-token pass exactly where the fresh prefill has one and only as
    /// the last, at most one more cached token given up than the prefix short of the last.
    #[test]
    fn prefill_passes_have_the_kinds_of_a_fresh_prefill() {
        for batch in 1..=6usize {
            for n in 1..=20usize {
                let prompt: Vec<u32> = (0..n as u32).collect();
                let (zero, fresh) = prefill_plan(&[], &prompt, batch);
                assert_eq!(zero, 0);
                let fresh_alone = fresh.contains(&1);
                for hit in 0..=n + 2 {
                    let mut cached: Vec<u32> = (0..hit as u32).collect();
                    cached.push(999);
                    let (common, passes) = prefill_plan(&cached, &prompt, batch);
                    let want = hit.min(n - 1);
                    assert!(common <= want && common + 1 >= want, "{batch} {n} {hit}");
                    assert_eq!(passes.iter().sum::<usize>(), n - common);
                    assert!(passes.iter().all(|&k| (1..=batch).contains(&k)));
                    let ones: Vec<usize> = (0..passes.len()).filter(|&i| passes[i] == 1).collect();
                    if batch == 1 {
                        continue;
                    }
                    assert_eq!(
                        !ones.is_empty(),
                        fresh_alone,
                        "{batch} {n} {hit}: {passes:?}"
                    );
                    assert!(ones.iter().all(|&i| i + 1 == passes.len()), "{passes:?}");
                }
            }
        }
    }

    #[test]
    fn token_logprobs_are_a_log_softmax_over_the_row() {
        let row = [1.0f32, 3.0, f32::NAN, 3.0, f32::NEG_INFINITY, -2.0];
        let lse = [1.0f64, 3.0, 3.0, -2.0]
            .iter()
            .map(|x| x.exp())
            .sum::<f64>()
            .ln();
        let lp = token_logprobs(&row, 0, 3);
        assert!((f64::from(lp.logprob) - (1.0 - lse)).abs() < 1e-6);
        // Best first, the tie by the lower id; NaN never listed.
        let ids: Vec<u32> = lp.top.iter().map(|c| c.0).collect();
        assert_eq!(ids, [1, 3, 0]);
        assert_eq!(lp.top[0].1, lp.top[1].1);
        let all = token_logprobs(&row, 4, 10);
        assert_eq!(all.logprob, f32::NEG_INFINITY);
        assert_eq!(all.top.len(), 5);
        let p: f64 = all.top.iter().map(|c| f64::from(c.1).exp()).sum();
        assert!((p - 1.0).abs() < 1e-6);
        assert!(token_logprobs(&row, 0, 0).top.is_empty());
    }
}
