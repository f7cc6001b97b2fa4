//! Picking the next token from a model's scores, the same way for every backend.
//!
//! The chain follows llama.cpp's common sampler, in its order:
//!
//! 1. **repetition penalty** over the distinct ids among the last `repeat_last_n` of the
//!    history: a positive score is divided by `repeat_penalty`, any other multiplied by it
//!    (once per distinct id, however often it occurs);
//!    then OpenAI's **frequency and presence penalties** over the tokens this sampler has
//!    produced (the completion so far, not the prompt): `frequency_penalty * count +
//!    presence_penalty * (count > 0)` is subtracted from each one's score;
//! 2. **top-k**: keep the `top_k` best (selection, not a sort of the whole vocabulary);
//! 3. **top-p**: keep the smallest best-first prefix whose probability (softmax of the scores
//!    as they are at this point, before temperature) reaches `top_p`;
//! 4. **min-p**: keep the candidates whose probability is at least `min_p` times the best one's;
//! 5. **temperature**: divide the scores by `temperature`;
//! 6. softmax and **one uniform draw** from a seeded ChaCha20 stream.
//!
//! `temperature == 0` is greedy: the best score after the penalty, without a draw.
//!
//! "Best" is always [`select_order`]: larger score first, equal scores by lower id. NaN scores
//! are never chosen. A non-greedy [`Sampler::sample`] consumes exactly one `u64` of the stream
//! per successful call, whatever the scores, so the stream position depends only on how many
//! tokens were sampled.
//!
//! The GPU backend need not read back the whole logits row: [`SamplerConfig::candidates_needed`]
//! says how many of the best (unpenalized) scores give exactly the token the full row would,
//! and [`Scores::Top`] carries them.

use std::cmp::Ordering;

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::ops::select_order;

/// Everything that can go wrong in sampling: a bad setting or scores with nothing to pick.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("temperature must be a finite number >= 0 (0 = greedy), got {0}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1] (1 = off), got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1] (0 = off), got {0}")]
    MinP(f32),
    #[error("repeat_penalty must be a finite number > 0 (1 = off), got {0}")]
    RepeatPenalty(f32),
    #[error("{0} must be a finite number (0 = off), got {1}")]
    Penalty(&'static str, f32),
    #[error("no scores to sample from")]
    Empty,
    #[error("every score is NaN")]
    AllNaN,
    #[error("no candidate has a score above -inf")]
    NoFiniteScore,
}

