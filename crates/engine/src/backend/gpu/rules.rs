//! The GPU's fusion rules, applied in this order by [`GpuBackend::make_plan`]. Each rewrites a
//! run of neighbouring ops into one op that does their work in fewer dispatches, only where
//! the weights and the device allow it and where nothing after the run reads a value the
//! fused op no longer writes (an intermediate such as the normed rows, or a scratch output).
//!
//! | rule | before | after |
//! |---|---|---|
//! | [`norm_bitlinear`] | `rms_norm`, 1-3 I2_S `bitlinear`s of its output, `relu_squared_mul` or `add` | `rms_norm+bitlinear` |
//! | [`residual_add`] | `matvec_q8` / `matmul` into a scratch, `add` of it to a residual | `matvec_q8+add` / `matmul+add` |
//! | [`shared_records`] | a second `quantize`/`quantize_q8` of an unchanged tensor | (gone) |
//! | [`norm_q8`] | `rms_norm`, `quantize_q8`/`quantize` of its output | `rms_norm+quantize_q8` / `rms_norm+quantize` |
//! | [`silu_q8`] | `silu_mul`, `quantize_q8` of its output | `silu_mul+quantize_q8` |
//! | [`fold_rope`] | `rope q`, `rope k`, `attention` | `attention+rope` |
//! | [`attention_q8`] | `attention`, `quantize_q8` of its output | `attention+quantize_q8` |
//! | [`pair_q8`] | two `matvec_q8` of one input | `matvec_q8 a + b` |
//! | [`add_norm`] | `matvec_q8+add`, `rms_norm+quantize_q8` of the sum, its products, the gated product or attention | `matvec_q8+add+norm record`, products of the record, `rms_norm factor+...` |
//! | [`share_f16_input`] | two cooperative-matrix `matmul`s of one input | the second reads the first's f16 input |

use super::plan::{GpuOp, Records};
use super::GpuBackend;
use crate::backend::{Elementwise, Op, Tensor, Weight};
use crate::gpu::bitlinear::{NormBitLinearMode, NormBitLinearOp};
use crate::gpu::matmul::MatmulOp;
use crate::gpu::q8::{can_add_norm, can_pair};
use crate::gpu::weights::GpuWeight;
use crate::pass::read_later;

/// Whether the value `t` holds after `ops[..from]` is read by `ops[from..]` before it is
/// written again.
fn needed(ops: &[GpuOp], from: usize, t: Tensor) -> bool {
    read_later(&ops[from.min(ops.len())..], t, GpuOp::reads, GpuOp::writes)
}

/// [`needed`] over model ops.
fn needed_op(ops: &[Op], from: usize, t: Tensor) -> bool {
    read_later(&ops[from.min(ops.len())..], t, Op::reads, |o| {
        o.writes().into_iter().collect()
    })
}

