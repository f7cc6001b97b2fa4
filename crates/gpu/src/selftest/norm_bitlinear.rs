//! The fused decode step of BitNet (`norm_bitlinear.wgsl`: RMSNorm, int8 activation
//! quantization and up to three I2_S products, with ReLU² gating or a residual add) against a
//! reference evaluated in f64 from the definition.
//!
//! Error bounds. Let `n_c = x_c w_c / rms`, `s = 127 / max|n|`, `v_c = n_c s` (f64). The kernel
//! rounds `x_c w_c`, its `1 / rms` (off by a relative `e`), the product, `s` (correctly
//! rounded from its absmax, which carries the same `1 + e`) and `n_c s`: `e` cancels, so its
//! `v_c` is within `8 eps |v_c|` of the exact one and its int8 value equals `round(v_c)` except
//! where `v_c` lies that close to a rounding boundary; there it may be one off ("uncertain"
//! columns, usually none or one per row). Each product's integer sum is exact, so the output
//! `ws * sum / s` differs from the reference by at most `ws / s` per uncertain column with a
//! nonzero weight, plus a relative `delta` for `1 / s` (the sum of squares' rounding, at most
//! its summation depth in eps, halved by the square root; the divide, `+ eps`, `inverseSqrt`'s
//! 2 ulp, the scale multiply and WGSL's 2.5-ulp divide): `delta = (dim / 512 + 40) eps`
//! covers the depth of any reduction order the kernel's helpers use. The gated output
//! `relu(g)^2 u` and the residual sum propagate those bounds (interval arithmetic) plus their
//! own roundings.

use super::harness::compare;
use super::harness::{gpu_err, poisoned, read_f32, submit, upload_f32, Check, Rng, Stats};
use super::ternary::activations;
use crate::bitlinear::{
    norm_bitlinear_rows_per_workgroup, norm_bitlinear_threads_per_row, NormBitLinearMode,
    NormBitLinearOp,
};
use crate::quant::{self, GgmlType};
use crate::GpuContext;

pub const CHECKS: &[Check] = &[
    Check {
        name: "ternary/norm_bitlinear_separate",
        run: |ctx| Box::pin(check(ctx, NormBitLinearMode::Separate)),
    },
    Check {
        name: "ternary/norm_bitlinear_relu_squared_gate",
        run: |ctx| Box::pin(check(ctx, NormBitLinearMode::ReluSquaredGate)),
    },
    Check {
        name: "ternary/norm_bitlinear_residual",
        run: |ctx| Box::pin(check(ctx, NormBitLinearMode::Residual)),
    },
];

/// `(dim, rows of each weight)`: BitNet 2B4T's q/k/v, gate/up and down shapes (down's rows
/// cut to keep the f64 reference quick), the largest input the kernel holds, the smallest,
/// and row counts that are not multiples of the rows per workgroup (`g`) in the last weight
/// (the others must be).
fn shapes(ctx: &GpuContext, mode: NormBitLinearMode) -> Vec<(usize, Vec<usize>)> {
    let tpr = norm_bitlinear_threads_per_row(&ctx.features);
    let g = norm_bitlinear_rows_per_workgroup(tpr) as usize;
    match mode {
        NormBitLinearMode::Separate => vec![
            (2560, vec![2560, 640, 640]),
            (384, vec![g, 2 * g, 7]),
            (9600, vec![g, 5]),
            (128, vec![3]),
        ],
        NormBitLinearMode::ReluSquaredGate => {
            vec![
                (2560, vec![1000, 1000]),
                (384, vec![7, 7]),
                (9600, vec![33, 33]),
            ]
        }
        NormBitLinearMode::Residual => vec![(6912, vec![300]), (128, vec![3]), (2560, vec![2560])],
    }
}

/// One weight: its ternary values (`-1, 0, 1`) and per-tensor scale, and its I2_S bytes.
struct Ternary {
    signs: Vec<i8>,
    scale: f32,
    data: Vec<u8>,
}

fn ternary(rng: &mut Rng, rows: usize, dim: usize) -> Result<Ternary, String> {
    let w = rng.vec(rows * dim, 1.0);
    let data = quant::quantize(GgmlType::I2_S, &w).map_err(|e| e.to_string())?;
    let scale = quant::i2s_weight_scale(&data, rows * dim).map_err(|e| e.to_string())?;
    let deq = quant::dequantize(GgmlType::I2_S, &data, rows * dim).map_err(|e| e.to_string())?;
    let signs = deq.iter().map(|&v| (v / scale).round() as i8).collect();
    Ok(Ternary { signs, scale, data })
}

/// The reference quantization of one normed row: int8 values, the exact scale, and which
/// columns the kernel may round the other way.
struct Quantized {
    q: Vec<i32>,
    s: f64,
    uncertain: Vec<bool>,
}

fn quantize_normed(x: &[f32], w: &[f32], eps: f32) -> Quantized {
    let dim = x.len() as f64;
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let inv = 1.0 / (ss / dim + f64::from(eps)).sqrt();
    let n: Vec<f64> = x
        .iter()
        .zip(w)
        .map(|(&a, &b)| f64::from(a) * f64::from(b) * inv)
        .collect();
    let m = n.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let s = 127.0 / m.max(1e-5);
    let margin = 8.0 * f64::from(f32::EPSILON);
    let mut q = Vec::with_capacity(n.len());
    let mut uncertain = Vec::with_capacity(n.len());
    for v in n.iter().map(|v| v * s) {
        q.push(v.round_ties_even().clamp(-128.0, 127.0) as i32);
        let frac = v.abs().fract();
        uncertain.push((frac - 0.5).abs() <= margin * v.abs() + 1e-30);
    }
    Quantized { q, s, uncertain }
}

