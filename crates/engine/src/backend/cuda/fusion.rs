//! The fusions the planning step finds in a pass (consecutive ops that run as one kernel),
//! and how each runs; the int8 form of activations kept between ops.

use super::*;

/// Consecutive ops run as one kernel, each step computed as its own kernel computes it (the
/// self-test checks the results equal the unfused ones bit for bit).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Fused {
    /// `add` (residual, into `x`; `y`: none for a norm alone), then RMSNorm of `x` into `out`,
    /// then the norm's output quantized for the product after it (`quant`).
    Norm {
        x: Tensor,
        y: Option<Tensor>,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        quant: Quant,
    },
    /// An elementwise function whose output a product takes as int8 blocks.
    ElementwiseQ8 {
        f: Elementwise,
        out: Tensor,
        first: Tensor,
        second: Tensor,
        rows: usize,
        cols: usize,
    },
    /// RoPE of q and of k, then attention over them: one launch turns both and stores k and
    /// v in the cache (`rope_store_*`), then attention as the op runs it; `quant`: its output
    /// quantized for the int8 product after it by the splits' merge.
    RopeAttention {
        layer: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        heads: usize,
        table: usize,
        scores: AttentionScores,
        quant: bool,
    },
    /// Two or three one-token products (int8 or BitLinear) of one format and width over the
    /// same activations.
    Products {
        bitlinear: bool,
        x: Tensor,
        rows: usize,
        products: Vec<(Weight, Tensor)>,
    },
}

/// How a fused norm leaves its output for the next product.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Quant {
    None,
    Q8,
    BitLinear,
}

impl Fused {
    /// Ops it stands for.
    pub(super) fn ops(&self) -> usize {
        match self {
            Fused::Norm { y, .. } => 1 + usize::from(y.is_some()),
            Fused::ElementwiseQ8 { .. } => 1,
            Fused::RopeAttention { .. } => 3,
            Fused::Products { products, .. } => products.len(),
        }
    }
}

/// Int8 rows in the scratch: of which tensor, how many, and for which kind of product.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Quantized {
    pub(super) x: Tensor,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) bitlinear: bool,
}

impl CudaBackend {
    /// Queue one op for a pass of `n` tokens whose longest sequence reaches `max_len`.
    pub(super) fn run(&mut self, op: &Op, n: usize, max_len: usize) -> Result<(), Error> {
        self.run_op(op, n, max_len)?;
        if let (Some(q), Some(t)) = (self.quantized, op.writes()) {
            if q.x == t {
                self.quantized = None;
            }
        }
        Ok(())
    }

