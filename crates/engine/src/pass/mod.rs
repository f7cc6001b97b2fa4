//! A forward pass as data: the list of typed ops an architecture's `forward()` emits
//! ([`Op`]), the batch it runs over ([`Batch`]: which sequence each run of tokens belongs to and
//! where it starts), and what it reads back ([`Readback`], [`Logits`]).
//!
//! A backend never sees a model: it plans the list once per shape ([`crate::backend::Backend::plan`]:
//! the CPU runs it as written, the reference; the GPU fuses neighbouring ops by named rules)
//! and runs the plan for each batch. Buffers are handles the backend gave out: activations and
//! norm weights are f32 [`Tensor`]s, matrices are [`Weight`]s in their file format. Layouts are
//! row-major: `n` rows of `dim` values are `x[row * dim + i]`.

mod print;

pub use crate::ops::{AttentionScores, AttentionShape, Elementwise, RopeConfig};
use crate::quant::GgmlType;
pub use print::{readback_name, Names};

/// An f32 buffer owned by a backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tensor(pub(crate) u32);

/// A weight matrix owned by a backend, in its file format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Weight(pub(crate) u32);

/// How a matrix product takes its operands: part of the op's arithmetic, decided when the
/// pass is written ([`Pass::set_activations`], by the backend's [`crate::backend::Backend::activations`]),
/// so that every backend that runs the op computes the same thing.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Activations {
    /// The f32 values as they are, dotted with the dequantized weights.
    F32,
    /// Each row quantized to int8 blocks of 32 ([`crate::quant::q8dot::quantize_q8`]: `iscale =
    /// 127 / amax`, round half to even, `d = 1 / iscale`), then per block exact integer dot
    /// products with the weight's integer form, scaled by `d` and the weight's group scales
    /// ([`crate::quant::q8dot::vec_dot_q8`]): llama.cpp's decode arithmetic, which the GPU's
    /// integer-dot kernels (`dot4I8Packed`) run.
    Q8,
    /// f16 operands, f32 sums, as tensor cores take them: each row scaled by the power of
    /// two that brings its largest magnitude into [1, 2) (1 for a zero row) and rounded to f16
    /// (nearest, ties to even), each weight decoded to f32 and rounded to f16, the products
    /// summed in f32, and the sum scaled back by the power's inverse (exactly) and by the
    /// weight's own scale. The GPU's cooperative-matrix products of several tokens
    /// (`matmul_f16_coop.wgsl`) compute this, in their own order of the f32 sums.
    F16,
}

impl Activations {
    /// The rule: a product of one token through a weight whose format has an integer form
    /// (rows of whole 32-value blocks) takes int8 activations; every other product takes f32.
    /// Prefill (several tokens) stays f32: there the weights are read once for all tokens and
    /// quantizing activations saves nothing.
    pub fn q8_for(dtype: GgmlType, cols: usize, rows: usize) -> bool {
        rows == 1
            && cols > 0
            && cols % crate::quant::q8dot::QK8 == 0
            && crate::quant::q8dot::has_q8_dot(dtype)
            && dtype
                .block()
                .is_some_and(|b| cols as u64 % b.block_elems == 0)
    }

    /// The name in printed passes (`""` for f32).
    pub fn suffix(self) -> &'static str {
        match self {
            Activations::F32 => "",
            Activations::Q8 => ", q8 activations",
            Activations::F16 => ", f16 operands",
        }
    }
}

