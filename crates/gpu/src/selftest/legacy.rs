//! Checks of the legacy family (F32, F16 and the 32-weight block formats: every dtype whose
//! family is `Legacy`): matvec, matmul and embedding, each on every format, against
//! `crate::quant::dequantize` of the same bytes.
//!
//! Weights are random floats in [-1, 1) put through `crate::quant::quantize`, so every block
//! is one the real quantizer could write; IQ4_NL, which has no quantizer, takes random blocks
//! with tame scales (every code, |d| < 2: `harness::tame_blocks`). Shapes: rows 576, 1536, 7 and 40 (and 5, 3),
//! columns 576, 1536, 288 = 9 blocks (the block formats need whole blocks) and 4128 (more than
//! one staged chunk of x), plus row lengths that are not a multiple of 4 or 8 for F32/F16
//! (their element-wise path); every shape whole and split into at least three chunks (mostly
//! of odd row counts, so the 32-row interleave groups are cut short). Matmul runs 1, 3, 17 and
//! 40 tokens; embedding ids hit the first and last rows, every chunk, and repeat.
//!
//! Tolerances:
//! - matvec, matmul: the f32 summation bound of `reference_matmul`, `cols * eps * sum |w x|`.
//!   It holds because the kernels multiply the *exact* dequantized weights (scales are f16 and
//!   codes at most 8 bits, so `d * q` is exact in f32 and `d * q + m` is one rounding, the
//!   same as the CPU's; see `shaders/quant/legacy_blocks.wgsl`) by x, or the exact codes and
//!   then the exact scale d (Q4_0, Q5_0, Q8_0, IQ4_NL in the matvec: each product is then the
//!   weight's times a power of two, and |d (q - o)| = |w|), and sum the products in f32 in
//!   some order, each step rounding once: at most about `(cols + 2) * eps / 2 * sum |w x|`.
//!   The random-x checks leave that bound loose on long rows, so the matvec also runs x with
//!   one nonzero per block (`matvec_positions`), where the bound is a few ulps.
//! - matmul where prefill takes the cooperative-matrix product (a device with the extension;
//!   F16 and the block formats, rows of whole 32-value blocks): its f16 bound
//!   ([`super::coop_bound`]), and its own checks ([`super::coop_checks`]).
//! - embedding: exact (bound 0). A gather does no arithmetic beyond the decode, which is exact.

use super::harness::{
    added_to_residual, compare, coop_bound, coop_checks, gpu_err, poisoned, read_f32,
    reference_matmul, run_matmul, submit, tame_blocks, upload_f32, PerDtype, Rng, Stats,
};
use crate::embedding::EmbeddingOp;
use crate::kernels::Kernel;
use crate::matmul::{uses_coop, MatmulOp};
use crate::quant::{self, Family, GgmlType};
use crate::weights::{row_bytes, GpuWeight};
use crate::GpuContext;

/// Whether `t` is a member of this family.
fn legacy(t: GgmlType) -> bool {
    Kernel::Matvec(t).family() == Some(Family::Legacy)
}

pub const PER_DTYPE: &[PerDtype] = &[
    PerDtype {
        prefix: "legacy/matvec_",
        applies: legacy,
        run: |ctx, t| Box::pin(matvec(ctx, t)),
    },
    PerDtype {
        prefix: "legacy/matmul_",
        applies: legacy,
        run: |ctx, t| Box::pin(matmul(ctx, t)),
    },
    PerDtype {
        prefix: "legacy/embedding_",
        applies: legacy,
        run: |ctx, t| Box::pin(embedding(ctx, t)),
    },
];

/// `(rows, cols)` a check runs for `dtype`: the shared shapes, plus row lengths off the
/// vector width for the float formats (element types, not blocks).
fn shapes(dtype: GgmlType, common: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut v = common.to_vec();
    if dtype.block().is_some_and(|b| b.block_elems == 1) {
        v.extend([(7, 100), (5, 99), (3, 2100)]);
    }
    v
}

/// Random `[rows, cols]` weights in `dtype`: the bytes, and what the CPU decodes them to.
fn random_weight(
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    seed: u64,
) -> Result<(Vec<u8>, Vec<f32>), String> {
    let mut rng = Rng(seed);
    let bytes = if quant::can_quantize(dtype) {
        let values = rng.vec(rows * cols, 1.0);
        quant::quantize(dtype, &values).map_err(|e| e.to_string())?
    } else {
        tame_blocks(dtype, rows * cols, &mut rng)?
    };
    let decoded = quant::dequantize(dtype, &bytes, rows * cols).map_err(|e| e.to_string())?;
    Ok((bytes, decoded))
}

