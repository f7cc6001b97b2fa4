//! The GPU's plan of a pass: the model's ops lowered to the GPU's ops ([`GpuOp`]: one per
//! dispatch group the tape records), then rewritten by fusion rules ([`super::rules`]), each a
//! named rewrite of neighbouring ops into one that does their work in fewer dispatches. What a
//! pass runs is the list this returns; nothing is decided while a pass is recorded.

use std::fmt::Write;

use super::rules;
use super::GpuBackend;
use crate::backend::{AttentionScores, Elementwise, Op, Readback, Tensor, Weight};
use crate::gpu::bitlinear::NormBitLinearMode;
use crate::gpu::q8::has_q8_matvec;
use crate::gpu::GpuError;
use crate::pass::Activations;
use crate::pass::{Names, Pass};
use crate::quant::BitLinearInput;
use crate::Error;

/// One step of a GPU pass, with the arguments that identify it (a tape built for a plan is
/// kept per plan; these are also the profile's labels).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GpuOp {
    Embed(Weight, Tensor),
    /// x, weight, out, rows, dim, eps bits.
    RmsNorm(Tensor, Tensor, Tensor, usize, usize, u32),
    /// w, x, out, rows.
    Matmul(Weight, Tensor, Tensor, usize),
    /// [`GpuOp::Matmul`] taking its scaled f16 inputs from the shared scratch, where the
    /// cooperative-matrix product of the same input just before it left them (q, k, v; gate,
    /// up).
    MatmulShared(Weight, Tensor, Tensor, usize),
    /// A product of `rows` tokens added to its output (the residual) in its dispatch.
    MatmulAdd(Weight, Tensor, Tensor, usize),
    /// The product only (I2_S: the input's records come from a Quantize or RmsNormQuantize
    /// step); the quantization too for the TQ formats.
    BitLinear(Weight, Tensor, Tensor, usize),
    /// Int8 records of `rows` rows of `cols` of a tensor (BitLinear's).
    Quantize(Tensor, usize, usize),
    /// An RmsNorm (its arguments) that also writes the records of its output.
    RmsNormQuantize(Tensor, Tensor, Tensor, usize, usize, u32),
    /// Int8 records (blocks of 32) of one row of `cols` of a tensor.
    QuantizeQ8(Tensor, usize),
    /// Gate, up, values: SiluMul into the gate and the gate's records; with the norm whose
    /// factor it applies (normed tensor, row length) where they are products of its record.
    SiluMulQuantizeQ8(Tensor, Tensor, usize, Option<(Tensor, usize)>),
    /// A one-row RmsNorm (its arguments but the row count) that also writes the q8 records of
    /// its output.
    RmsNormQuantizeQ8(Tensor, Tensor, Tensor, usize, u32),
    /// A one-token RMSNorm (input, weight, eps bits) with the I2_S products it feeds
    /// (weights, the tensors written) in one dispatch; the normed rows and scratch outputs are
    /// left unwritten.
    NormBitLinear(
        Tensor,
        Tensor,
        u32,
        Vec<Weight>,
        Vec<Tensor>,
        NormBitLinearMode,
    ),
    /// A one-token integer-dot product from the input's int8 records: weight, input, output,
    /// added to the output (`true`), from the input's norm record (`true`).
    MatvecQ8(Weight, Tensor, Tensor, bool, bool),
    /// Two one-token integer-dot products of one input in one dispatch: weights, input,
    /// outputs; from a norm record (`true`).
    MatvecQ8Pair(Weight, Weight, Tensor, Tensor, Tensor, bool),
    /// A one-token integer-dot product (weight, input) added to its residual, which also
    /// writes the norm record of the sum for the RMSNorm (weight, output, eps bits) after it.
    MatvecQ8AddNorm(Weight, Tensor, Tensor, Tensor, Tensor, u32),
    /// x, heads, RoPE table.
    Rope(Tensor, usize, usize),
    /// Layer, q/k/v/out, query heads, the RoPE table folded in, the output's q8 records
    /// written too, q/k/v products of a norm record whose factor the attention applies, the
    /// scores' window and soft cap.
    Attention(
        usize,
        [Tensor; 4],
        usize,
        Option<usize>,
        bool,
        bool,
        ScoresKey,
    ),
    /// x, values, the cap's bits: `x = cap * tanh(x / cap)`.
    Softcap(Tensor, usize, u32),
    Elementwise(Elementwise, Tensor, Option<Tensor>, Option<Tensor>, usize),
    /// out, bias, rows, cols: `out[r, :] += bias`.
    AddBias(Tensor, Tensor, usize, usize),
    /// out, scale, rows, cols: `out[r, :] *= scale`.
    ScaleColumns(Tensor, Tensor, usize, usize),
    /// src, row, cols, dst, dst row.
    CopyRow(Tensor, usize, usize, Tensor, usize),
    /// logits, rows, vocab, k.
    TopK(Tensor, usize, usize, usize),
}