/// One step of a forward pass. Every op works on the pass's tokens in order; `rows` counts
/// the rows an op covers (the pass's tokens, or the head's rows).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `out[t, :] = table[id_t, :]` for the pass's tokens.
    Embed { table: Weight, out: Tensor },
    /// `out[r, :] = x[r, :] / rms(x[r, :]) * weight` for `rows` rows of `dim`.
    RmsNorm {
        x: Tensor,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
    },
    /// `out[r, :] = W x[r, :]` (the weight's own scale applied), with the activations taken
    /// as `act` says: as they are, or quantized to int8 blocks first ([`Activations`]).
    MatMul {
        w: Weight,
        x: Tensor,
        out: Tensor,
        rows: usize,
        act: Activations,
    },
    /// BitLinear: `out[r, :] = (W . q(x[r, :])) * scale / s_r`, `q` the per-row int8 absmax
    /// quantization (ternary weights only).
    BitLinear {
        w: Weight,
        x: Tensor,
        out: Tensor,
        rows: usize,
    },
    /// Rotate `x: (tokens, heads, head_dim)` in place, each token at its position, by RoPE
    /// table `table` (the session's configurations, [`crate::backend::Backend::init_cache`]).
    Rope {
        x: Tensor,
        heads: usize,
        table: usize,
    },
    /// Append the tokens' `k`, `v` to layer `layer` of their sequence's cache at their
    /// positions, then causal attention of `q` over that sequence's positions `0 ..= pos`
    /// (or the window `scores` gives, with its soft cap): `out: (tokens, heads, head_dim)`.
    Attention {
        layer: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        heads: usize,
        scores: AttentionScores,
    },
    /// `out[i] = f(first[i], second[i])` for `len` values (`first: None`: `out` itself).
    Elementwise {
        f: Elementwise,
        out: Tensor,
        first: Option<Tensor>,
        second: Option<Tensor>,
        len: usize,
    },
    /// `out[r, c] += bias[c]` for `rows` rows of `cols` (a linear layer's bias: Qwen2's q, k
    /// and v).
    AddBias {
        out: Tensor,
        bias: Tensor,
        rows: usize,
        cols: usize,
    },
    /// `out[r, c] *= scale[c]` for `rows` rows of `cols` (Phi-3's RoPE attention factor on the
    /// rotated dimensions of q).
    ScaleColumns {
        out: Tensor,
        scale: Tensor,
        rows: usize,
        cols: usize,
    },
    /// `x[i] = cap * tanh(x[i] / cap)` for `len` values (Gemma 2's final logits).
    Softcap { x: Tensor, len: usize, cap: f32 },
    /// `dst[dst_row, ..cols] = src[row, ..cols]`.
    CopyRow {
        src: Tensor,
        row: usize,
        cols: usize,
        dst: Tensor,
        dst_row: usize,
    },
    /// What the pass returns from `logits: (rows, vocab)`.
    Read {
        logits: Tensor,
        rows: usize,
        vocab: usize,
        what: Readback,
    },
}

impl Op {
    /// The tensors the op reads.
    pub fn reads(&self) -> Vec<Tensor> {
        match *self {
            Op::Embed { .. } => vec![],
            Op::RmsNorm { x, weight, .. } => vec![x, weight],
            Op::MatMul { x, .. } | Op::BitLinear { x, .. } => vec![x],
            Op::Rope { x, .. } | Op::Softcap { x, .. } => vec![x],
            Op::Attention { q, k, v, .. } => vec![q, k, v],
            Op::Elementwise {
                out, first, second, ..
            } => [Some(first.unwrap_or(out)), second]
                .into_iter()
                .flatten()
                .collect(),
            Op::AddBias { out, bias, .. } => vec![out, bias],
            Op::ScaleColumns { out, scale, .. } => vec![out, scale],
            Op::CopyRow { src, .. } => vec![src],
            Op::Read { logits, .. } => vec![logits],
        }
    }

    /// The tensor the op writes, if any.
    pub fn writes(&self) -> Option<Tensor> {
        match *self {
            Op::Embed { out, .. }
            | Op::RmsNorm { out, .. }
            | Op::MatMul { out, .. }
            | Op::BitLinear { out, .. }
            | Op::Attention { out, .. }
            | Op::Elementwise { out, .. }
            | Op::AddBias { out, .. }
            | Op::ScaleColumns { out, .. } => Some(out),
            Op::Rope { x, .. } | Op::Softcap { x, .. } => Some(x),
            Op::CopyRow { dst, .. } => Some(dst),
            Op::Read { .. } => None,
        }
    }
}

