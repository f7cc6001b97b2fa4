//! Checks of the integer-dot decode path ([`crate::q8`]): the QuantizeQ8 kernel against
//! [`quant::q8dot::quantize_q8`], RmsNormQuantizeQ8 (the norm, then the same check of its
//! records), and every `MatvecQ8` kernel, run after QuantizeQ8 in one
//! pass as the backend runs them, against two references. Shapes: the K-quant checks' (rows
//! 576 / 1536 / 7 by 2304 / 256 / 1536) or, for the 32-weight formats, rows 576 / 1536 / 7 / 45
//! by 576 / 96 / 1536 / 4160 (two staging chunks); whole and split into three or more chunks;
//! at the default workgroup size and at 32 and 256 with the chunks reversed; outputs poisoned,
//! with a poisoned margin after them that must survive.
//!
//! The activations include an all-zero block of 32 (d = 0), a block of tiny values (below
//! `Q8_MIN_AMAX`: zeros too) and a block of large ones (|x| up to 1e4).
//!
//! Tolerances:
//! - QuantizeQ8: the int8 values must equal the CPU's exactly (both compute `127 / amax`
//!   correctly rounded and one f32 multiply rounded half to even); each `d = 1 / iscale`
//!   within 3 ulp of the CPU's (WGSL's `1.0 / x` is allowed 2.5 ulp).
//! - Against the integer reference ([`quant::q8dot::vec_dot_q8`], exact integer sums, the f32
//!   factors multiplied in f64): the kernel adds, per group of 16, `d8 * (scale * sumi +
//!   offset * sumx)` with exact integer sums, so each term reaches the output through at most
//!   5 roundings in the group, 3 ulp of `d8`, and the thread's running sum and workgroup tree
//!   (fewer than `cols / 16 + 8`): in all fewer than `cols` roundings, bound `cols * eps *
//!   magnitude`, where the magnitude sums `|d8| (|scale| |code x_q| + |offset| |x_q|)` per
//!   element (it bounds every partial sum).
//! - Against the f32 dequantized product (`quant::dequantize` with the unquantized x, in f64):
//!   the activation quantization moves each x by at most `d8 / 2` (rounding to the q8 grid)
//!   plus `381 eps * d8` (the 3-ulp `d8`, times `|q| <= 127`), so the integer-form product
//!   differs from the exact one by at most `0.5001 * sum |w| d8`; the dequantized weights
//!   carry one rounding each (`eps * sum |w x|` more); plus the kernel's rounding bound above.

use super::harness::{
    added_to_residual, compare, gpu_err, poisoned, read_f32, submit, upload_f32, Check, PerDtype,
    Rng, Stats, POISON,
};
use super::kquants::{check_margin, kquant, seed, upload, weight_data, MARGIN, SHAPES};
use crate::kernels::{kquants, Kernel};
use crate::matmul::MatmulOp;
use crate::q8::{decode_record, record_bytes, QuantizeQ8Op, RmsNormQuantizeQ8Op};
use crate::quant::q8dot::{quantize_q8, vec_dot_q8, Q8Row};
use crate::quant::{self, Family, GgmlType};
use crate::weights::{row_bytes, GpuWeight};
use crate::GpuContext;

pub const CHECKS: &[Check] = &[
    Check {
        name: "q8/quantize",
        run: |ctx| Box::pin(quantize(ctx)),
    },
    Check {
        name: "q8/rms_norm_quantize",
        run: |ctx| Box::pin(norm_quantize(ctx)),
    },
    Check {
        name: "q8/silu_mul_quantize",
        run: |ctx| Box::pin(silu_mul_quantize(ctx)),
    },
];

