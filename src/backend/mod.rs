//! The ops a model's forward pass is written against, and the backends that run them: the CPU
//! ([`cpu::CpuBackend`], the reference) and wgpu ([`gpu::GpuBackend`], WebGPU in the browser,
//! Vulkan/Metal natively).
//!
//! A backend owns every buffer: the model asks for activation buffers ([`Tensor`]) and uploads
//! weights ([`Weight`]) once, then each forward pass is a sequence of op calls between
//! [`Backend::begin`] and [`Backend::finish`]. The CPU backend runs each op as it is called; the
//! GPU backend records it (building its uniforms and bind groups the first time a call with the
//! same buffers and shape is seen, reusing them afterwards) and submits the whole pass at
//! `finish`, reading back only what was asked for.
//!
//! Layouts are row-major f32: a batch of `n` rows of `dim` values is `x[row * dim + i]`.

pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;
#[cfg(feature = "gpu")]
pub mod profile;

use crate::cpu::ops::RopeConfig;
use crate::quant::GgmlType;

pub use crate::cpu::ops::AttentionShape;

/// An f32 buffer owned by a backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tensor(pub(crate) u32);

/// A weight matrix owned by a backend, in its file format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Weight(pub(crate) u32);

/// A `[rows, cols]` weight as the file stores it.
#[derive(Clone, Copy, Debug)]
pub struct WeightData<'a> {
    pub name: &'a str,
    pub dtype: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// The tensor's bytes (for I2_S including the trailing scale).
    pub bytes: &'a [u8],
    /// A separate per-tensor scale the weight is multiplied by (upstream llama.cpp's
    /// `blk.N.<name>.scale` for TQ1_0/TQ2_0 BitNet files); I2_S carries its own.
    pub scale: Option<f32>,
}

/// Which function of `(first, second)` [`Backend::elementwise`] computes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// `first + second` (residual add).
    Add,
    /// `silu(first) * second` (Llama FFN).
    SiluMul,
    /// `max(first, 0)^2` (no second operand).
    ReluSquared,
    /// `max(first, 0)^2 * second` (BitNet FFN: `relu(gate)^2 * up`).
    ReluSquaredMul,
}

impl Elementwise {
    /// Whether the function reads a second operand.
    pub fn takes_second(self) -> bool {
        self != Elementwise::ReluSquared
    }
}

/// What [`Backend::norm_bitlinear`] and [`Backend::norm_matmul`] do with their products.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Combine {
    /// Each product stays in its output.
    Separate,
    /// `outs[0] = relu(outs[0])^2 * outs[1]` over `len` values (BitNet's FFN); `outs[1]` is
    /// scratch.
    ReluSquaredMul { len: usize },
    /// `outs[0] = silu(outs[0]) * outs[1]` over `len` values (Llama's FFN); `outs[1]` is
    /// scratch.
    SiluMul { len: usize },
    /// `residual += outs[0]` over `len` values; `outs[0]` is scratch.
    AddTo { residual: Tensor, len: usize },
    /// The products are q, k and v (`outs[0..3]`): `rope(q, n_heads)`, `rope(k, n_kv_heads)`,
    /// then `attention(layer, q, k, v, out, n_heads)` (Llama's attention). q, k and v are
    /// scratch afterwards (a backend may leave them unnormed and apply the norm in the
    /// attention).
    Attention {
        layer: usize,
        n_heads: usize,
        n_kv_heads: usize,
        out: Tensor,
    },
}

/// The arguments of [`Backend::norm_bitlinear`] and [`Backend::norm_matmul`]: an RMSNorm, the
/// products of its output, and what is done with them.
#[derive(Copy, Clone, Debug)]
pub struct NormProducts<'a> {
    /// `(n, dim)` rows to normalize.
    pub x: Tensor,
    /// The norm's weight, `dim` values.
    pub norm: Tensor,
    pub eps: f32,
    pub dim: usize,
    /// Rows (tokens).
    pub n: usize,
    /// Scratch for the normed rows, `(n, dim)`: what it holds afterwards is unspecified.
    pub normed: Tensor,
    /// The weights taking the normed rows (BitLinear ones for `norm_bitlinear`), and their
    /// outputs.
    pub weights: &'a [Weight],
    pub outs: &'a [Tensor],
    pub combine: Combine,
}