/// **norm_bitlinear** (BitNet decode): a one-token RMSNorm, the I2_S BitLinear products of its
/// output (1 to 3, each into its own tensor), and what combines them (`relu(gate)^2 * up`, or
/// the add of the one product into the residual) become one dispatch
/// ([`NormBitLinearOp`]). Applied to the model's ops at `i`; returns the op and how many
/// model ops it covers.
pub(super) fn norm_bitlinear(
    b: &GpuBackend,
    ops: &[Op],
    i: usize,
    tokens: usize,
) -> Option<(GpuOp, usize)> {
    if !b.rules.norm_bitlinear || tokens != 1 {
        return None;
    }
    let Op::RmsNorm {
        x,
        weight: norm,
        out: normed,
        rows: 1,
        dim,
        eps,
    } = ops[i]
    else {
        return None;
    };
    let mut weights = Vec::new();
    let mut outs = Vec::new();
    let mut j = i + 1;
    while let Some(&Op::BitLinear {
        w,
        x: input,
        out,
        rows: 1,
    }) = ops.get(j)
    {
        if input != normed || weights.len() == 3 {
            break;
        }
        weights.push(w);
        outs.push(out);
        j += 1;
    }
    if weights.is_empty() {
        return None;
    }
    let ws: Vec<&GpuWeight> = weights.iter().map(|w| b.weight(*w)).collect();
    // The combination that follows, if it is one the kernel does.
    let (mode, written, scratch, used) = match ops.get(j) {
        Some(&Op::Elementwise {
            f: Elementwise::ReluSquaredMul,
            out,
            first: None,
            second: Some(up),
            len,
        }) if outs.len() == 2 && out == outs[0] && up == outs[1] => {
            if len != ws[0].rows as usize {
                return None;
            }
            (
                NormBitLinearMode::ReluSquaredGate,
                vec![outs[0]],
                vec![outs[1]],
                j + 1 - i,
            )
        }
        Some(&Op::Elementwise {
            f: Elementwise::Add,
            out: residual,
            first: None,
            second: Some(product),
            len,
        }) if outs.len() == 1 && product == outs[0] => {
            if len != ws[0].rows as usize {
                return None;
            }
            (
                NormBitLinearMode::Residual,
                vec![residual],
                vec![outs[0]],
                j + 1 - i,
            )
        }
        _ => (NormBitLinearMode::Separate, outs.clone(), vec![], j - i),
    };
    if NormBitLinearOp::unsupported(&b.ctx, &ws, dim as u32, mode).is_some() {
        return None;
    }
    // Every workgroup reads the input while others write the outputs.
    let distinct = written
        .iter()
        .enumerate()
        .all(|(k, t)| *t != x && *t != norm && !written[..k].contains(t));
    // The normed rows and the scratch outputs are never written.
    let end = i + used;
    let dead = std::iter::once(normed)
        .chain(scratch)
        .all(|t| written.contains(&t) || !needed_op(ops, end, t));
    (distinct && dead).then(|| {
        (
            GpuOp::NormBitLinear(x, norm, eps.to_bits(), weights, written, mode),
            used,
        )
    })
}

/// **residual_add**: a product into a scratch tensor followed by the add of that scratch to
/// a residual becomes the product added to the residual in its own dispatch: a one-token
/// integer-dot product (`matvec_q8+add`), a one-token product of a legacy format with the
/// kernel (`MatvecAdd`), or a product of several tokens on cooperative matrices.
pub(super) fn residual_add(b: &GpuBackend, ops: &mut Vec<GpuOp>) {
    if !b.rules.residual {
        return;
    }
    let mut i = 0;
    while i + 1 < ops.len() {
        let fused = match (&ops[i], &ops[i + 1]) {
            (
                &GpuOp::MatvecQ8(w, x, s, false, false),
                &GpuOp::Elementwise(Elementwise::Add, r, None, Some(s2), len),
            ) if s == s2 && r != x && r != s && len == b.weight(w).rows as usize => {
                Some(GpuOp::MatvecQ8(w, x, r, true, false))
            }
            (
                &GpuOp::Matmul(w, x, s, rows),
                &GpuOp::Elementwise(Elementwise::Add, r, None, Some(s2), len),
            ) if s == s2 && r != x && r != s => {
                let gw = b.weight(w);
                if rows == 1 && len == gw.rows as usize && MatmulOp::has_matvec_add(gw.dtype) {
                    Some(GpuOp::MatmulAdd(w, x, r, 1))
                } else if len == rows * gw.rows as usize
                    && MatmulOp::takes_coop(&b.ctx, gw, rows as u32)
                {
                    Some(GpuOp::MatmulAdd(w, x, r, rows))
                } else {
                    None
                }
            }
            _ => None,
        };
        match fused {
            Some(op) if !needed(ops, i + 2, scratch_of(&ops[i])) => {
                ops.splice(i..i + 2, [op]);
            }
            _ => {}
        }
        i += 1;
    }
}

/// The output of a product.
fn scratch_of(op: &GpuOp) -> Tensor {
    match op {
        GpuOp::MatvecQ8(_, _, s, ..) | GpuOp::Matmul(_, _, s, _) => *s,
        _ => Tensor(u32::MAX),
    }
}

/// **shared_records**: a tensor's int8 records are made once and read by every product of it
/// (q, k and v; gate and up) until an op writes the tensor: a quantization of records that
/// are current goes.
pub(super) fn shared_records(b: &GpuBackend, ops: &mut Vec<GpuOp>) {
    if !b.rules.shared_records {
        return;
    }
    let head_dim = b.head_dim();
    let mut i = 0;
    while i < ops.len() {
        let wanted = match ops[i] {
            GpuOp::QuantizeQ8(x, cols) => Some(Records::Q8(x, cols)),
            GpuOp::Quantize(x, _, cols) => Some(Records::BitLinear(x, cols)),
            _ => None,
        };
        if let Some(r) = wanted {
            let x = match r {
                Records::Q8(x, _) | Records::BitLinear(x, _) => x,
            };
            let current = ops[..i]
                .iter()
                .rev()
                .find_map(|op| {
                    if op.makes_records(head_dim) == Some(r) {
                        Some(true)
                    } else if op.writes().contains(&x) {
                        Some(false)
                    } else {
                        None
                    }
                })
                .unwrap_or(false);
            if current {
                ops.remove(i);
                continue;
            }
        }
        i += 1;
    }
}

