//! Checks of the legacy family (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).

use super::{compare, reference_matmul, run_matmul, upload_f32, Check, Rng, Stats};
use crate::gpu::GpuContext;
use crate::quant::GgmlType;

pub const CHECKS: &[Check] = &[Check {
    name: "legacy/matvec_f32",
    run: |ctx| Box::pin(matvec_f32(ctx)),
}];

/// F32 weights, odd shapes, whole and split into at least three chunks. Bound: the f32
/// summation bound `cols * eps * sum |w x|`, valid for any summation order.
async fn matvec_f32(ctx: &GpuContext) -> Result<Stats, String> {
    let mut stats = Stats::default();
    for (rows, cols) in [(576usize, 1536usize), (7, 100), (1536, 576)] {
        let mut rng = Rng(rows as u64 * 31 + cols as u64);
        let w = rng.vec(rows * cols, 1.0);
        let x = rng.vec(cols, 1.0);
        let xb = upload_f32(ctx, "x", &x)?;
        let (want, bound) = reference_matmul(&w, &x, rows, cols, 1);
        for max_chunk in [u64::MAX, (rows as u64 / 3 + 1) * cols as u64 * 4] {
            let gw = ctx
                .upload_weight_split(
                    "w",
                    GgmlType::F32,
                    rows as u32,
                    cols as u32,
                    bytemuck::cast_slice(&w),
                    max_chunk,
                )
                .map_err(|e| e.to_string())?;
            let got = run_matmul(ctx, &gw, &xb, 1).await?;
            stats.merge(compare(
                &format!("{rows}x{cols} in {} chunks", gw.chunks.len()),
                &got,
                &want,
                &bound,
            )?);
        }
    }
    Ok(stats)
}