/// The sampling settings (llama.cpp's names and meanings).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerConfig {
    /// Divides the scores before the final softmax; 0 = greedy (argmax after the penalty).
    pub temperature: f32,
    /// Keep only the `top_k` best candidates; 0 = off.
    pub top_k: usize,
    /// Keep the smallest best-first prefix with at least this probability mass; 1 = off.
    pub top_p: f32,
    /// Drop candidates less likely than `min_p` times the best one; 0 = off.
    pub min_p: f32,
    /// Penalty for ids seen among the last `repeat_last_n` of the history; 1 = off.
    pub repeat_penalty: f32,
    /// How much of the history the penalty looks at; 0 = none.
    pub repeat_last_n: usize,
    /// Subtracted from a generated token's score once per time it was generated (OpenAI's
    /// `frequency_penalty`); 0 = off, negative values encourage repetition.
    pub frequency_penalty: f32,
    /// Subtracted from the score of every token generated at least once (OpenAI's
    /// `presence_penalty`); 0 = off.
    pub presence_penalty: f32,
    /// Seed of the ChaCha20 stream the draws come from.
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults (`common_params_sampling`), with a fixed seed of 0.
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding: the argmax, nothing else.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            ..SamplerConfig::default()
        }
    }

    /// Whether every setting is in its range.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(SamplingError::Temperature(t));
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(SamplingError::TopP(p));
        }
        let m = self.min_p;
        if !(0.0..=1.0).contains(&m) {
            return Err(SamplingError::MinP(m));
        }
        let r = self.repeat_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(SamplingError::RepeatPenalty(r));
        }
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !v.is_finite() {
                return Err(SamplingError::Penalty(name, v));
            }
        }
        Ok(())
    }

    /// Temperature 0: the argmax, no draw.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether the repetition penalty changes anything.
    fn penalizes(&self) -> bool {
        self.repeat_penalty != 1.0 && self.repeat_last_n > 0
    }

    /// Whether the frequency or presence penalty is on.
    fn penalizes_generated(&self) -> bool {
        self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }

    /// How many of the best scores (before any penalty, in [`select_order`]) the engine must
    /// pass as [`Scores::Top`] to get exactly the token the whole row would give; `None` when
    /// the whole row is needed. The engine clamps it to the vocabulary size.
    ///
    /// Without a penalty: 1 when greedy, `top_k` when top-k is on, since every later stage
    /// only looks at what top-k kept. With a penalty >= 1 add `repeat_last_n`: the penalty
    /// only lowers scores, but lowering a penalized candidate can let one from beyond the
    /// first `k` in (scores 5 and 4, the 5 penalized by 2: the best is now the 4). What it
    /// cannot do is raise anything, so with `m` penalized ids the penalized best `k` lie
    /// within the unpenalized best `k + m`: that prefix holds at least `k` unpenalized
    /// candidates, each of which still ranks above any candidate outside the prefix (whose
    /// score at most fell). `m` is at most `repeat_last_n`; [`Self::candidates_needed_for`]
    /// counts it. A penalty < 1 raises scores, and then nothing short of the row will do.
    /// With a frequency or presence penalty the number of penalized ids grows with the
    /// completion, so there is no bound without it: `None` (see
    /// [`Sampler::candidates_needed_for`]).
    pub fn candidates_needed(&self) -> Option<usize> {
        if self.penalizes_generated() {
            return None;
        }
        self.needed(self.repeat_last_n, 0)
    }

    /// [`Self::candidates_needed`] for this history: `m` is the number of distinct ids in
    /// the penalty's window rather than its length.
    pub fn candidates_needed_for(&self, history: &[u32]) -> Option<usize> {
        let mut ids = Vec::new();
        self.penalized_ids(history, &mut ids);
        self.needed(ids.len(), 0)
    }

    /// `penalized`: ids the repetition penalty may touch; `generated`: distinct ids the
    /// frequency and presence penalties touch (they only lower scores when both are >= 0,
    /// the same argument as for a repetition penalty > 1).
    fn needed(&self, penalized: usize, generated: usize) -> Option<usize> {
        let mut k = if self.is_greedy() {
            1
        } else if self.top_k > 0 {
            self.top_k
        } else {
            return None;
        };
        if self.penalizes_generated() {
            if self.frequency_penalty < 0.0 || self.presence_penalty < 0.0 {
                return None;
            }
            k = k.saturating_add(generated);
        }
        if !self.penalizes() {
            Some(k)
        } else if self.repeat_penalty > 1.0 {
            Some(k.saturating_add(penalized))
        } else {
            None
        }
    }

    /// The distinct ids the penalty applies to, sorted, into `out`.
    fn penalized_ids(&self, history: &[u32], out: &mut Vec<u32>) {
        out.clear();
        if self.penalizes() {
            let n = self.repeat_last_n.min(history.len());
            out.extend_from_slice(&history[history.len() - n..]);
            out.sort_unstable();
            out.dedup();
        }
    }
}

/// A model's scores for the next token.
#[derive(Debug, Clone, Copy)]
pub enum Scores<'a> {
    /// The whole logits row; the id is the index.
    Full(&'a [f32]),
    /// `(id, score)` candidates: the best of the row in [`select_order`] (as
    /// `cpu::ops::top_k` picks them: ties at the cut go to the lower id), at least
    /// `min(candidates_needed_for(history), vocabulary)` of them, for the token to equal the
    /// whole row's. Fewer are taken as the whole choice. Their order is not relied on.
    Top(&'a [(u32, f32)]),
}

/// [`select_order`] on `(id, score)` pairs.
fn order(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    select_order((a.0 as usize, a.1), (b.0 as usize, b.1))
}

/// llama.cpp's repetition penalty on one score.
fn penalize(score: f32, penalty: f32) -> f32 {
    if score <= 0.0 {
        score * penalty
    } else {
        score / penalty
    }
}

/// The candidates left by the filters (best first where a stage sorted them), scores before
/// temperature: what the final softmax and draw see.
struct Filtered<'s> {
    cands: &'s [(u32, f32)],
    /// The best score among them (before temperature), finite or +inf.
    max: f32,
}

/// Samples tokens with one [`SamplerConfig`] and one seeded random stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: ChaCha20Rng,
    /// Scratch: the candidates of the current call.
    cands: Vec<(u32, f32)>,
    /// Whether `cands` is best first (`Top`) or in id order (`Full`).
    sorted: bool,
    /// Scratch: the penalized ids of the current call.
    ids: Vec<u32>,
    /// `(id, times)` of every token this sampler returned, sorted by id (the frequency and
    /// presence penalties).
    generated: Vec<(u32, u32)>,
}

impl Sampler {
    /// A sampler whose stream starts from `cfg.seed`; an error when a setting is out of range.
    pub fn new(cfg: SamplerConfig) -> Result<Self, SamplingError> {
        cfg.validate()?;
        Ok(Sampler {
            cfg,
            rng: ChaCha20Rng::seed_from_u64(cfg.seed),
            cands: Vec::new(),
            sorted: false,
            ids: Vec::new(),
            generated: Vec::new(),
        })
    }