/// [`Backend::norm_bitlinear`] as separate ops: the definition, and what a backend without a
/// fused form of a call runs.
pub fn norm_bitlinear_steps<B: Backend + ?Sized>(
    b: &mut B,
    c: &NormProducts<'_>,
) -> Result<(), crate::Error> {
    norm_product_steps(b, c, "norm_bitlinear", |b, w, x, out, n| {
        b.bitlinear(w, x, out, n)
    })
}

/// [`Backend::norm_matmul`] as separate ops: the definition, and what a backend without a
/// fused form of a call runs.
pub fn norm_matmul_steps<B: Backend + ?Sized>(
    b: &mut B,
    c: &NormProducts<'_>,
) -> Result<(), crate::Error> {
    norm_product_steps(b, c, "norm_matmul", |b, w, x, out, n| {
        b.matmul(w, x, out, n)
    })
}

/// The norm, each `product` of its output, then the combination.
fn norm_product_steps<B: Backend + ?Sized>(
    b: &mut B,
    c: &NormProducts<'_>,
    what: &str,
    product: impl Fn(&mut B, Weight, Tensor, Tensor, usize) -> Result<(), crate::Error>,
) -> Result<(), crate::Error> {
    if c.weights.is_empty() || c.weights.len() != c.outs.len() {
        return Err(crate::Error::Usage(format!(
            "{what} with {} weights and {} outputs",
            c.weights.len(),
            c.outs.len()
        )));
    }
    b.rms_norm(c.x, c.norm, c.normed, c.n, c.dim, c.eps)?;
    for (&w, &out) in c.weights.iter().zip(c.outs) {
        product(b, w, c.normed, out, c.n)?;
    }
    let gated = |f: Elementwise, b: &mut B, len| match c.outs {
        [gate, up] => b.elementwise(f, *gate, None, Some(*up), len),
        _ => Err(crate::Error::Usage(format!(
            "a gated {what} takes two weights (gate, up)"
        ))),
    };
    match c.combine {
        Combine::Separate => Ok(()),
        Combine::ReluSquaredMul { len } => gated(Elementwise::ReluSquaredMul, b, len),
        Combine::SiluMul { len } => gated(Elementwise::SiluMul, b, len),
        Combine::AddTo { residual, len } => {
            b.elementwise(Elementwise::Add, residual, None, Some(c.outs[0]), len)
        }
        Combine::Attention {
            layer,
            n_heads,
            n_kv_heads,
            out,
        } => match c.outs {
            [q, k, v] => {
                b.rope(*q, n_heads)?;
                b.rope(*k, n_kv_heads)?;
                b.attention(layer, *q, *k, *v, out, n_heads)
            }
            _ => Err(crate::Error::Usage(format!(
                "an attention {what} takes three weights (q, k, v)"
            ))),
        },
    }
}

/// [`Backend::matmul_add`] as separate ops: the definition, and what a backend runs where it
/// has no fused form of a call.
pub fn matmul_add_steps<B: Backend + ?Sized>(
    b: &mut B,
    w: Weight,
    x: Tensor,
    scratch: Tensor,
    residual: Tensor,
    rows: usize,
    len: usize,
) -> Result<(), crate::Error> {
    b.matmul(w, x, scratch, rows)?;
    b.elementwise(Elementwise::Add, residual, None, Some(scratch), len)
}

/// What [`Backend::finish`] reads back from a `(rows, vocab)` logits buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Readback {
    /// Every row (the `logits` command; costs `rows * vocab * 4` bytes).
    All,
    /// The last row in full (sampling that needs the whole distribution).
    Last,
    /// The best `k` `(id, logit)` of the last row, best first.
    TopK(usize),
    /// Nothing (prefill chunks before the last).
    Nothing,
}

/// What a forward pass returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Logits {
    /// `rows * vocab` values (All) or `vocab` values (Last).
    Full(Vec<f32>),
    /// Best first, ties by lower id.
    Top(Vec<(u32, f32)>),
    None,
}

