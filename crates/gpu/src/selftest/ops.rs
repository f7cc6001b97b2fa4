//! Checks of the ops family (RMSNorm, RoPE, attention, softmax, ReLU², SiLU-gated product,
//! add, argmax, top-k) against their CPU twins in `crate::cpu::ops`, on seeded random inputs
//! of odd sizes (dims 7, 576, 2560; heads 9/3 of 64 (SmolLM2) and 20/5 of 128 (BitNet);
//! positions 1, 130, 260, 1000, 4095 and 1_000_003 for RoPE; 1 and 17 tokens), outputs poisoned.
//!
//! Tolerances are worst-case bounds built from WGSL's stated accuracies (`+ - *` correctly
//! rounded, division 2.5 ulp, `inverseSqrt` 2 ulp, `exp(x)` 3 + 2|x| ulp) and the f32
//! summation bound `n * eps * sum |terms|` (any order); each check states its own. `eps` is
//! f32's 2^-23; the twins round their f64 result to f32 once, which adds `eps * |want|`.

use super::attention::{attention, attention_rope, attention_windowed};
use super::harness::{
    compare, gpu_err, poisoned, read_f32, read_u32, rope_bound, submit, upload_f32, wide, Check,
    Rng, Stats, EPS,
};
use crate::cpu::ops as cpu;
use crate::ops::{
    ArgmaxOp, Elementwise, ElementwiseOp, KvDtype, Position, RmsNormOp, RopeOp, RopeTable,
    SoftmaxOp, TopKOp,
};
use crate::GpuContext;

pub const CHECKS: &[Check] = &[
    Check {
        name: "ops/rms_norm",
        run: |ctx| Box::pin(rms_norm(ctx)),
    },
    Check {
        name: "ops/rope",
        run: |ctx| Box::pin(rope(ctx)),
    },
    Check {
        name: "ops/attention_f32_cache",
        run: |ctx| Box::pin(attention(ctx, KvDtype::F32)),
    },
    Check {
        name: "ops/attention_f16_cache",
        run: |ctx| Box::pin(attention(ctx, KvDtype::F16)),
    },
    Check {
        name: "ops/attention_windowed_f32_cache",
        run: |ctx| Box::pin(attention_windowed(ctx, KvDtype::F32)),
    },
    Check {
        name: "ops/attention_windowed_f16_cache",
        run: |ctx| Box::pin(attention_windowed(ctx, KvDtype::F16)),
    },
    Check {
        name: "ops/attention_rope_f32_cache",
        run: |ctx| Box::pin(attention_rope(ctx, KvDtype::F32)),
    },
    Check {
        name: "ops/attention_rope_f16_cache",
        run: |ctx| Box::pin(attention_rope(ctx, KvDtype::F16)),
    },
    Check {
        name: "ops/softmax",
        run: |ctx| Box::pin(softmax(ctx)),
    },
    Check {
        name: "ops/relu_squared",
        run: |ctx| Box::pin(elementwise(ctx, Elementwise::ReluSquared)),
    },
    Check {
        name: "ops/relu_squared_mul",
        run: |ctx| Box::pin(elementwise(ctx, Elementwise::ReluSquaredMul)),
    },
    Check {
        name: "ops/silu_mul",
        run: |ctx| Box::pin(elementwise(ctx, Elementwise::SiluMul)),
    },
    Check {
        name: "ops/gelu_mul",
        run: |ctx| Box::pin(elementwise(ctx, Elementwise::GeluMul)),
    },
    Check {
        name: "ops/add",
        run: |ctx| Box::pin(elementwise(ctx, Elementwise::Add)),
    },
    Check {
        name: "ops/softcap",
        run: |ctx| Box::pin(softcap(ctx)),
    },
    Check {
        name: "ops/argmax",
        run: |ctx| Box::pin(argmax(ctx)),
    },
    Check {
        name: "ops/top_k",
        run: |ctx| Box::pin(top_k(ctx)),
    },
];

/// Bound: `|want| * ((dim/2 + 8) eps)`. The sum of squares is off by at most
/// `(dim - 1) eps` relative (all terms positive), which `inverseSqrt` halves; the division by
/// dim, `+ eps`, `inverseSqrt` (2 ulp), two products and the twin's rounding add the 8.
async fn rms_norm(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (dim, n_rows) in [
        (576usize, 1usize),
        (576, 17),
        (2560, 1),
        (2560, 17),
        (7, 1),
        (7, 17),
    ] {
        let mut rng = Rng(dim as u64 * 7 + n_rows as u64);
        let x = rng.vec(dim * n_rows, 2.0);
        let w = rng.vec(dim, 1.5);
        let eps = 1e-5;
        let want = wide(&cpu::rms_norm(&x, &w, eps));
        let bound: Vec<f64> = want
            .iter()
            .map(|v| v.abs() * (dim as f64 / 2.0 + 8.0) * EPS)
            .collect();
        let xb = upload_f32(ctx, "x", &x)?;
        let wb = upload_f32(ctx, "w", &w)?;
        let out = poisoned(ctx, x.len())?;
        let op =
            RmsNormOp::new(ctx, &xb, &wb, &out, n_rows as u32, dim as u32, eps).map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got = read_f32(ctx, &out, x.len()).await?;
        stats.merge(compare(
            &format!("rms_norm {n_rows}x{dim}"),
            &got,
            &want,
            &bound,
        )?);
    }
    Ok(stats)
}

