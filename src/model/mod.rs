//! Models: the configuration read from a file's metadata ([`config`]), the weights by name
//! ([`weights`]), and one forward pass per architecture written once against
//! [`crate::backend::Backend`] ([`llama`], [`bitnet`]).

pub mod bitnet;
pub mod config;
pub mod llama;
pub mod rdrr;
pub mod weights;

pub use config::{Arch, ModelConfig};
pub use rdrr::RdrrModel;
pub use weights::{AsyncTensorSource, GgufTensors, ReadySource, TensorSource, Weights};

use crate::backend::{Backend, KvShape, Logits, Readback, Tensor};
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
    /// Attention output `(n, n_heads, head_dim)`, and its sub-normed form (BitNet).
    pub att: Tensor,
    pub att_normed: Tensor,
    /// FFN hidden `(n, ffn_dim)`: gate, up, and the sub-normed product (BitNet).
    pub hb: Tensor,
    pub hb2: Tensor,
    pub hb_normed: Tensor,
    /// The last token's residual and normed residual `(1, dim)`.
    pub x_last: Tensor,
    pub xb_last: Tensor,
    /// `(logits_rows, n_vocab)`.
    pub logits: Tensor,
    /// Tokens whose logits one pass can return: the batch, or fewer where a batch of logits
    /// would exceed the backend's largest tensor (a 128k vocabulary at 512 tokens is 250 MiB,
    /// WebGPU's default binding limit 128 MiB).
    pub logits_rows: usize,
}

impl RunState {
    fn new<B: Backend>(b: &mut B, c: &ModelConfig) -> Result<Self, Error> {
        let n = b.max_batch();
        let logits_rows = n.min(b.max_tensor_len() / c.n_vocab.max(1)).max(1);
        let q_dim = c.n_heads * c.head_dim;
        let kv_dim = c.n_kv_heads * c.head_dim;
        Ok(RunState {
            x: b.alloc("x", n * c.dim)?,
            xb: b.alloc("xb", n * c.dim)?,
            xb2: b.alloc("xb2", n * c.dim)?,
            q: b.alloc("q", n * q_dim)?,
            k: b.alloc("k", n * kv_dim)?,
            v: b.alloc("v", n * kv_dim)?,
            att: b.alloc("att", n * q_dim)?,
            att_normed: b.alloc("att_normed", n * q_dim)?,
            hb: b.alloc("hb", n * c.ffn_dim)?,
            hb2: b.alloc("hb2", n * c.ffn_dim)?,
            hb_normed: b.alloc("hb_normed", n * c.ffn_dim)?,
            x_last: b.alloc("x_last", c.dim)?,
            xb_last: b.alloc("xb_last", c.dim)?,
            logits: b.alloc("logits", logits_rows * c.n_vocab)?,
            logits_rows,
        })
    }
}

/// A model on a backend: configuration, weights, activations and a KV cache of `ctx`
/// positions.
pub struct Model<B: Backend> {
    pub config: ModelConfig,
    pub backend: B,
    pub weights: Weights,
    pub state: RunState,
    /// Positions the KV cache holds.
    pub ctx: usize,
}

