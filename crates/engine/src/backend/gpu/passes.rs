//! Running a plan: a pass is recorded from its tape into command buffers with the copy of
//! what it reads back, submitted, and read back.
//!
//! A one-token pass is encoded whole when it is recorded, so that it can be submitted the
//! moment its token is known (sampled decoding records pass `t + 1` while pass `t` runs). A
//! pass of several tokens is encoded when it is submitted, in parts of 8, 8, 16, 32, ...
//! steps, each submitted as soon as it is encoded, so the device starts on a prefill's first
//! layers while the host encodes the rest; the queue keeps the parts in order and the
//! uniforms the pass reads (position, token ids) are written before the first, so the pass
//! computes the same as in one submission.

use web_time::Instant;

use super::plan::GpuPlan;
use super::tape::TapeKey;
use super::GpuBackend;
use crate::backend::{Batch, Logits, Readback, Tokens};
use crate::error::BatchError;
use crate::gpu::GpuError;
use crate::Error;

/// What a pass reads back: the staging buffer, the bytes, and the readback.
type Read = Option<(crate::gpu::Pooled, u64)>;

/// A recorded pass (dropped unsubmitted, it never runs and its readback buffer goes back to
/// the pool).
pub enum GpuRecorded {
    /// Encoded whole.
    Encoded {
        commands: wgpu::CommandBuffer,
        read: Read,
        readback: Option<Readback>,
        tokens: usize,
    },
    /// Several tokens, encoded in parts when submitted.
    Parts {
        key: TapeKey,
        tokens: usize,
        readback: Option<(crate::backend::Tensor, usize, usize, Readback)>,
    },
}

/// A submitted pass: what to wait for and where its readback lands.
pub struct GpuPending {
    submission: wgpu::SubmissionIndex,
    read: Read,
    readback: Option<Readback>,
}

impl GpuBackend {
    /// Record `plan` for `batch` (one span: the wgpu backend runs one sequence per pass).
    pub(super) fn record_pass(
        &mut self,
        plan: &GpuPlan,
        batch: &Batch,
    ) -> Result<GpuRecorded, Error> {
        crate::backend::check_batch(batch, self.max_batch, self.kv.as_ref())?;
        let [span] = batch.spans[..] else {
            return Err(GpuError::Unsupported(format!(
                "a pass over {} sequences (the wgpu backend runs one sequence per pass)",
                batch.spans.len()
            ))
            .into());
        };
        if plan.tokens != span.len {
            return Err(GpuError::Validation(format!(
                "a plan for {} tokens recorded for {}",
                plan.tokens, span.len
            ))
            .into());
        }
        // Written when the next submission starts: this pass's.
        self.position.set(&self.ctx, span.pos0 as u32);
        let key = self.tape(plan, span.seq)?;
        if plan.tokens > 1 && self.submit_in_parts && self.profiler.is_none() {
            return Ok(GpuRecorded::Parts {
                key,
                tokens: plan.tokens,
                readback: plan.read,
            });
        }
        let started = Instant::now();
        let mut encoder = self.encoder("forward");
        let mut profiler = self.profiler.take();
        if let Some(p) = profiler.as_mut() {
            p.begin();
        }
        let steps = self.tapes.get(&key).map_or(0, |t| t.steps.len());
        self.encode(key, 0..steps, &mut encoder, profiler.as_mut());
        self.profiler = profiler;
        let read = self.encode_read(&mut encoder, plan.read)?;
        let commands = encoder.finish();
        self.timings.record_s += started.elapsed().as_secs_f64();
        Ok(GpuRecorded::Encoded {
            commands,
            read,
            readback: plan.read.map(|r| r.3),
            tokens: plan.tokens,
        })
    }