/// The weight uploaded whole, and split into at least three chunks (`rows / 3 + 1` rows each
/// where that makes three, so the last one is shorter).
fn uploads(
    ctx: &GpuContext,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    bytes: &[u8],
) -> Result<Vec<GpuWeight>, String> {
    let row = row_bytes(dtype, cols as u64).ok_or("row size")?;
    let rows_per_chunk = if (rows / 3 + 1) * 2 < rows {
        rows / 3 + 1
    } else {
        (rows / 3).max(1)
    };
    let split = rows_per_chunk as u64 * row + 16;
    let mut out = Vec::new();
    for max_chunk in [u64::MAX, split] {
        let w = ctx
            .upload_weight_split("w", dtype, rows as u32, cols as u32, bytes, max_chunk)
            .map_err(gpu_err)?;
        if max_chunk == split && rows >= 3 && w.chunks.len() < 3 {
            return Err(format!("{rows} rows split into {} chunks", w.chunks.len()));
        }
        out.push(w);
    }
    Ok(out)
}

/// Matvec (one token) through `MatmulOp`, which picks `Kernel::Matvec`.
async fn matvec(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in shapes(dtype, &[(576, 1536), (1536, 576), (7, 288), (40, 4128)]) {
        let seed = rows as u64 * 7919 + cols as u64 + u64::from(dtype.id()) * 1_000_003;
        let (bytes, w) = random_weight(dtype, rows, cols, seed)?;
        let x = Rng(seed ^ 0x5eed).vec(cols, 1.0);
        let xb = upload_f32(ctx, "x", &x)?;
        let (want, bound) = reference_matmul(&w, &x, rows, cols, 1);
        for gw in uploads(ctx, dtype, rows, cols, &bytes)? {
            let got = run_matmul(ctx, &gw, &xb, 1).await?;
            let what = format!("{rows}x{cols} in {} chunks", gw.chunks.len());
            stats.merge(compare(&what, &got, &want, &bound)?);
            // Added to a residual (MatvecAdd), at the adapter's workgroup size.
            let residual = Rng(seed ^ 0xadd).vec(rows, 4.0);
            let y = upload_f32(ctx, "residual", &residual)?;
            let op = MatmulOp::matvec_add(ctx, &gw, &xb, &y).map_err(gpu_err)?;
            submit(ctx, |pass| op.record(pass));
            let got = read_f32(ctx, &y, rows).await?;
            let (sum, sum_bound) = added_to_residual(&want, &bound, &residual);
            let what_add = format!("{what}, added to a residual");
            stats.merge(compare(&what_add, &got, &sum, &sum_bound)?);
            // Every shape of the kernel on every adapter: CPU adapters take 4 invocations
            // with 16 rows each, GPUs 256 in 8 column slices; 16 takes 16 rows each too, 32
            // is one slice of one row per invocation.
            if gw.chunks.len() == 1 {
                for wg in MATVEC_WORKGROUP_SIZES {
                    let got = run_matvec_wg(ctx, &gw, &xb, wg).await?;
                    let what = format!("{rows}x{cols}, {wg}-invocation workgroups");
                    stats.merge(compare(&what, &got, &want, &bound)?);
                }
            }
        }
    }
    stats.merge(matvec_positions(ctx, dtype).await?);
    Ok(stats)
}

/// Workgroup sizes the matvec check also runs with, whatever the adapter would pick.
const MATVEC_WORKGROUP_SIZES: [u32; 4] = [4, 16, 32, 256];

/// `Kernel::Matvec` with `wg` invocations per workgroup.
async fn run_matvec_wg(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    wg: u32,
) -> Result<Vec<f32>, String> {
    let y = poisoned(ctx, w.rows as usize)?;
    let op =
        MatmulOp::with_kernel(ctx, Kernel::Matvec(w.dtype), wg, w, x, &y, 1).map_err(gpu_err)?;
    submit(ctx, |pass| op.record(pass));
    read_f32(ctx, &y, w.rows as usize).await
}

/// Matvec with x = +-1 at one column per block (position `(p + 5 b) % 32` in block `b`, for
/// every p < 32), zero elsewhere: y is a sum of a few exact weights, so the bound is tight
/// (a few ulps) and any weight the kernel's own decode (matvec's `block_dot`) gets wrong at
/// any position of a block shows, which the loose bound of a random x over long rows could
/// hide.
async fn matvec_positions(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let (rows, cols) = (40, 288);
    let (bytes, w) = random_weight(dtype, rows, cols, 0x9051 + u64::from(dtype.id()))?;
    let weights = uploads(ctx, dtype, rows, cols, &bytes)?;
    let mut stats = Stats::default();
    for p in 0..32 {
        let mut x = vec![0.0f32; cols];
        for b in 0..cols / 32 {
            x[32 * b + (p + 5 * b) % 32] = if b % 2 == 0 { 1.0 } else { -1.0 };
        }
        let xb = upload_f32(ctx, "x", &x)?;
        let (want, bound) = reference_matmul(&w, &x, rows, cols, 1);
        for gw in &weights {
            let got = run_matmul(ctx, gw, &xb, 1).await?;
            let what = format!(
                "{rows}x{cols}, x at position {p}, {} chunks",
                gw.chunks.len()
            );
            stats.merge(compare(&what, &got, &want, &bound)?);
        }
    }
    Ok(stats)
}