impl<B: Backend> Model<B> {
    /// Load a model's weights onto `backend` with a KV cache of `ctx` positions (at most the
    /// model's trained context; 0 means the trained context).
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
        mut backend: B,
        config: ModelConfig,
        src: &S,
        ctx: usize,
    ) -> Result<Self, Error> {
        let ctx = if ctx == 0 { config.context_length } else { ctx };
        if ctx == 0 {
            return Err(Error::Usage("a context of zero tokens".into()));
        }
        let mut config = config;
        if let Some(f) = weights::rope_freq_factors_async(src).await? {
            config.rope.freq_factors = Some(f);
        }
        let weights = Weights::load_async(&mut backend, &config, src).await?;
        let state = RunState::new(&mut backend, &config)?;
        backend.init_cache(
            KvShape {
                n_layers: config.n_layers,
                max_ctx: ctx,
                n_kv_heads: config.n_kv_heads,
                head_dim: config.head_dim,
            },
            &config.rope,
        )?;
        Ok(Model {
            config,
            backend,
            weights,
            state,
            ctx,
        })
    }

    /// One forward pass over `ids` at positions `pos0 ..` (at most the backend's batch),
    /// appending their keys and values to the cache, and reading back what `readback` asks
    /// for.
    pub async fn forward(
        &mut self,
        ids: &[u32],
        pos0: usize,
        readback: Readback,
    ) -> Result<Logits, Error> {
        let pending = self.submit(ids, pos0, readback)?;
        self.backend.wait(pending).await
    }

    /// [`Model::forward`] without waiting: the pass is submitted, [`Model::wait`] reads it.
    pub fn submit(
        &mut self,
        ids: &[u32],
        pos0: usize,
        readback: Readback,
    ) -> Result<B::Pending, Error> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.config.n_vocab) {
            return Err(Error::Usage(format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                self.config.n_vocab
            )));
        }
        self.check_room(ids.len(), pos0)?;
        self.backend.begin(ids, pos0)?;
        self.record(ids.len(), readback)
    }

    /// A one-token pass at `pos0` whose token is the best candidate of the last submitted
    /// pass that read back its top-k, chosen on the device ([`Backend::begin_chained`]):
    /// greedy decoding submits it before that pass is read back.
    pub fn submit_chained(&mut self, pos0: usize, readback: Readback) -> Result<B::Pending, Error> {
        self.check_room(1, pos0)?;
        self.backend.begin_chained(pos0)?;
        self.record(1, readback)
    }

    /// A one-token pass at `pos0` recorded and encoded now, its token given later to
    /// [`Model::submit_prepared`] ([`Backend::begin_deferred`]): sampled decoding prepares
    /// the next pass while the device runs the current one.
    pub fn prepare(&mut self, pos0: usize, readback: Readback) -> Result<B::Prepared, Error> {
        self.check_room(1, pos0)?;
        self.backend.begin_deferred(pos0)?;
        let rows = self.record_ops(1, readback)?;
        let (logits, vocab) = (self.state.logits, self.config.n_vocab);
        self.backend.prepare(logits, rows, vocab, readback)
    }

    /// Submit a pass from [`Model::prepare`] with its token.
    pub fn submit_prepared(&mut self, prepared: B::Prepared, id: u32) -> Result<B::Pending, Error> {
        if id as usize >= self.config.n_vocab {
            return Err(Error::Usage(format!(
                "token id {id} is outside the vocabulary of {} tokens",
                self.config.n_vocab
            )));
        }
        self.backend.submit_prepared(prepared, id)
    }

    /// What a submitted pass read back.
    pub async fn wait(&mut self, pending: B::Pending) -> Result<Logits, Error> {
        self.backend.wait(pending).await
    }

    fn check_room(&self, n: usize, pos0: usize) -> Result<(), Error> {
        if pos0 + n > self.ctx {
            return Err(Error::Usage(format!(
                "{n} tokens at position {pos0} do not fit the context of {} tokens",
                self.ctx
            )));
        }
        Ok(())
    }

    /// Every op of a pass over `n` tokens, then the head and the submission.
    fn record(&mut self, n: usize, readback: Readback) -> Result<B::Pending, Error> {
        let rows = self.record_ops(n, readback)?;
        let (logits, vocab) = (self.state.logits, self.config.n_vocab);
        self.backend.submit(logits, rows, vocab, readback)
    }

    /// Every op of a pass over `n` tokens and the head; the rows of logits it makes.
    fn record_ops(&mut self, n: usize, readback: Readback) -> Result<usize, Error> {
        match self.config.arch {
            Arch::Llama => llama::blocks(self, n)?,
            Arch::BitNet => bitnet::blocks(self, n)?,
        }
        self.head(n, readback)
    }

    /// The final norm and the LM head: over every token when all logits are read back, over
    /// the last one otherwise, and not at all when nothing is. Returns the rows of logits.
    fn head(&mut self, n: usize, readback: Readback) -> Result<usize, Error> {
        let c = &self.config;
        let (w, s) = (&self.weights, &self.state);
        let b = &mut self.backend;
        let rows = match readback {
            Readback::Nothing => 1,
            Readback::All if n > s.logits_rows => {
                return Err(Error::Usage(format!(
                    "{n} tokens' logits do not fit one pass (at most {}: the logits of {} \
                     tokens would exceed the device's largest buffer binding)",
                    s.logits_rows, n
                )))
            }
            Readback::All => {
                b.rms_norm(s.x, w.output_norm, s.xb, n, c.dim, c.eps)?;
                b.matmul(w.output, s.xb, s.logits, n)?;
                n
            }
            Readback::Last | Readback::TopK(_) => {
                // The last row (a pass of one token: the stream itself, no copy).
                let last = match n {
                    1 => s.x,
                    _ => {
                        b.copy_row(s.x, n - 1, c.dim, s.x_last)?;
                        s.x_last
                    }
                };
                b.rms_norm(last, w.output_norm, s.xb_last, 1, c.dim, c.eps)?;
                b.matmul(w.output, s.xb_last, s.logits, 1)?;
                1
            }
        };
        Ok(rows)
    }
}
