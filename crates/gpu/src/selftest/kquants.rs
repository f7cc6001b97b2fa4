//! Checks of the K-quant family (every dtype whose family is `KQuant`: Q4_K, Q5_K, Q6_K,
//! IQ4_XS):
//! matvec, matmul and embedding against
//! `crate::quant::dequantize` (bit-exact with gguf-py) on rows 576 / 1536 / 7 and row lengths
//! 256, 1536 (6 super-blocks) and 2304 (9), whole and split into at least three chunks, with
//! the chunks dispatched in file order and in reverse (so a chunk that writes outside its rows
//! is caught whichever order hides it) and poisoned values past the end that must survive.
//!
//! Data: Q4_K and Q6_K are `crate::quant::quantize` of random floats; Q5_K has no quantizer, so
//! its blocks are random bytes with `d` and `dmin` replaced by finite f16 of sane magnitude
//! (as tests/goldens/gen_quant_goldens.py does), plus one block with every scale bit set and
//! one with all scales zero. IQ4_XS has no quantizer either: random blocks with tame scales
//! (every code, |d| < 2: `harness::tame_blocks`).
//!
//! Tolerances. Matmul and embedding dequantize every weight with the CPU's f32 operations in
//! the CPU's order: Q4_K/Q5_K `(d * sc) * q - dmin * m`, where `d * sc`, `dmin * m` (11-bit f16
//! times a 6-bit integer) and `(d * sc) * q` (times a 5-bit integer) are exact in f32, so the
//! only rounding is the subtraction, the same with or without FMA contraction; Q6_K
//! `(d * sc) * (q - 32)`, the same two products (the first exact); IQ4_XS
//! `(d * (ls - 32)) * KVALUES[q]`, both products exact (11 + 6 + 7 bits). So their weights are
//! the reference's bit for bit, which the embedding checks assert (allowed error 0), and a matmul
//! output is an f32 sum of `cols` exact-weight products (one FMA chain), whose error is at most
//! `gamma_cols * sum |w x| <= cols * eps * sum |w x|`: the bound of `reference_matmul`.
//!
//! Where the device has cooperative matrices ([`crate::matmul::uses_coop`]), the matmul
//! check also runs the cooperative-matrix product prefill uses there
//! ([`super::coop_checks`]), whose weights and inputs are rounded to f16 before exact products
//! accumulated in f32: the f32 bound plus `2^-10 sum |w x|` and an absolute term for f16's
//! subnormal range ([`super::coop_bound`]).
//!
//! Matvec (decode, bandwidth-bound) applies each 16-weight group's scale once to the group's
//! sum: it adds `d*sc * (sum q x)` and `- dmin*m * (sum x)` for Q4_K/Q5_K and
//! `d*sc * (sum (q - 32) x)` for Q6_K, `d*(ls-32) * (sum KVALUES[q] x)` per 32 for IQ4_XS.
//! Each product reaches the output through at most `32 + 3 + cols/32 + 8 <= cols` roundings
//! (group sum, scaling, the thread's running sum, the workgroup tree), so the same f32 summation bound holds over the magnitudes of the terms it
//! actually adds: `cols * eps * sum t |x|` with `t = |scale*q| + |offset| <= |w| + 2 |offset|`
//! for the group's offset in the block's integer form (Q4_K, Q5_K: `-dmin*m`; Q6_K, IQ4_XS:
//! none, so `t = |w|`), the reference's own rounding of `w` included in the factor-two slack of
//! `gamma_k <= cols * eps / 2`. This is the harness bound with the minimum terms counted, which
//! the kernel subtracts after summing rather than inside each weight.

use super::harness::{
    compare, coop_checks, gpu_err, poisoned, read_f32, reference_matmul, run_matmul, submit,
    upload_f32, PerDtype, Rng, Stats, POISON,
};
use crate::embedding::EmbeddingOp;
use crate::kernels::{kquants, Kernel};
use crate::matmul::{uses_coop, MatmulOp};
use crate::quant::{self, Family, GgmlType};
use crate::weights::{row_bytes, GpuWeight};
use crate::GpuContext;

/// Whether `t` is a member of this family.
pub(super) fn kquant(t: GgmlType) -> bool {
    matches!(Kernel::Matvec(t).family(), Some(Family::KQuant(_)))
}

pub const PER_DTYPE: &[PerDtype] = &[
    PerDtype {
        prefix: "kquants/matvec_",
        applies: kquant,
        run: |ctx, t| Box::pin(matvec(ctx, t)),
    },
    PerDtype {
        prefix: "kquants/matmul_",
        applies: kquant,
        run: |ctx, t| Box::pin(matmul(ctx, t)),
    },
    PerDtype {
        prefix: "kquants/embedding_",
        applies: kquant,
        run: |ctx, t| Box::pin(embedding(ctx, t)),
    },
];

/// (rows, cols): rows not multiples of the workgroup's rows or tile, 6 and 9 super-blocks per
/// row (not powers of two) and a one-block row (short rows: thread groups in matvec).
pub(super) const SHAPES: [(usize, usize); 3] = [(576, 2304), (1536, 256), (7, 1536)];

