//! Argmax and top-k over rows of logits, reduced in levels (select_common.wgsl): each
//! workgroup keeps the best k of its chunk, the next level the best k of those, until one
//! workgroup per row is left.

pub use super::super::kernels::params::SelectParams;
use super::{check, need, pipeline};
use crate::kernels::Kernel;
use crate::matmul::Dispatch;
use crate::{GpuContext, GpuError, Pooled};

/// Candidates one argmax workgroup scans (a tuning value: more workgroups in the first level
/// against a longer second level).
const ARGMAX_CHUNK: u32 = 2048;
/// Candidates one top-k workgroup sorts (the size of its workgroup arrays in top_k.wgsl).
const TOP_K_CHUNK: u32 = 1024;
/// The largest k.
pub const MAX_TOP_K: u32 = 64;

/// One level: candidates per row in, workgroups per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub n_in: u32,
    pub workgroups: u32,
}

/// The levels that reduce `cols` candidates to `k`, `chunk` per workgroup.
pub fn levels(cols: u32, chunk: u32, k: u32) -> Vec<Level> {
    let mut out = Vec::new();
    let mut n_in = cols;
    loop {
        let workgroups = n_in.div_ceil(chunk).max(1);
        out.push(Level { n_in, workgroups });
        if workgroups == 1 {
            return out;
        }
        n_in = workgroups * k;
    }
}

/// The dispatches of a levelled reduction. Level `l` writes scratch `l % 2`, the last level
/// `out`.
fn build(
    ctx: &GpuContext,
    kernel: Kernel,
    logits: &wgpu::Buffer,
    out: &wgpu::Buffer,
    shape: (u32, u32),
    (chunk, k, index_only): (u32, u32, bool),
) -> Result<(Vec<Dispatch>, Vec<Pooled>), GpuError> {
    let (n_rows, cols) = shape;
    check(n_rows > 0 && cols > 0, || {
        format!("{} over an empty row", kernel.label())
    })?;
    check(
        n_rows <= ctx.limits.max_compute_workgroups_per_dimension,
        || format!("{} over {n_rows} rows", kernel.label()),
    )?;
    need(
        &kernel.label(),
        logits,
        u64::from(n_rows) * u64::from(cols) * 4,
    )?;
    let (pipeline, _) = pipeline(ctx, kernel)?;
    let plan = levels(cols, chunk, k);
    let scratch_pairs = u64::from(n_rows) * u64::from(plan[0].workgroups) * u64::from(k);
    let scratch = if plan.len() > 1 {
        vec![
            ctx.scratch("select.scratch0", scratch_pairs * 8)?,
            ctx.scratch("select.scratch1", scratch_pairs * 8)?,
        ]
    } else {
        Vec::new()
    };
    let mut dispatches = Vec::new();
    let mut buffers = Vec::new();
    for (l, level) in plan.iter().enumerate() {
        let last = l + 1 == plan.len();
        let params = SelectParams {
            n_rows,
            n_in: level.n_in,
            chunk,
            k,
            level: l as u32,
            last: u32::from(last && index_only),
            pad0: 0,
            pad1: 0,
        };
        let u = ctx.uniform("select.params", &params);
        let dst = if last { out } else { &scratch[l % 2] };
        // Level 0 reads no pairs: bind the logits there too (both read-only).
        let src = if l == 0 {
            logits
        } else {
            &scratch[(l - 1) % 2]
        };
        let bind_group = ctx.bind(&pipeline, &[&u, logits, dst, src]);
        dispatches.push(Dispatch {
            pipeline: pipeline.clone(),
            bind_group,
            workgroups: [level.workgroups, n_rows, 1],
        });
        buffers.push(u);
    }
    buffers.extend(scratch);
    Ok((dispatches, buffers))
}

/// `out[r]` = index of the largest of `logits[r, :]` (ties: lowest index; NaN never wins;
/// `u32::MAX` when the row holds no number).
pub struct ArgmaxOp {
    dispatches: Vec<Dispatch>,
    _buffers: Vec<Pooled>,
}

impl ArgmaxOp {
    /// `logits`: `(n_rows, cols)` f32; `out`: `n_rows` u32.
    pub fn new(
        ctx: &GpuContext,
        logits: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_rows: u32,
        cols: u32,
    ) -> Result<Self, GpuError> {
        need("argmax out", out, u64::from(n_rows) * 4)?;
        let (dispatches, buffers) = build(
            ctx,
            Kernel::Argmax,
            logits,
            out,
            (n_rows, cols),
            (ARGMAX_CHUNK, 1, true),
        )?;
        Ok(ArgmaxOp {
            dispatches,
            _buffers: buffers,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.dispatches {
            d.record(pass);
        }
    }
}

/// `out[r, j]` = the j-th best `(index u32, value f32)` of `logits[r, :]`: descending value,
/// ties by lower index, NaN after every number; slots beyond `cols` hold
/// `(u32::MAX, NaN)`.
pub struct TopKOp {
    dispatches: Vec<Dispatch>,
    _buffers: Vec<Pooled>,
}

impl TopKOp {
    /// `logits`: `(n_rows, cols)` f32; `out`: `(n_rows, k)` pairs of u32 (8 bytes each).
    pub fn new(
        ctx: &GpuContext,
        logits: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_rows: u32,
        cols: u32,
        k: u32,
    ) -> Result<Self, GpuError> {
        check((1..=MAX_TOP_K).contains(&k), || {
            format!("top-k with k = {k} (1 ..= {MAX_TOP_K})")
        })?;
        need("top_k out", out, u64::from(n_rows) * u64::from(k) * 8)?;
        // k = 1 (greedy decoding) takes the argmax reduction, which writes the same pairs at
        // its last level: a strided scan and one tree per workgroup instead of a bitonic sort
        // of every chunk (the same order: select_common.wgsl's `before`).
        let (kernel, chunk) = match k {
            1 => (Kernel::Argmax, ARGMAX_CHUNK),
            _ => (Kernel::TopK, TOP_K_CHUNK),
        };
        let (dispatches, buffers) =
            build(ctx, kernel, logits, out, (n_rows, cols), (chunk, k, false))?;
        Ok(TopKOp {
            dispatches,
            _buffers: buffers,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.dispatches {
            d.record(pass);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_shrink_to_one_workgroup() {
        let l = levels(128_256, TOP_K_CHUNK, 64);
        let n: Vec<(u32, u32)> = l.iter().map(|l| (l.n_in, l.workgroups)).collect();
        assert_eq!(n, vec![(128_256, 126), (8064, 8), (512, 1)]);
        let l = levels(128_256, ARGMAX_CHUNK, 1);
        assert_eq!(l.len(), 2);
        assert_eq!(
            l[1],
            Level {
                n_in: 63,
                workgroups: 1
            }
        );
        assert_eq!(levels(7, TOP_K_CHUNK, 64).len(), 1);
    }
}
