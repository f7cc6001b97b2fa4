//! What the checks share: a seeded PRNG, poisoned outputs, submitting work, running a matmul,
//! and comparing against a reference with a per-element error bound.

use std::future::Future;
use std::pin::Pin;

use crate::matmul::MatmulOp;
use crate::quant::GgmlType;
use crate::weights::GpuWeight;
use crate::{GpuContext, GpuError};
use tritium_core::ops::{RopeConfig, RopeStyle};

/// The bit pattern outputs are filled with before a kernel runs: a NaN no kernel produces, so
/// an element the kernel fails to write fails every comparison.
pub const POISON: u32 = 0x7fa5_a5a5;

/// SplitMix64: a tiny seeded generator, so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` values uniform in [-scale, scale).
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Random file bytes for `n` weights of a type without a quantizer (IQ4_NL), where the checks
/// cannot put random values through `quant::quantize`: every code equally likely, each f16
/// scale made finite and below 2 in magnitude (`quant::tame`).
pub fn tame_blocks(dtype: GgmlType, n: usize, rng: &mut Rng) -> Result<Vec<u8>, String> {
    let len = dtype
        .tensor_bytes(n as u64)
        .ok_or_else(|| format!("{n} {dtype} weights are not whole blocks"))?;
    let mut data = rng.bytes(len as usize);
    crate::quant::tame(dtype, &mut data);
    Ok(data)
}

pub fn gpu_err(e: GpuError) -> String {
    e.to_string()
}

/// A storage buffer of `n` 32-bit values filled with [`POISON`].
pub fn poisoned(ctx: &GpuContext, n: usize) -> Result<wgpu::Buffer, String> {
    let b = ctx.storage("out", (n * 4) as u64).map_err(gpu_err)?;
    ctx.write(&b, 0, &vec![POISON; n.max(1)]);
    Ok(b)
}

/// A storage buffer holding `values`.
pub fn upload_f32(ctx: &GpuContext, label: &str, values: &[f32]) -> Result<wgpu::Buffer, String> {
    ctx.storage_init(label, bytemuck::cast_slice(values))
        .map_err(gpu_err)
}

/// Submit recorded work in one compute pass.
pub fn submit(ctx: &GpuContext, record: impl FnOnce(&mut wgpu::ComputePass<'_>)) {
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        record(&mut pass);
    }
    ctx.queue.submit([enc.finish()]);
}

/// Read back `n` f32.
pub async fn read_f32(ctx: &GpuContext, b: &wgpu::Buffer, n: usize) -> Result<Vec<f32>, String> {
    ctx.read_f32(b, 0, n as u64).await.map_err(gpu_err)
}

/// Run `y = W x` for `n_tokens` tokens through [`MatmulOp`] and read `y` back.
pub async fn run_matmul(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    n_tokens: u32,
) -> Result<Vec<f32>, String> {
    let n = (w.rows * n_tokens) as usize;
    let y = poisoned(ctx, n)?;
    let op = MatmulOp::new(ctx, w, x, &y, n_tokens).map_err(gpu_err)?;
    submit(ctx, |pass| op.record(pass));
    read_f32(ctx, &y, n).await
}

/// `Y = X W^T` in f64 (`w` is `[rows, cols]`, `x` is `[n_tokens, cols]`, the result
/// `[n_tokens, rows]`), with the bound on any f32 summation order of the products:
/// `|err| <= cols * eps * sum |w_i x_i|`.
pub fn reference_matmul(
    w: &[f32],
    x: &[f32],
    rows: usize,
    cols: usize,
    n_tokens: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * n_tokens];
    let mut bound = vec![0.0; rows * n_tokens];
    for t in 0..n_tokens {
        for r in 0..rows {
            let (mut s, mut a) = (0.0f64, 0.0f64);
            for c in 0..cols {
                let p = f64::from(w[r * cols + c]) * f64::from(x[t * cols + c]);
                s += p;
                a += p.abs();
            }
            y[t * rows + r] = s;
            bound[t * rows + r] = cols as f64 * f64::from(f32::EPSILON) * a;
        }
    }
    (y, bound)
}