/// **norm_q8**: an RMSNorm whose output is quantized next writes the records in its own
/// dispatch: one row for the integer-dot products (`rms_norm+quantize_q8`), any rows for
/// I2_S BitLinear (`rms_norm+quantize`).
pub(super) fn norm_q8(b: &GpuBackend, ops: &mut Vec<GpuOp>) {
    let mut i = 0;
    while i + 1 < ops.len() {
        let fused = match (&ops[i], &ops[i + 1]) {
            (&GpuOp::RmsNorm(x, w, out, 1, dim, eps), &GpuOp::QuantizeQ8(q, cols))
                if b.rules.norm_q8 && q == out && cols == dim =>
            {
                Some(GpuOp::RmsNormQuantizeQ8(x, w, out, dim, eps))
            }
            (&GpuOp::RmsNorm(x, w, out, rows, dim, eps), &GpuOp::Quantize(q, qrows, cols))
                if b.rules.norm_quantize
                    && q == out
                    && qrows == rows
                    && cols == dim
                    && dim % 4 == 0 =>
            {
                Some(GpuOp::RmsNormQuantize(x, w, out, rows, dim, eps))
            }
            _ => None,
        };
        if let Some(op) = fused {
            ops.splice(i..i + 2, [op]);
        }
        i += 1;
    }
}

/// **silu_q8**: in a one-token pass, Llama's gated product `silu(gate) * up` whose result is
/// quantized next (for `ffn_down`'s integer-dot product) writes the records in its own
/// dispatch.
pub(super) fn silu_q8(b: &GpuBackend, ops: &mut Vec<GpuOp>, tokens: usize) {
    if !(b.rules.silu_q8 && b.rules.int_dot && tokens == 1) {
        return;
    }
    let mut i = 0;
    while i + 1 < ops.len() {
        if let (
            &GpuOp::Elementwise(Elementwise::SiluMul, gate, None, Some(up), len),
            &GpuOp::QuantizeQ8(q, cols),
        ) = (&ops[i], &ops[i + 1])
        {
            if q == gate && cols == len && up != gate {
                ops.splice(i..i + 2, [GpuOp::SiluMulQuantizeQ8(gate, up, len, None)]);
            }
        }
        i += 1;
    }
}

/// **fold_rope**: the RoPE of q (query heads) and of k (the cache's KV heads) right before the
/// attention that reads them go into the attention, which rotates q and the new keys as it
/// loads them (and leaves the q and k buffers unrotated).
pub(super) fn fold_rope(b: &GpuBackend, ops: &mut Vec<GpuOp>) {
    let Some(kv_heads) = b.kv_heads() else {
        return;
    };
    if !b.rules.fold_rope || !b.has_rope() {
        return;
    }
    let mut i = 0;
    while i + 2 < ops.len() {
        if let (
            &GpuOp::Rope(a, ha, ta),
            &GpuOp::Rope(c, hc, tc),
            &GpuOp::Attention(l, t, h, None, q8, norm, scores),
        ) = (&ops[i], &ops[i + 1], &ops[i + 2])
        {
            let [q, k, ..] = t;
            let (qh, kh) = ((q, h), (k, kv_heads));
            let pair = ((a, ha), (c, hc));
            if q != k && ta == tc && (pair == (qh, kh) || pair == (kh, qh)) {
                let folded = GpuOp::Attention(l, t, h, Some(ta), q8, norm, scores);
                ops.splice(i..i + 3, [folded]);
            }
        }
        i += 1;
    }
}