pub const PER_DTYPE: &[PerDtype] = &[
    PerDtype {
        prefix: "q8/matvec_",
        applies: |t| Kernel::MatvecQ8(t).source().is_some(),
        run: |ctx, t| Box::pin(matvec(ctx, t)),
    },
    PerDtype {
        prefix: "q8/matvec_pair_",
        applies: |t| Kernel::MatvecQ8Pair(t).source().is_some(),
        run: |ctx, t| Box::pin(matvec_pair(ctx, t)),
    },
];

/// Activations for a row of `cols`: uniform in [-1, 1) with a zero block, a tiny block and a
/// large block where the row is long enough.
pub(super) fn activations(rng: &mut Rng, cols: usize) -> Vec<f32> {
    let mut x = rng.vec(cols, 1.0);
    if cols >= 128 {
        x[32..64].fill(0.0);
        x[64..96].iter_mut().for_each(|v| *v *= 1e-31);
        x[96..128].iter_mut().for_each(|v| *v *= 1e4);
    }
    x
}

/// QuantizeQ8 on `n_tokens` rows of `cols` into a poisoned buffer; the records read back.
async fn gpu_records(
    ctx: &GpuContext,
    x: &[f32],
    cols: usize,
    n_tokens: usize,
) -> Result<Vec<u8>, String> {
    let xb = upload_f32(ctx, "x", x)?;
    let bytes = record_bytes(cols as u32) as usize * n_tokens;
    let xq = poisoned(ctx, bytes / 4)?;
    let op = QuantizeQ8Op::new(ctx, &xb, &xq, cols as u32, n_tokens as u32).map_err(gpu_err)?;
    submit(ctx, |pass| op.record(pass));
    let words = read_f32(ctx, &xq, bytes / 4).await?;
    Ok(words
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect())
}

/// Two tokens of each length (so the record stride is exercised), 576 = 18 blocks included.
async fn quantize(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for cols in [2304usize, 576, 32] {
        let mut rng = Rng(0x5138 ^ cols as u64);
        let n_tokens = 2;
        let mut x = activations(&mut rng, cols);
        x.extend(activations(&mut rng, cols));
        let records = gpu_records(ctx, &x, cols, n_tokens).await?;
        check_records(
            &x,
            &records,
            cols,
            n_tokens,
            &format!("{cols} values"),
            &mut stats,
        )?;
    }
    Ok(stats)
}

/// The records of `n_tokens` rows of `cols` against the CPU quantization of `x` (tolerances in
/// the module docs).
pub(super) fn check_records(
    x: &[f32],
    records: &[u8],
    cols: usize,
    n_tokens: usize,
    what: &str,
    stats: &mut Stats,
) -> Result<(), String> {
    let rb = record_bytes(cols as u32) as usize;
    for t in 0..n_tokens {
        let want = quantize_q8(&x[t * cols..(t + 1) * cols]).map_err(|e| e.to_string())?;
        let (q, d) = decode_record(
            records.get(t * rb..(t + 1) * rb).ok_or("short records")?,
            cols,
        )
        .ok_or("short record")?;
        if let Some(i) = (0..cols).find(|&i| q[i] != want.qs[i]) {
            return Err(format!(
                "{what}, token {t}: value {i} ({}) quantized to {}, want {}",
                x[t * cols + i],
                q[i],
                want.qs[i]
            ));
        }
        let bound: Vec<f64> = want
            .d
            .iter()
            .map(|&v| 3.0 * f64::from(f32::EPSILON) * f64::from(v))
            .collect();
        let want_d: Vec<f64> = want.d.iter().map(|&v| f64::from(v)).collect();
        stats.merge(compare(
            &format!("{what}, token {t}, scales"),
            &d,
            &want_d,
            &bound,
        )?);
        stats.elements += cols as u64;
    }
    Ok(())
}

