//! Checks of the ternary family: activation quantization (int8 records and f32), I2_S
//! BitLinear (matvec and matmul), TQ1_0 and TQ2_0 (matvec and matmul on f32 activations, and
//! as BitLinear), against the CPU references.
//!
//! Shapes are BitNet b1.58 2B4T's in small form plus odd ones: rows 640 (the K/V projection)
//! and 7; cols 2560 (hidden) and 3 blocks (384 for I2_S's 128-weight blocks, 768 for the TQ
//! formats' 256); every weight whole and split into at least three chunks; 1, 3 and 17 tokens.

use super::harness::{
    compare, gpu_err, poisoned, read_f32, reference_matmul, run_matmul, submit, upload_f32, Check,
    PerDtype, Rng, Stats,
};
use crate::bitlinear::{activations_bytes, decode_record, fake_activations_bytes, record_bytes};
use crate::bitlinear::{BitLinearOp, QuantizeActivationsOp, RmsNormQuantizeOp};
use crate::cpu::bitlinear::{bitlinear_i2s, quantize_activations};
use crate::quant::{self, GgmlType};
use crate::weights::{row_bytes, GpuWeight};
use crate::GpuContext;

pub const CHECKS: &[Check] = &[
    Check {
        name: "ternary/quantize_activations",
        run: |ctx| Box::pin(quantize_check(ctx)),
    },
    Check {
        name: "ternary/rms_norm_quantize",
        run: |ctx| Box::pin(norm_quantize_check(ctx)),
    },
    Check {
        name: "ternary/matvec_i2s",
        run: |ctx| Box::pin(i2s(ctx, &[1])),
    },
    Check {
        name: "ternary/matmul_i2s",
        run: |ctx| Box::pin(i2s(ctx, &[3, 17])),
    },
    Check {
        name: "ternary/fake_quantize_activations",
        run: |ctx| Box::pin(fake_quantize_check(ctx)),
    },
];

/// Whether `t` is one of upstream ggml's ternary types (the TQ skeletons' family).
fn tq_family(t: GgmlType) -> bool {
    crate::kernels::Kernel::Matvec(t).family() == Some(crate::quant::Family::Ternary)
}

pub const PER_DTYPE: &[PerDtype] = &[
    PerDtype {
        prefix: "ternary/matvec_",
        applies: tq_family,
        run: |ctx, t| Box::pin(tq(ctx, t, &[1])),
    },
    PerDtype {
        prefix: "ternary/matmul_",
        applies: tq_family,
        run: |ctx, t| Box::pin(tq(ctx, t, &[3, 17])),
    },
    PerDtype {
        prefix: "ternary/bitlinear_",
        applies: tq_family,
        run: |ctx, t| Box::pin(tq_bitlinear(ctx, t)),
    },
];

/// Activations whose per-token magnitude spans many binades (so the scale division sees
/// varied mantissas and exponents), with special rows: all zero (the 1e-5 epsilon), tiny
/// (absmax below the epsilon), and absmax 127 with exact half-way values (s = 1, so
/// `round(x * s)` meets ties: half to even).
pub(super) fn activations(rng: &mut Rng, n_tokens: usize, cols: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n_tokens * cols);
    for t in 0..n_tokens {
        let row: Vec<f32> = match t % 7 {
            3 => vec![0.0; cols],
            5 => rng.vec(cols, 3e-6),
            6 => (0..cols)
                .map(|c| match c {
                    0 => 127.0,
                    _ => (rng.below(255) as f32 - 127.0) + 0.5 * (rng.below(2) as f32),
                })
                .map(|v: f32| v.clamp(-127.0, 127.0))
                .collect(),
            _ => {
                let scale = 2f32.powi(rng.below(40) as i32 - 20) * (1.0 + rng.f32().abs());
                rng.vec(cols, scale)
            }
        };
        x.extend(row);
    }
    x
}

/// `(n_tokens, cols)` for the quantization checks: 4096 tokens of 4 values put the scale
/// division through many mantissas and binades; 8196 values take several strides of the
/// workgroup; 100 is no multiple of 16 (record padding).
const QUANTIZE_SHAPES: [(usize, usize); 6] = [
    (3, 2560),
    (64, 384),
    (17, 100),
    (2, 6912),
    (4096, 4),
    (2, 8196),
];