/// An attention's window and soft cap, as plan keys ([`AttentionScores`] with the cap's bits).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScoresKey {
    pub window: usize,
    pub softcap_bits: u32,
}

impl ScoresKey {
    pub fn of(s: AttentionScores) -> Self {
        ScoresKey {
            window: s.window,
            softcap_bits: s.softcap.to_bits(),
        }
    }

    pub fn scores(self) -> AttentionScores {
        AttentionScores {
            window: self.window,
            softcap: f32::from_bits(self.softcap_bits),
        }
    }

    /// The plan line's suffix (empty for plain scores).
    fn describe(self) -> String {
        let s = self.scores();
        let mut out = String::new();
        if s.window > 0 {
            out += &format!(", window {}", s.window);
        }
        if s.softcap > 0.0 {
            out += &format!(", soft cap {}", s.softcap);
        }
        out
    }
}

/// What a tensor's int8 records are, as the ops that make and read them know them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Records {
    /// Integer-dot records (blocks of 32) of a row of `cols` (`crate::gpu::q8`).
    Q8(Tensor, usize),
    /// BitLinear records (per row absmax) of rows of `cols` (`crate::gpu::bitlinear`).
    BitLinear(Tensor, usize),
}

impl GpuOp {
    /// The f32 tensors the op reads (as it leaves them unfused; records are in
    /// [`GpuOp::reads_records`]).
    pub(super) fn reads(&self) -> Vec<Tensor> {
        use GpuOp::*;
        match self {
            Embed(..) => vec![],
            TopK(logits, ..) => vec![*logits],
            RmsNorm(x, w, ..) | RmsNormQuantize(x, w, ..) | RmsNormQuantizeQ8(x, w, ..) => {
                vec![*x, *w]
            }
            Matmul(_, x, ..) | MatmulShared(_, x, ..) | Quantize(x, ..) | QuantizeQ8(x, _) => {
                vec![*x]
            }
            MatmulAdd(_, x, r, _) => vec![*x, *r],
            // I2_S products read the records; the TQ kernels read the f32 input.
            BitLinear(_, x, ..) => vec![*x],
            SiluMulQuantizeQ8(g, u, ..) => vec![*g, *u],
            NormBitLinear(x, w, _, _, written, mode) => {
                let mut v = vec![*x, *w];
                if *mode == NormBitLinearMode::Residual {
                    v.extend(written.first());
                }
                v
            }
            MatvecQ8(_, _, out, add, _) => match add {
                true => vec![*out],
                false => vec![],
            },
            MatvecQ8Pair(..) => vec![],
            MatvecQ8AddNorm(_, _, r, w, ..) => vec![*r, *w],
            Rope(x, ..) | Softcap(x, ..) => vec![*x],
            Attention(_, [q, k, v, _], ..) => vec![*q, *k, *v],
            Elementwise(_, out, first, second, _) => [Some(first.unwrap_or(*out)), *second]
                .into_iter()
                .flatten()
                .collect(),
            AddBias(out, bias, ..) | ScaleColumns(out, bias, ..) => vec![*out, *bias],
            CopyRow(src, ..) => vec![*src],
        }
    }