/// RmsNormQuantizeQ8 against the CPU: the normalized rows within the bound of ops/rms_norm
/// (`|y| (dim / 2 + 8) eps`: the sum of squares in another order, inverseSqrt's 2 ulp), and the
/// records held to QuantizeQ8's tolerances against the CPU quantization of the rows the kernel
/// wrote (the same values in registers). Shapes: decode rows of 576 and 2048 and a single
/// block (the one-pass path: at most 8 values per invocation), a batch of 3 rows of 2304 and 257
/// blocks (the two-pass path: more than one quarter per invocation of a 256 workgroup).
async fn norm_quantize(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (n_tokens, dim) in [(1usize, 2048usize), (1, 576), (3, 2304), (1, 32), (2, 8224)] {
        let mut rng = Rng(0x4e51 ^ (n_tokens * 7919 + dim) as u64);
        let mut x = Vec::new();
        for _ in 0..n_tokens {
            x.extend(activations(&mut rng, dim));
        }
        let w: Vec<f32> = (0..dim).map(|i| 0.25 + (i % 13) as f32 * 0.125).collect();
        let eps = 1e-5;
        let want = crate::cpu::ops::rms_norm(&x, &w, eps);
        let xb = upload_f32(ctx, "x", &x)?;
        let wb = upload_f32(ctx, "w", &w)?;
        let y = poisoned(ctx, x.len())?;
        let bytes = record_bytes(dim as u32) as usize * n_tokens;
        let xq = poisoned(ctx, bytes / 4)?;
        let op = RmsNormQuantizeQ8Op::new(ctx, &xb, &wb, &y, &xq, n_tokens as u32, dim as u32, eps)
            .map_err(gpu_err)?;
        submit(ctx, |pass| op.record(pass));
        let got_y = read_f32(ctx, &y, x.len()).await?;
        let bound: Vec<f64> = want
            .iter()
            .map(|v| f64::from(v.abs()) * (dim as f64 / 2.0 + 8.0) * f64::from(f32::EPSILON))
            .collect();
        let want_wide: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        let what = format!("rms_norm_quantize_q8 {n_tokens}x{dim}");
        stats.merge(compare(
            &format!("{what} normalized"),
            &got_y,
            &want_wide,
            &bound,
        )?);
        let records: Vec<u8> = read_f32(ctx, &xq, bytes / 4)
            .await?
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect();
        check_records(&got_y, &records, dim, n_tokens, &what, &mut stats)?;
    }
    Ok(stats)
}