/// QuantizeActivations against the CPU: int8 values, padding and the header exactly equal,
/// scales bit-equal (the kernel divides by exact integer long division; `127 / m` is never a
/// tie, so the rounding is decided by the round and sticky bits). Tolerance: none.
async fn quantize_check(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_tokens, cols) in QUANTIZE_SHAPES {
        let mut rng = Rng(n_tokens as u64 * 1009 + cols as u64);
        let x = activations(&mut rng, n_tokens, cols);
        let (want_q, want_s) = quantize_activations(&x, cols);
        let xb = upload_f32(ctx, "x", &x)?;
        let bytes = activations_bytes(cols as u32, n_tokens as u32);
        let xq = poisoned(ctx, (bytes / 4) as usize)?;
        let op = QuantizeActivationsOp::new(ctx, &xb, &xq, cols as u32, n_tokens as u32)
            .map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got = ctx.read_bytes(&xq, 0, bytes).await.map_err(gpu_err)?;
        let rec = record_bytes(cols as u32) as usize;
        for t in 0..n_tokens {
            let r = &got[t * rec..(t + 1) * rec];
            let what = format!("{n_tokens}x{cols} token {t}");
            let (s, sum, q) = decode_record(r, cols).ok_or(format!("{what}: short record"))?;
            let want = &want_q[t * cols..(t + 1) * cols];
            if s.to_bits() != want_s[t].to_bits() {
                return Err(format!("{what}: scale {s:e}, want {:e}", want_s[t]));
            }
            if let Some(c) = (0..cols).find(|&c| q[c] != want[c]) {
                return Err(format!(
                    "{what} col {c}: x = {:e} quantized to {}, want {}",
                    x[t * cols + c],
                    q[c],
                    want[c]
                ));
            }
            let want_sum: i32 = want.iter().map(|&v| i32::from(v)).sum();
            if sum != want_sum {
                return Err(format!("{what}: sum {sum}, want {want_sum}"));
            }
            if r[8..16].iter().chain(&r[16 + cols..]).any(|&b| b != 0) {
                return Err(format!("{what}: header or padding not zeroed"));
            }
            stats.elements += cols as u64 + 2;
        }
    }
    Ok(stats)
}

/// RmsNormQuantize against the CPU: the normalized rows within the bound of ops/rms_norm
/// (`|y| (dim / 2 + 8) eps`: the sum of squares in another order, inverseSqrt's 2 ulp), and the
/// records exactly equal to the CPU's quantization of the rows the kernel wrote (scale bits,
/// int8 values, sum, zeroed header and padding). Shapes: decode rows of BitNet 2B4T's widths,
/// a batch, and a width that is not a multiple of 16.
async fn norm_quantize_check(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_tokens, dim) in [
        (1usize, 2560usize),
        (1, 6912),
        (5, 2560),
        (3, 12),
        (2, 8196),
        (1, 16384),
    ] {
        let mut rng = Rng(n_tokens as u64 * 31 + dim as u64);
        let x = activations(&mut rng, n_tokens, dim);
        let w: Vec<f32> = (0..dim).map(|i| 0.25 + (i % 13) as f32 * 0.125).collect();
        let eps = 1e-5;
        let want = crate::cpu::ops::rms_norm(&x, &w, eps);
        let xb = upload_f32(ctx, "x", &x)?;
        let wb = upload_f32(ctx, "w", &w)?;
        let y = poisoned(ctx, x.len())?;
        let bytes = activations_bytes(dim as u32, n_tokens as u32);
        let xq = poisoned(ctx, (bytes / 4) as usize)?;
        let op = RmsNormQuantizeOp::new(ctx, &xb, &wb, &y, &xq, n_tokens as u32, dim as u32, eps)
            .map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got_y = ctx
            .read_bytes(&y, 0, (x.len() * 4) as u64)
            .await
            .map_err(gpu_err)?;
        let got_y: Vec<f32> = bytemuck::pod_collect_to_vec(&got_y);
        let bound: Vec<f64> = want
            .iter()
            .map(|v| f64::from(v.abs()) * (dim as f64 / 2.0 + 8.0) * f64::from(f32::EPSILON))
            .collect();
        let want_wide: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        stats.merge(super::harness::compare(
            &format!("rms_norm_quantize {n_tokens}x{dim} normalized"),
            &got_y,
            &want_wide,
            &bound,
        )?);
        let (want_q, want_s) = quantize_activations(&got_y, dim);
        let got = ctx.read_bytes(&xq, 0, bytes).await.map_err(gpu_err)?;
        let rec = record_bytes(dim as u32) as usize;
        for t in 0..n_tokens {
            let r = &got[t * rec..(t + 1) * rec];
            let what = format!("rms_norm_quantize {n_tokens}x{dim} token {t}");
            let (s, sum, q) = decode_record(r, dim).ok_or(format!("{what}: short record"))?;
            let want = &want_q[t * dim..(t + 1) * dim];
            if s.to_bits() != want_s[t].to_bits() {
                return Err(format!("{what}: scale {s:e}, want {:e}", want_s[t]));
            }
            if let Some(c) = (0..dim).find(|&c| q[c] != want[c]) {
                return Err(format!("{what} col {c}: {} want {}", q[c], want[c]));
            }
            let want_sum: i32 = want.iter().map(|&v| i32::from(v)).sum();
            if sum != want_sum {
                return Err(format!("{what}: sum {sum}, want {want_sum}"));
            }
            if r[8..16].iter().chain(&r[16 + dim..]).any(|&b| b != 0) {
                return Err(format!("{what}: header or padding not zeroed"));
            }
            stats.elements += dim as u64 + 2;
        }
    }
    Ok(stats)
}