/// **attention_q8**: a one-token attention whose output is quantized next (for `wo`'s
/// integer-dot product) writes the records in its combine, where it is cut into pieces
/// whose heads are whole q8 blocks.
pub(super) fn attention_q8(b: &GpuBackend, ops: &mut Vec<GpuOp>, tokens: usize) {
    if !(b.rules.int_dot && b.rules.attention_q8 && tokens == 1) {
        return;
    }
    let head_dim = b.head_dim();
    let mut i = 0;
    while i + 1 < ops.len() {
        if let (&GpuOp::Attention(l, t, h, rope, false, norm, s), &GpuOp::QuantizeQ8(x, cols)) =
            (&ops[i], &ops[i + 1])
        {
            if x == t[3] && cols == h * head_dim && b.attention_quantizes(h) {
                ops.splice(i..i + 2, [GpuOp::Attention(l, t, h, rope, true, norm, s)]);
            }
        }
        i += 1;
    }
}

/// **pair_q8**: two one-token integer-dot products of one input, one right after the other,
/// into distinct outputs run in one dispatch where the weights allow ([`can_pair`]: q and k,
/// gate and up), the same bits as two.
pub(super) fn pair_q8(b: &GpuBackend, ops: &mut Vec<GpuOp>) {
    if !b.rules.pair_q8 {
        return;
    }
    let mut i = 0;
    while i + 1 < ops.len() {
        if let (&GpuOp::MatvecQ8(wa, x, oa, false, na), &GpuOp::MatvecQ8(wb, xb, ob, false, nb)) =
            (&ops[i], &ops[i + 1])
        {
            if x == xb
                && na == nb
                && oa != x
                && ob != x
                && ob != oa
                && can_pair(b.weight(wa), b.weight(wb))
            {
                ops.splice(i..i + 2, [GpuOp::MatvecQ8Pair(wa, wb, x, oa, ob, na)]);
            }
        }
        i += 1;
    }
}

/// **add_norm** (Llama decode): a one-token integer-dot product added to the residual, the
/// RMSNorm of that residual and the products of the norm (its q8 record) fold together: the
/// add writes the record of `x * w` and each block's sum of squares (`matvec_q8+add+norm
/// record`), the products read that record (products of the normed rows times `rms(x)`), and
/// the op after them applies `1 / rms(x)`: the gated product for the FFN's gate and up
/// (`rms_norm factor+silu_mul+quantize_q8`), the decode attention for q, k and v (`rms_norm
/// factor+attention`, where it combines its pieces in its own dispatch). The norm then has no
/// dispatch of its own. RoPE between the products and the attention stays (it is linear).
pub(super) fn add_norm(b: &GpuBackend, ops: &mut Vec<GpuOp>, tokens: usize) {
    if !(b.rules.add_norm && b.rules.norm_q8 && tokens == 1) {
        return;
    }
    let mut i = 0;
    while i + 2 < ops.len() {
        if let Some(fold) = add_norm_at(b, ops, i) {
            apply_add_norm(ops, i, fold);
        }
        i += 1;
    }
}

/// What [`add_norm`] found at one place.
struct AddNormFold {
    /// The norm: weight, output, row length, eps bits.
    norm: (Tensor, Tensor, usize, u32),
    /// Indexes of the products of the norm's record.
    products: Vec<usize>,
    /// Index of the op that applies the factor.
    consumer: usize,
}

