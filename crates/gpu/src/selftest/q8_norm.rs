//! Checks of Llama's FFN norm folded into its neighbours (crates/engine/src/backend/gpu/add_norm.rs): the
//! residual add that writes the next RMSNorm's record ([`crate::q8::q8_matvec_add_norm`],
//! `Kernel::MatvecQ8AddNorm`), and the gated product that applies the norm's factor to the
//! products of such a record ([`QuantizeQ8Op::silu_mul_norm`], `Kernel::SiluMulQuantizeQ8Norm`).
//! The products of the record in between are plain integer-dot products of its leading q8
//! record (the `q8/matvec_*` checks), which the record check below holds to the CPU bit for bit.
//!
//! What is checked, and the tolerances (CPU references in f64 on the values the GPU wrote):
//! - The residual `y = r + W x` against the integer reference of `W x` plus the add's rounding
//!   (the bound of `q8/matvec_*` with a residual), and a poisoned margin after it.
//! - The norm record's values and scales against the CPU's `quantize_q8` of `y * w` (each
//!   product one f32 multiply of the values read back, as the kernel's): the int8 values
//!   exactly, each scale within 3 ulp (`q8/quantize`'s tolerances); its sums of squares per
//!   block within `33 eps` of the f64 sum (32 squares and 31 additions, each rounded once);
//!   the padding after the sums zero and the eps word untouched, and a poisoned margin after
//!   the record.
//! - The gated product of unscaled gate and up values `g`, `u` (the record's products) against
//!   `silu(inv g) (inv u)` in f64, `inv = 1 / sqrt(sum y^2 / n + eps)` from the f64 sums: the
//!   factor is off by at most `e = (n / 2 + 10) eps` relative (the sum of squares in another
//!   order, inverseSqrt's 2 ulp, the mean's division), each scaled input by `e + eps`, which
//!   moves the product by at most `(2 + |a|) (e + eps)` relative with `a = inv g` (silu's
//!   relative slope is below `1 + |a|`); plus ops/silu_mul's own `(10 + 2 |a|) eps`. Its
//!   records against the CPU's `quantize_q8` of the product it wrote (`q8/quantize`'s
//!   tolerances).
//! - A weight in several chunks is refused with an error.

use super::harness::{
    compare, gpu_err, read_f32, submit, upload_f32, PerDtype, Rng, Stats, POISON,
};
use super::kquants::{check_margin, kquant, seed, upload, weight_data, MARGIN};
use super::q8::{activations, check_records, references};
use crate::q8::{
    norm_record_bytes, norm_record_init, q8_matvec_add_norm, record_bytes, QuantizeQ8Op,
};
use crate::quant::q8dot::quantize_q8;
use crate::quant::GgmlType;
use crate::GpuContext;

use super::harness::added_to_residual;

pub const PER_DTYPE: &[PerDtype] = &[PerDtype {
    prefix: "q8/add_norm_",
    applies: |t| {
        crate::kernels::Kernel::MatvecQ8AddNorm(t)
            .source()
            .is_some()
    },
    run: |ctx, t| Box::pin(add_norm(ctx, t)),
}];

const EPS: f32 = 1e-5;

/// `(rows, cols, ffn)`: the product's rows (the norm's width: one block, SmolLM2's 576 = 18,
/// Llama-1B's 2048 = 64) and row length (legacy: two staging chunks of 4096 in one), and the
/// gated product's length (SmolLM2's and Llama-1B's FFN widths, a single block).
fn shapes(dtype: GgmlType) -> Vec<(usize, usize, usize)> {
    if kquant(dtype) {
        vec![(576, 1536, 1536), (2048, 512, 8192), (32, 256, 32)]
    } else {
        vec![(576, 576, 1536), (96, 4160, 32), (2048, 96, 8192)]
    }
}