/// `[whole, small]`: a chunk limit that keeps the weight whole and one that splits its rows
/// into three chunks.
fn chunk_limits(dtype: GgmlType, rows: usize, cols: usize) -> Result<[u64; 2], String> {
    let row = row_bytes(dtype, cols as u64).ok_or(format!("{dtype}: no row size for {cols}"))?;
    Ok([u64::MAX, rows.div_ceil(3) as u64 * row + 16])
}

fn upload(
    ctx: &GpuContext,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    data: &[u8],
    max_chunk: u64,
) -> Result<GpuWeight, String> {
    let w = ctx
        .upload_weight_split("w", dtype, rows as u32, cols as u32, data, max_chunk)
        .map_err(gpu_err)?;
    if max_chunk != u64::MAX && w.chunks.len() < 3 {
        return Err(format!("{rows} rows split into {} chunks", w.chunks.len()));
    }
    Ok(w)
}

/// I2_S BitLinear (quantize + matvec/matmul) against `cpu::bitlinear`. The integer sums are
/// exact on both sides, so outputs differ only by the final `acc * weight_scale / s`: the CPU
/// rounds twice (correctly: at most 1 eps relative), the GPU's multiply is correctly rounded
/// and WGSL allows 2.5 ulp for `/` (at most 3 eps relative); bound `4 eps |y|`.
/// The last shape has enough rows for the matvec's wide mapping (`ternary::WIDE_ROWS`).
async fn i2s(ctx: &GpuContext, token_counts: &[usize]) -> Result<Stats, String> {
    let mut stats = Stats::default();
    let wide = crate::kernels::ternary::WIDE_ROWS as usize + 7;
    for (rows, cols) in [
        (640usize, 2560usize),
        (7, 384),
        (7, 2560),
        (640, 384),
        (wide, 128),
    ] {
        let mut rng = Rng(rows as u64 * 7919 + cols as u64);
        let w = rng.vec(rows * cols, 1.0);
        let data = quant::quantize(GgmlType::I2_S, &w).map_err(|e| e.to_string())?;
        let ws = quant::i2s_weight_scale(&data, rows * cols).map_err(|e| e.to_string())?;
        for &n in token_counts {
            let x = activations(&mut rng, n, cols);
            let (xq, s) = quantize_activations(&x, cols);
            let want: Vec<f64> = bitlinear_i2s(&data, ws, rows, cols, &xq, &s)
                .into_iter()
                .map(f64::from)
                .collect();
            let bound: Vec<f64> = want
                .iter()
                .map(|v| 4.0 * f64::from(f32::EPSILON) * v.abs())
                .collect();
            let xb = upload_f32(ctx, "x", &x)?;
            for max_chunk in chunk_limits(GgmlType::I2_S, rows, cols)? {
                let gw = upload(ctx, GgmlType::I2_S, rows, cols, &data, max_chunk)?;
                let y = poisoned(ctx, rows * n)?;
                let op = BitLinearOp::new(ctx, &gw, &xb, &y, n as u32, true).map_err(gpu_err)?;
                submit(ctx, |pass| op.record(pass));
                let got = read_f32(ctx, &y, rows * n).await?;
                stats.merge(compare(
                    &format!("{rows}x{cols}, {n} tokens, {} chunks", gw.chunks.len()),
                    &got,
                    &want,
                    &bound,
                )?);
            }
        }
    }
    Ok(stats)
}