    fn encoder(&self, label: &str) -> wgpu::CommandEncoder {
        self.ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    /// The copies of what the pass reads back (and, for a top-k, of the best id of the last
    /// row into the token ids, the token of a chained pass after it).
    fn encode_read(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        read: Option<(crate::backend::Tensor, usize, usize, Readback)>,
    ) -> Result<Read, Error> {
        let Some((logits, rows, vocab, what)) = read else {
            return Ok(None);
        };
        let row_bytes = vocab as u64 * 4;
        let (buffer, offset, bytes) = match what {
            Readback::All | Readback::Last => {
                (self.buf(logits).clone(), 0, rows as u64 * row_bytes)
            }
            Readback::TopK(k) => {
                let k = k.max(1) as u64;
                let top = self.top_buffer(rows * k as usize)?;
                encoder.copy_buffer_to_buffer(&top, (rows as u64 - 1) * k * 8, &self.ids, 0, 4);
                (top, 0, rows as u64 * k * 8)
            }
            Readback::Nothing => return Ok(None),
        };
        // From the context's pool; a pass dropped without a wait returns it there.
        let staging = self.ctx.staging(bytes);
        encoder.copy_buffer_to_buffer(&buffer, offset, &staging, 0, bytes.next_multiple_of(4));
        Ok(Some((staging, bytes)))
    }

    /// Submit a recorded pass with its tokens.
    pub(super) fn submit_pass(
        &mut self,
        pass: GpuRecorded,
        tokens: Tokens<'_>,
    ) -> Result<GpuPending, Error> {
        let n = match &pass {
            GpuRecorded::Encoded { tokens, .. } | GpuRecorded::Parts { tokens, .. } => *tokens,
        };
        match tokens {
            Tokens::Ids(ids) if ids.len() == n => self.ctx.write(&self.ids, 0, ids),
            Tokens::Ids(ids) => {
                return Err(BatchError::TokenCount {
                    ids: ids.len(),
                    tokens: n,
                }
                .into())
            }
            // The best id of the last pass that read back its top-k is in `ids` already.
            Tokens::Chained if n == 1 && self.chain_ready => self.timings.chained += 1,
            Tokens::Chained => return Err(BatchError::ChainWithoutTopK.into()),
        }
        let (commands, read, readback) = match pass {
            GpuRecorded::Encoded {
                commands,
                read,
                readback,
                ..
            } => (commands, read, readback),
            GpuRecorded::Parts { key, readback, .. } => {
                let (last, read) = self.submit_parts(key, readback)?;
                (last, read, readback.map(|r| r.3))
            }
        };
        let started = Instant::now();
        let submission = self.ctx.queue.submit([commands]);
        self.timings.passes += 1;
        self.timings.submit_s += started.elapsed().as_secs_f64();
        self.chain_ready = matches!(readback, Some(Readback::TopK(_)));
        Ok(GpuPending {
            submission,
            read,
            readback,
        })
    }

    /// Encode and submit a pass of several tokens in parts as they are encoded; the last
    /// part, with the readback, is returned to be submitted.
    fn submit_parts(
        &mut self,
        key: TapeKey,
        read: Option<(crate::backend::Tensor, usize, usize, Readback)>,
    ) -> Result<(wgpu::CommandBuffer, Read), Error> {
        const FIRST_PART: usize = 8;
        let steps = self.tapes.get(&key).map_or(0, |t| t.steps.len());
        let mut submitted = 0;
        for cursor in 1..=steps {
            if cursor - submitted < FIRST_PART.max(submitted) {
                continue;
            }
            let started = Instant::now();
            let mut encoder = self.encoder("forward part");
            self.encode(key, submitted..cursor, &mut encoder, None);
            let commands = encoder.finish();
            let encoded = Instant::now();
            self.ctx.queue.submit([commands]);
            submitted = cursor;
            self.timings.parts += 1;
            self.timings.record_s += (encoded - started).as_secs_f64();
            self.timings.submit_s += encoded.elapsed().as_secs_f64();
        }
        let started = Instant::now();
        let mut encoder = self.encoder("forward");
        self.encode(key, submitted..steps, &mut encoder, None);
        let read = self.encode_read(&mut encoder, read)?;
        let commands = encoder.finish();
        self.timings.record_s += started.elapsed().as_secs_f64();
        Ok((commands, read))
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
            Some(Readback::TopK(k)) => Logits::Top(
                data.chunks(k.max(1) * 8)
                    .map(|row| {
                        row.chunks_exact(8)
                            .map(|c| {
                                let id = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                                let v = f32::from_le_bytes([c[4], c[5], c[6], c[7]]);
                                (id, v)
                            })
                            .filter(|&(id, _)| id != u32::MAX)
                            .collect()
                    })
                    .collect(),
            ),
            _ => Logits::Full(bytemuck::pod_collect_to_vec(&data)),
        })
    }
}
