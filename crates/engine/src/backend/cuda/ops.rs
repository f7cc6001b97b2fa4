//! Each op of a pass as kernels: attention, the products, and the rest.

use super::*;

impl CudaBackend {
    /// Attention of the pass's `n` tokens (`q`, `heads` heads) over layer `layer`'s cache, the
    /// tokens' keys and values already stored, into `out`; with `quant`, `out` is also left
    /// in the int8 scratch where the kernels that run can do it (the returned flag says so).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend(
        &mut self,
        layer: usize,
        q: Tensor,
        out: Tensor,
        heads: usize,
        n: usize,
        max_len: usize,
        quant: bool,
        scores: AttentionScores,
    ) -> Result<bool, Error> {
        let kv = self.kv()?;
        // The flash and grouped kernels attend without windows or soft caps.
        let plain = scores == AttentionScores::default();
        let kind = kv_kind(kv.dtype);
        let (pos, seq) = (self.tokens.pos.ptr(), self.tokens.seq.ptr());
        let (kc, vc) = {
            let (k, v) = &self.cache[layer];
            (k.ptr(), v.ptr())
        };
        if Self::flash(&kv, n, scores) {
            let args = [
                Arg::Ptr(self.ptr(q)),
                Arg::Ptr(kc),
                Arg::Ptr(vc),
                Arg::Ptr(self.ptr(out)),
                Arg::Ptr(self.tokens.tiles.ptr()),
                Arg::Ptr(pos),
                Arg::Ptr(seq),
                Arg::U32(heads as u32),
                Arg::U32(kv.n_kv_heads as u32),
                Arg::U32(kv.max_ctx as u32),
            ];
            let name = format!("flash_attention_{}", kv.head_dim);
            return self
                .launch(&name, (self.tiles, heads), 128, &args)
                .map(|_| false);
        }
        let (split, nsplit) = if n <= GRAPH_MAX_TOKENS {
            Self::graph_splits(&kv)
        } else {
            let split = max_len
                .div_ceil(PREFILL_SPLITS)
                .next_multiple_of(ATTENTION_SPLIT)
                .max(ATTENTION_SPLIT);
            (split, max_len.div_ceil(split))
        };
        let part = Self::scratch_ptr(&self.scratch.part);
        if plain && GROUP_HEAD_DIMS.contains(&kv.head_dim) {
            let args = [
                Arg::Ptr(self.ptr(q)),
                Arg::Ptr(kc),
                Arg::Ptr(vc),
                Arg::Ptr(part),
                Arg::Ptr(pos),
                Arg::Ptr(seq),
                Arg::U32(heads as u32),
                Arg::U32(kv.n_kv_heads as u32),
                Arg::U32(kv.max_ctx as u32),
                Arg::U32(split as u32),
                Arg::U32(nsplit as u32),
            ];
            let per_kv = (heads / kv.n_kv_heads).div_ceil(GROUP_HEADS);
            self.launch(
                &format!("attention_group_{kind}_{}", kv.head_dim),
                (n * kv.n_kv_heads * per_kv, nsplit),
                128,
                &args,
            )?;
        } else {
            let args = [
                Arg::Ptr(self.ptr(q)),
                Arg::Ptr(kc),
                Arg::Ptr(vc),
                Arg::Ptr(part),
                Arg::Ptr(pos),
                Arg::Ptr(seq),
                Arg::U32(heads as u32),
                Arg::U32(kv.n_kv_heads as u32),
                Arg::U32(kv.head_dim as u32),
                Arg::U32(kv.max_ctx as u32),
                Arg::U32(split as u32),
                Arg::U32(nsplit as u32),
                Arg::U32(u32::try_from(scores.window).unwrap_or(u32::MAX)),
                Arg::F32(scores.softcap),
            ];
            self.launch(
                &format!("attention_part_{kind}"),
                (n * heads, nsplit),
                128,
                &args,
            )?;
        }
        let (xq, xd) = match quant {
            true => (
                Self::scratch_ptr(&self.scratch.xq),
                Self::scratch_ptr(&self.scratch.xd),
            ),
            false => (0, 0),
        };
        let args = [
            Arg::Ptr(part),
            Arg::Ptr(self.ptr(out)),
            Arg::Ptr(pos),
            Arg::U32(heads as u32),
            Arg::U32(kv.head_dim as u32),
            Arg::U32(split as u32),
            Arg::U32(nsplit as u32),
            Arg::Ptr(xq),
            Arg::Ptr(xd),
        ];
        self.launch("attention_merge", (n * heads, 1), 128, &args)?;
        Ok(quant)
    }

    pub(super) fn run_op(&mut self, op: &Op, n: usize, max_len: usize) -> Result<(), Error> {
        let (ids, pos, seq) = (
            self.tokens.ids.ptr(),
            self.tokens.pos.ptr(),
            self.tokens.seq.ptr(),
        );
        match *op {
            Op::Embed { table, out } => {
                let w = self.weight(table)?;
                let (name, args) = (
                    format!("embed_{}", w.suffix),
                    [
                        Arg::Ptr(w.ptr),
                        Arg::Ptr(w.row_bytes as u64),
                        Arg::Ptr(ids),
                        Arg::Ptr(self.ptr(out)),
                        Arg::U32(w.cols as u32),
                        Arg::U32(w.rows as u32),
                        Arg::F32(w.scale),
                    ],
                );
                self.launch(&name, (n, 1), 128, &args)
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                rows,
                dim,
                eps,
            } => self.run_fused(
                Fused::Norm {
                    x,
                    y: None,
                    weight,
                    out,
                    rows,
                    dim,
                    eps,
                    quant: Quant::None,
                },
                n,
                max_len,
            ),
            Op::MatMul {
                w,
                x,
                out,
                rows,
                act,
            } => self.matmul(w, x, self.ptr(out), rows, act),
            Op::BitLinear { w, x, out, rows } => {
                let cw = self.weight(w)?;
                let (cols, wrows, suffix, wptr, rb, scale) =
                    (cw.cols, cw.rows, cw.suffix, cw.ptr, cw.row_bytes, cw.scale);
                let (xq, s) = (
                    Self::scratch_ptr(&self.scratch.xq),
                    Self::scratch_ptr(&self.scratch.xd),
                );
                let yp = self.ptr(out);
                self.quantize(Quantized {
                    x,
                    rows,
                    cols,
                    bitlinear: true,
                })?;
                if Self::int8_bitlinear(self.weight(w)?, rows) {
                    let wide = Self::scratch_ptr(&self.scratch.wide);
                    let decode = [
                        Arg::Ptr(wptr),
                        Arg::Ptr(rb as u64),
                        Arg::Ptr(wide),
                        Arg::U32(wrows as u32),
                        Arg::U32(cols as u32),
                    ];
                    let chunks = wrows * cols / 32;
                    self.launch("dequant_i8_i2_s", (chunks.div_ceil(128), 1), 128, &decode)?;
                    self.timed(
                        || format!("cublas I8 {wrows}x{cols} by {rows}"),
                        |me| {
                            me.blas()?
                                .gemm(GemmType::I8, wrows, rows, cols, wide, xq, yp)
                                .map_err(gds)
                        },
                    )?;
                    let args = [
                        Arg::Ptr(yp),
                        Arg::Ptr(s),
                        Arg::U32(wrows as u32),
                        Arg::U32(rows as u32),
                        Arg::F32(scale),
                    ];
                    return self.launch(
                        "bitlinear_scale",
                        ((wrows * rows).div_ceil(256), 1),
                        256,
                        &args,
                    );
                }
                let name = format!("bitlinear_{suffix}");
                for t0 in (0..rows).step_by(GEMV_MAX_TOKENS) {
                    let nt = (rows - t0).min(GEMV_MAX_TOKENS);
                    self.launch(
                        &name,
                        (wrows.div_ceil(4 / warps_per_row(cols)), 1),
                        128,
                        &[
                            Arg::Ptr(wptr),
                            Arg::Ptr(rb as u64),
                            Arg::Ptr(xq + (t0 * cols) as u64),
                            Arg::Ptr(s + (t0 * 4) as u64),
                            Arg::Ptr(yp + (t0 * wrows * 4) as u64),
                            Arg::U32(wrows as u32),
                            Arg::U32(cols as u32),
                            Arg::U32(nt as u32),
                            Arg::F32(scale),
                            Arg::U32(warps_per_row(cols) as u32),
                        ],
                    )?;
                }
                Ok(())
            }
            Op::Rope { x, heads, table } => {
                let (freqs, cfg) = self.rope.get(table).ok_or(BackendError::NoCache("RoPE"))?;
                let args = [
                    Arg::Ptr(self.ptr(x)),
                    Arg::Ptr(pos),
                    Arg::Ptr(freqs.ptr()),
                    Arg::U32(heads as u32),
                    Arg::U32(cfg.head_dim as u32),
                    Arg::U32(cfg.rot_dim as u32),
                    Arg::U32(rope_style_code(cfg.style)),
                ];
                self.launch("rope", (n, 1), 256, &args)
            }
            Op::Attention {
                layer,
                q,
                k,
                v,
                out,
                heads,
                scores,
            } => {
                let kv = self.kv()?;
                let kv_row = kv.n_kv_heads * kv.head_dim;
                let (kc, vc) = {
                    let (k, v) = &self.cache[layer];
                    (k.ptr(), v.ptr())
                };
                let store = [
                    Arg::Ptr(self.ptr(k)),
                    Arg::Ptr(self.ptr(v)),
                    Arg::Ptr(kc),
                    Arg::Ptr(vc),
                    Arg::Ptr(pos),
                    Arg::Ptr(seq),
                    Arg::U32(kv_row as u32),
                    Arg::U32(kv.max_ctx as u32),
                ];
                self.launch(
                    &format!("kv_store_{}", kv_kind(kv.dtype)),
                    (n, 1),
                    256,
                    &store,
                )?;
                self.attend(layer, q, out, heads, n, max_len, false, scores)
                    .map(|_| ())
            }
            Op::Elementwise {
                f,
                out,
                first,
                second,
                len,
            } => {
                let code = elementwise_code(f);
                let a = self.ptr(first.unwrap_or(out));
                let b = second.map_or(a, |s| self.ptr(s));
                let args = [
                    Arg::U32(code),
                    Arg::Ptr(self.ptr(out)),
                    Arg::Ptr(a),
                    Arg::Ptr(b),
                    Arg::U32(len as u32),
                ];
                self.launch("elementwise", (len.div_ceil(256), 1), 256, &args)
            }
            Op::Softcap { x, len, cap } => {
                let args = [Arg::Ptr(self.ptr(x)), Arg::U32(len as u32), Arg::F32(cap)];
                self.launch("softcap", (len.div_ceil(256), 1), 256, &args)
            }
            Op::AddBias {
                out,
                bias: row,
                rows,
                cols,
            }
            | Op::ScaleColumns {
                out,
                scale: row,
                rows,
                cols,
            } => {
                let len = rows * cols;
                let name = match op {
                    Op::AddBias { .. } => "add_bias",
                    _ => "scale_columns",
                };
                let args = [
                    Arg::Ptr(self.ptr(out)),
                    Arg::Ptr(self.ptr(row)),
                    Arg::U32(rows as u32),
                    Arg::U32(cols as u32),
                ];
                self.launch(name, (len.div_ceil(256), 1), 256, &args)
            }
            Op::CopyRow {
                src,
                row,
                cols,
                dst,
                dst_row,
            } => self
                .dev
                .copy(
                    self.ptr(dst) + (dst_row * cols * 4) as u64,
                    self.ptr(src) + (row * cols * 4) as u64,
                    cols * 4,
                )
                .map_err(gds),
            Op::Read {
                logits,
                rows,
                vocab,
                what: Readback::TopK(k),
            } => {
                let k = k.max(1);
                let segs = vocab.div_ceil(TOPK_SEG);
                if k > TOPK_MAX || segs * k > TOPK_MERGE_MAX {
                    // Read in full and selected on the host ([`CudaBackend::read`]).
                    return Ok(());
                }
                let (cv, ci, ov, oi) = self.topk_slots(rows, segs, k);
                let lp = self.ptr(logits);
                self.launch(
                    "topk_segments",
                    (segs, rows),
                    256,
                    &[
                        Arg::Ptr(lp),
                        Arg::U32(vocab as u32),
                        Arg::U32(k as u32),
                        Arg::Ptr(cv),
                        Arg::Ptr(ci),
                    ],
                )?;
                let best = self.tokens.best.ptr();
                self.launch(
                    "topk_merge",
                    (rows, 1),
                    256,
                    &[
                        Arg::Ptr(cv),
                        Arg::Ptr(ci),
                        Arg::U32(segs as u32),
                        Arg::U32(k as u32),
                        Arg::Ptr(ov),
                        Arg::Ptr(oi),
                        Arg::Ptr(best),
                    ],
                )
            }
            Op::Read { .. } => Ok(()),
        }
    }

    /// Where top-k's candidates and results sit in the scratch: candidate values and ids,
    /// result values and ids (the results contiguous, values then ids, for one download).
    pub(super) fn topk_slots(&self, rows: usize, segs: usize, k: usize) -> (u64, u64, u64, u64) {
        let base = Self::scratch_ptr(&self.scratch.topk);
        let cand = (rows * segs * k * 4) as u64;
        let out = (rows * k * 4) as u64;
        (base, base + cand, base + 2 * cand, base + 2 * cand + out)
    }

    /// `out = W x` for `rows` tokens with operands `act`.
    pub(super) fn matmul(
        &mut self,
        w: Weight,
        xt: Tensor,
        y: u64,
        rows: usize,
        act: Activations,
    ) -> Result<(), Error> {
        let cw = self.weight(w)?;
        let (cols, wrows, suffix, wptr, rb, scale) =
            (cw.cols, cw.rows, cw.suffix, cw.ptr, cw.row_bytes, cw.scale);
        let wpr = warps_per_row(cols);
        let grid = (wrows.div_ceil(4 / wpr), 1);
        let x = self.ptr(xt);
        match act {
            Activations::F32 if rows <= GEMV_MAX_TOKENS => self.launch(
                &format!("gemv_{suffix}"),
                grid,
                128,
                &[
                    Arg::Ptr(wptr),
                    Arg::Ptr(rb as u64),
                    Arg::Ptr(x),
                    Arg::Ptr(y),
                    Arg::U32(wrows as u32),
                    Arg::U32(cols as u32),
                    Arg::U32(rows as u32),
                    Arg::F32(scale),
                    Arg::U32(wpr as u32),
                ],
            ),
            Activations::Q8 => {
                let (xq, xd) = (
                    Self::scratch_ptr(&self.scratch.xq),
                    Self::scratch_ptr(&self.scratch.xd),
                );
                let name = format!("gemv_q8_{suffix}");
                self.quantize(Quantized {
                    x: xt,
                    rows,
                    cols,
                    bitlinear: false,
                })?;
                for t0 in (0..rows).step_by(GEMV_MAX_TOKENS) {
                    let nt = (rows - t0).min(GEMV_MAX_TOKENS);
                    self.launch(
                        &name,
                        grid,
                        128,
                        &[
                            Arg::Ptr(wptr),
                            Arg::Ptr(rb as u64),
                            Arg::Ptr(xq + (t0 * cols) as u64),
                            Arg::Ptr(xd + (t0 * cols / 32 * 4) as u64),
                            Arg::Ptr(y + (t0 * wrows * 4) as u64),
                            Arg::U32(wrows as u32),
                            Arg::U32(cols as u32),
                            Arg::U32(nt as u32),
                            Arg::F32(scale),
                            Arg::U32(wpr as u32),
                        ],
                    )?;
                }
                Ok(())
            }
            Activations::F32 | Activations::F16 => {
                let f16 = act == Activations::F16;
                let wide = Self::scratch_ptr(&self.scratch.wide);
                let decode = [
                    Arg::Ptr(wptr),
                    Arg::Ptr(rb as u64),
                    Arg::Ptr(wide),
                    Arg::U32(wrows as u32),
                    Arg::U32(cols as u32),
                ];
                let chunks = wrows * cols / 32;
                let kind = if f16 { "f16" } else { "f32" };
                self.launch(
                    &format!("dequant_{kind}_{suffix}"),
                    (chunks.div_ceil(128), 1),
                    128,
                    &decode,
                )?;
                let (xh, back) = (
                    Self::scratch_ptr(&self.scratch.xh),
                    Self::scratch_ptr(&self.scratch.xd),
                );
                let (operand, t) = if f16 {
                    // `back` shares the scale scratch with int8 rows.
                    self.quantized = None;
                    self.launch(
                        "f16_operands",
                        (rows, 1),
                        256,
                        &[
                            Arg::Ptr(x),
                            Arg::Ptr(xh),
                            Arg::Ptr(back),
                            Arg::U32(cols as u32),
                        ],
                    )?;
                    (xh, GemmType::F16)
                } else {
                    (x, GemmType::F32)
                };
                self.timed(
                    || format!("cublas {t:?} {wrows}x{cols} by {rows}"),
                    |me| {
                        me.blas()?
                            .gemm(t, wrows, rows, cols, wide, operand, y)
                            .map_err(gds)
                    },
                )?;
                if f16 || scale != 1.0 {
                    self.launch(
                        "scale_rows",
                        ((wrows * rows).div_ceil(256), 1),
                        256,
                        &[
                            Arg::Ptr(y),
                            Arg::Ptr(if f16 { back } else { 0 }),
                            Arg::U32(wrows as u32),
                            Arg::U32(rows as u32),
                            Arg::F32(scale),
                        ],
                    )?;
                }
                Ok(())
            }
        }
    }
}
