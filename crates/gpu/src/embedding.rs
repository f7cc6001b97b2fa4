//! Embedding gather: rows of a (possibly quantized, possibly split) table picked by token id.
//! One dispatch per chunk; each workgroup handles one token and writes only when the token's
//! row lies in that chunk, so a table split across bindings needs no CPU-side routing (the ids
//! may come from the GPU's own sampling).

use std::sync::Arc;

pub use super::kernels::params::EmbeddingParams;
use super::kernels::Kernel;
use super::matmul::{grid, Dispatch};
use super::weights::GpuWeight;
use super::{GpuContext, GpuError, Pooled};

/// `out[t, :] = table[ids[t], :]` as f32, built once and recorded every forward pass.
pub struct EmbeddingOp {
    pub dispatches: Vec<Dispatch>,
    _uniforms: Vec<Pooled>,
}

impl EmbeddingOp {
    /// `ids`: `n_tokens` u32 token ids; `out`: `n_tokens * table.cols` f32.
    pub fn new(
        ctx: &GpuContext,
        table: &GpuWeight,
        ids: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_tokens: u32,
    ) -> Result<Self, GpuError> {
        let pipeline: Arc<wgpu::ComputePipeline> =
            ctx.kernel(Kernel::Embedding(table.dtype), None)?;
        let mut dispatches = Vec::new();
        let mut uniforms = Vec::new();
        for chunk in &table.chunks {
            let params = EmbeddingParams {
                n_tokens,
                cols: table.cols,
                rows: chunk.rows,
                row_offset: chunk.first_row,
            };
            let u = ctx.uniform(&format!("{}.embedding", table.name), &params);
            let mut buffers: Vec<&wgpu::Buffer> = vec![&u, ids, out];
            buffers.extend(chunk.planes.iter());
            dispatches.push(Dispatch {
                pipeline: pipeline.clone(),
                bind_group: ctx.bind(&pipeline, &buffers),
                workgroups: grid(n_tokens, ctx.limits.max_compute_workgroups_per_dimension),
            });
            uniforms.push(u);
        }
        Ok(EmbeddingOp {
            dispatches,
            _uniforms: uniforms,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.dispatches {
            d.record(pass);
        }
    }
}