/// Bound per rotated element: `(|a| + |b|) * 12 eps + eps |want|`. The angle is exact to
/// 2^-31 rad (fixed point), its reduction to [-pi/4, pi/4) costs 3 roundings of a value below
/// 1, the sin/cos polynomials (truncation below 2e-9) about 4 more, and `a cos - b sin` 3.
/// Dimensions beyond rot_dim must come back unchanged (bound 0).
async fn rope(ctx: &GpuContext) -> Result<Stats, String> {
    use tritium_core::ops::{Llama3Scaling, RopeConfig, RopeStyle};
    let llama3 = Llama3Scaling {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };
    let smollm2 = RopeConfig::new(64, 100_000.0, RopeStyle::Interleaved);
    let bitnet = RopeConfig::new(128, 500_000.0, RopeStyle::NeoX);
    let llama32 = RopeConfig {
        llama3: Some(llama3),
        ..RopeConfig::new(64, 500_000.0, RopeStyle::Interleaved)
    };
    let partial = RopeConfig {
        rot_dim: 32,
        ..RopeConfig::new(64, 10_000.0, RopeStyle::NeoX)
    };
    let partial_interleaved = RopeConfig {
        rot_dim: 48,
        ..RopeConfig::new(64, 10_000.0, RopeStyle::Interleaved)
    };
    let configs = [
        (smollm2, [9usize, 3]),
        (bitnet, [20, 5]),
        (llama32, [32, 8]),
        (partial, [4, 1]),
        (partial_interleaved, [3, 1]),
    ];
    let mut stats = Stats::default();
    for (ci, (cfg, heads)) in configs.iter().enumerate() {
        let table = RopeTable::new(ctx, cfg).map_err(gpu_err)?;
        for n_heads in heads {
            for (pos0, n_tokens) in [(1usize, 1usize), (130, 17), (1000, 1), (1_000_003, 17)] {
                let mut rng = Rng((ci * 1000 + n_heads * 10 + pos0) as u64);
                let x = rng.vec(n_tokens * n_heads * cfg.head_dim, 2.0);
                let mut want32 = x.clone();
                cpu::rope(&mut want32, *n_heads, pos0, cfg);
                let want = wide(&want32);
                let bound = rope_bound(&x, &want, cfg);
                let xb = upload_f32(ctx, "x", &x)?;
                let position = Position::new(ctx, pos0 as u32);
                let op = RopeOp::new(
                    ctx,
                    &table,
                    &xb,
                    &position,
                    n_tokens as u32,
                    *n_heads as u32,
                )
                .map_err(gpu_err)?;
                submit(ctx, |pass| op.record(pass));
                let got = read_f32(ctx, &xb, x.len()).await?;
                stats.merge(compare(
                    &format!(
                        "rope {:?} rot {}/{} x{n_heads} heads, {n_tokens} tokens at {pos0}",
                        cfg.style, cfg.rot_dim, cfg.head_dim
                    ),
                    &got,
                    &want,
                    &bound,
                )?);
            }
        }
    }
    Ok(stats)
}