    /// The f32 tensors the op writes.
    pub(super) fn writes(&self) -> Vec<Tensor> {
        use GpuOp::*;
        match self {
            Embed(_, out)
            | RmsNorm(_, _, out, ..)
            | Matmul(_, _, out, _)
            | MatmulShared(_, _, out, _)
            | MatmulAdd(_, _, out, _)
            | BitLinear(_, _, out, _)
            | RmsNormQuantize(_, _, out, ..)
            | RmsNormQuantizeQ8(_, _, out, ..)
            | MatvecQ8(_, _, out, ..)
            | Rope(out, ..)
            | Softcap(out, ..)
            | Elementwise(_, out, ..)
            | AddBias(out, ..)
            | ScaleColumns(out, ..)
            | CopyRow(_, _, _, out, _) => vec![*out],
            SiluMulQuantizeQ8(g, ..) => vec![*g],
            NormBitLinear(.., written, _) => written.clone(),
            MatvecQ8Pair(_, _, _, a, b, _) => vec![*a, *b],
            MatvecQ8AddNorm(_, _, r, ..) => vec![*r],
            Attention(_, [.., out], ..) => vec![*out],
            Quantize(..) | QuantizeQ8(..) | TopK(..) => vec![],
        }
    }

    /// The tensor whose int8 records (or norm record) the op reads, where it reads records
    /// instead of the f32 values.
    pub(super) fn records_of(&self) -> Option<Tensor> {
        use GpuOp::*;
        match self {
            MatvecQ8(_, x, ..) | MatvecQ8Pair(_, _, x, ..) | MatvecQ8AddNorm(_, x, ..) => Some(*x),
            _ => None,
        }
    }

    /// The weights the op reads.
    pub(super) fn weights(&self) -> Vec<Weight> {
        use GpuOp::*;
        match self {
            Embed(w, _)
            | Matmul(w, ..)
            | MatmulShared(w, ..)
            | MatmulAdd(w, ..)
            | BitLinear(w, ..)
            | MatvecQ8(w, ..)
            | MatvecQ8AddNorm(w, ..) => vec![*w],
            MatvecQ8Pair(a, b, ..) => vec![*a, *b],
            NormBitLinear(_, _, _, ws, ..) => ws.clone(),
            _ => vec![],
        }
    }

    /// The records the op writes, if any (`head_dim`: the cache's, for an attention's).
    pub(super) fn makes_records(&self, head_dim: usize) -> Option<Records> {
        use GpuOp::*;
        match *self {
            QuantizeQ8(x, cols) => Some(Records::Q8(x, cols)),
            RmsNormQuantizeQ8(_, _, out, dim, _) => Some(Records::Q8(out, dim)),
            SiluMulQuantizeQ8(g, _, len, _) => Some(Records::Q8(g, len)),
            Attention(_, [.., out], heads, _, true, ..) => Some(Records::Q8(out, heads * head_dim)),
            Quantize(x, _, cols) | RmsNormQuantize(_, _, x, _, cols, _) => {
                Some(Records::BitLinear(x, cols))
            }
            _ => None,
        }
    }
}

/// A pass as the GPU runs it.
pub struct GpuPlan {
    /// Identifies the plan's tape (unique per backend).
    pub(super) id: u64,
    /// Tokens per pass.
    pub(super) tokens: usize,
    pub(super) ops: Vec<GpuOp>,
    /// What the pass reads back from which logits: `(logits, rows, vocab, readback)`.
    pub(super) read: Option<(Tensor, usize, usize, Readback)>,
}

/// Which rules the planner applies (all by default; turned off one at a time for
/// comparisons, each rule's ops then run as separate dispatches).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The backend runs [`Activations::Q8`] products (its [`crate::backend::Limits`] say so,
    /// and the model writes one-token passes with them); off, every product is f32.
    pub int_dot: bool,
    /// [`rules::residual_add`].
    pub residual: bool,
    /// [`rules::shared_records`].
    pub shared_records: bool,
    /// [`rules::norm_q8`], one-row norms for integer-dot products.
    pub norm_q8: bool,
    /// [`rules::norm_q8`], norms for I2_S BitLinear.
    pub norm_quantize: bool,
    /// [`rules::silu_q8`].
    pub silu_q8: bool,
    /// [`rules::fold_rope`].
    pub fold_rope: bool,
    /// [`rules::attention_q8`].
    pub attention_q8: bool,
    /// [`rules::pair_q8`].
    pub pair_q8: bool,
    /// [`rules::add_norm`].
    pub add_norm: bool,
    /// [`rules::norm_bitlinear`].
    pub norm_bitlinear: bool,
    /// [`rules::share_f16_input`].
    pub share_f16_input: bool,
}

