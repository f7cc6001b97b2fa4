//! GPU time per op, for `tritium bench generate --profile`: every op of a pass runs in its own
//! compute pass with timestamp queries at its start and end (which costs some speed itself, so
//! profiled runs are separate from the timed ones), and the durations add up per label.

use std::collections::BTreeMap;

use crate::gpu::{GpuContext, GpuError};

/// Most timed ops per pass (two queries each).
pub const MAX_TIMED_OPS: u32 = 2048;

/// Timestamp queries and the per-label totals.
pub struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    /// Labels of the ops timed in the last encoded pass, in query order.
    labels: Vec<String>,
    totals: BTreeMap<String, OpTime>,
}

/// Total GPU time of one label.
#[derive(Copy, Clone, Debug, Default, serde::Serialize)]
pub struct OpTime {
    pub calls: u64,
    pub seconds: f64,
}

impl Profiler {
    /// `None` where the device has no timestamp queries.
    pub fn new(ctx: &GpuContext) -> Option<Profiler> {
        if !ctx.features.timestamps {
            return None;
        }
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile.timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * MAX_TIMED_OPS,
        });
        let resolve = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile.resolve"),
            size: 16 * u64::from(MAX_TIMED_OPS),
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        ctx.keep(&resolve);
        Some(Profiler {
            set,
            resolve,
            labels: Vec::new(),
            totals: BTreeMap::new(),
        })
    }

    /// Start encoding a pass.
    pub fn begin(&mut self) {
        self.labels.clear();
    }

    /// Timestamp writes around the next op, or `None` when the query set is full.
    pub fn next(&mut self, label: String) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let i = self.labels.len() as u32;
        if i >= MAX_TIMED_OPS {
            return None;
        }
        self.labels.push(label);
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        })
    }

    /// Resolve this pass's queries (after its ops, in the same encoder).
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let n = 2 * self.labels.len() as u32;
        if n > 0 {
            encoder.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
        }
    }

    /// Read the resolved queries (after the pass was submitted) and add them to the totals.
    pub async fn collect(&mut self, ctx: &GpuContext) -> Result<(), GpuError> {
        let n = self.labels.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let bytes = ctx.read_bytes(&self.resolve, 0, 16 * n).await?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        let period = f64::from(ctx.queue.get_timestamp_period()) * 1e-9;
        for (label, t) in self.labels.drain(..).zip(ticks.chunks_exact(2)) {
            let e = self.totals.entry(label).or_default();
            e.calls += 1;
            e.seconds += t[1].saturating_sub(t[0]) as f64 * period;
        }
        Ok(())
    }

    /// Forget the totals (after a warm-up).
    pub fn clear(&mut self) {
        self.totals.clear();
    }

    /// The totals, largest first.
    pub fn totals(&self) -> Vec<(String, OpTime)> {
        let mut v: Vec<_> = self.totals.iter().map(|(k, t)| (k.clone(), *t)).collect();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        v
    }
}
