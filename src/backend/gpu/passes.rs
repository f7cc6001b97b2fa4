//! Passes of the GPU backend once recorded: encoded into one command buffer with the copy of
//! what the caller reads back ([`GpuBackend::encode_pass`]), submitted, and read back.

use web_time::Instant;

use super::{GpuBackend, Key, Step};
use crate::backend::{Logits, Readback, Tensor};
use crate::gpu::ops::TopKOp;
use crate::gpu::GpuError;
use crate::Error;

/// A submitted pass: what to wait for and where its readback lands (a pass dropped without a
/// wait frees its readback buffer).
pub struct GpuPending {
    pub(super) submission: wgpu::SubmissionIndex,
    pub(super) read: Option<(crate::gpu::Pooled, u64)>,
    pub(super) readback: Readback,
}

/// A pass recorded and encoded, not submitted yet (a prepared pass waits for its token:
/// [`crate::backend::Backend::submit_prepared`]).
pub struct GpuPrepared {
    pub(super) commands: wgpu::CommandBuffer,
    pub(super) read: Option<(crate::gpu::Pooled, u64)>,
    pub(super) readback: Readback,
}

impl GpuBackend {
    /// The pass recorded so far, with the copy of what `readback` asks for from `logits:
    /// (rows, vocab)`, as one command buffer (not submitted), and what to read back.
    pub(super) fn encode_pass(
        &mut self,
        logits: Tensor,
        rows: usize,
        vocab: usize,
        readback: Readback,
    ) -> Result<GpuPrepared, Error> {
        let started = Instant::now();
        self.flush_pending()?;
        let row_bytes = vocab as u64 * 4;
        // What to copy back: (source buffer, offset, bytes).
        let source = match readback {
            Readback::All => Some((self.buf(logits).clone(), 0, rows as u64 * row_bytes)),
            Readback::Last => Some((
                self.buf(logits).clone(),
                (rows as u64 - 1) * row_bytes,
                row_bytes,
            )),
            Readback::TopK(k) => {
                let k = k.max(1);
                let top = self.top_buffer(rows * k)?;
                let t = top.clone();
                self.step(Key::TopK(logits, rows, vocab, k), move |s| {
                    Ok(Step::TopK(TopKOp::new(
                        &s.ctx,
                        s.buf(logits),
                        &t,
                        rows as u32,
                        vocab as u32,
                        k as u32,
                    )?))
                })?;
                Some((top, (rows as u64 - 1) * k as u64 * 8, k as u64 * 8))
            }
            Readback::Nothing => None,
        };
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("forward"),
            });
        let mut profiler = self.profiler.take();
        if let Some(p) = profiler.as_mut() {
            p.begin();
        }
        self.encode(&mut encoder, profiler.as_mut());
        self.profiler = profiler;
        let read = match source {
            Some((buffer, offset, bytes)) => {
                if matches!(readback, Readback::TopK(_)) {
                    // The best id of the last row becomes the token of a chained pass.
                    encoder.copy_buffer_to_buffer(&buffer, offset, &self.ids, 0, 4);
                }
                // From the context's pool; a pass dropped without a wait returns it there.
                let staging = self.ctx.staging(bytes);
                encoder.copy_buffer_to_buffer(
                    &buffer,
                    offset,
                    &staging,
                    0,
                    bytes.next_multiple_of(4),
                );
                Some((staging, bytes))
            }
            None => None,
        };
        self.chain_ready = matches!(readback, Readback::TopK(_));
        let commands = encoder.finish();
        self.timings.record_s += started.elapsed().as_secs_f64();
        Ok(GpuPrepared {
            commands,
            read,
            readback,
        })
    }

    /// Submit an encoded pass.
    pub(super) fn submit_encoded(&mut self, pass: GpuPrepared) -> GpuPending {
        let started = Instant::now();
        let submission = self.ctx.queue.submit([pass.commands]);
        self.timings.passes += 1;
        self.timings.submit_s += started.elapsed().as_secs_f64();
        GpuPending {
            submission,
            read: pass.read,
            readback: pass.readback,
        }
    }

    /// What a submitted pass read back, once the device is done with it.
    pub(super) async fn read_pass(&mut self, pending: GpuPending) -> Result<Logits, Error> {
        let GpuPending {
            submission,
            read,
            readback,
        } = pending;
        let started = Instant::now();
        if let Some(p) = self.profiler.as_mut() {
            self.ctx.poll_until(submission.clone());
            p.collect(&self.ctx).await?;
        }
        let Some((staging, bytes)) = read else {
            return Ok(Logits::None);
        };
        let (tx, rx) = futures_channel::oneshot::channel();
        staging
            .slice(..bytes)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        self.ctx.poll_until(submission);
        let mapped = rx
            .await
            .map_err(|_| GpuError::Readback("the map callback was dropped".into()))
            .and_then(|r| r.map_err(|e| GpuError::Readback(e.to_string())));
        let data = mapped.and_then(|()| {
            let view = staging
                .slice(..bytes)
                .get_mapped_range()
                .map_err(|e| GpuError::Readback(e.to_string()))?;
            Ok(view.to_vec())
        });
        staging.unmap();
        drop(staging); // back to the pool
        self.timings.wait_s += started.elapsed().as_secs_f64();
        let data = data?;
        Ok(match readback {
            Readback::TopK(_) => Logits::Top(
                data.chunks_exact(8)
                    .map(|c| {
                        let id = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        let v = f32::from_le_bytes([c[4], c[5], c[6], c[7]]);
                        (id, v)
                    })
                    .filter(|&(id, _)| id != u32::MAX)
                    .collect(),
            ),
            _ => Logits::Full(bytemuck::pod_collect_to_vec(&data)),
        })
    }
}