/// SiluMulQuantizeQ8: the product it writes over the gate equals the SiluMul elementwise
/// kernel's on the same device bit for bit (it is the same function, which the fusion must
/// not change), and is within ops/silu_mul's bound of the CPU's `silu_mul` (`(10 + 2|g|) eps`
/// relative: the GPU's exp may differ by 3 + 2|g| ulp); its records pass QuantizeQ8's checks
/// against the CPU quantization of the product it wrote. Shapes: Llama-3.2-1B's and SmolLM2's
/// FFN widths, a single block, and 3 tokens.
async fn silu_mul_quantize(ctx: &GpuContext) -> Result<Stats, String> {
    use crate::ops::ElementwiseOp;
    use tritium_core::ops::Elementwise;
    let mut stats = Stats::default();
    for (n_tokens, cols) in [(1usize, 8192usize), (1, 1536), (1, 32), (3, 2304)] {
        let mut rng = Rng(0x5117 ^ (n_tokens * 7919 + cols) as u64);
        let n = n_tokens * cols;
        let mut g = Vec::with_capacity(n);
        for _ in 0..n_tokens {
            g.extend(activations(&mut rng, cols));
        }
        // Gates out to |g| = 40 (exp(-g) overflows past about 88: covered by ops/silu_mul).
        for v in g.iter_mut() {
            *v *= 6.0;
        }
        let u = rng.vec(n, 3.0);
        let ub = upload_f32(ctx, "up", &u)?;
        let fused = upload_f32(ctx, "gate", &g)?;
        let plain = upload_f32(ctx, "gate", &g)?;
        let bytes = record_bytes(cols as u32) as usize * n_tokens;
        let xq = poisoned(ctx, bytes / 4)?;
        let op = QuantizeQ8Op::silu_mul(ctx, &fused, &ub, &xq, cols as u32, n_tokens as u32)
            .map_err(gpu_err)?;
        let twin = ElementwiseOp::new(ctx, Elementwise::SiluMul, &plain, None, Some(&ub), n as u32)
            .map_err(gpu_err)?;
        submit(ctx, |pass| {
            op.record(pass);
            twin.record(pass);
        });
        let got = read_f32(ctx, &fused, n).await?;
        let elementwise = read_f32(ctx, &plain, n).await?;
        let what = format!("silu_mul_quantize_q8 {n_tokens}x{cols}");
        if let Some(i) = (0..n).find(|&i| got[i].to_bits() != elementwise[i].to_bits()) {
            return Err(format!(
                "{what}: product {i} is {} (bits {:#x}), the SiluMul kernel's {} (bits {:#x})",
                got[i],
                got[i].to_bits(),
                elementwise[i],
                elementwise[i].to_bits()
            ));
        }
        let want: Vec<f64> = crate::cpu::ops::silu_mul(&g, &u)
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let bound: Vec<f64> = want
            .iter()
            .zip(&g)
            .map(|(w, gv)| w.abs() * (10.0 + 2.0 * f64::from(gv.abs())) * f64::from(f32::EPSILON))
            .collect();
        stats.merge(compare(&format!("{what} product"), &got, &want, &bound)?);
        let records: Vec<u8> = read_f32(ctx, &xq, bytes / 4)
            .await?
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect();
        check_records(&got, &records, cols, n_tokens, &what, &mut stats)?;
    }
    Ok(stats)
}

/// Run QuantizeQ8 then `MatvecQ8(w.dtype)` at `wg` (chunks reversed if asked) in one pass,
/// a K-quant kernel taking `span` units per step (`None`: the kernel's choice for the weight);
/// with a `residual`, `MatvecQ8Add` into a copy of it at the default workgroup size.
async fn run_q8(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    (wg, span): (Option<u32>, Option<u32>),
    reverse: bool,
    residual: Option<&[f32]>,
) -> Result<Vec<f32>, String> {
    let n = w.rows as usize;
    let y = match residual {
        Some(r) => {
            let mut init = r.to_vec();
            init.extend(std::iter::repeat_n(f32::from_bits(POISON), MARGIN));
            upload_f32(ctx, "y", &init)?
        }
        None => poisoned(ctx, n + MARGIN)?,
    };
    let xq = ctx.storage("xq", record_bytes(w.cols)).map_err(gpu_err)?;
    let quant = QuantizeQ8Op::new(ctx, x, &xq, w.cols, 1).map_err(gpu_err)?;
    let accumulate = residual.is_some();
    let mut op = match wg {
        None => crate::q8::q8_matvec(ctx, w, &xq, &y, accumulate).map_err(gpu_err)?,
        Some(wg) => {
            let kernel = Kernel::MatvecQ8(w.dtype);
            let span = span.or(kquants::matvec_q8_span(kernel, w.bytes, w.cols));
            MatmulOp::spanned(ctx, (kernel, wg, span), w, &xq, &y, 1).map_err(gpu_err)?
        }
    };
    if reverse {
        op.dispatches.reverse();
    }
    submit(ctx, |pass| {
        quant.record(pass);
        op.record(pass);
    });
    let mut out = read_f32(ctx, &y, n + MARGIN).await?;
    check_margin(&Kernel::MatvecQ8(w.dtype).label(), &out[n..])?;
    out.truncate(n);
    Ok(out)
}