/// Rows of one workgroup (up to 2048 columns) and rows split into chunks (2560 = 2 chunks,
/// 5000 = 3, a vocabulary 63); the scale is set after creation through `set_scale`.
///
/// Bound per element: `|want| * (E_i + 2 E_max + (cols + 6) eps)` with
/// `E_i = (3 + 3|s_i - m| + |s_i|) eps`, s = x * scale: the rounding of s and of `s - m`
/// (relative to exp's result: absolute errors of the argument), exp's 3 + 2|x| ulp, the row
/// sum (cols terms, each off by at most E_max), the chunks' rescaling `exp(m_c - M)` (at most
/// E_max again), `1 / sum` (2.5 ulp), the product and the twin's rounding.
async fn softmax(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_rows, cols, scale) in [
        (1usize, 7usize, 1.0f32),
        (3, 576, 0.7),
        (17, 2560, 1.25),
        (3, 5000, 0.9),
        (1, 128_256, 1.0),
    ] {
        let mut rng = Rng((n_rows * cols) as u64 + 3);
        let x = rng.vec(n_rows * cols, 8.0);
        let want = wide(&cpu::softmax(&x, cols, scale));
        let mut bound = Vec::with_capacity(x.len());
        for (xr, wr) in x.chunks(cols).zip(want.chunks(cols)) {
            let s: Vec<f64> = xr
                .iter()
                .map(|&v| f64::from(v) * f64::from(scale))
                .collect();
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s
                .iter()
                .map(|&si| (3.0 + 3.0 * (si - m).abs() + si.abs()) * EPS)
                .collect();
            let e_max = e.iter().cloned().fold(0.0, f64::max);
            bound.extend(
                wr.iter()
                    .zip(&e)
                    .map(|(w, ei)| w.abs() * (ei + 2.0 * e_max + (cols as f64 + 6.0) * EPS)),
            );
        }
        let xb = upload_f32(ctx, "x", &x)?;
        let out = poisoned(ctx, x.len())?;
        let op =
            SoftmaxOp::new(ctx, &xb, &out, n_rows as u32, cols as u32, 1.0).map_err(gpu_err)?;
        op.set_scale(ctx, scale);
        submit(ctx, |pass| op.record(pass));
        let got = read_f32(ctx, &out, x.len()).await?;
        stats.merge(compare(
            &format!("softmax {n_rows}x{cols} scale {scale}"),
            &got,
            &want,
            &bound,
        )?);
    }
    Ok(stats)
}

/// Out of place and in place, n = 7, 6912 and 17 * 2560. Bounds (relative to |want|):
/// add 1 rounding (`eps`, which also covers the twin's identical f32 sum); ReLU² 2 roundings
/// (3 with the gate) plus the twin's; SiLU `(10 + 2|g|) eps`: exp(-g) 3 + 2|g| ulp (which
/// moves `g / (1 + e)` by at most as much, relatively), `1 + e`, the division (2.5 ulp), the
/// product and the twin's rounding.
async fn elementwise(ctx: &GpuContext, f: Elementwise) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for n in [7usize, 6912, 17 * 2560] {
        let mut rng = Rng(n as u64 * 13 + f as u64);
        let a = rng.vec(n, 6.0);
        let b = rng.vec(n, 3.0);
        // Each bound is `rel |want| + abs` in units of eps.
        let zero = vec![0.0; n];
        let (want, rel, abs): (Vec<f32>, Vec<f64>, Vec<f64>) = match f {
            Elementwise::Add => (cpu::add(&a, &b), vec![1.0; n], zero),
            Elementwise::SiluMul => (
                cpu::silu_mul(&a, &b),
                a.iter().map(|g| 10.0 + 2.0 * f64::from(g.abs())).collect(),
                zero,
            ),
            Elementwise::ReluSquared => (cpu::relu_squared(&a), vec![3.0; n], zero),
            Elementwise::ReluSquaredMul => (cpu::relu_squared_mul(&a, &b), vec![4.0; n], zero),
            // z's 4 roundings move tanh by at most 4 |z| tanh'(z) <= 2 eps, tanh itself is
            // off by up to 8 ulp of 1: 1 + tanh(z) by 10 eps absolute, which is relative
            // where g > 0 (1 + tanh >= 1) and, where g < 0, at most 5 |g u| eps on the
            // result; then 3 roundings of the products: 16 relative, 8 |g u| absolute.
            Elementwise::GeluMul => (
                cpu::gelu_mul(&a, &b),
                vec![16.0; n],
                a.iter()
                    .zip(&b)
                    .map(|(g, u)| 8.0 * f64::from((g * u).abs()))
                    .collect(),
            ),
        };
        let want = wide(&want);
        let bound: Vec<f64> = want
            .iter()
            .zip(&rel)
            .zip(&abs)
            .map(|((w, r), a)| (w.abs() * r + a) * EPS)
            .collect();
        let ab = upload_f32(ctx, "a", &a)?;
        let bb = upload_f32(ctx, "b", &b)?;
        for in_place in [false, true] {
            let out = if in_place {
                upload_f32(ctx, "out", &a)?
            } else {
                poisoned(ctx, n)?
            };
            let first = (!in_place).then_some(&ab);
            let op =
                ElementwiseOp::new(ctx, f, &out, first, Some(&bb), n as u32).map_err(gpu_err)?;
            submit(ctx, |pass| op.record(pass));
            let got = read_f32(ctx, &out, n).await?;
            stats.merge(compare(
                &format!("{f:?} n {n} in place {in_place}"),
                &got,
                &want,
                &bound,
            )?);
        }
    }
    Ok(stats)
}