/// Expected values and their error bounds.
type Expected = (Vec<f64>, Vec<f64>);

/// Each row's product `ws * sum_c w q / s` and its bound.
fn product(t: &Ternary, rows: usize, q: &Quantized, delta: f64) -> Expected {
    let dim = q.q.len();
    let unit = f64::from(t.scale) / q.s;
    let mut want = Vec::with_capacity(rows);
    let mut bound = Vec::with_capacity(rows);
    for r in 0..rows {
        let signs = &t.signs[r * dim..(r + 1) * dim];
        let sum: i64 = signs
            .iter()
            .zip(&q.q)
            .map(|(&w, &v)| i64::from(w) * i64::from(v))
            .sum();
        let unsure = signs
            .iter()
            .zip(&q.uncertain)
            .filter(|(&w, &u)| w != 0 && u)
            .count();
        let a = unit * sum as f64;
        want.push(a);
        bound.push(unit * unsure as f64 * (1.0 + delta) + a.abs() * delta);
    }
    (want, bound)
}

async fn check(ctx: &GpuContext, mode: NormBitLinearMode) -> Result<Stats, String> {
    let eps = 1e-5f32;
    let mut stats = Stats::default();
    for (dim, rows) in shapes(ctx, mode) {
        let rows = rows.as_slice();
        let mut rng = Rng(dim as u64 * 8191 + rows.iter().sum::<usize>() as u64 + mode as u64);
        let delta = (dim as f64 / 512.0 + 40.0) * f64::from(f32::EPSILON);
        let weights: Vec<Ternary> = rows
            .iter()
            .map(|&r| ternary(&mut rng, r, dim))
            .collect::<Result<_, _>>()?;
        let gpu_weights = weights
            .iter()
            .zip(rows)
            .map(|(t, &r)| {
                ctx.upload_weight("w", GgmlType::I2_S, r as u32, dim as u32, &t.data)
                    .map_err(gpu_err)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<_> = gpu_weights.iter().collect();
        let norm: Vec<f32> = (0..dim).map(|i| 0.25 + (i % 13) as f32 * 0.125).collect();
        let nb = upload_f32(ctx, "norm", &norm)?;
        let spare = [poisoned(ctx, 4)?, poisoned(ctx, 4)?];
        let rows_x = activations(&mut rng, 7, dim);
        // Random magnitudes, an all-zero row, absmax 127 with half-way values.
        for t in [0usize, 3, 6] {
            let what = format!("{mode:?} {dim} x {rows:?} row kind {t}");
            let x = &rows_x[t * dim..(t + 1) * dim];
            let xb = upload_f32(ctx, "x", x)?;
            let q = quantize_normed(x, &norm, eps);
            let products: Vec<Expected> = weights
                .iter()
                .zip(rows)
                .map(|(w, &r)| product(w, r, &q, delta))
                .collect();
            let (outs, expect): (Vec<wgpu::Buffer>, Vec<Expected>) = match mode {
                NormBitLinearMode::Separate => (
                    rows.iter()
                        .map(|&r| poisoned(ctx, r))
                        .collect::<Result<_, _>>()?,
                    products,
                ),
                NormBitLinearMode::ReluSquaredGate => {
                    let ((g, bg), (u, bu)) = (&products[0], &products[1]);
                    let e = f64::from(f32::EPSILON);
                    let (want, bound) = (0..rows[0])
                        .map(|r| {
                            let relu = g[r].max(0.0);
                            let big_u = u[r].abs() + bu[r];
                            let big_g = relu + bg[r];
                            let y = relu * relu * u[r];
                            let b = (2.0 * relu + bg[r]) * bg[r] * big_u
                                + relu * relu * bu[r]
                                + 3.0 * e * big_g * big_g * big_u;
                            (y, b)
                        })
                        .unzip();
                    (vec![poisoned(ctx, rows[0])?], vec![(want, bound)])
                }
                NormBitLinearMode::Residual => {
                    let residual = rng.vec(rows[0], 4.0);
                    let (a, ba) = &products[0];
                    let e = f64::from(f32::EPSILON);
                    let (want, bound) = (0..rows[0])
                        .map(|r| {
                            let res = f64::from(residual[r]);
                            (res + a[r], ba[r] + e * (res.abs() + a[r].abs() + ba[r]))
                        })
                        .unzip();
                    (
                        vec![upload_f32(ctx, "residual", &residual)?],
                        vec![(want, bound)],
                    )
                }
            };
            let out_refs: Vec<&wgpu::Buffer> = outs.iter().collect();
            let op = NormBitLinearOp::new(
                ctx,
                &xb,
                &nb,
                eps,
                &refs,
                &out_refs,
                mode,
                [&spare[0], &spare[1]],
            )
            .map_err(gpu_err)?;
            submit(ctx, |pass| op.record(pass));
            for (i, (buf, (want, bound))) in outs.iter().zip(&expect).enumerate() {
                let got = read_f32(ctx, buf, want.len()).await?;
                stats.merge(compare(&format!("{what} output {i}"), &got, want, bound)?);
            }
        }
    }
    Ok(stats)
}