impl Rules {
    /// Every rule on; integer-dot decode as given.
    pub fn all(int_dot: bool) -> Rules {
        Rules {
            int_dot,
            residual: true,
            shared_records: true,
            norm_q8: true,
            norm_quantize: true,
            silu_q8: true,
            fold_rope: true,
            attention_q8: true,
            pair_q8: true,
            add_norm: true,
            norm_bitlinear: true,
            share_f16_input: true,
        }
    }

    /// Every fusion off: each model op in dispatches of its own (and each product quantizing
    /// its own input).
    pub fn none(int_dot: bool) -> Rules {
        Rules {
            int_dot,
            residual: false,
            shared_records: false,
            norm_q8: false,
            norm_quantize: false,
            silu_q8: false,
            fold_rope: false,
            attention_q8: false,
            pair_q8: false,
            add_norm: false,
            norm_bitlinear: false,
            share_f16_input: false,
        }
    }
}

impl GpuBackend {
    /// The plan of `pass`: lowering, then each rule in order.
    pub(super) fn make_plan(&self, pass: &Pass) -> Result<GpuPlan, Error> {
        let tokens = pass.tokens;
        let mut read = None;
        let mut ops = Vec::with_capacity(pass.ops.len() * 2);
        let mut i = 0;
        while i < pass.ops.len() {
            if let Some((op, used)) = rules::norm_bitlinear(self, &pass.ops, i, tokens) {
                ops.push(op);
                i += used;
                continue;
            }
            if let Op::Read {
                logits,
                rows,
                vocab,
                what,
            } = pass.ops[i]
            {
                if i + 1 != pass.ops.len() {
                    return Err(
                        GpuError::Validation("a readback before the end of a pass".into()).into(),
                    );
                }
                if let Readback::TopK(k) = what {
                    ops.push(GpuOp::TopK(logits, rows, vocab, k.max(1)));
                }
                read = Some((logits, rows, vocab, what));
            } else {
                self.lower(&pass.ops[i], &mut ops)?;
            }
            i += 1;
        }
        rules::residual_add(self, &mut ops);
        rules::shared_records(self, &mut ops);
        rules::norm_q8(self, &mut ops);
        rules::silu_q8(self, &mut ops, tokens);
        rules::fold_rope(self, &mut ops);
        rules::attention_q8(self, &mut ops, tokens);
        rules::pair_q8(self, &mut ops);
        rules::add_norm(self, &mut ops, tokens);
        rules::share_f16_input(self, &mut ops);
        Ok(GpuPlan {
            id: self.next_plan_id(),
            tokens,
            ops,
            read,
        })
    }