/// A product `want` (within `bound`) added to `residual` in f32: the sums and their bound, the
/// product's plus the add's rounding.
pub fn added_to_residual(want: &[f64], bound: &[f64], residual: &[f32]) -> (Vec<f64>, Vec<f64>) {
    want.iter()
        .zip(bound)
        .zip(residual)
        .map(|((&p, &b), &r)| {
            let s = p + f64::from(r);
            (s, b + (s.abs() + b) * f64::from(f32::EPSILON))
        })
        .unzip()
}

/// Compare with a per-element bound (a NaN, infinity or poison fails), returning the worst
/// error ratio or a message naming the first bad element.
pub fn compare(what: &str, got: &[f32], want: &[f64], bound: &[f64]) -> Result<Stats, String> {
    if got.len() != want.len() || want.len() != bound.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let mut worst = 0.0f64;
    for (i, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        let err = (f64::from(g) - w).abs();
        let b = b.max(1e-30);
        if !g.is_finite() || err > b {
            return Err(format!(
                "{what}: element {i}: got {g} (bits {:#010x}), want {w}, allowed error {b:.3e}",
                g.to_bits()
            ));
        }
        worst = worst.max(err / b);
    }
    Ok(Stats {
        elements: got.len() as u64,
        worst_ratio: worst,
    })
}

/// The cooperative-matrix prefill product ([`MatmulOp::coop_f16`]) of `gw` (weights `w`) for
/// 3, 17, 70 and 200 tokens (200: two 128-token tiles, the second partial): as prefill runs
/// it, and a 128-row range at a time (so every weight here spans several ranges, a partial
/// last one included, and the small ranges split their columns into slices); both added to a
/// residual in the product's dispatch; then with the inputs times 2^20, beyond f16's range.
pub async fn coop_checks(
    ctx: &GpuContext,
    gw: &GpuWeight,
    w: &[f32],
    rng: &mut Rng,
) -> Result<Stats, String> {
    let mut stats = Stats::default();
    let (rows, cols) = (gw.rows as usize, gw.cols as usize);
    for n_tokens in [3usize, 17, 70, 200] {
        let x = rng.vec(cols * n_tokens, 1.0);
        let (want, bound) = reference_matmul(w, &x, rows, cols, n_tokens);
        let coop_bound = coop_bound(w, &x, rows, cols, n_tokens, &bound);
        let what = format!(
            "{rows}x{cols} in {} chunks, {n_tokens} tokens, cooperative matrices",
            gw.chunks.len()
        );
        let xb = upload_f32(ctx, "x", &x)?;
        let whole = run_matmul(ctx, gw, &xb, n_tokens as u32).await?;
        stats.merge(compare(&what, &whole, &want, &coop_bound)?);
        let ranged = run_coop(ctx, gw, &xb, n_tokens as u32, 128).await?;
        stats.merge(compare(
            &format!("{what}, 128-row ranges"),
            &ranged,
            &want,
            &coop_bound,
        )?);
        // Added to a residual in the product's dispatch (`MatmulOp::coop_add`, and with
        // 128-row ranges, where the slices' sum adds): the same bits as the product alone
        // plus the residual in one f32 addition (what the separate Add kernel computes).
        let residual = rng.vec(rows * n_tokens, 1.0);
        for (range, alone) in [(None, &whole), (Some(128u32), &ranged)] {
            let n = n_tokens as u32;
            let y = upload_f32(ctx, "y", &residual)?;
            let op = match range {
                None => MatmulOp::coop_add(ctx, gw, &xb, &y, n),
                Some(r) => MatmulOp::coop_f16(ctx, gw, &xb, &y, n, (r, true)),
            }
            .map_err(gpu_err)?;
            submit(ctx, |pass| op.record(pass));
            let got = read_f32(ctx, &y, rows * n_tokens).await?;
            if let Some(i) =
                (0..got.len()).find(|&i| got[i].to_bits() != (residual[i] + alone[i]).to_bits())
            {
                return Err(format!(
                    "{what}, added to a residual (ranges {range:?}): element {i} is {}, the \
                     product alone plus the residual {}",
                    got[i],
                    residual[i] + alone[i]
                ));
            }
            stats.elements += got.len() as u64;
        }
        // Inputs far beyond f16's range (65504): the per-token scaling keeps them finite; a
        // power of two scales the reference exactly.
        let big = 2f32.powi(20);
        let xb = upload_f32(ctx, "x", &x.iter().map(|v| v * big).collect::<Vec<_>>())?;
        let got = run_matmul(ctx, gw, &xb, n_tokens as u32).await?;
        let scaled = |v: &[f64]| -> Vec<f64> { v.iter().map(|e| e * f64::from(big)).collect() };
        stats.merge(compare(
            &format!("{what}, inputs times 2^20"),
            &got,
            &scaled(&want),
            &scaled(&coop_bound),
        )?);
    }
    Ok(stats)
}