/// TQ1_0/TQ2_0 against `quant::dequantize` + an f64 product. The bound is the f32 summation
/// bound `cols * eps * sum |w x|` of `reference_matmul`, valid in any summation order: the
/// kernels form the exact products `(c - 1) * x`, sum them in f32 and multiply each 64-weight
/// unit's sum by `d` once, which adds one rounding per unit (at most `(64 + 1 + cols / 64)`
/// eps-terms in all, below `cols` for `cols >= 256`).
async fn tq(ctx: &GpuContext, dtype: GgmlType, token_counts: &[usize]) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in [(640usize, 2560usize), (7, 768), (7, 2560), (640, 768)] {
        let mut rng = Rng(rows as u64 * 104_729 + cols as u64 + dtype as u64);
        let w = rng.vec(rows * cols, 1.0);
        let mut data = quant::quantize(dtype, &w).map_err(|e| e.to_string())?;
        // Bytes no quantizer writes still decode the same on both sides: TQ2_0 code 3 (+2)
        // and TQ1_0 bytes past 242.
        data[0] = 0xff;
        data[1] = 0xf7;
        let deq = quant::dequantize(dtype, &data, rows * cols).map_err(|e| e.to_string())?;
        for &n in token_counts {
            let x = rng.vec(n * cols, 1.0);
            let xb = upload_f32(ctx, "x", &x)?;
            let (want, bound) = reference_matmul(&deq, &x, rows, cols, n);
            for max_chunk in chunk_limits(dtype, rows, cols)? {
                let gw = upload(ctx, dtype, rows, cols, &data, max_chunk)?;
                let got = run_matmul(ctx, &gw, &xb, n as u32).await?;
                stats.merge(compare(
                    &format!("{rows}x{cols}, {n} tokens, {} chunks", gw.chunks.len()),
                    &got,
                    &want,
                    &bound,
                )?);
            }
        }
    }
    Ok(stats)
}

/// FakeQuantizeActivations against the CPU quantizer: `y = x_q / s` with the CPU's `x_q` and
/// `s`. The kernel takes `s` and `x_q` from the same WGSL helpers as QuantizeActivations
/// (checked bit-exact above); only the final `x_q / s` is a WGSL division, allowed 2.5 ulp of
/// the exact quotient, so the bound is `2.5 eps |x_q / s|` against the exact f64 quotient (a
/// zero code must give exactly zero). A wrong code would be off by `1 / s`, at least
/// `|x_q / s| / 127`, far outside the bound.
async fn fake_quantize_check(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_tokens, cols) in QUANTIZE_SHAPES {
        let mut rng = Rng(n_tokens as u64 * 2003 + cols as u64);
        let x = activations(&mut rng, n_tokens, cols);
        let (want_q, want_s) = quantize_activations(&x, cols);
        let want: Vec<f64> = want_q
            .iter()
            .enumerate()
            .map(|(i, &q)| f64::from(q) / f64::from(want_s[i / cols]))
            .collect();
        let bound: Vec<f64> = want
            .iter()
            .map(|v| 2.5 * f64::from(f32::EPSILON) * v.abs())
            .collect();
        let xb = upload_f32(ctx, "x", &x)?;
        let n = (fake_activations_bytes(cols as u32, n_tokens as u32) / 4) as usize;
        let y = poisoned(ctx, n)?;
        let op = QuantizeActivationsOp::fake(ctx, &xb, &y, cols as u32, n_tokens as u32)
            .map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got = read_f32(ctx, &y, n).await?;
        stats.merge(compare(&format!("{n_tokens}x{cols}"), &got, &want, &bound)?);
    }
    Ok(stats)
}