    /// [`SamplerConfig::candidates_needed_for`], counting the ids this sampler generated for
    /// the frequency and presence penalties.
    pub fn candidates_needed_for(&self, history: &[u32]) -> Option<usize> {
        let mut ids = Vec::new();
        self.cfg.penalized_ids(history, &mut ids);
        let generated = if self.cfg.penalizes_generated() {
            self.generated.len()
        } else {
            0
        };
        self.cfg.needed(ids.len(), generated)
    }

    /// Count `id` as generated (the frequency and presence penalties).
    fn record(&mut self, id: u32) {
        match self.generated.binary_search_by_key(&id, |g| g.0) {
            Ok(i) => self.generated[i].1 += 1,
            Err(i) => self.generated.insert(i, (id, 1)),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// The next token for these scores, given the ids so far (prompt and generated; only
    /// the penalty reads them). An error when no score is a number (or, when not greedy,
    /// none is above -inf).
    pub fn sample(&mut self, scores: Scores<'_>, history: &[u32]) -> Result<u32, SamplingError> {
        self.penalized(scores, history)?;
        let id = if self.cfg.is_greedy() {
            self.argmax()?
        } else {
            let cfg = self.cfg;
            let f = filter(&mut self.cands, self.sorted, &cfg)?;
            let u = unit(self.rng.next_u64());
            f.draw(cfg.temperature, u)
        };
        if self.cfg.penalizes_generated() {
            self.record(id);
        }
        Ok(id)
    }

    /// The distribution [`Self::sample`] draws from for these scores: `(id, probability)`,
    /// in the order the draw walks them. Greedy gives its one token with probability 1.
    /// Consumes no randomness.
    pub fn distribution(
        &mut self,
        scores: Scores<'_>,
        history: &[u32],
    ) -> Result<Vec<(u32, f64)>, SamplingError> {
        self.penalized(scores, history)?;
        if self.cfg.is_greedy() {
            return Ok(vec![(self.argmax()?, 1.0)]);
        }
        let cfg = self.cfg;
        let f = filter(&mut self.cands, self.sorted, &cfg)?;
        let w = f.weight(cfg.temperature);
        let total: f64 = f.cands.iter().map(|c| w(c.1)).sum();
        Ok(f.cands.iter().map(|c| (c.0, w(c.1) / total)).collect())
    }

    /// Fills `self.cands` with the penalized, non-NaN candidates: in id order for
    /// [`Scores::Full`], best first for [`Scores::Top`].
    fn penalized(&mut self, scores: Scores<'_>, history: &[u32]) -> Result<(), SamplingError> {
        self.cfg.penalized_ids(history, &mut self.ids);
        let r = self.cfg.repeat_penalty;
        let cands = &mut self.cands;
        cands.clear();
        match scores {
            Scores::Full(row) => {
                if row.is_empty() {
                    return Err(SamplingError::Empty);
                }
                cands.extend(row.iter().enumerate().map(|(i, &s)| (i as u32, s)));
                for &id in &self.ids {
                    if let Some(c) = cands.get_mut(id as usize) {
                        c.1 = penalize(c.1, r);
                    }
                }
                penalize_generated(&self.cfg, &self.generated, cands, true);
                cands.retain(|c| !c.1.is_nan());
                self.sorted = false;
            }
            Scores::Top(top) => {
                if top.is_empty() {
                    return Err(SamplingError::Empty);
                }
                cands.extend(top.iter().filter(|c| !c.1.is_nan()));
                if !self.ids.is_empty() {
                    for c in cands.iter_mut() {
                        if self.ids.binary_search(&c.0).is_ok() {
                            c.1 = penalize(c.1, r);
                        }
                    }
                }
                penalize_generated(&self.cfg, &self.generated, cands, false);
                // Sorted again: the penalty may have changed the order (and the engine's
                // order is not trusted to be exactly ours).
                cands.sort_unstable_by(order);
                self.sorted = true;
            }
        }
        if cands.is_empty() {
            return Err(SamplingError::AllNaN);
        }
        Ok(())
    }

    /// The best candidate of `self.cands`; an error when it is -inf.
    fn argmax(&self) -> Result<u32, SamplingError> {
        match self.cands.iter().min_by(|a, b| order(a, b)) {
            Some(&(_, s)) if s == f32::NEG_INFINITY => Err(SamplingError::NoFiniteScore),
            Some(&(id, _)) => Ok(id),
            None => Err(SamplingError::AllNaN),
        }
    }
}

/// OpenAI's frequency and presence penalties of `cfg` on `cands` for the `(id, times)`
/// pairs of `generated` (sorted by id): `cands` indexed by id when `by_index`, else any order.
fn penalize_generated(
    cfg: &SamplerConfig,
    generated: &[(u32, u32)],
    cands: &mut [(u32, f32)],
    by_index: bool,
) {
    if !cfg.penalizes_generated() {
        return;
    }
    let (f, p) = (cfg.frequency_penalty, cfg.presence_penalty);
    let sub = |s: f32, n: u32| s - f * n as f32 - p;
    if by_index {
        for &(id, n) in generated {
            if let Some(c) = cands.get_mut(id as usize) {
                c.1 = sub(c.1, n);
            }
        }
    } else {
        for c in cands.iter_mut() {
            if let Ok(i) = generated.binary_search_by_key(&c.0, |g| g.0) {
                c.1 = sub(c.1, generated[i].1);
            }
        }
    }
}

/// Top-k, top-p and min-p on non-empty, NaN-free candidates, best first when `sorted`.
fn filter<'s>(
    cands: &'s mut Vec<(u32, f32)>,
    mut sorted: bool,
    cfg: &SamplerConfig,
) -> Result<Filtered<'s>, SamplingError> {
    let k = cfg.top_k;
    if k > 0 {
        if !sorted {
            if k < cands.len() {
                cands.select_nth_unstable_by(k - 1, order);
                cands.truncate(k);
            }
            cands.sort_unstable_by(order);
            sorted = true;
        } else {
            cands.truncate(k);
        }
    }
    let max = if sorted {
        cands[0].1
    } else {
        cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1))
    };
    if max == f32::NEG_INFINITY {
        return Err(SamplingError::NoFiniteScore);
    }
    if max == f32::INFINITY {
        // All the mass is on the +inf candidates: the best of them, like greedy.
        if let Some(&best) = cands.iter().min_by(|a, b| order(a, b)) {
            cands.clear();
            cands.push(best);
        }
        return Ok(Filtered { cands, max });
    }
    if cfg.top_p < 1.0 {
        top_p(cands, &mut sorted, max, cfg.top_p);
    }
    if cfg.min_p > 0.0 {
        // llama.cpp's form: p_i >= min_p * p_max  <=>  s_i >= s_max + ln(min_p).
        let floor = max + cfg.min_p.ln();
        cands.retain(|c| c.1 >= floor);
    }
    // Neither top-p nor min-p drops the best, so `max` still holds.
    Ok(Filtered { cands, max })
}

