//! Matrix-vector and matrix-matrix kernels against the CPU reference on seeded random inputs,
//! on every kernel variant the device has (f16/subgroups and plain f32), with weights split
//! across several bindings.

#[path = "gpu/common.rs"]
mod common;

use common::*;
use tritium::quant::GgmlType;

/// F32 weights: the bound is the f32 summation bound k * eps * sum |w x| (any order).
#[test]
fn matvec_f32_odd_sizes_and_split() {
    for ctx in contexts() {
        for (rows, cols) in [(576usize, 1536usize), (7, 100), (1536, 576)] {
            let mut rng = Rng(rows as u64 * 31 + cols as u64);
            let w = rng.vec(rows * cols, 1.0);
            let x = rng.vec(cols, 1.0);
            let bytes: Vec<u8> = bytemuck::cast_slice(&w).to_vec();
            let xb = ctx.storage_init("x", bytemuck::cast_slice(&x)).unwrap();
            let (want, bound) = reference_matmul(&w, &x, rows, cols, 1);
            // Whole, then split into chunks of at most ~rows/3 rows.
            for max_chunk in [u64::MAX, (rows as u64 / 3 + 1) * cols as u64 * 4] {
                let gw = ctx
                    .upload_weight_split(
                        "w",
                        GgmlType::F32,
                        rows as u32,
                        cols as u32,
                        &bytes,
                        max_chunk,
                    )
                    .unwrap();
                assert!(max_chunk == u64::MAX || gw.chunks.len() >= 3 || rows < 3);
                let got = run_matmul(ctx, &gw, &xb, 1);
                assert_close(
                    &format!("f32 {rows}x{cols} chunks {}", gw.chunks.len()),
                    &got,
                    &want,
                    &bound,
                );
            }
        }
    }
}