/// Everything one layer's KV cache needs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub max_ctx: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// What every backend checks when a pass starts: `1 ..= max_batch` tokens, at positions inside
/// the cache (when it exists).
fn check_pass(
    n: usize,
    max_batch: usize,
    pos0: usize,
    max_ctx: Option<usize>,
) -> Result<(), crate::Error> {
    if n == 0 || n > max_batch {
        return Err(crate::Error::Usage(format!(
            "a forward pass of {n} tokens (1 ..= {max_batch})"
        )));
    }
    if let Some(max_ctx) = max_ctx.filter(|&m| pos0 + n > m) {
        return Err(crate::Error::Usage(format!(
            "positions {pos0} .. {} exceed the context of {max_ctx} tokens",
            pos0 + n
        )));
    }
    Ok(())
}

/// The ops of a forward pass. Errors are [`crate::Error`] (a GPU op that cannot be built, a
/// shape the backend does not support); a backend never panics on model data.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// A short description (`cpu`, `gpu: NVIDIA H200 (Vulkan)`).
    fn describe(&self) -> String;

    /// Most tokens one forward pass takes (activation buffers are sized for it).
    fn max_batch(&self) -> usize;

    /// Most f32 values one tensor may hold (a GPU's largest storage binding).
    fn max_tensor_len(&self) -> usize {
        usize::MAX
    }

    /// Upload a weight in its file format.
    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, crate::Error>;

    /// An f32 vector (norm weights) uploaded once.
    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, crate::Error>;

    /// A zeroed activation buffer of `len` f32.
    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, crate::Error>;

    /// Create the KV cache and the RoPE table (once per model, before the first pass).
    fn init_cache(&mut self, kv: KvShape, rope: &RopeConfig) -> Result<(), crate::Error>;

    /// Bytes this backend holds for weights, activations and cache.
    fn bytes_used(&self) -> u64;

    /// Start a forward pass over `ids` (at most [`Backend::max_batch`]) at positions
    /// `pos0 ..`.
    fn begin(&mut self, ids: &[u32], pos0: usize) -> Result<(), crate::Error>;

    /// `out[t, :] = table[ids[t], :]` for the pass's tokens.
    fn embed(&mut self, table: Weight, out: Tensor) -> Result<(), crate::Error>;

    /// `out[r, :] = rmsnorm(x[r, :]) * weight` for `rows` rows of `weight`'s length `dim`.
    fn rms_norm(
        &mut self,
        x: Tensor,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
    ) -> Result<(), crate::Error>;

    /// `out[t, :] = W x[t, :]` for `rows` rows of x (f32 activations; a separate scale of the
    /// weight is applied).
    fn matmul(
        &mut self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        rows: usize,
    ) -> Result<(), crate::Error>;

    /// `residual[t, :] += W x[t, :]` for `rows` rows: [`Self::matmul`] into `scratch` (what it
    /// holds afterwards is unspecified), then [`Elementwise::Add`] over `len` values. The GPU
    /// adds a one-token integer-dot product to the residual in the product's own dispatch.
    fn matmul_add(
        &mut self,
        w: Weight,
        x: Tensor,
        scratch: Tensor,
        residual: Tensor,
        rows: usize,
        len: usize,
    ) -> Result<(), crate::Error> {
        matmul_add_steps(self, w, x, scratch, residual, rows, len)
    }

    /// BitLinear: `out[t, :] = (W_ternary . q(x[t, :])) * weight_scale / s_t` with `q` the
    /// per-token int8 absmax quantization (transformers' BitNet).
    fn bitlinear(
        &mut self,
        w: Weight,
        x: Tensor,
        out: Tensor,
        rows: usize,
    ) -> Result<(), crate::Error>;

    /// RMSNorm of `c.x`, then BitLinear of the normed rows by each of `c.weights`, then
    /// `c.combine` ([`norm_bitlinear_steps`] defines it). The GPU runs a one-token call as one
    /// dispatch where the weights allow.
    fn norm_bitlinear(&mut self, c: NormProducts<'_>) -> Result<(), crate::Error> {
        norm_bitlinear_steps(self, &c)
    }

    /// RMSNorm of `c.x`, then [`Self::matmul`] of the normed rows by each of `c.weights`, then
    /// `c.combine` ([`norm_matmul_steps`] defines it). The GPU folds a one-token call's norm into
    /// the residual add before it and the gated product after it where the weights allow
    /// (Llama's FFN: the norm then has no dispatch of its own).
    fn norm_matmul(&mut self, c: NormProducts<'_>) -> Result<(), crate::Error> {
        norm_matmul_steps(self, &c)
    }

    /// Rotate `x: (n_tokens, n_heads, head_dim)` in place at the pass's positions.
    fn rope(&mut self, x: Tensor, n_heads: usize) -> Result<(), crate::Error>;

    /// Append the pass's `k`, `v` to layer `layer` of the cache at the pass's positions, then
    /// causal attention of `q` over positions `0 ..= pos`: `out: (n_tokens, n_heads, head_dim)`.
    /// What `q` and `k` hold afterwards is unspecified (the GPU folds their RoPE into this op
    /// and leaves them unrotated).
    fn attention(
        &mut self,
        layer: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        n_heads: usize,
    ) -> Result<(), crate::Error>;

    /// `out[i] = f(first[i], second[i])` for `len` values (`first: None`: in place on `out`).
    fn elementwise(
        &mut self,
        f: Elementwise,
        out: Tensor,
        first: Option<Tensor>,
        second: Option<Tensor>,
        len: usize,
    ) -> Result<(), crate::Error>;

    /// `dst[0 .. cols] = src[row * cols ..][.. cols]`.
    fn copy_row(
        &mut self,
        src: Tensor,
        row: usize,
        cols: usize,
        dst: Tensor,
    ) -> Result<(), crate::Error>;

    /// A submitted pass whose readback has not been collected yet ([`Backend::wait`]).
    type Pending;

    /// Whether a submitted pass runs while the host records the next one (a GPU), so that
    /// submitting greedy passes ahead with [`Backend::begin_chained`] saves time.
    fn runs_ahead(&self) -> bool {
        false
    }

    /// Start a one-token pass at `pos0` whose token is the best candidate (the top-1 of the
    /// last row) of the most recently submitted pass that read back [`Readback::TopK`],
    /// taken where that pass ran: the GPU feeds its own argmax to the next pass, so greedy
    /// decoding records and submits token `t + 1` while token `t` is still running.
    fn begin_chained(&mut self, pos0: usize) -> Result<(), crate::Error>;

    /// A pass recorded and encoded but not submitted ([`Backend::prepare`]).
    type Prepared;

    /// Start a one-token pass at `pos0` whose token is not known yet. It is recorded and
    /// encoded now ([`Backend::prepare`]), while the device still runs the pass before it, and
    /// submitted once the host has sampled its token ([`Backend::submit_prepared`]), so the
    /// device does not wait for the encoding after every sampled token. Backends that run
    /// passes as they are recorded do not offer it ([`Backend::runs_ahead`] is false).
    fn begin_deferred(&mut self, pos0: usize) -> Result<(), crate::Error> {
        let _ = pos0;
        Err(crate::Error::Usage(
            "this backend does not prepare passes ahead".into(),
        ))
    }

    /// End a pass begun with [`Backend::begin_deferred`] as [`Backend::submit`] would, without
    /// submitting it.
    fn prepare(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<Self::Prepared, crate::Error> {
        let _ = (logits, rows, vocab, readback);
        Err(crate::Error::Usage(
            "this backend does not prepare passes ahead".into(),
        ))
    }

    /// Submit a prepared pass with its token `id` (the last submitted pass is its
    /// predecessor: its keys and values are in the cache by the time this one runs). A
    /// prepared pass that is dropped instead is never run.
    fn submit_prepared(
        &mut self,
        prepared: Self::Prepared,
        id: u32,
    ) -> Result<Self::Pending, crate::Error> {
        let _ = (prepared, id);
        Err(crate::Error::Usage(
            "this backend does not prepare passes ahead".into(),
        ))
    }

    /// End the pass: the GPU submits it, with the copy of what `readback` asks for from
    /// `logits: (rows, vocab)`, and returns without waiting.
    fn submit(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<Self::Pending, crate::Error>;

    /// Wait for a submitted pass and return what it read back. Passes may be waited for in
    /// submission order only.
    async fn wait(&mut self, pending: Self::Pending) -> Result<Logits, crate::Error>;

    /// [`Backend::submit`], then [`Backend::wait`].
    async fn finish(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<Logits, crate::Error> {
        let pending = self.submit(logits, rows, vocab, readback)?;
        self.wait(pending).await
    }
}