/// `Kernel::Matmul` for `n_tokens` tokens, dispatched directly (`MatmulOp` would pick the
/// matvec kernel for one token; the matmul kernel must be right for any count).
async fn run_matmul_kernel(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    n_tokens: u32,
) -> Result<Vec<f32>, String> {
    let kernel = Kernel::Matmul(w.dtype);
    let wg = kernel.source().map_or(256, |s| s.default_workgroup_size);
    let n = (w.rows * n_tokens) as usize;
    let y = poisoned(ctx, n)?;
    let op = MatmulOp::with_kernel(ctx, kernel, wg, w, x, &y, n_tokens).map_err(gpu_err)?;
    submit(ctx, |pass| op.record(pass));
    read_f32(ctx, &y, n).await
}

/// Matmul for 1, 3, 17 and 40 tokens (partial token tiles, and two tiles), on row counts that
/// leave partial 64-row tiles.
async fn matmul(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in shapes(dtype, &[(576, 288), (7, 1536), (1536, 576)]) {
        let seed = rows as u64 * 104_729 + cols as u64 + u64::from(dtype.id()) * 1_000_033;
        let (bytes, w) = random_weight(dtype, rows, cols, seed)?;
        let weights = uploads(ctx, dtype, rows, cols, &bytes)?;
        // Where prefill takes the cooperative-matrix product (f16 operands), its checks and
        // bound (see the K-quant checks).
        let coop = uses_coop(ctx, dtype) && cols % 32 == 0;
        if coop {
            let mut rng = Rng(seed ^ 0xc00b);
            for gw in &weights {
                stats.merge(coop_checks(ctx, gw, &w, &mut rng).await?);
            }
        }
        // 40 tokens span two token tiles (32 tokens each with the default workgroup size).
        let tokens: &[usize] = if rows * cols <= 576 * 288 {
            &[1, 3, 17, 40]
        } else {
            &[1, 3, 17]
        };
        for &n_tokens in tokens {
            let x = Rng(seed ^ n_tokens as u64).vec(n_tokens * cols, 1.0);
            let xb = upload_f32(ctx, "x", &x)?;
            let (want, mut bound) = reference_matmul(&w, &x, rows, cols, n_tokens);
            if coop && n_tokens > 1 {
                bound = coop_bound(&w, &x, rows, cols, n_tokens, &bound);
            }
            for gw in &weights {
                let got = if n_tokens == 1 {
                    run_matmul_kernel(ctx, gw, &xb, 1).await?
                } else {
                    run_matmul(ctx, gw, &xb, n_tokens as u32).await?
                };
                let what = format!(
                    "{rows}x{cols}, {n_tokens} tokens, {} chunks",
                    gw.chunks.len()
                );
                stats.merge(compare(&what, &got, &want, &bound)?);
            }
        }
    }
    Ok(stats)
}

/// Embedding gather through `EmbeddingOp`: ids hit the first and last rows, rows in every
/// chunk, and repeat; the result must equal the CPU's decode exactly.
async fn embedding(ctx: &GpuContext, dtype: GgmlType) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in shapes(dtype, &[(300, 576), (50, 288)]) {
        let seed = rows as u64 * 15_485_863 + cols as u64 + u64::from(dtype.id());
        let (bytes, table) = random_weight(dtype, rows, cols, seed)?;
        let mut rng = Rng(seed ^ 0xe3b);
        let mut ids: Vec<u32> = vec![0, rows as u32 - 1, rows as u32 / 2, 1, rows as u32 - 1];
        ids.extend((0..6).map(|_| rng.below(rows as u64) as u32));
        let idb = ctx
            .storage_init("ids", bytemuck::cast_slice(&ids))
            .map_err(gpu_err)?;
        let want: Vec<f64> = ids
            .iter()
            .flat_map(|&id| &table[id as usize * cols..(id as usize + 1) * cols])
            .map(|&v| f64::from(v))
            .collect();
        let bound = vec![0.0; want.len()];
        for gw in uploads(ctx, dtype, rows, cols, &bytes)? {
            let out = poisoned(ctx, want.len())?;
            let op = EmbeddingOp::new(ctx, &gw, &idb, &out, ids.len() as u32).map_err(gpu_err)?;
            submit(ctx, |pass| op.record(pass));
            let got = read_f32(ctx, &out, want.len()).await?;
            let what = format!("{rows}x{cols} in {} chunks", gw.chunks.len());
            stats.merge(compare(&what, &got, &want, &bound)?);
        }
    }
    Ok(stats)
}