    /// The GPU ops of one model op before any fusion: a product whose op asks for int8
    /// activations ([`Activations::Q8`]) quantizes its input first and takes the integer-dot
    /// kernel, and so does an I2_S BitLinear of any rows.
    fn lower(&self, op: &Op, out: &mut Vec<GpuOp>) -> Result<(), Error> {
        match *op {
            Op::Embed { table, out: o } => out.push(GpuOp::Embed(table, o)),
            Op::RmsNorm {
                x,
                weight,
                out: o,
                rows,
                dim,
                eps,
            } => out.push(GpuOp::RmsNorm(x, weight, o, rows, dim, eps.to_bits())),
            Op::MatMul {
                w,
                x,
                out: o,
                rows,
                act,
            } => match act {
                Activations::F32 | Activations::F16 => {
                    // The product kernel takes cooperative matrices (f16 operands) exactly
                    // where `activations` said F16: the pass states what runs.
                    let gw = self.weight(w);
                    let coop = u32::try_from(rows)
                        .is_ok_and(|n| crate::gpu::matmul::MatmulOp::takes_coop(&self.ctx, gw, n));
                    if coop != (act == Activations::F16) {
                        return Err(GpuError::Unsupported(format!(
                            "{act:?} operands for {} ({} {}x{}, {rows} rows) on this device",
                            gw.name, gw.dtype, gw.rows, gw.cols
                        ))
                        .into());
                    }
                    out.push(GpuOp::Matmul(w, x, o, rows))
                }
                Activations::Q8 => {
                    let gw = self.weight(w);
                    if rows != 1 || !has_q8_matvec(gw.dtype, gw.cols) {
                        return Err(GpuError::Unsupported(format!(
                            "int8 activations for {} ({} {}x{}, {rows} rows): no integer-dot kernel",
                            gw.name, gw.dtype, gw.rows, gw.cols
                        ))
                        .into());
                    }
                    out.push(GpuOp::QuantizeQ8(x, gw.cols as usize));
                    out.push(GpuOp::MatvecQ8(w, x, o, false, false));
                }
            },
            Op::BitLinear { w, x, out: o, rows } => {
                let gw = self.weight(w);
                match crate::quant::bitlinear_input(gw.dtype) {
                    // The records come from a step of their own (which a norm may fold in).
                    Some(BitLinearInput::Records) => {
                        out.push(GpuOp::Quantize(x, rows, gw.cols as usize));
                        out.push(GpuOp::BitLinear(w, x, o, rows));
                    }
                    Some(BitLinearInput::FakeQuant) => out.push(GpuOp::BitLinear(w, x, o, rows)),
                    None => {
                        return Err(GpuError::Unsupported(format!(
                            "BitLinear over {} weights on the GPU (ternary types only)",
                            gw.dtype
                        ))
                        .into())
                    }
                }
            }
            Op::Rope { x, heads, table } => out.push(GpuOp::Rope(x, heads, table)),
            Op::Softcap { x, len, cap } => out.push(GpuOp::Softcap(x, len, cap.to_bits())),
            Op::Attention {
                layer,
                q,
                k,
                v,
                out: o,
                heads,
                scores,
            } => out.push(GpuOp::Attention(
                layer,
                [q, k, v, o],
                heads,
                None,
                false,
                false,
                ScoresKey::of(scores),
            )),
            Op::Elementwise {
                f,
                out: o,
                first,
                second,
                len,
            } => out.push(GpuOp::Elementwise(f, o, first, second, len)),
            Op::AddBias {
                out: o,
                bias,
                rows,
                cols,
            } => out.push(GpuOp::AddBias(o, bias, rows, cols)),
            Op::ScaleColumns {
                out: o,
                scale,
                rows,
                cols,
            } => out.push(GpuOp::ScaleColumns(o, scale, rows, cols)),
            Op::CopyRow {
                src,
                row,
                cols,
                dst,
                dst_row,
            } => out.push(GpuOp::CopyRow(src, row, cols, dst, dst_row)),
            Op::Read { .. } => {}
        }
        Ok(())
    }

