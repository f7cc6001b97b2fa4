//! Ops written out for people (`tritium run --plan`): each op with the names of its buffers.

use std::collections::HashMap;
use std::fmt::Write;

use super::{Op, Readback, Tensor, Weight};
use crate::quant::GgmlType;

/// The names of a model's buffers, as the model allocated them.
#[derive(Clone, Debug, Default)]
pub struct Names {
    tensors: HashMap<Tensor, String>,
    weights: HashMap<Weight, (String, GgmlType, usize, usize)>,
}

impl Names {
    pub fn tensor_named(&mut self, t: Tensor, name: &str) {
        self.tensors.insert(t, name.to_string());
    }

    pub fn weight_named(
        &mut self,
        w: Weight,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
    ) {
        self.weights
            .insert(w, (name.to_string(), dtype, rows, cols));
    }

    /// A tensor's name (`t7` when unnamed).
    pub fn tensor(&self, t: Tensor) -> String {
        self.tensors
            .get(&t)
            .cloned()
            .unwrap_or_else(|| format!("t{}", t.0))
    }

    /// A weight's name, dtype and shape: `blk.0.attn_q.weight Q4_K 2048x2048`.
    pub fn weight(&self, w: Weight) -> String {
        match self.weights.get(&w) {
            Some((name, dtype, rows, cols)) => format!("{name} {dtype} {rows}x{cols}"),
            None => format!("w{}", w.0),
        }
    }

    /// The name of a weight without its shape.
    pub fn weight_name(&self, w: Weight) -> String {
        self.weights
            .get(&w)
            .map_or_else(|| format!("w{}", w.0), |(n, ..)| n.clone())
    }
}

impl Op {
    /// One line: what the op computes, from and into which buffers.
    pub fn describe(&self, n: &Names) -> String {
        let t = |x: &Tensor| n.tensor(*x);
        let mut s = String::new();
        let _ = match self {
            Op::Embed { table, out } => write!(s, "embed {} -> {}", n.weight(*table), t(out)),
            Op::RmsNorm {
                x,
                weight,
                out,
                rows,
                dim,
                ..
            } => write!(
                s,
                "rms_norm {} * {} -> {} ({rows}x{dim})",
                t(x),
                t(weight),
                t(out)
            ),
            Op::MatMul {
                w,
                x,
                out,
                rows,
                act,
            } => {
                write!(
                    s,
                    "matmul {} . {} -> {} ({rows} rows{})",
                    n.weight(*w),
                    t(x),
                    t(out),
                    act.suffix()
                )
            }
            Op::BitLinear { w, x, out, rows } => {
                write!(
                    s,
                    "bitlinear {} . {} -> {} ({rows} rows)",
                    n.weight(*w),
                    t(x),
                    t(out)
                )
            }
            Op::Rope { x, heads, table } => match table {
                0 => write!(s, "rope {} ({heads} heads)", t(x)),
                _ => write!(s, "rope {} ({heads} heads, table {table})", t(x)),
            },
            Op::Attention {
                layer,
                q,
                k,
                v,
                out,
                heads,
                scores,
            } => {
                let mut extra = String::new();
                if scores.window > 0 {
                    extra += &format!(", window {}", scores.window);
                }
                if scores.softcap > 0.0 {
                    extra += &format!(", soft cap {}", scores.softcap);
                }
                write!(
                    s,
                    "attention layer {layer} q={} k={} v={} -> {} ({heads} heads{extra})",
                    t(q),
                    t(k),
                    t(v),
                    t(out)
                )
            }
            Op::Softcap { x, len, cap } => write!(s, "softcap {} ({len} values, cap {cap})", t(x)),
            Op::Elementwise {
                f,
                out,
                first,
                second,
                len,
            } => {
                let a = first.map_or_else(|| t(out), |x| t(&x));
                match second {
                    Some(b) => write!(s, "{} {}, {} -> {} ({len})", f.name(), a, t(b), t(out)),
                    None => write!(s, "{} {} -> {} ({len})", f.name(), a, t(out)),
                }
            }
            Op::AddBias {
                out,
                bias,
                rows,
                cols,
            } => write!(s, "add bias {} to {} ({rows}x{cols})", t(bias), t(out)),
            Op::ScaleColumns {
                out,
                scale,
                rows,
                cols,
            } => write!(
                s,
                "scale columns of {} by {} ({rows}x{cols})",
                t(out),
                t(scale)
            ),
            Op::CopyRow {
                src,
                row,
                cols,
                dst,
                dst_row,
            } => write!(
                s,
                "copy {}[{row}] -> {}[{dst_row}] ({cols})",
                t(src),
                t(dst)
            ),
            Op::Read {
                logits,
                rows,
                vocab,
                what,
            } => write!(
                s,
                "read {} of {} ({rows}x{vocab})",
                readback_name(*what),
                t(logits)
            ),
        };
        s
    }
}

/// `top-1`, `last row`, `all rows`, `nothing`.
pub fn readback_name(r: Readback) -> String {
    match r {
        Readback::All => "all rows".into(),
        Readback::Last => "last rows".into(),
        Readback::TopK(k) => format!("top-{k}"),
        Readback::Nothing => "nothing".into(),
    }
}
