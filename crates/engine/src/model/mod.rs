//! Models: the configuration read from a file's metadata ([`config`]), the weights by name
//! ([`weights`]), and each architecture's forward pass written once as a list of ops
//! ([`llama`], [`bitnet`]), which a backend plans once per pass shape and runs per batch.

pub mod bitnet;
pub mod config;
pub mod gemma;
pub mod llama;
pub mod lora;
pub mod rdrr;
pub mod weights;

pub use config::{Arch, ModelConfig};
pub use lora::{AdapterData, AdapterId};
pub use rdrr::RdrrModel;
pub use weights::{AsyncTensorSource, FileSpan, GgufTensors, ReadySource, TensorSource, Weights};

use crate::backend::{Arithmetic, Backend, KvShape, KvType};
use crate::error::{BatchError, ModelError};
use crate::pass::{Batch, Logits, Names, Pass, Readback, Tensor, Tokens};
use crate::Error;

/// The activation buffers of a forward pass, sized for the backend's largest batch.
pub struct RunState {
    /// The residual stream `(n, dim)`.
    pub x: Tensor,
    /// Normed input of a sub-block `(n, dim)`.
    pub xb: Tensor,
    /// A sub-block's output before the residual add `(n, dim)`.
    pub xb2: Tensor,
    /// `(n, n_heads, head_dim)`.
    pub q: Tensor,
    /// `(n, n_kv_heads, head_dim)`.
    pub k: Tensor,
    pub v: Tensor,
    /// q and k with each head RMS-normed (Qwen3), `None` where the architecture has no such
    /// norm.
    pub q_normed: Option<Tensor>,
    pub k_normed: Option<Tensor>,
    /// Attention output `(n, n_heads, head_dim)`, and its sub-normed form (BitNet).
    pub att: Tensor,
    pub att_normed: Tensor,
    /// FFN hidden `(n, ffn_dim)`: gate, up, and the sub-normed product (BitNet).
    pub hb: Tensor,
    pub hb2: Tensor,
    pub hb_normed: Tensor,
    /// Each span's last residual row and its norm `(n_seqs, dim)`.
    pub x_last: Tensor,
    pub xb_last: Tensor,
    /// `(logits_rows, n_vocab)`.
    pub logits: Tensor,
    /// Rows of logits one pass can return: the batch, or fewer where a batch of logits would
    /// exceed the backend's largest tensor (a 128k vocabulary at 512 tokens is 250 MiB,
    /// WebGPU's default binding limit 128 MiB).
    pub logits_rows: usize,
}

impl RunState {
    fn new<B: Backend>(
        b: &mut B,
        c: &ModelConfig,
        n_seqs: usize,
        names: &mut Names,
    ) -> Result<Self, Error> {
        let limits = b.limits();
        let n = limits.max_batch;
        let logits_rows = n
            .min(limits.max_tensor_len / c.n_vocab.max(1))
            .max(n_seqs.min(n))
            .max(1);
        let q_dim = c.n_heads * c.head_dim;
        let kv_dim = c.n_kv_heads * c.head_dim;
        let mut alloc = |name: &str, len: usize| -> Result<Tensor, Error> {
            let t = b.alloc(name, len)?;
            names.tensor_named(t, name);
            Ok(t)
        };
        Ok(RunState {
            x: alloc("x", n * c.dim)?,
            xb: alloc("xb", n * c.dim)?,
            xb2: alloc("xb2", n * c.dim)?,
            q: alloc("q", n * q_dim)?,
            k: alloc("k", n * kv_dim)?,
            v: alloc("v", n * kv_dim)?,
            q_normed: match c.arch.has_qk_norm() {
                true => Some(alloc("q_normed", n * q_dim)?),
                false => None,
            },
            k_normed: match c.arch.has_qk_norm() {
                true => Some(alloc("k_normed", n * kv_dim)?),
                false => None,
            },
            att: alloc("att", n * q_dim)?,
            att_normed: alloc("att_normed", n * q_dim)?,
            hb: alloc("hb", n * c.ffn_dim)?,
            hb2: alloc("hb2", n * c.ffn_dim)?,
            hb_normed: alloc("hb_normed", n * c.ffn_dim)?,
            x_last: alloc("x_last", n_seqs * c.dim)?,
            xb_last: alloc("xb_last", n_seqs * c.dim)?,
            logits: alloc("logits", logits_rows * c.n_vocab)?,
            logits_rows,
        })
    }
}

/// What a pass's plan depends on: its rows, the rows the head reads, and the readback.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PassShape {
    tokens: usize,
    last_rows: Vec<usize>,
    readback: Readback,
}

/// Plans kept per model (decode, a prefill's full and last batches, a few readbacks).
const MAX_PLANS: usize = 12;

/// A model on a backend: configuration, weights, activations and a KV cache of `n_seqs`
/// sequences of `ctx` positions.
pub struct Model<B: Backend> {
    pub config: ModelConfig,
    pub backend: B,
    pub weights: Weights,
    pub state: RunState,
    /// Positions the KV cache holds per sequence.
    pub ctx: usize,
    /// Sequences the KV cache holds.
    pub n_seqs: usize,
    /// The names of the buffers, for printed plans.
    pub names: Names,
    /// Plans by pass shape, most recently used last.
    plans: Vec<(PassShape, B::Plan)>,
}