async fn add_norm(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let producer = dtype;
    let mut stats = Stats::default();
    for (rows, cols, ffn) in shapes(producer) {
        let mut rng = Rng(seed(producer, rows, cols) ^ 0xadd0 ^ ffn as u64);
        let data = weight_data(producer, rows, cols, &mut rng)?;
        let x = activations(&mut rng, cols);
        let residual = activations(&mut rng, rows);
        let norm_w: Vec<f32> = (0..rows).map(|i| 0.25 + (i % 13) as f32 * 0.125).collect();
        let xq_cpu = quantize_q8(&x).map_err(|e| e.to_string())?;
        let [want, bound, ..] = references(producer, &data, rows, cols, &x, &xq_cpu)?;
        let (want_y, bound_y) = added_to_residual(&want, &bound, &residual);

        let wp = upload(ctx, producer, rows, cols, &data, false)?;
        let xb = upload_f32(ctx, "x", &x)?;
        let xq = ctx
            .storage("xq", record_bytes(cols as u32))
            .map_err(gpu_err)?;
        let quant = QuantizeQ8Op::new(ctx, &xb, &xq, cols as u32, 1).map_err(gpu_err)?;
        let mut init = residual.clone();
        init.extend(std::iter::repeat_n(f32::from_bits(POISON), MARGIN));
        let y = upload_f32(ctx, "y", &init)?;
        let nw = upload_f32(ctx, "norm_w", &norm_w)?;
        let record_len = norm_record_bytes(rows as u32) as usize;
        let mut record_init = norm_record_init(rows as u32, EPS);
        record_init.extend(std::iter::repeat_n(POISON.to_le_bytes(), MARGIN).flatten());
        let record = ctx
            .storage_init("norm_record", &record_init)
            .map_err(gpu_err)?;
        let what = format!("{producer} {rows}x{cols}, gated product of {ffn}");
        if rows >= 256 {
            let split = upload(ctx, producer, rows, cols, &data, true)?;
            if q8_matvec_add_norm(ctx, &split, &xq, &y, &nw, &record).is_ok() {
                return Err(format!(
                    "{what}: a weight in {} chunks was taken",
                    split.chunks.len()
                ));
            }
        }
        let op = q8_matvec_add_norm(ctx, &wp, &xq, &y, &nw, &record).map_err(gpu_err)?;
        // The gated product of unscaled gate and up values (gates out to |g| = 40 once scaled).
        let inv_scale = 8.0 / (rows as f32).sqrt();
        let g: Vec<f32> = activations(&mut rng, ffn)
            .iter()
            .map(|v| v * inv_scale)
            .collect();
        let u: Vec<f32> = rng.vec(ffn, 3.0);
        let gb = upload_f32(ctx, "gate", &g)?;
        let ub = upload_f32(ctx, "up", &u)?;
        let gq = ctx
            .storage("gate records", record_bytes(ffn as u32))
            .map_err(gpu_err)?;
        let silu =
            QuantizeQ8Op::silu_mul_norm(ctx, (&gb, &ub), (&record, rows as u32), &gq, ffn as u32)
                .map_err(gpu_err)?;
        submit(ctx, |pass| {
            quant.record(pass);
            op.record(pass);
            silu.record(pass);
        });

        // The residual.
        let mut got_y = read_f32(ctx, &y, rows + MARGIN).await?;
        check_margin(&format!("{what}: the residual"), &got_y[rows..])?;
        got_y.truncate(rows);
        stats.merge(compare(
            &format!("{what}: residual"),
            &got_y,
            &want_y,
            &bound_y,
        )?);

        // The norm record.
        let raw = read_f32(ctx, &record, record_len / 4 + MARGIN).await?;
        check_margin(&format!("{what}: the norm record"), &raw[record_len / 4..])?;
        let words: Vec<u32> = raw[..record_len / 4].iter().map(|v| v.to_bits()).collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let normed_in: Vec<f32> = got_y.iter().zip(&norm_w).map(|(a, b)| a * b).collect();
        check_records(&normed_in, &bytes, rows, 1, &what, &mut stats)?;
        let base = 4 * (rows / 16 + rows.div_ceil(128));
        let blocks = rows / 32;
        let got_ss: Vec<f32> = words[base..base + blocks]
            .iter()
            .map(|&w| f32::from_bits(w))
            .collect();
        let want_ss: Vec<f64> = got_y
            .chunks_exact(32)
            .map(|b| b.iter().map(|&v| f64::from(v) * f64::from(v)).sum())
            .collect();
        let bound_ss: Vec<f64> = want_ss
            .iter()
            .map(|s| 33.0 * f64::from(f32::EPSILON) * s)
            .collect();
        stats.merge(compare(
            &format!("{what}: sums of squares"),
            &got_ss,
            &want_ss,
            &bound_ss,
        )?);
        let padded = 4 * rows.div_ceil(128);
        if let Some(i) = (blocks..padded).find(|&i| words[base + i] != 0) {
            return Err(format!("{what}: padding word {i} of the sums was written"));
        }
        if words[base + padded] != EPS.to_bits() {
            return Err(format!("{what}: the eps word was overwritten"));
        }

        // The gated product.
        let n = rows as f64;
        let inv = 1.0 / (want_ss.iter().sum::<f64>() / n + f64::from(EPS)).sqrt();
        let e = (n / 2.0 + 10.0) * f64::from(f32::EPSILON);
        let eps = f64::from(f32::EPSILON);
        let (want, bound): (Vec<f64>, Vec<f64>) = g
            .iter()
            .zip(&u)
            .map(|(&gv, &uv)| {
                let a = inv * f64::from(gv);
                let p = a / (1.0 + (-a).exp()) * (inv * f64::from(uv));
                (
                    p,
                    p.abs() * ((2.0 + a.abs()) * (e + eps) + (10.0 + 2.0 * a.abs()) * eps),
                )
            })
            .unzip();
        let got = read_f32(ctx, &gb, ffn).await?;
        stats.merge(compare(
            &format!("{what}: gated product"),
            &got,
            &want,
            &bound,
        )?);
        let records: Vec<u8> = read_f32(ctx, &gq, record_bytes(ffn as u32) as usize / 4)
            .await?
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect();
        check_records(
            &got,
            &records,
            ffn,
            1,
            &format!("{what}: gated product"),
            &mut stats,
        )?;
    }
    Ok(stats)
}
