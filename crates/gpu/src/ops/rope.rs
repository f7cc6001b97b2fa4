//! Rotary position embedding on q or k in place, interleaved or NeoX pairs, with optional
//! partial rotation and Llama-3 frequency scaling (the frequencies come from the CPU
//! definition, [`RopeConfig::inv_freqs`]).

pub use super::super::kernels::params::RopeParams;
use super::{check, need, pipeline, Position};
use crate::kernels::Kernel;
use crate::matmul::{grid, Dispatch};
use crate::{GpuContext, GpuError, Pooled};
use tritium_core::ops::{RopeConfig, RopeStyle};

/// The per-pair frequencies of one RoPE configuration on the GPU, shared by every layer's q
/// and k ops.
pub struct RopeTable {
    pub config: RopeConfig,
    /// `rot_dim / 2` pairs of u32: `inv_freq / 2pi` as a 64-bit binary fraction, high word
    /// first (rope.wgsl forms `position * inv_freq` exactly from it).
    pub buffer: wgpu::Buffer,
}

impl RopeTable {
    pub fn new(ctx: &GpuContext, config: &RopeConfig) -> Result<Self, GpuError> {
        check(
            config.rot_dim >= 2 && config.rot_dim % 2 == 0 && config.rot_dim <= config.head_dim,
            || {
                format!(
                    "RoPE over {} of {} dimensions (must be even, 2 ..= head_dim)",
                    config.rot_dim, config.head_dim
                )
            },
        )?;
        let words: Vec<u32> = config
            .inv_freqs()
            .into_iter()
            .flat_map(|f| {
                let [hi, lo] = turns_fraction(f);
                [hi, lo]
            })
            .collect();
        let buffer = ctx.storage_init("rope.freqs", bytemuck::cast_slice(&words))?;
        Ok(RopeTable {
            config: config.clone(),
            buffer,
        })
    }
}

/// `inv_freq / 2pi` (turns per position, in [0, 1) for any real RoPE) as a 64-bit binary
/// fraction `[hi, lo]`, truncated.
pub fn turns_fraction(inv_freq: f64) -> [u32; 2] {
    let t = (inv_freq / std::f64::consts::TAU).fract().max(0.0);
    let hi = (t * 4_294_967_296.0).floor();
    let lo = ((t * 4_294_967_296.0 - hi) * 4_294_967_296.0).floor();
    [hi as u32, lo as u32]
}

/// Rotate `x: (n_tokens, n_heads, head_dim)` in place; token `t` at `position + t`.
pub struct RopeOp {
    dispatch: Dispatch,
    _params: Pooled,
}

impl RopeOp {
    pub fn new(
        ctx: &GpuContext,
        table: &RopeTable,
        x: &wgpu::Buffer,
        position: &Position,
        n_tokens: u32,
        n_heads: u32,
    ) -> Result<Self, GpuError> {
        let cfg = &table.config;
        let head_dim = cfg.head_dim as u32;
        need(
            "rope x",
            x,
            u64::from(n_tokens) * u64::from(n_heads) * u64::from(head_dim) * 4,
        )?;
        let (pipeline, wg) = pipeline(ctx, Kernel::Rope)?;
        let params = ctx.uniform(
            "rope.params",
            &RopeParams {
                n_tokens,
                n_heads,
                head_dim,
                rot_dim: cfg.rot_dim as u32,
                neox: u32::from(cfg.style == RopeStyle::NeoX),
                ..Default::default()
            },
        );
        let bind_group = ctx.bind(&pipeline, &[&params, &position.buffer, x, &table.buffer]);
        let threads = n_tokens * n_heads * (cfg.rot_dim as u32 / 2);
        Ok(RopeOp {
            dispatch: Dispatch {
                pipeline,
                bind_group,
                workgroups: grid(
                    threads.div_ceil(wg),
                    ctx.limits.max_compute_workgroups_per_dimension,
                ),
            },
            _params: params,
        })
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch.record(pass);
    }
}

#[cfg(test)]
mod tests {
    use super::turns_fraction;

    #[test]
    fn turns_as_a_binary_fraction() {
        // inv_freq = pi: half a turn.
        assert_eq!(turns_fraction(std::f64::consts::PI), [0x8000_0000, 0]);
        // inv_freq = 1 rad: 1 / 2pi = 0.15915494309189535 turns.
        let [hi, lo] = turns_fraction(1.0);
        let back = f64::from(hi) / 4_294_967_296.0 + f64::from(lo) / 4_294_967_296.0f64.powi(2);
        assert!((back - 1.0 / std::f64::consts::TAU).abs() < 1e-17);
    }
}