fn add_norm_at(b: &GpuBackend, ops: &[GpuOp], i: usize) -> Option<AddNormFold> {
    let GpuOp::MatvecQ8(w, _, r, true, false) = ops[i] else {
        return None;
    };
    let GpuOp::RmsNormQuantizeQ8(x, norm_w, normed, dim, eps) = ops[i + 1] else {
        return None;
    };
    let gw = b.weight(w);
    if x != r || normed == x || gw.rows as usize != dim || !can_add_norm(gw) {
        return None;
    }
    // The products of the normed rows, and their outputs in order.
    let mut products = Vec::new();
    let mut weights: Vec<Weight> = Vec::new();
    let mut outs: Vec<Tensor> = Vec::new();
    let mut j = i + 2;
    loop {
        match ops.get(j) {
            Some(&GpuOp::MatvecQ8(p, input, o, false, false)) if input == normed => {
                weights.push(p);
                outs.push(o);
            }
            Some(&GpuOp::MatvecQ8Pair(p, q, input, op, oq, false)) if input == normed => {
                weights.extend([p, q]);
                outs.extend([op, oq]);
            }
            _ => break,
        }
        products.push(j);
        j += 1;
    }
    let distinct = outs
        .iter()
        .enumerate()
        .all(|(k, o)| !outs[..k].contains(o) && ![x, norm_w, normed].contains(o));
    if !distinct {
        return None;
    }
    let (consumer, unscaled_after): (usize, Vec<Tensor>) = match (&weights[..], ops.get(j)) {
        // Llama's gated FFN.
        (
            [gate, up],
            Some(
                &GpuOp::SiluMulQuantizeQ8(g, u, len, None)
                | &GpuOp::Elementwise(Elementwise::SiluMul, g, None, Some(u), len),
            ),
        ) if g == outs[0] && u == outs[1] => {
            let (gate, up) = (b.weight(*gate), b.weight(*up));
            if gate.rows != up.rows || len != gate.rows as usize || len % 32 != 0 {
                return None;
            }
            (j, vec![outs[1]])
        }
        // Llama's attention inputs (RoPE, linear, may come between).
        ([_, _, _], _) => {
            let mut k = j;
            while let Some(GpuOp::Rope(t, ..)) = ops.get(k) {
                if !outs[..2].contains(t) {
                    return None;
                }
                k += 1;
            }
            let GpuOp::Attention(_, [q, kk, v, out], heads, _, _, false, _) = *ops.get(k)? else {
                return None;
            };
            let fits = [q, kk, v] == [outs[0], outs[1], outs[2]]
                && ![x, norm_w, normed].contains(&out)
                && !outs.contains(&out)
                && b.attention_takes_norm(heads);
            if !fits {
                return None;
            }
            (k, outs.clone())
        }
        _ => return None,
    };
    // Nothing after reads the never-written normed rows or the products before the factor.
    let dead = std::iter::once(normed)
        .chain(unscaled_after)
        .all(|t| !needed(ops, consumer + 1, t));
    dead.then_some(AddNormFold {
        norm: (norm_w, normed, dim, eps),
        products,
        consumer,
    })
}

fn apply_add_norm(ops: &mut Vec<GpuOp>, i: usize, f: AddNormFold) {
    let (norm_w, normed, dim, eps) = f.norm;
    if let GpuOp::MatvecQ8(w, x, r, ..) = ops[i] {
        ops[i] = GpuOp::MatvecQ8AddNorm(w, x, r, norm_w, normed, eps);
    }
    for &p in &f.products {
        ops[p] = match ops[p].clone() {
            GpuOp::MatvecQ8(w, x, o, a, _) => GpuOp::MatvecQ8(w, x, o, a, true),
            GpuOp::MatvecQ8Pair(a, b, x, oa, ob, _) => GpuOp::MatvecQ8Pair(a, b, x, oa, ob, true),
            other => other,
        };
    }
    ops[f.consumer] = match ops[f.consumer].clone() {
        GpuOp::SiluMulQuantizeQ8(g, u, len, None)
        | GpuOp::Elementwise(Elementwise::SiluMul, g, None, Some(u), len) => {
            GpuOp::SiluMulQuantizeQ8(g, u, len, Some((normed, dim)))
        }
        GpuOp::Attention(l, t, h, rope, q8, _, s) => GpuOp::Attention(l, t, h, rope, q8, true, s),
        other => other,
    };
    // The norm is done by the add (its record) and the consumer (its factor).
    ops.remove(i + 1);
}

/// **share_f16_input** (prefill on cooperative matrices): a product right after another of
/// the same input and row length (q, k and v; gate and up) takes the scaled f16 inputs the
/// first left in the shared scratch instead of converting them again.
pub(super) fn share_f16_input(b: &GpuBackend, ops: &mut [GpuOp]) {
    if !b.rules.share_f16_input {
        return;
    }
    for i in 1..ops.len() {
        let (prev, op) = (&ops[i - 1], &ops[i]);
        let (GpuOp::Matmul(pw, px, pout, prows) | GpuOp::MatmulShared(pw, px, pout, prows)) = *prev
        else {
            continue;
        };
        let GpuOp::Matmul(w, x, out, rows) = *op else {
            continue;
        };
        let (pg, g) = (b.weight(pw), b.weight(w));
        let shares = px == x
            && prows == rows
            && pout != x
            && pg.cols == g.cols
            && MatmulOp::takes_coop(&b.ctx, pg, rows as u32)
            && MatmulOp::takes_coop(&b.ctx, g, rows as u32);
        if shares {
            ops[i] = GpuOp::MatmulShared(w, x, out, rows);
        }
    }
}