/// An architecture's ops for one pass, in order, as its `forward()` writes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    /// Tokens (rows) the pass runs.
    pub tokens: usize,
    pub ops: Vec<Op>,
}

impl Pass {
    pub fn embed(&mut self, table: Weight, out: Tensor) {
        self.ops.push(Op::Embed { table, out });
    }

    pub fn rms_norm(
        &mut self,
        x: Tensor,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
    ) {
        self.ops.push(Op::RmsNorm {
            x,
            weight,
            out,
            rows,
            dim,
            eps,
        });
    }

    /// A product on f32 activations ([`Pass::quantize_activations`] decides, once the pass
    /// is written, which take int8 activations instead).
    pub fn matmul(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) {
        self.ops.push(Op::MatMul {
            w,
            x,
            out,
            rows,
            act: Activations::F32,
        });
    }

    /// Set each product's operands to `choice(w, rows)` (the backend's, once the pass is
    /// written).
    pub fn set_activations(&mut self, choice: impl Fn(Weight, usize) -> Activations) {
        for op in &mut self.ops {
            if let Op::MatMul { w, rows, act, .. } = op {
                *act = choice(*w, *rows);
            }
        }
    }

    pub fn bitlinear(&mut self, w: Weight, x: Tensor, out: Tensor, rows: usize) {
        self.ops.push(Op::BitLinear { w, x, out, rows });
    }

    pub fn rope(&mut self, x: Tensor, heads: usize) {
        self.rope_by(x, heads, 0);
    }

    /// RoPE by the session's table `table` (Gemma 3's local and global layers differ).
    pub fn rope_by(&mut self, x: Tensor, heads: usize, table: usize) {
        self.ops.push(Op::Rope { x, heads, table });
    }

    pub fn attention(&mut self, layer: usize, qkv: [Tensor; 3], out: Tensor, heads: usize) {
        self.attention_with(layer, qkv, out, heads, AttentionScores::default());
    }

    /// Attention whose scores are windowed or soft-capped as `scores` says.
    pub fn attention_with(
        &mut self,
        layer: usize,
        [q, k, v]: [Tensor; 3],
        out: Tensor,
        heads: usize,
        scores: AttentionScores,
    ) {
        self.ops.push(Op::Attention {
            layer,
            q,
            k,
            v,
            out,
            heads,
            scores,
        });
    }

    /// `x = cap * tanh(x / cap)` over `len` values.
    pub fn softcap(&mut self, x: Tensor, len: usize, cap: f32) {
        self.ops.push(Op::Softcap { x, len, cap });
    }

    /// `acc += x` over `len` values (a residual add).
    pub fn add(&mut self, acc: Tensor, x: Tensor, len: usize) {
        self.elementwise(Elementwise::Add, acc, x, len);
    }

    /// `gate = silu(gate) * up` over `len` values.
    pub fn silu_mul(&mut self, gate: Tensor, up: Tensor, len: usize) {
        self.elementwise(Elementwise::SiluMul, gate, up, len);
    }

    /// `gate = gelu(gate) * up` over `len` values (GELU's tanh form).
    pub fn gelu_mul(&mut self, gate: Tensor, up: Tensor, len: usize) {
        self.elementwise(Elementwise::GeluMul, gate, up, len);
    }

    /// `gate = relu(gate)^2 * up` over `len` values.
    pub fn relu_squared_mul(&mut self, gate: Tensor, up: Tensor, len: usize) {
        self.elementwise(Elementwise::ReluSquaredMul, gate, up, len);
    }

    fn elementwise(&mut self, f: Elementwise, out: Tensor, second: Tensor, len: usize) {
        self.ops.push(Op::Elementwise {
            f,
            out,
            first: None,
            second: Some(second),
            len,
        });
    }