/// Keeps the smallest best-first prefix of `cands` whose softmax mass reaches `p` (all of
/// them when rounding never lets it), leaving `cands` sorted. Unsorted candidates are sorted
/// only as far as needed: blocks of growing size are selected from the rest and sorted.
fn top_p(cands: &mut Vec<(u32, f32)>, sorted: &mut bool, max: f32, p: f32) {
    let max = f64::from(max);
    let weight = |s: f32| (f64::from(s) - max).exp();
    let total: f64 = cands.iter().map(|c| weight(c.1)).sum();
    let target = f64::from(p) * total;
    let len = cands.len();
    let mut cum = 0.0;
    let mut done = 0;
    while done < len {
        let end = if *sorted {
            len
        } else {
            let end = (done * 4).max(64).min(len);
            let rest = &mut cands[done..];
            if end < len {
                rest.select_nth_unstable_by(end - done - 1, order);
            }
            cands[done..end].sort_unstable_by(order);
            end
        };
        for i in done..end {
            cum += weight(cands[i].1);
            if cum >= target {
                cands.truncate(i + 1);
                *sorted = true;
                return;
            }
        }
        done = end;
    }
    *sorted = true;
}

impl Filtered<'_> {
    /// The softmax weight (unnormalized: the best's is 1) of a score at `temperature`.
    /// With a +inf best, that one alone (the only candidate left) weighs 1.
    fn weight(&self, temperature: f32) -> impl Fn(f32) -> f64 {
        let t = f64::from(temperature);
        let max = f64::from(self.max);
        let inf = self.max == f32::INFINITY;
        move |s: f32| {
            if inf {
                1.0
            } else {
                ((f64::from(s) - max) / t).exp()
            }
        }
    }

    /// The candidate where `u` (in [0, 1)) falls in the cumulative softmax at `temperature`.
    fn draw(&self, temperature: f32, u: f64) -> u32 {
        let w = self.weight(temperature);
        let total: f64 = self.cands.iter().map(|c| w(c.1)).sum();
        let r = u * total;
        let mut cum = 0.0;
        let mut last = self.cands[0].0;
        for c in self.cands {
            let wi = w(c.1);
            if wi > 0.0 {
                cum += wi;
                last = c.0;
                if r < cum {
                    return c.0;
                }
            }
        }
        // Rounding left `r` at the very top: the last candidate with any weight.
        last
    }
}

/// A uniform number in [0, 1) from the top 53 bits of a `u64`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests;