    /// Queue `ops` (a pass of `n` tokens), consecutive ones fused where
    /// [`CudaBackend::fusion_at`] finds a fusion.
    pub(super) fn run_ops(&mut self, ops: &[Op], n: usize, max_len: usize) -> Result<(), Error> {
        let mut i = 0;
        while i < ops.len() {
            match self.fusion_at(&ops[i..]) {
                Some(f) => {
                    if let Fused::Products { products, .. } = &f {
                        self.ensure_weights(products.iter().map(|&(w, _)| w))?;
                    }
                    i += f.ops();
                    self.run_fused(f, n, max_len)?;
                }
                None => {
                    self.ensure_weights(stream::op_weights(&ops[i]))?;
                    self.run(&ops[i], n, max_len)?;
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// How the op after a norm or an elementwise op takes `t` (`rows` x `cols`) when it is an
    /// int8 product of it: as int8 blocks or as BitLinear's rows.
    pub(super) fn quant_for(
        &self,
        next: Option<&Op>,
        t: Tensor,
        rows: usize,
        cols: usize,
    ) -> Quant {
        let width = |w: Weight| self.weight(w).map_or(0, |cw| cw.cols);
        match next {
            Some(&Op::MatMul {
                w,
                x,
                rows: r,
                act: Activations::Q8,
                ..
            }) if x == t && r == rows && width(w) == cols => Quant::Q8,
            Some(&Op::BitLinear { w, x, rows: r, .. })
                if x == t && r == rows && width(w) == cols =>
            {
                Quant::BitLinear
            }
            _ => Quant::None,
        }
    }

    /// The fusion that starts at `ops[0]`, if any.
    pub(super) fn fusion_at(&self, ops: &[Op]) -> Option<Fused> {
        if !self.fusions {
            return None;
        }
        match *ops.first()? {
            Op::Elementwise {
                f: Elementwise::Add,
                out,
                first,
                second: Some(y),
                len,
            } if first.is_none_or(|a| a == out) => match ops.get(1) {
                Some(&Op::RmsNorm {
                    x,
                    weight,
                    out: no,
                    rows,
                    dim,
                    eps,
                }) if x == out && rows * dim == len && no != x && y != no => Some(Fused::Norm {
                    x,
                    y: Some(y),
                    weight,
                    out: no,
                    rows,
                    dim,
                    eps,
                    quant: self.quant_for(ops.get(2), no, rows, dim),
                }),
                _ => None,
            },
            Op::RmsNorm {
                x,
                weight,
                out,
                rows,
                dim,
                eps,
            } if out != x => {
                let quant = self.quant_for(ops.get(1), out, rows, dim);
                (quant != Quant::None).then_some(Fused::Norm {
                    x,
                    y: None,
                    weight,
                    out,
                    rows,
                    dim,
                    eps,
                    quant,
                })
            }
            Op::Elementwise {
                f,
                out,
                first,
                second,
                len,
            } => match ops.get(1) {
                Some(&Op::MatMul {
                    w,
                    x,
                    rows,
                    act: Activations::Q8,
                    ..
                }) if x == out => {
                    let cols = self.weight(w).ok()?.cols;
                    let first = first.unwrap_or(out);
                    let second = second.unwrap_or(first);
                    (rows * cols == len && second != out).then_some(Fused::ElementwiseQ8 {
                        f,
                        out,
                        first,
                        second,
                        rows,
                        cols,
                    })
                }
                _ => None,
            },
            Op::MatMul {
                x,
                rows,
                act: Activations::Q8,
                ..
            }
            | Op::BitLinear { x, rows, .. }
                if rows <= GEMV_MAX_TOKENS =>
            {
                let bitlinear = matches!(ops[0], Op::BitLinear { .. });
                let key = |op: &Op| -> Option<(Weight, Tensor, &'static str, usize)> {
                    let (w, out) = match *op {
                        Op::MatMul {
                            w,
                            x: ox,
                            out,
                            rows: r,
                            act: Activations::Q8,
                        } if !bitlinear && ox == x && r == rows => (w, out),
                        Op::BitLinear {
                            w,
                            x: ox,
                            out,
                            rows: r,
                        } if bitlinear && ox == x && r == rows => (w, out),
                        _ => return None,
                    };
                    let cw = self.weight(w).ok()?;
                    Some((w, out, cw.suffix, cw.cols))
                };
                let (_, _, suffix, cols) = key(&ops[0])?;
                let mut products = Vec::new();
                for op in ops.iter().take(3) {
                    match key(op) {
                        Some((w, out, s, c))
                            if s == suffix
                                && c == cols
                                && out != x
                                && products.iter().all(|&(_, o)| o != out) =>
                        {
                            products.push((w, out))
                        }
                        _ => break,
                    }
                }
                (products.len() >= 2).then_some(Fused::Products {
                    bitlinear,
                    x,
                    rows,
                    products,
                })
            }
            Op::Rope {
                x: qx,
                heads,
                table,
            } => {
                let (
                    Some(&Op::Rope {
                        x: kx,
                        heads: kh,
                        table: kt,
                    }),
                    Some(&Op::Attention {
                        layer,
                        q,
                        k,
                        v,
                        out,
                        heads: ah,
                        scores,
                    }),
                ) = (ops.get(1), ops.get(2))
                else {
                    return None;
                };
                let kv = self.kv().ok()?;
                let head_dim = self.rope.get(table)?.1.head_dim;
                (qx == q
                    && kx == k
                    && kt == table
                    && q != k
                    && heads == ah
                    && kh == kv.n_kv_heads
                    && head_dim == kv.head_dim
                    && layer < kv.n_layers)
                    .then_some(Fused::RopeAttention {
                        layer,
                        q,
                        k,
                        v,
                        out,
                        heads,
                        table,
                        scores,
                        quant: kv.head_dim % 32 == 0
                            && matches!(ops.get(3), Some(&Op::MatMul {
                                w,
                                x,
                                act: Activations::Q8,
                                ..
                            }) if x == out && self.weight(w).is_ok_and(|cw| cw.cols == heads * kv.head_dim)),
                    })
            }
            _ => None,
        }
    }

    /// Quantize `want.x`'s rows into the int8 scratch (blocks of 32, or BitLinear's per-row
    /// scale) unless it holds them already.
    pub(super) fn quantize(&mut self, want: Quantized) -> Result<(), Error> {
        if self.quantized == Some(want) {
            return Ok(());
        }
        let args = [
            Arg::Ptr(self.ptr(want.x)),
            Arg::Ptr(Self::scratch_ptr(&self.scratch.xq)),
            Arg::Ptr(Self::scratch_ptr(&self.scratch.xd)),
            Arg::U32(want.cols as u32),
        ];
        if want.bitlinear {
            self.launch("bitlinear_quantize", (want.rows, 1), 256, &args)?;
        } else {
            let grid = ((want.cols / 32).div_ceil(4), want.rows);
            self.launch("quantize_q8", grid, 128, &args)?;
        }
        self.quantized = Some(want);
        Ok(())
    }

    /// Queue a fusion.
    pub(super) fn run_fused(&mut self, f: Fused, n: usize, max_len: usize) -> Result<(), Error> {
        let (xq, xd) = (
            Self::scratch_ptr(&self.scratch.xq),
            Self::scratch_ptr(&self.scratch.xd),
        );
        match f {
            Fused::Norm {
                x,
                y,
                weight,
                out,
                rows,
                dim,
                eps,
                quant,
            } => {
                let args = [
                    Arg::Ptr(self.ptr(x)),
                    Arg::Ptr(y.map_or(0, |y| self.ptr(y))),
                    Arg::Ptr(self.ptr(weight)),
                    Arg::Ptr(self.ptr(out)),
                    Arg::U32(dim as u32),
                    Arg::F32(eps),
                    Arg::U32(match quant {
                        Quant::None => 0,
                        Quant::Q8 => 1,
                        Quant::BitLinear => 2,
                    }),
                    Arg::Ptr(xq),
                    Arg::Ptr(xd),
                ];
                self.launch("norm_fused", (rows, 1), NORM_BLOCK, &args)?;
                self.quantized = match quant {
                    Quant::None => self.quantized.filter(|q| q.x != x && q.x != out),
                    q => Some(Quantized {
                        x: out,
                        rows,
                        cols: dim,
                        bitlinear: q == Quant::BitLinear,
                    }),
                };
                Ok(())
            }
            Fused::ElementwiseQ8 {
                f,
                out,
                first,
                second,
                rows,
                cols,
            } => {
                let len = rows * cols;
                let args = [
                    Arg::U32(elementwise_code(f)),
                    Arg::Ptr(self.ptr(out)),
                    Arg::Ptr(self.ptr(first)),
                    Arg::Ptr(self.ptr(second)),
                    Arg::U32(len as u32),
                    Arg::Ptr(xq),
                    Arg::Ptr(xd),
                ];
                self.launch("elementwise_q8", ((len / 32).div_ceil(4), 1), 128, &args)?;
                self.quantized = Some(Quantized {
                    x: out,
                    rows,
                    cols,
                    bitlinear: false,
                });
                Ok(())
            }
            Fused::RopeAttention {
                layer,
                q,
                k,
                v,
                out,
                heads,
                table,
                scores,
                quant,
            } => {
                let kv = self.kv()?;
                let (freqs, cfg) = self.rope.get(table).ok_or(BackendError::NoCache("RoPE"))?;
                let (kc, vc) = {
                    let (k, v) = &self.cache[layer];
                    (k.ptr(), v.ptr())
                };
                let args = [
                    Arg::Ptr(self.ptr(q)),
                    Arg::Ptr(self.ptr(k)),
                    Arg::Ptr(self.ptr(v)),
                    Arg::Ptr(kc),
                    Arg::Ptr(vc),
                    Arg::Ptr(self.tokens.pos.ptr()),
                    Arg::Ptr(self.tokens.seq.ptr()),
                    Arg::Ptr(freqs.ptr()),
                    Arg::U32(heads as u32),
                    Arg::U32(kv.n_kv_heads as u32),
                    Arg::U32(kv.head_dim as u32),
                    Arg::U32(cfg.rot_dim as u32),
                    Arg::U32(rope_style_code(cfg.style)),
                    Arg::U32(kv.max_ctx as u32),
                ];
                let name = format!("rope_store_{}", kv_kind(kv.dtype));
                self.launch(&name, (n, 1), 256, &args)?;
                let quantized = self.attend(layer, q, out, heads, n, max_len, quant, scores)?;
                self.quantized = match quantized {
                    true => Some(Quantized {
                        x: out,
                        rows: n,
                        cols: heads * kv.head_dim,
                        bitlinear: false,
                    }),
                    false => self.quantized.filter(|t| ![q, k, out].contains(&t.x)),
                };
                Ok(())
            }
            Fused::Products {
                bitlinear,
                x,
                rows,
                products,
            } => {
                let first = self.weight(products[0].0)?;
                let (cols, suffix) = (first.cols, first.suffix);
                self.quantize(Quantized {
                    x,
                    rows,
                    cols,
                    bitlinear,
                })?;
                let mut args = Vec::with_capacity(19);
                let mut total = 0;
                for i in 0..3 {
                    match products.get(i) {
                        Some(&(w, out)) => {
                            let cw = self.weight(w)?;
                            total += cw.rows;
                            args.extend([
                                Arg::Ptr(cw.ptr),
                                Arg::Ptr(cw.row_bytes as u64),
                                Arg::Ptr(self.ptr(out)),
                                Arg::U32(cw.rows as u32),
                                Arg::F32(cw.scale),
                            ]);
                        }
                        None => args.extend([
                            Arg::Ptr(0),
                            Arg::Ptr(0),
                            Arg::Ptr(0),
                            Arg::U32(0),
                            Arg::F32(0.0),
                        ]),
                    }
                }
                let wpr = warps_per_row(cols);
                args.extend([
                    Arg::Ptr(xq),
                    Arg::Ptr(xd),
                    Arg::U32(cols as u32),
                    Arg::U32(rows as u32),
                    Arg::U32(wpr as u32),
                ]);
                let kind = if bitlinear { "bitlinear" } else { "gemv_q8" };
                self.launch(
                    &format!("{kind}_multi_{suffix}"),
                    (total.div_ceil(4 / wpr), 1),
                    128,
                    &args,
                )
            }
        }
    }
}