/// Poisoned values after each output that no kernel may touch.
pub(super) const MARGIN: usize = 64;

pub(super) fn seed(dtype: GgmlType, rows: usize, cols: usize) -> u64 {
    u64::from(dtype.id()) << 40 ^ (rows as u64) << 20 ^ cols as u64
}

/// Random K-quant data for a `[rows, cols]` weight (see the module docs).
pub(super) fn weight_data(
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    rng: &mut Rng,
) -> Result<Vec<u8>, String> {
    let n = rows * cols;
    // IQ4_NL (in the integer-dot checks) and IQ4_XS have no quantizer: random blocks with
    // tame scales.
    if !quant::can_quantize(dtype) {
        return super::harness::tame_blocks(dtype, n, rng);
    }
    if dtype != GgmlType::Q5_K {
        return quant::quantize(dtype, &rng.vec(n, 1.0)).map_err(|e| e.to_string());
    }
    const BLOCK: usize = 176;
    let mut data = rng.bytes(n / 256 * BLOCK);
    for (b, block) in data.chunks_exact_mut(BLOCK).enumerate() {
        for field in [0, 2] {
            // |v| in [1e-4, 1e-1): normal f16; negative one time in eight.
            let mag = 10f32.powf(-4.0 + 3.0 * (rng.f32() + 1.0) / 2.0);
            let v = if rng.below(8) == 0 { -mag } else { mag };
            block[field..field + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
        match b {
            1 => block[4..16].fill(0xff),
            2 => block[4..16].fill(0),
            _ => {}
        }
    }
    Ok(data)
}

/// Per weight, the magnitude `t` the matvec kernel's terms have (see the module docs): `|w|`
/// plus twice its group's offset in the block's integer form (`|w|` where there is none).
fn matvec_terms(dtype: GgmlType, data: &[u8], w: &[f32]) -> Vec<f32> {
    let plain = || w.iter().map(|v| v.abs()).collect();
    let (Some(imp), Some(geo)) = (quant::lookup(dtype), dtype.block()) else {
        return plain();
    };
    let (elems, bytes) = (geo.block_elems as usize, geo.block_bytes as usize);
    let mut t = Vec::with_capacity(w.len());
    for (ws, b) in w.chunks(elems).zip(data.chunks_exact(bytes)) {
        let Some(ib) = imp.int_block(b) else {
            return plain();
        };
        let offsets = ib
            .groups
            .iter()
            .flat_map(|&(len, _, offset)| std::iter::repeat_n(offset.abs(), len));
        for (v, o) in ws.iter().zip(offsets) {
            t.push(v.abs() + 2.0 * o);
        }
    }
    t
}

pub(super) fn upload(
    ctx: &GpuContext,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    data: &[u8],
    split: bool,
) -> Result<GpuWeight, String> {
    let row = row_bytes(dtype, cols as u64).ok_or("bad row length")?;
    let max_chunk = if split {
        (rows as u64 / 3 + 1) * row + 16
    } else {
        u64::MAX
    };
    let w = ctx
        .upload_weight_split("w", dtype, rows as u32, cols as u32, data, max_chunk)
        .map_err(gpu_err)?;
    if split && w.chunks.len() < 3 {
        return Err(format!(
            "{rows} rows split into only {} chunks",
            w.chunks.len()
        ));
    }
    Ok(w)
}

/// The poisoned values after the output must be untouched.
pub(super) fn check_margin(what: &str, out: &[f32]) -> Result<(), String> {
    match out.iter().position(|v| v.to_bits() != POISON) {
        Some(i) => Err(format!("{what}: wrote {} past the end of the output", i)),
        None => Ok(()),
    }
}

/// Run `kernel` with `workgroup_size` through `MatmulOp::with_kernel` (so Matmul also runs for
/// one token), optionally with the chunks dispatched in reverse, and read back `y`.
async fn run_kernel(
    ctx: &GpuContext,
    kernel: Kernel,
    workgroup_size: u32,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    n_tokens: u32,
    reverse: bool,
) -> Result<Vec<f32>, String> {
    let n = (w.rows * n_tokens) as usize;
    let y = poisoned(ctx, n + MARGIN)?;
    let mut op =
        MatmulOp::with_kernel(ctx, kernel, workgroup_size, w, x, &y, n_tokens).map_err(gpu_err)?;
    if reverse {
        op.dispatches.reverse();
    }
    submit(ctx, |pass| op.record(pass));
    let mut out = read_f32(ctx, &y, n + MARGIN).await?;
    check_margin(&kernel.label(), &out[n..])?;
    out.truncate(n);
    Ok(out)
}

/// One token. Through `MatmulOp` (as the model runs it), then at workgroup sizes 32 and 256
/// (one, two or four thread groups per workgroup depending on the row length) with the chunks
/// in reverse. Bound: the f32 summation bound over the kernel's terms (module docs).
async fn matvec(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in SHAPES {
        let mut rng = Rng(seed(dtype, rows, cols));
        let data = weight_data(dtype, rows, cols, &mut rng)?;
        let w = quant::dequantize(dtype, &data, rows * cols).map_err(|e| e.to_string())?;
        let x = rng.vec(cols, 1.0);
        let xb = upload_f32(ctx, "x", &x)?;
        let (want, _) = reference_matmul(&w, &x, rows, cols, 1);
        let terms = matvec_terms(dtype, &data, &w);
        let (_, bound) = reference_matmul(&terms, &x, rows, cols, 1);
        for split in [false, true] {
            let gw = upload(ctx, dtype, rows, cols, &data, split)?;
            let what = format!("{rows}x{cols} in {} chunks", gw.chunks.len());
            let got = run_matmul(ctx, &gw, &xb, 1).await?;
            stats.merge(compare(&what, &got, &want, &bound)?);
            for wg in [32, 256] {
                let got = run_kernel(ctx, Kernel::Matvec(dtype), wg, &gw, &xb, 1, true).await?;
                stats.merge(compare(
                    &format!("{what}, wg {wg}, reversed"),
                    &got,
                    &want,
                    &bound,
                )?);
            }
        }
    }
    Ok(stats)
}

/// 1, 3, 17 and 70 tokens (70: two 64-token tiles, the second partial): the whole weight at
/// workgroup size 128 (64-row tiles), the split weight at 256 (128-row tiles) where the device
/// has the workgroup memory for it, else at 128, with its chunks reversed.
async fn matmul(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in SHAPES {
        let mut rng = Rng(seed(dtype, rows, cols) ^ 1);
        let data = weight_data(dtype, rows, cols, &mut rng)?;
        let w = quant::dequantize(dtype, &data, rows * cols).map_err(|e| e.to_string())?;
        let big = kquants::largest_matmul_workgroup(ctx.limits.max_compute_workgroup_storage_size);
        for (split, wg) in [(false, 128), (true, big)] {
            let gw = upload(ctx, dtype, rows, cols, &data, split)?;
            if uses_coop(ctx, dtype) {
                stats.merge(coop_checks(ctx, &gw, &w, &mut rng).await?);
            }
            for n_tokens in [1usize, 3, 17, 70] {
                let x = rng.vec(cols * n_tokens, 1.0);
                let xb = upload_f32(ctx, "x", &x)?;
                let (want, bound) = reference_matmul(&w, &x, rows, cols, n_tokens);
                let k = Kernel::Matmul(dtype);
                let got = run_kernel(ctx, k, wg, &gw, &xb, n_tokens as u32, split).await?;
                let what = format!(
                    "{rows}x{cols} in {} chunks, {n_tokens} tokens, wg {wg}",
                    gw.chunks.len()
                );
                stats.merge(compare(&what, &got, &want, &bound)?);
            }
        }
    }
    Ok(stats)
}

/// Token ids at both ends of the table and on both sides of every chunk boundary, plus random
/// ones, gathered through `EmbeddingOp` with its dispatches in order and reversed. The output
/// must equal the CPU dequantization exactly.
async fn embedding(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in SHAPES {
        let mut rng = Rng(seed(dtype, rows, cols) ^ 2);
        let data = weight_data(dtype, rows, cols, &mut rng)?;
        let table = quant::dequantize(dtype, &data, rows * cols).map_err(|e| e.to_string())?;
        for split in [false, true] {
            let gw = upload(ctx, dtype, rows, cols, &data, split)?;
            let mut ids = vec![0u32, rows as u32 - 1];
            for c in gw.chunks.iter().skip(1) {
                ids.extend([c.first_row - 1, c.first_row]);
            }
            ids.extend((0..5).map(|_| rng.below(rows as u64) as u32));
            let n = ids.len();
            let want: Vec<f64> = ids
                .iter()
                .flat_map(|&id| &table[id as usize * cols..(id as usize + 1) * cols])
                .map(|&v| f64::from(v))
                .collect();
            let exact = vec![0.0; want.len()];
            let ids_buf = ctx
                .storage_init("ids", bytemuck::cast_slice(&ids))
                .map_err(gpu_err)?;
            for reverse in [false, true] {
                let out = poisoned(ctx, n * cols + MARGIN)?;
                let op = EmbeddingOp::new(ctx, &gw, &ids_buf, &out, n as u32).map_err(gpu_err)?;
                submit(ctx, |pass| {
                    if reverse {
                        op.dispatches.iter().rev().for_each(|d| d.record(pass));
                    } else {
                        op.record(pass);
                    }
                });
                let mut got = read_f32(ctx, &out, n * cols + MARGIN).await?;
                let what = format!(
                    "{rows}x{cols} in {} chunks, ids {ids:?}{}",
                    gw.chunks.len(),
                    if reverse { ", reversed" } else { "" }
                );
                check_margin(&what, &got[n * cols..])?;
                got.truncate(n * cols);
                stats.merge(compare(&what, &got, &want, &exact)?);
            }
        }
    }
    Ok(stats)
}