/// [`MatmulOp::coop_f16`] with ranges of `range_rows` rows into a poisoned output.
pub async fn run_coop(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    n_tokens: u32,
    range_rows: u32,
) -> Result<Vec<f32>, String> {
    let n = (w.rows * n_tokens) as usize;
    let y = poisoned(ctx, n)?;
    let op = MatmulOp::coop_f16(ctx, w, x, &y, n_tokens, (range_rows, false)).map_err(gpu_err)?;
    submit(ctx, |pass| op.record(pass));
    read_f32(ctx, &y, n).await
}

/// The bound of the cooperative-matrix matmul (module docs): the f32 summation bound `bound`
/// (`cols eps sum |w x|`), plus the rounding of each weight and input to f16: relative 2^-11
/// each (`2^-10 sum |w x|`, and a little more for their product), and absolute in f16's
/// subnormal range, 2^-25 for a weight and 2^-25 of the token's scale (at most `2 max|x|`)
/// for an input, which `2^-24 (sum |x| + max|x| sum |w|)` covers.
pub fn coop_bound(
    w: &[f32],
    x: &[f32],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    bound: &[f64],
) -> Vec<f64> {
    let eps = f64::from(f32::EPSILON);
    let mut out = Vec::with_capacity(bound.len());
    for t in 0..n_tokens {
        let row = &x[t * cols..(t + 1) * cols];
        let xs: f64 = row.iter().map(|v| f64::from(v.abs())).sum();
        let xmax = row.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
        for r in 0..rows {
            let ws: f64 = w[r * cols..(r + 1) * cols]
                .iter()
                .map(|v| f64::from(v.abs()))
                .sum();
            let b = bound[t * rows + r];
            let wx = b / (cols as f64 * eps);
            out.push(b + 1.001 * 2f64.powi(-10) * wx + 2f64.powi(-24) * (xs + xmax * ws));
        }
    }
    out
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    /// Output elements compared.
    pub elements: u64,
    /// The largest |error| / allowed error over all elements (at most 1 when passing).
    pub worst_ratio: f64,
}

impl Stats {
    pub fn merge(&mut self, other: Stats) {
        self.elements += other.elements;
        self.worst_ratio = self.worst_ratio.max(other.worst_ratio);
    }
}

pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<Stats, String>> + 'a>>;

/// One named check.
pub struct Check {
    /// `family/kernel`, e.g. `ops/rms_norm`.
    pub name: &'static str,
    pub run: for<'a> fn(&'a GpuContext) -> CheckFuture<'a>,
}

/// A check of one kernel kind, run for every dtype of the registry it `applies` to (in
/// registry order) and named `{prefix}{dtype in lowercase}`: `legacy/matvec_` checks
/// `legacy/matvec_f32`, `legacy/matvec_f16`, `legacy/matvec_q4_0`, ...
pub struct PerDtype {
    pub prefix: &'static str,
    pub applies: fn(GgmlType) -> bool,
    pub run: for<'a> fn(&'a GpuContext, GgmlType) -> CheckFuture<'a>,
}

pub const EPS: f64 = f32::EPSILON as f64;

pub fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

pub async fn read_u32(ctx: &GpuContext, b: &wgpu::Buffer, n: usize) -> Result<Vec<u32>, String> {
    let bytes = ctx.read_bytes(b, 0, n as u64 * 4).await.map_err(gpu_err)?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

pub fn rope_bound(x: &[f32], want: &[f64], cfg: &RopeConfig) -> Vec<f64> {
    let half = cfg.rot_dim / 2;
    let mut bound = vec![0.0; x.len()];
    for (h, head) in x.chunks(cfg.head_dim).enumerate() {
        for i in 0..half {
            let (ia, ib) = match cfg.style {
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                RopeStyle::NeoX => (i, i + half),
            };
            let mag = f64::from(head[ia].abs() + head[ib].abs());
            for j in [ia, ib] {
                let at = h * cfg.head_dim + j;
                bound[at] = mag * 12.0 * EPS + want[at].abs() * EPS;
            }
        }
    }
    bound
}