    /// What an op is, for the profile and the tape's listing: kind, dtype and shape.
    pub(super) fn label(&self, op: &GpuOp, n: usize) -> String {
        let weight = |w: &Weight| {
            let w = self.weight(*w);
            format!("{} {}x{}", w.dtype, w.rows, w.cols)
        };
        use GpuOp as K;
        match op {
            K::Embed(w, _) => format!("embed {}", weight(w)),
            K::RmsNorm(_, _, _, rows, dim, _) => format!("rms_norm {rows}x{dim}"),
            K::Matmul(w, _, _, rows) => format!("matmul {} (x{rows})", weight(w)),
            K::MatmulShared(w, _, _, rows) => {
                format!("matmul {} (x{rows}, the f16 input before it)", weight(w))
            }
            K::MatmulAdd(w, _, _, rows) => format!("matmul+add {} (x{rows})", weight(w)),
            K::BitLinear(w, _, _, rows) => format!("bitlinear {} (x{rows})", weight(w)),
            K::Quantize(_, rows, cols) => format!("quantize {rows}x{cols}"),
            K::QuantizeQ8(_, cols) => format!("quantize_q8 1x{cols}"),
            K::SiluMulQuantizeQ8(_, _, cols, norm) => format!(
                "{}silu_mul+quantize_q8 1x{cols}",
                if norm.is_some() {
                    "rms_norm factor+"
                } else {
                    ""
                }
            ),
            K::RmsNormQuantizeQ8(_, _, _, dim, _) => format!("rms_norm+quantize_q8 1x{dim}"),
            K::MatvecQ8(w, _, _, add, norm) => format!(
                "matvec_q8{} {}{}",
                if *add { "+add" } else { "" },
                weight(w),
                if *norm { " (norm record)" } else { "" },
            ),
            K::MatvecQ8Pair(a, b, _, _, _, norm) => format!(
                "matvec_q8 {} + {}{}",
                weight(a),
                weight(b),
                if *norm { " (norm record)" } else { "" },
            ),
            K::MatvecQ8AddNorm(w, ..) => format!("matvec_q8+add+norm record {}", weight(w)),
            K::RmsNormQuantize(_, _, _, rows, dim, _) => {
                format!("rms_norm+quantize {rows}x{dim}")
            }
            K::NormBitLinear(_, _, _, ws, _, mode) => {
                let shapes: Vec<String> = ws.iter().map(weight).collect();
                format!("rms_norm+bitlinear {mode:?} {}", shapes.join(" + "))
            }
            K::Rope(_, heads, table) => match table {
                0 => format!("rope {n}x{heads} heads"),
                t => format!("rope {n}x{heads} heads, table {t}"),
            },
            K::Attention(_, _, heads, rope, q8, norm, scores) => format!(
                "{}attention{}{} {n}x{heads} heads{}",
                if *norm { "rms_norm factor+" } else { "" },
                if rope.is_some() { "+rope" } else { "" },
                if *q8 { "+quantize_q8" } else { "" },
                scores.describe()
            ),
            K::Softcap(_, len, cap) => format!("softcap {} {len}", f32::from_bits(*cap)),
            K::Elementwise(f, _, _, _, len) => format!("{f:?} {len}"),
            K::AddBias(_, _, rows, cols) => format!("add bias {rows}x{cols}"),
            K::ScaleColumns(_, _, rows, cols) => format!("scale columns {rows}x{cols}"),
            K::CopyRow(..) => "copy".into(),
            K::TopK(_, rows, vocab, k) => format!("top-{k} {rows}x{vocab}"),
        }
    }

    /// The plan written out: one line per op, its label and the buffers it reads and writes.
    pub(super) fn describe_plan(&self, plan: &GpuPlan, names: &Names) -> Vec<String> {
        let mut lines: Vec<String> = plan
            .ops
            .iter()
            .map(|op| {
                let mut s = self.label(op, plan.tokens);
                let t = |ts: Vec<Tensor>| {
                    ts.iter()
                        .map(|t| names.tensor(*t))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let mut reads = op.reads();
                reads.extend(op.records_of().filter(|x| !reads.contains(x)));
                let (r, w) = (t(reads), t(op.writes()));
                let _ = match (r.is_empty(), w.is_empty()) {
                    (false, false) => write!(s, ": {r} -> {w}"),
                    (true, false) => write!(s, ": -> {w}"),
                    (false, true) => write!(s, ": {r}"),
                    (true, true) => Ok(()),
                };
                let weights: Vec<String> =
                    op.weights().iter().map(|w| names.weight_name(*w)).collect();
                if !weights.is_empty() {
                    let _ = write!(s, " [{}]", weights.join(", "));
                }
                // The kernel a product, norm or attention runs (and the hints that chose it).
                if let Some(kernel) = self.kernel_of(op, plan.tokens) {
                    let _ = write!(s, " => {kernel}");
                }
                s
            })
            .collect();
        if let Some((logits, rows, vocab, what)) = plan.read {
            lines.push(format!(
                "read {} of {} ({rows}x{vocab})",
                crate::pass::readback_name(what),
                names.tensor(logits)
            ));
        }
        lines
    }
}
