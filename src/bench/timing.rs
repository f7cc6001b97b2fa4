//! Timing GPU work: timestamp queries where the device has them, wall-clock otherwise.

use std::time::Instant;

use crate::gpu::{GpuContext, GpuError};

/// How a figure was timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clock {
    /// GPU timestamp queries around the work.
    Timestamps,
    /// Host time from submit to completion (includes submission overhead).
    WallClock,
}

/// Seconds per repetition of `record`, recorded `reps` times in one compute pass (one
/// submission), after a warm-up. The best of `trials`.
pub fn time_compute(
    ctx: &GpuContext,
    reps: u32,
    trials: u32,
    record: &dyn Fn(&mut wgpu::ComputePass<'_>),
) -> Result<(f64, Clock), GpuError> {
    let query = ctx.features.timestamps.then(|| TimestampPair::new(ctx));
    best_of(ctx, query.as_ref(), reps, trials, &|enc| {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("bench"),
            timestamp_writes: query.as_ref().map(|q| wgpu::ComputePassTimestampWrites {
                query_set: &q.set,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            }),
        });
        for _ in 0..reps {
            record(&mut pass);
        }
    })
}

/// Seconds per copy of `bytes` bytes between two buffers (copies recorded `reps` times in one
/// submission), the best of `trials`.
pub fn time_copy(
    ctx: &GpuContext,
    bytes: u64,
    reps: u32,
    trials: u32,
) -> Result<(f64, Clock), GpuError> {
    let a = ctx.storage("copy.src", bytes)?;
    let b = ctx.storage("copy.dst", bytes)?;
    let inside = ctx
        .device
        .features()
        .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
    let query = inside.then(|| TimestampPair::new(ctx));
    best_of(ctx, query.as_ref(), reps, trials, &|enc| {
        if let Some(q) = &query {
            enc.write_timestamp(&q.set, 0);
        }
        for _ in 0..reps {
            enc.copy_buffer_to_buffer(&a, 0, &b, 0, bytes);
        }
        if let Some(q) = &query {
            enc.write_timestamp(&q.set, 1);
        }
    })
}

/// Encode with `encode` (which writes the timestamps when `query` is given), submit, wait, and
/// keep the best time per repetition over `trials` runs after a warm-up.
fn best_of(
    ctx: &GpuContext,
    query: Option<&TimestampPair>,
    reps: u32,
    trials: u32,
    encode: &dyn Fn(&mut wgpu::CommandEncoder),
) -> Result<(f64, Clock), GpuError> {
    // Warm up for at least 0.3 s of submissions: a GPU that sat idle while the CPU prepared
    // the next weight drops its clocks, and one short warm-up submission does not bring them
    // back (later kernels of a full run would measure several times slower).
    let warm = Instant::now();
    let mut warm_runs = 0;
    while warm_runs < 2 || (warm.elapsed().as_secs_f64() < 0.3 && warm_runs < 500) {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        encode(&mut enc);
        ctx.queue.submit([enc.finish()]);
        ctx.poll_wait();
        warm_runs += 1;
    }
    let mut best = f64::INFINITY;
    for _ in 0..trials.max(1) {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        encode(&mut enc);
        if let Some(q) = query {
            q.resolve(&mut enc);
        }
        let start = Instant::now();
        ctx.queue.submit([enc.finish()]);
        ctx.poll_wait();
        let wall = start.elapsed().as_secs_f64();
        let secs = match query {
            Some(q) => q.seconds(ctx)?,
            None => wall,
        };
        best = best.min(secs / f64::from(reps));
    }
    let clock = if query.is_some() {
        Clock::Timestamps
    } else {
        Clock::WallClock
    };
    Ok((best, clock))
}

struct TimestampPair {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
}

impl TimestampPair {
    fn new(ctx: &GpuContext) -> Self {
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bench.timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bench.timestamps.resolve"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        TimestampPair { set, resolve }
    }

    fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..2, &self.resolve, 0);
    }

    fn seconds(&self, ctx: &GpuContext) -> Result<f64, GpuError> {
        let bytes = pollster::block_on(ctx.read_bytes(&self.resolve, 0, 16))?;
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        let ticks = t[1].saturating_sub(t[0]) as f64;
        Ok(ticks * f64::from(ctx.queue.get_timestamp_period()) * 1e-9)
    }
}