impl<B: Backend> Model<B> {
    /// Load a model's weights onto `backend` with a KV cache of `ctx` positions (at most the
    /// model's trained context; 0 means the trained context) for one sequence.
    pub fn load(
        backend: B,
        config: ModelConfig,
        src: &dyn TensorSource,
        ctx: usize,
    ) -> Result<Self, Error> {
        weights::run_ready(Self::load_async(
            backend,
            config,
            &weights::ReadySource(src),
            ctx,
        ))
    }

    /// [`Model::load`] from an asynchronous source (the browser's main thread), a tensor at a
    /// time.
    pub async fn load_async<S: AsyncTensorSource>(
        backend: B,
        config: ModelConfig,
        src: &S,
        ctx: usize,
    ) -> Result<Self, Error> {
        Self::load_sequences(backend, config, src, ctx, 1).await
    }

    /// [`Model::load_async`] with a KV cache for `n_seqs` sequences.
    pub async fn load_sequences<S: AsyncTensorSource>(
        mut backend: B,
        config: ModelConfig,
        src: &S,
        ctx: usize,
        n_seqs: usize,
    ) -> Result<Self, Error> {
        let ctx = if ctx == 0 { config.context_length } else { ctx };
        if ctx == 0 || n_seqs == 0 {
            return Err(ModelError::EmptyCache {
                context: ctx,
                sequences: n_seqs,
            }
            .into());
        }
        let mut config = config;
        if let Some(f) = weights::rope_freq_factors_async(src, &config, ctx).await? {
            config.rope.freq_factors = Some(f);
        }
        let mut names = Names::default();
        let weights = Weights::load_async(&mut backend, &config, src, &mut names).await?;
        let state = RunState::new(&mut backend, &config, n_seqs, &mut names)?;
        let mut kv = KvShape {
            n_layers: config.n_layers,
            max_ctx: ctx,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            n_seqs,
            dtype: KvType::F32,
        };
        kv.dtype = match backend.limits().arithmetic {
            Arithmetic::Exact => KvType::F32,
            Arithmetic::Fast => backend
                .kv_request()
                .unwrap_or_else(|| KvType::default_for(&kv)),
        };
        backend.init_cache(kv, &config.ropes())?;
        Ok(Model {
            config,
            backend,
            weights,
            state,
            ctx,
            n_seqs,
            names,
            plans: Vec::new(),
        })
    }

    /// The ops of a pass over `batch` reading back `readback`, as the architecture writes
    /// them: the blocks, then the head.
    pub fn ops(&self, batch: &Batch, readback: Readback) -> Result<Pass, Error> {
        let n = batch.tokens();
        let mut p = Pass {
            tokens: n,
            ops: Vec::new(),
        };
        let (c, w, s) = (&self.config, &self.weights, &self.state);
        match c.arch {
            config::Arch::Llama
            | config::Arch::Qwen2
            | config::Arch::Qwen3
            | config::Arch::Phi3 => llama::forward(c, w, s, n, &mut p)?,
            config::Arch::BitNet => bitnet::forward(c, w, s, n, &mut p)?,
            config::Arch::Gemma2 | config::Arch::Gemma3 => gemma::forward(c, w, s, n, &mut p)?,
        }
        self.head(&batch.last_rows(), n, readback, &mut p)?;
        p.set_activations(|w, rows| self.backend.activations(w, rows));
        Ok(p)
    }

    /// The final norm and the LM head: over every token when all logits are read back, over
    /// each span's last token otherwise, and not at all when nothing is.
    fn head(
        &self,
        last_rows: &[usize],
        n: usize,
        readback: Readback,
        p: &mut Pass,
    ) -> Result<(), Error> {
        let (c, w, s) = (&self.config, &self.weights, &self.state);
        match readback {
            Readback::Nothing => {}
            Readback::All if n > s.logits_rows => {
                return Err(BatchError::LogitsTooLarge {
                    tokens: n,
                    max: s.logits_rows,
                }
                .into())
            }
            Readback::All => {
                p.rms_norm(s.x, w.output_norm, s.xb, n, c.dim, c.eps); // xb: (n, dim)
                p.matmul(w.output, s.xb, s.logits, n); // logits: (n, n_vocab)
                if c.final_softcap > 0.0 {
                    p.softcap(s.logits, n * c.n_vocab, c.final_softcap);
                }
                p.read(s.logits, n, c.n_vocab, readback);
            }
            Readback::Last | Readback::TopK(_) => {
                let rows = last_rows.len();
                // Each span's last row (a pass of one token: the stream itself, no copy).
                let last = if n == 1 {
                    s.x
                } else {
                    for (i, &r) in last_rows.iter().enumerate() {
                        p.copy_row(s.x, r, c.dim, s.x_last, i); // x_last: (spans, dim)
                    }
                    s.x_last
                };
                p.rms_norm(last, w.output_norm, s.xb_last, rows, c.dim, c.eps);
                p.matmul(w.output, s.xb_last, s.logits, rows); // logits: (spans, n_vocab)
                if c.final_softcap > 0.0 {
                    p.softcap(s.logits, rows * c.n_vocab, c.final_softcap);
                }
                p.read(s.logits, rows, c.n_vocab, readback);
            }
        }
        Ok(())
    }