/// Both references for every row (module docs): `(integer, its bound, f32, its bound)`.
pub(super) fn references(
    dtype: GgmlType,
    data: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    xq: &Q8Row,
) -> Result<[Vec<f64>; 4], String> {
    let rb = row_bytes(dtype, cols as u64).ok_or("bad row length")? as usize;
    let w = quant::dequantize(dtype, data, rows * cols).map_err(|e| e.to_string())?;
    let eps = f64::from(f32::EPSILON);
    let mut out: [Vec<f64>; 4] = Default::default();
    for r in 0..rows {
        let (dot, mag) =
            vec_dot_q8(dtype, &data[r * rb..(r + 1) * rb], xq).map_err(|e| e.to_string())?;
        let kernel_bound = cols as f64 * eps * mag;
        let (mut exact, mut wx, mut shift) = (0f64, 0f64, 0f64);
        for (c, (&wv, &xv)) in w[r * cols..(r + 1) * cols].iter().zip(x).enumerate() {
            let (wv, xv) = (f64::from(wv), f64::from(xv));
            exact += wv * xv;
            wx += (wv * xv).abs();
            shift += wv.abs() * f64::from(xq.d[c / 32]);
        }
        out[0].push(dot);
        out[1].push(kernel_bound);
        out[2].push(exact);
        out[3].push(0.5001 * shift + eps * wx + kernel_bound);
    }
    Ok(out)
}

/// Legacy (32-weight block) shapes: rows not multiples of the workgroup's 32, row lengths of
/// 18, 3 and 48 blocks, one longer than the kernel's 4096-value staging chunk (two chunks).
const LEGACY_SHAPES: [(usize, usize); 4] = [(576, 576), (1536, 96), (7, 1536), (45, 4160)];

async fn matvec(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    // The ternary formats also at enough rows for their wide mapping (ternary::WIDE_ROWS).
    let wide = [(crate::kernels::ternary::WIDE_ROWS as usize + 7, 256)];
    let kquant = kquant(dtype);
    let shapes: Vec<(usize, usize)> = match Kernel::MatvecQ8(dtype).family() {
        Some(Family::KQuant(_)) => SHAPES.to_vec(),
        Some(Family::Ternary) => SHAPES.iter().chain(&wide).copied().collect(),
        _ => LEGACY_SHAPES.to_vec(),
    };
    for &(rows, cols) in &shapes {
        let mut rng = Rng(seed(dtype, rows, cols) ^ 0x98);
        let data = weight_data(dtype, rows, cols, &mut rng)?;
        let x = activations(&mut rng, cols);
        let xq = quantize_q8(&x).map_err(|e| e.to_string())?;
        let [want, bound, exact, exact_bound] = references(dtype, &data, rows, cols, &x, &xq)?;
        let xb = upload_f32(ctx, "x", &x)?;
        for split in [false, true] {
            let gw = upload(ctx, dtype, rows, cols, &data, split)?;
            let what = format!("{rows}x{cols} in {} chunks", gw.chunks.len());
            // K-quants also with two units per step (the large matrices' mapping).
            let mut runs = vec![
                (None, None, false),
                (Some(32), None, true),
                (Some(256), None, true),
            ];
            if kquant {
                runs.extend([(Some(32), Some(2), false), (Some(64), Some(2), true)]);
            }
            for (wg, span, reverse) in runs {
                let got = run_q8(ctx, &gw, &xb, (wg, span), reverse, None).await?;
                let what = format!("{what}, wg {wg:?}, span {span:?}");
                stats.merge(compare(&format!("{what} (integer)"), &got, &want, &bound)?);
                compare(&format!("{what} (f32)"), &got, &exact, &exact_bound)?;
            }
            // Added to a residual (MatvecQ8Add): the product's bound plus the add's rounding.
            let residual = activations(&mut rng, rows);
            let got = run_q8(ctx, &gw, &xb, (None, None), false, Some(&residual)).await?;
            let (sum, sum_bound) = added_to_residual(&want, &bound, &residual);
            let what = format!("{what}, added to a residual");
            stats.merge(compare(
                &format!("{what} (integer)"),
                &got,
                &sum,
                &sum_bound,
            )?);
        }
    }
    Ok(stats)
}