    /// `out[r, :] += bias` for `rows` rows of `cols`.
    pub fn add_bias(&mut self, out: Tensor, bias: Tensor, rows: usize, cols: usize) {
        self.ops.push(Op::AddBias {
            out,
            bias,
            rows,
            cols,
        });
    }

    /// `out[r, :] *= scale` for `rows` rows of `cols`.
    pub fn scale_columns(&mut self, out: Tensor, scale: Tensor, rows: usize, cols: usize) {
        self.ops.push(Op::ScaleColumns {
            out,
            scale,
            rows,
            cols,
        });
    }

    pub fn copy_row(&mut self, src: Tensor, row: usize, cols: usize, dst: Tensor, dst_row: usize) {
        self.ops.push(Op::CopyRow {
            src,
            row,
            cols,
            dst,
            dst_row,
        });
    }

    pub fn read(&mut self, logits: Tensor, rows: usize, vocab: usize, what: Readback) {
        self.ops.push(Op::Read {
            logits,
            rows,
            vocab,
            what,
        });
    }
}

/// Tokens `pos0 .. pos0 + len` of sequence `seq`: one run of a batch.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    /// The KV cache slot of the sequence (`0 .. KvShape::n_seqs`).
    pub seq: usize,
    pub pos0: usize,
    pub len: usize,
}

/// The tokens of one pass: runs of consecutive positions of one or more sequences, in the
/// order of the pass's rows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Batch {
    pub spans: Vec<Span>,
}

impl Batch {
    /// `n` tokens of sequence 0 from position `pos0`.
    pub fn one(pos0: usize, n: usize) -> Batch {
        Batch {
            spans: vec![Span {
                seq: 0,
                pos0,
                len: n,
            }],
        }
    }

    /// Tokens in the pass.
    pub fn tokens(&self) -> usize {
        self.spans.iter().map(|s| s.len).sum()
    }

    /// Each span's last row (the rows the head reads for [`Readback::Last`] and
    /// [`Readback::TopK`]).
    pub fn last_rows(&self) -> Vec<usize> {
        let mut end = 0;
        self.spans
            .iter()
            .map(|s| {
                end += s.len;
                end - 1
            })
            .collect()
    }

    /// The position of each of the pass's tokens, in row order, with its sequence.
    pub fn positions(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.spans
            .iter()
            .flat_map(|s| (s.pos0..s.pos0 + s.len).map(move |p| (s.seq, p)))
    }
}

/// Where a pass's token ids come from when it is submitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tokens<'a> {
    /// One id per row.
    Ids(&'a [u32]),
    /// One token: the best candidate of the last row of the most recently submitted pass that
    /// read back its top-k, taken where that pass ran (a GPU feeds its own choice to the next
    /// pass, so greedy decoding submits pass `t + 1` before pass `t` is read back).
    Chained,
}

/// What a pass reads back from its logits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Readback {
    /// Every token's row (the `logits` command; costs `rows * vocab * 4` bytes).
    All,
    /// The last row of each span, in full (sampling that needs the whole distribution).
    Last,
    /// The best `k` `(id, logit)` of the last row of each span, best first.
    TopK(usize),
    /// Nothing (prefill chunks before the last).
    Nothing,
}

/// What a pass returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Logits {
    /// `rows * vocab` values: every token's row ([`Readback::All`]) or each span's last
    /// ([`Readback::Last`]).
    Full(Vec<f32>),
    /// Per span, best first, ties by lower id.
    Top(Vec<Vec<(u32, f32)>>),
    None,
}

/// The first position after `from` where `t` is read, unless it is written first (or never
/// read again): whether the value `t` holds at `from` is still needed.
pub fn read_later<O>(
    ops: &[O],
    t: Tensor,
    reads: impl Fn(&O) -> Vec<Tensor>,
    writes: impl Fn(&O) -> Vec<Tensor>,
) -> bool {
    for op in ops {
        if reads(op).contains(&t) {
            return true;
        }
        if writes(op).contains(&t) {
            return false;
        }
    }
    false
}