/// BitLinear over TQ1_0/TQ2_0 (fake quantization, then matvec for 1 token and matmul for 3
/// and 17; for 1 token also the q8 records and the integer-dot matvec) against the CPU twin's
/// definition evaluated in f64:
/// `y[t, r] = weight_scale * sum_c w[r, c] * x_q[t, c] / s_t`, with `w` from
/// `quant::dequantize` and `x_q`, `s_t` from `cpu::bitlinear::quantize_activations`, on the
/// special activation rows too (all zero, tiny, ties), with a weight scale other than 1 (the
/// kernels apply it from the uniform). Bound, with `S = |weight_scale| sum_c |w x_q / s|`:
/// the GPU's `x_q / s` is within 2.5 eps relative (see the check above), the TQ kernels'
/// summation within `cols eps` of `S` (see [`tq`]), the final multiply by the weight scale one
/// rounding: `(cols + 4) eps S`. The integer-dot path sums exactly per block of 32 and rounds
/// each block's term a few times (the exact conversion, `1 / s` within 2.5 eps, the scales'
/// products, the f32 sum over blocks): fewer than `cols` eps-terms, so the same bound holds.
async fn tq_bitlinear(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in [(640usize, 2560usize), (7, 768), (7, 2560), (640, 768)] {
        let mut rng = Rng(rows as u64 * 15_485_863 + cols as u64 + dtype as u64);
        let w = rng.vec(rows * cols, 1.0);
        let mut data = quant::quantize(dtype, &w).map_err(|e| e.to_string())?;
        data[0] = 0xff;
        data[1] = 0xf7;
        let deq = quant::dequantize(dtype, &data, rows * cols).map_err(|e| e.to_string())?;
        // A BitNet-like per-tensor scale, not a power of two (its multiply rounds).
        let ws = 0.5 + rng.f32().abs();
        for n in [1usize, 3, 17] {
            let x = activations(&mut rng, n, cols);
            let (xq, s) = quantize_activations(&x, cols);
            let mut want = vec![0.0f64; rows * n];
            let mut bound = vec![0.0f64; rows * n];
            for t in 0..n {
                let st = f64::from(s[t]);
                for r in 0..rows {
                    let (mut acc, mut abs) = (0.0f64, 0.0f64);
                    for c in 0..cols {
                        let p = f64::from(deq[r * cols + c]) * f64::from(xq[t * cols + c]) / st;
                        acc += p;
                        abs += p.abs();
                    }
                    let ws = f64::from(ws);
                    want[t * rows + r] = ws * acc;
                    bound[t * rows + r] =
                        (cols as f64 + 4.0) * f64::from(f32::EPSILON) * ws.abs() * abs;
                }
            }
            let xb = upload_f32(ctx, "x", &x)?;
            for max_chunk in chunk_limits(dtype, rows, cols)? {
                let mut gw = upload(ctx, dtype, rows, cols, &data, max_chunk)?;
                gw.scale = ws;
                // One token: the f32 kernel on x_q / s, and the integer-dot kernel on q8
                // records (x_q with 1 / s for every block).
                let paths: &[bool] = if n == 1 { &[false, true] } else { &[false] };
                for &int_dot in paths {
                    let y = poisoned(ctx, rows * n)?;
                    let op =
                        BitLinearOp::new(ctx, &gw, &xb, &y, n as u32, int_dot).map_err(gpu_err)?;
                    submit(ctx, |pass| op.record(pass));
                    let got = read_f32(ctx, &y, rows * n).await?;
                    let path = if int_dot { "integer dot" } else { "f32" };
                    stats.merge(compare(
                        &format!(
                            "{rows}x{cols}, {n} tokens, {} chunks, {path}",
                            gw.chunks.len()
                        ),
                        &got,
                        &want,
                        &bound,
                    )?);
                }
            }
        }
    }
    Ok(stats)
}