/// `MatvecQ8Pair`: two weights of one format and row length (rows 576 and 7, 36 and 1536,
/// 2048 and 512 as Llama-1B's q and k) in one dispatch, both outputs poisoned with margins,
/// against the integer reference with the single kernel's bound (module docs), and equal bit
/// for bit to the single `MatvecQ8` of each weight run at the same workgroup size (the same
/// arithmetic per row).
async fn matvec_pair(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (ra, rb, cols) in [
        (576usize, 7usize, 2304usize),
        (36, 1536, 256),
        (2048, 512, 512),
    ] {
        let mut rng = Rng(seed(dtype, ra, cols) ^ 0x9a17 ^ rb as u64);
        let da = weight_data(dtype, ra, cols, &mut rng)?;
        let db = weight_data(dtype, rb, cols, &mut rng)?;
        let x = activations(&mut rng, cols);
        let xq = quantize_q8(&x).map_err(|e| e.to_string())?;
        let [want_a, bound_a, ..] = references(dtype, &da, ra, cols, &x, &xq)?;
        let [want_b, bound_b, ..] = references(dtype, &db, rb, cols, &x, &xq)?;
        let wa = upload(ctx, dtype, ra, cols, &da, false)?;
        let wb = upload(ctx, dtype, rb, cols, &db, false)?;
        if !crate::q8::can_pair(&wa, &wb) {
            return Err(format!("{ra}x{cols} and {rb}x{cols} cannot be paired"));
        }
        let xb = upload_f32(ctx, "x", &x)?;
        let xqb = ctx
            .storage("xq", record_bytes(cols as u32))
            .map_err(gpu_err)?;
        let quant = QuantizeQ8Op::new(ctx, &xb, &xqb, cols as u32, 1).map_err(gpu_err)?;
        let kernel = Kernel::MatvecQ8Pair(dtype);
        let wg = crate::q8::q8_workgroup_size(kernel, dtype, wa.bytes + wb.bytes, wa.cols);
        // The pair as the backend makes it, then with two units per step (the large matrices'
        // mapping), each against the single kernel at the same workgroup size and span.
        let chosen = kquants::matvec_q8_span(kernel, wa.bytes + wb.bytes, wa.cols);
        for span in [chosen, Some(2)] {
            let ya = poisoned(ctx, ra + MARGIN)?;
            let yb = poisoned(ctx, rb + MARGIN)?;
            let op = MatmulOp::pair(ctx, (kernel, wg, span), &wa, &wb, &xqb, &ya, &yb)
                .map_err(gpu_err)?;
            submit(ctx, |pass| {
                quant.record(pass);
                op.record(pass);
            });
            let label = kernel.label();
            let mut got_a = read_f32(ctx, &ya, ra + MARGIN).await?;
            let mut got_b = read_f32(ctx, &yb, rb + MARGIN).await?;
            check_margin(&label, &got_a[ra..])?;
            check_margin(&label, &got_b[rb..])?;
            got_a.truncate(ra);
            got_b.truncate(rb);
            let what = format!("{ra}x{cols} + {rb}x{cols}, span {span:?}");
            stats.merge(compare(
                &format!("{what}, first"),
                &got_a,
                &want_a,
                &bound_a,
            )?);
            stats.merge(compare(
                &format!("{what}, second"),
                &got_b,
                &want_b,
                &bound_b,
            )?);
            for (w, got, which) in [(&wa, &got_a, "first"), (&wb, &got_b, "second")] {
                let single = run_q8(ctx, w, &xb, (Some(wg), span), false, None).await?;
                if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != single[i].to_bits()) {
                    return Err(format!(
                        "{what}: the {which} product's row {i} is {} paired, {} alone",
                        got[i], single[i]
                    ));
                }
            }
        }
    }
    Ok(stats)
}