    /// The backend's plan of a pass over `batch` (made once per shape and kept), moved to
    /// the end of the list; its index.
    fn plan(&mut self, batch: &Batch, readback: Readback) -> Result<usize, Error> {
        let shape = PassShape {
            tokens: batch.tokens(),
            last_rows: batch.last_rows(),
            readback,
        };
        match self.plans.iter().position(|(s, _)| *s == shape) {
            Some(i) => {
                let entry = self.plans.remove(i);
                self.plans.push(entry);
            }
            None => {
                let ops = self.ops(batch, readback)?;
                let plan = self.backend.plan(&ops)?;
                if self.plans.len() >= MAX_PLANS {
                    self.plans.remove(0);
                }
                self.plans.push((shape, plan));
            }
        }
        Ok(self.plans.len() - 1)
    }

    /// A pass over `batch` as the architecture writes it and as the backend runs it, one line
    /// per op (`tritium run --plan`).
    pub fn plan_text(
        &mut self,
        batch: &Batch,
        readback: Readback,
    ) -> Result<(Vec<String>, Vec<String>), Error> {
        let ops = self.ops(batch, readback)?;
        let written = ops.ops.iter().map(|o| o.describe(&self.names)).collect();
        let i = self.plan(batch, readback)?;
        Ok((
            written,
            self.backend.plan_lines(&self.plans[i].1, &self.names),
        ))
    }

    /// Upload a LoRA adapter read and checked against this model ([`AdapterData::read`]); it
    /// applies once [`Model::set_adapters`] names it.
    pub fn load_adapter(&mut self, data: &AdapterData) -> Result<AdapterId, Error> {
        let lora = &mut self.weights.lora;
        lora.load(&mut self.backend, &self.config, data, &mut self.names)
    }

    /// Apply these loaded adapters with their scales from the next pass on (none: the base
    /// model). Returns whether anything changed: the keys and values cached under other
    /// adapters are then stale.
    pub fn set_adapters(&mut self, active: &[(AdapterId, f32)]) -> Result<bool, Error> {
        let (ops, any) = self.weights.lora.set(&mut self.backend, active)?;
        if ops {
            self.plans.clear();
        }
        Ok(any)
    }

    /// Forget every plan (after a change to how the backend plans, such as a fusion rule
    /// turned off for a comparison).
    pub fn clear_plans(&mut self) {
        self.plans.clear();
    }

    /// Record a pass over `batch` that reads back `readback` (submitted by
    /// [`Model::submit`]). A GPU encodes a one-token pass now, while the pass before it may
    /// still run.
    pub fn record(&mut self, batch: &Batch, readback: Readback) -> Result<B::Recorded, Error> {
        self.check_batch(batch)?;
        let i = self.plan(batch, readback)?;
        self.backend.record(&self.plans[i].1, batch)
    }

    /// Submit a recorded pass with its token ids (checked against the vocabulary).
    pub fn submit(&mut self, pass: B::Recorded, tokens: Tokens<'_>) -> Result<B::Pending, Error> {
        if let Tokens::Ids(ids) = tokens {
            if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.config.n_vocab) {
                return Err(BatchError::TokenOutOfVocab {
                    id: bad,
                    n_vocab: self.config.n_vocab,
                }
                .into());
            }
        }
        self.backend.submit(pass, tokens)
    }

    /// What a submitted pass read back.
    pub async fn wait(&mut self, pending: B::Pending) -> Result<Logits, Error> {
        self.backend.wait(pending).await
    }

    /// One pass over `ids` at positions `pos0 ..` of sequence 0: record, submit, wait.
    pub async fn forward(
        &mut self,
        ids: &[u32],
        pos0: usize,
        readback: Readback,
    ) -> Result<Logits, Error> {
        let pass = self.record(&Batch::one(pos0, ids.len()), readback)?;
        let pending = self.submit(pass, Tokens::Ids(ids))?;
        self.wait(pending).await
    }

    /// A batch fits: at most one span per sequence, each inside the context.
    fn check_batch(&self, batch: &Batch) -> Result<(), Error> {
        for (i, s) in batch.spans.iter().enumerate() {
            if s.pos0 + s.len > self.ctx {
                return Err(BatchError::PastContext {
                    tokens: s.len,
                    pos0: s.pos0,
                    context: self.ctx,
                }
                .into());
            }
            if s.seq >= self.n_seqs || batch.spans[..i].iter().any(|o| o.seq == s.seq) {
                return Err(BatchError::BadSequence {
                    seq: s.seq,
                    n_seqs: self.n_seqs,
                }
                .into());
            }
        }
        Ok(())
    }
}