/// Soft caps of 30 and 0.5 over values up to 60 in size, n = 7 and 17 * 2560: the division
/// (2.5 ulp, which moves tanh by at most as much relatively), tanh (8 ulp of 1, absolute),
/// the product and the twin's rounding: `(4 |want| + 10 cap) eps`.
async fn softcap(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n, cap) in [(7usize, 30.0f32), (17 * 2560, 30.0), (17 * 2560, 0.5)] {
        let x = Rng(n as u64 + 5).vec(n, 60.0);
        let mut want = x.clone();
        cpu::softcap(&mut want, cap);
        let want = wide(&want);
        let bound: Vec<f64> = want
            .iter()
            .map(|w| (4.0 * w.abs() + 10.0 * f64::from(cap)) * EPS)
            .collect();
        let xb = upload_f32(ctx, "x", &x)?;
        let op = ElementwiseOp::softcap(ctx, &xb, n as u32, cap).map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got = read_f32(ctx, &xb, n).await?;
        stats.merge(compare(
            &format!("softcap {cap} n {n}"),
            &got,
            &want,
            &bound,
        )?);
    }
    Ok(stats)
}

/// Rows of `cols` random values with planted trouble: the maximum tied at several places
/// across workgroup chunks, NaNs (one at index 0), -inf, and values rounded to 1/4 so that
/// ties are common everywhere.
fn select_rows(n_rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut x: Vec<f32> = rng
        .vec(n_rows * cols, 20.0)
        .into_iter()
        .map(|v| (v * 4.0).round() / 4.0)
        .collect();
    for row in x.chunks_mut(cols) {
        for _ in 0..cols.div_ceil(50) {
            let i = rng.below(cols as u64) as usize;
            row[i] = f32::NAN;
            let j = rng.below(cols as u64) as usize;
            row[j] = f32::NEG_INFINITY;
        }
        row[0] = f32::NAN;
        let top = 30.0;
        for _ in 0..3 {
            let i = rng.below(cols as u64) as usize;
            row[i] = top;
        }
    }
    x
}

/// Exact: the chosen index must be the twin's (no arithmetic happens). Also a row of NaNs
/// (`u32::MAX`) and a row of NaNs and -inf.
async fn argmax(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_rows, cols) in [(1usize, 128_256usize), (3, 7), (2, 4097), (17, 576)] {
        let mut x = select_rows(n_rows, cols, (n_rows * cols) as u64);
        if n_rows > 1 {
            x[..cols].fill(f32::NAN);
            let second = &mut x[cols..2 * cols];
            second.fill(f32::NAN);
            second[cols / 2] = f32::NEG_INFINITY;
            second[cols - 1] = f32::NEG_INFINITY;
        }
        let want: Vec<u32> = x
            .chunks(cols)
            .map(|r| cpu::argmax(r).map_or(u32::MAX, |i| i as u32))
            .collect();
        let xb = upload_f32(ctx, "logits", &x)?;
        let out = poisoned(ctx, n_rows)?;
        let op = ArgmaxOp::new(ctx, &xb, &out, n_rows as u32, cols as u32).map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got = read_u32(ctx, &out, n_rows).await?;
        if got != want {
            return Err(format!(
                "argmax {n_rows}x{cols}: got {got:?}, want {want:?}"
            ));
        }
        stats.merge(Stats {
            elements: n_rows as u64,
            worst_ratio: 0.0,
        });
    }
    Ok(stats)
}

/// Exact: indices equal and values bit-equal (NaN to NaN) to the twin's first k, then
/// `(u32::MAX, NaN)` padding when the row is shorter than k.
async fn top_k(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_rows, cols, k) in [
        (1usize, 128_256usize, 64usize),
        (2, 128_256, 40),
        (1, 128_256, 1),
        (4, 5000, 1),
        (3, 7, 1),
        (3, 7, 5),
        (2, 7, 64),
        (2, 3000, 17),
    ] {
        let x = select_rows(n_rows, cols, (n_rows * cols + k) as u64);
        let xb = upload_f32(ctx, "logits", &x)?;
        let out = poisoned(ctx, n_rows * k * 2)?;
        let op =
            TopKOp::new(ctx, &xb, &out, n_rows as u32, cols as u32, k as u32).map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got = read_u32(ctx, &out, n_rows * k * 2).await?;
        for (r, row) in x.chunks(cols).enumerate() {
            let mut want = cpu::top_k(row, k);
            want.resize(k, (u32::MAX, f32::NAN));
            for (j, &(wi, wv)) in want.iter().enumerate() {
                let at = 2 * (r * k + j);
                let (gi, gv) = (got[at], f32::from_bits(got[at + 1]));
                let same = gi == wi && (gv == wv || (gv.is_nan() && wv.is_nan()));
                if !same {
                    return Err(format!(
                        "top_k {n_rows}x{cols} k {k}: row {r} rank {j}: got ({gi}, {gv}), \
                         want ({wi}, {wv})"
                    ));
                }
            }
        }
        stats.merge(Stats {
            elements: (n_rows * k) as u64,
            worst_ratio: 0.0,
        });
    }
    Ok(stats)
}
