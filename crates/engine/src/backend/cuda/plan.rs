//! Planning: a pass's ops checked against the buffers, and the scratch they need.

use super::*;

impl CudaBackend {
    /// Check a pass's ops against the buffers and say what scratch they need.
    pub(super) fn check(&self, pass: &Pass) -> Result<(Needs, Option<usize>), Error> {
        let n = pass.tokens;
        let mut needs = Needs::default();
        let mut vocab = None;
        for op in &pass.ops {
            match *op {
                Op::Embed { table, out } => {
                    let w = self.weight(table)?;
                    self.need(out, n * w.cols, "embedding")?;
                    vocab = Some(w.rows);
                }
                Op::RmsNorm {
                    x,
                    weight,
                    out,
                    rows,
                    dim,
                    ..
                } => {
                    self.need(x, rows * dim, "rms_norm x")?;
                    self.need(out, rows * dim, "rms_norm out")?;
                    self.need(weight, dim, "rms_norm weight")?;
                }
                Op::MatMul {
                    w,
                    x,
                    out,
                    rows,
                    act,
                } => {
                    let cw = self.weight(w)?;
                    self.need(x, rows * cw.cols, "matmul x")?;
                    self.need(out, rows * cw.rows, "matmul out")?;
                    match act {
                        Activations::Q8 => {
                            if !quant::q8dot::has_q8_dot(cw.dtype) {
                                return Err(BackendError::UnsupportedWeight {
                                    name: cw.name.clone(),
                                    why: format!("int8 activations with {} weights", cw.dtype),
                                }
                                .into());
                            }
                            needs.xq = needs.xq.max(rows * cw.cols);
                            needs.xd = needs.xd.max(rows * cw.cols / 32 * 4);
                        }
                        Activations::F16 => {
                            needs.xh = needs.xh.max(rows * cw.cols * 2);
                            needs.xd = needs.xd.max(rows * 4);
                            needs.wide = needs.wide.max(cw.rows * cw.cols * 2);
                        }
                        Activations::F32 if rows > GEMV_MAX_TOKENS => {
                            needs.wide = needs.wide.max(cw.rows * cw.cols * 4);
                        }
                        Activations::F32 => {}
                    }
                }
                Op::BitLinear { w, x, out, rows } => {
                    let cw = self.weight(w)?;
                    if quant::bitlinear_input(cw.dtype).is_none() {
                        return Err(BackendError::UnsupportedWeight {
                            name: cw.name.clone(),
                            why: format!(
                                "BitLinear over {} weights (ternary types only)",
                                cw.dtype
                            ),
                        }
                        .into());
                    }
                    self.need(x, rows * cw.cols, "bitlinear x")?;
                    self.need(out, rows * cw.rows, "bitlinear out")?;
                    needs.xq = needs.xq.max(rows * cw.cols);
                    needs.xd = needs.xd.max(rows * 4);
                    if Self::int8_bitlinear(cw, rows) {
                        needs.wide = needs.wide.max(cw.rows * cw.cols);
                    }
                }
                Op::Rope { x, heads, table } => {
                    let cfg = &self.rope.get(table).ok_or(BackendError::NoCache("RoPE"))?.1;
                    self.need(x, n * heads * cfg.head_dim, "rope x")?;
                    if cfg.rot_dim > MAX_HEAD_DIM {
                        return Err(BackendError::UnsupportedWeight {
                            name: "rope".into(),
                            why: format!(
                                "{} rotated dimensions (CUDA turns at most {MAX_HEAD_DIM})",
                                cfg.rot_dim
                            ),
                        }
                        .into());
                    }
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
                    if layer >= kv.n_layers {
                        return Err(BackendError::NoCacheLayer { layer }.into());
                    }
                    if kv.head_dim > MAX_HEAD_DIM
                        || kv.n_kv_heads == 0
                        || heads % kv.n_kv_heads != 0
                    {
                        return Err(BackendError::UnsupportedWeight {
                            name: format!("attention of layer {layer}"),
                            why: format!(
                                "{heads} heads over {} KV heads of {} (CUDA takes head_dim <= {MAX_HEAD_DIM} and whole groups)",
                                kv.n_kv_heads, kv.head_dim
                            ),
                        }
                        .into());
                    }
                    let (kv_row, q_row) = (kv.n_kv_heads * kv.head_dim, heads * kv.head_dim);
                    self.need(q, n * q_row, "attention q")?;
                    self.need(k, n * kv_row, "attention k")?;
                    self.need(v, n * kv_row, "attention v")?;
                    self.need(out, n * q_row, "attention out")?;
                    let splits = if Self::flash(&kv, n, scores) {
                        0
                    } else if n <= GRAPH_MAX_TOKENS {
                        Self::graph_splits(&kv).1
                    } else {
                        PREFILL_SPLITS
                    };
                    needs.part = needs.part.max(n * heads * splits * (kv.head_dim + 2) * 4);
                }
                Op::Elementwise {
                    f,
                    out,
                    first,
                    second,
                    len,
                } => {
                    self.need(out, len, "elementwise out")?;
                    self.need(first.unwrap_or(out), len, "elementwise first operand")?;
                    match (f.takes_second(), second) {
                        (true, Some(s)) => self.need(s, len, "elementwise second operand")?,
                        (true, None) => {
                            return Err(BackendError::MissingOperand { op: f.name() }.into())
                        }
                        (false, _) => {}
                    }
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
                    self.need(out, rows * cols, "by-column op out")?;
                    self.need(row, cols, "by-column op row")?;
                }
                Op::Softcap { x, len, cap } => {
                    self.need(x, len, "softcap x")?;
                    if !(cap > 0.0 && cap.is_finite()) {
                        return Err(BackendError::UnsupportedWeight {
                            name: "softcap".into(),
                            why: format!("a soft cap of {cap}"),
                        }
                        .into());
                    }
                }
                Op::CopyRow {
                    src,
                    row,
                    cols,
                    dst,
                    dst_row,
                } => {
                    self.need(src, (row + 1) * cols, "copy_row src")?;
                    self.need(dst, (dst_row + 1) * cols, "copy_row dst")?;
                }
                Op::Read {
                    logits,
                    rows,
                    vocab,
                    what,
                } => {
                    self.need(logits, rows * vocab, "logits")?;
                    if let Readback::TopK(k) = what {
                        let k = k.max(1);
                        let segs = vocab.div_ceil(TOPK_SEG);
                        if k <= TOPK_MAX && segs * k <= TOPK_MERGE_MAX {
                            needs.topk = needs.topk.max((rows * segs * k + rows * k) * 8);
                        }
                    }
                }
            }
        }
        Ok((needs, vocab))
    }
}
