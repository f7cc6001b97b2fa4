//! The tape of a plan: its steps built once (uniforms and bind groups over the pass's
//! buffers), kept per plan and sequence, and recorded into a command encoder for every pass
//! that runs the plan ([`GpuBackend::encode`]: one compute pass per run of steps between
//! buffer copies, or one per step with timestamps while profiling).

use std::ops::Range;

use super::plan::{GpuOp, GpuPlan};
use super::GpuBackend;
use crate::backend::profile::Profiler;
use crate::backend::Tensor;
use crate::gpu::bitlinear::{
    BitLinearOp, NormBitLinearOp, QuantizeActivationsOp, RmsNormQuantizeOp,
};
use crate::gpu::embedding::EmbeddingOp;
use crate::gpu::matmul::MatmulOp;
use crate::gpu::ops::{AttentionOp, ElementwiseOp, RmsNormOp, RopeOp, TopKOp};
use crate::gpu::q8::{QuantizeQ8Op, RmsNormQuantizeQ8Op};
use crate::Error;

pub(super) enum Step {
    Embed(EmbeddingOp),
    RmsNorm(RmsNormOp),
    Matmul(MatmulOp),
    BitLinear(Box<BitLinearOp>),
    Quantize(QuantizeActivationsOp),
    RmsNormQuantize(RmsNormQuantizeOp),
    NormBitLinear(NormBitLinearOp),
    QuantizeQ8(QuantizeQ8Op),
    RmsNormQuantizeQ8(RmsNormQuantizeQ8Op),
    Rope(RopeOp),
    Attention(AttentionOp),
    Elementwise(ElementwiseOp),
    TopK(TopKOp),
    /// A buffer copy (between compute passes).
    Copy {
        src: Tensor,
        src_offset: u64,
        dst: Tensor,
        dst_offset: u64,
        bytes: u64,
    },
}

impl Step {
    fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        match self {
            Step::Embed(op) => op.record(pass),
            Step::RmsNorm(op) => op.record(pass),
            Step::Matmul(op) => op.record(pass),
            Step::BitLinear(op) => op.record(pass),
            Step::Quantize(op) => op.record(pass),
            Step::RmsNormQuantize(op) => op.record(pass),
            Step::NormBitLinear(op) => op.record(pass),
            Step::QuantizeQ8(op) => op.record(pass),
            Step::RmsNormQuantizeQ8(op) => op.record(pass),
            Step::Rope(op) => op.record(pass),
            Step::Attention(op) => op.record(pass),
            Step::Elementwise(op) => op.record(pass),
            Step::TopK(op) => op.record(pass),
            Step::Copy { .. } => {}
        }
    }
}

/// A plan's steps for one sequence.
pub(super) struct Tape {
    pub(super) ops: Vec<GpuOp>,
    pub(super) steps: Vec<Step>,
    pub(super) tokens: usize,
    /// The backend's `tape_clock` when a pass last used it.
    pub(super) last_used: u64,
}

/// A tape's key: the plan's id and the sequence whose cache it binds.
pub(super) type TapeKey = (u64, usize);

/// Most tapes kept: decode, full prefill batches and the last, shorter batches of recent
/// prompts, a few readbacks. Beyond it the least recently used tape is dropped, and its ops'
/// uniforms and scratch buffers go back to the context's buffer pool for the next tape.
pub(super) const MAX_TAPES: usize = 6;

impl GpuBackend {
    /// The tape of `plan` for sequence `seq`, built now if it is not kept.
    pub(super) fn tape(&mut self, plan: &GpuPlan, seq: usize) -> Result<TapeKey, Error> {
        let key = (plan.id, seq);
        self.tape_clock += 1;
        if let Some(t) = self.tapes.get_mut(&key) {
            t.last_used = self.tape_clock;
            return Ok(key);
        }
        self.evict_tapes(MAX_TAPES - 1);
        let steps = self.build_tape(plan, seq)?;
        self.tapes.insert(
            key,
            Tape {
                ops: plan.ops.clone(),
                steps,
                tokens: plan.tokens,
                last_used: self.tape_clock,
            },
        );
        Ok(key)
    }

    /// Drop the least recently used tapes until at most `keep` remain.
    fn evict_tapes(&mut self, keep: usize) {
        while self.tapes.len() > keep {
            let oldest = self
                .tapes
                .iter()
                .min_by_key(|(_, t)| t.last_used)
                .map(|(k, _)| *k);
            match oldest {
                Some(k) => {
                    self.tapes.remove(&k);
                }
                None => break,
            }
        }
    }

    /// The most recently used tape, step by step: each op with its arguments (buffer and
    /// weight handles) and its label, for comparing what two builds record.
    pub fn tape_dump(&self) -> Vec<String> {
        self.tapes
            .values()
            .max_by_key(|t| t.last_used)
            .map(|t| {
                t.ops
                    .iter()
                    .map(|op| format!("{op:?} | {}", self.label(op, t.tokens)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many tapes the backend holds.
    pub fn tapes(&self) -> usize {
        self.tapes.len()
    }

    /// What the most recently used tape of `n_tokens`-token passes does, step by step (the
    /// profile's labels).
    pub fn tape_ops(&self, n_tokens: usize) -> Vec<String> {
        self.tapes
            .values()
            .filter(|t| t.tokens == n_tokens)
            .max_by_key(|t| t.last_used)
            .map(|t| t.ops.iter().map(|op| self.label(op, t.tokens)).collect())
            .unwrap_or_default()
    }

    /// Record steps `range` of a tape into one command encoder.
    pub(super) fn encode(
        &self,
        key: TapeKey,
        range: Range<usize>,
        encoder: &mut wgpu::CommandEncoder,
        mut profiler: Option<&mut Profiler>,
    ) {
        let Some(tape) = self.tapes.get(&key) else {
            return;
        };
        let end = range.end.min(tape.steps.len());
        let steps = &tape.steps[range.start.min(end)..end];
        let ops = &tape.ops[range.start.min(end)..end];
        let mut i = 0;
        while i < steps.len() {
            if let Step::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                bytes,
            } = &steps[i]
            {
                encoder.copy_buffer_to_buffer(
                    self.buf(*src),
                    *src_offset,
                    self.buf(*dst),
                    *dst_offset,
                    *bytes,
                );
                i += 1;
                continue;
            }
            if let Some(p) = profiler.as_mut() {
                let label = self.label(&ops[i], tape.tokens);
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("forward"),
                    timestamp_writes: p.next(label),
                });
                steps[i].record(&mut pass);
                i += 1;
                continue;
            }
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("forward"),
                timestamp_writes: None,
            });
            while i < steps.len() && !matches!(steps[i], Step::Copy { .. }) {
                steps[i].record(&mut pass);
                i += 1;
            }
        }
        if let Some(p) = profiler {
            p.resolve(encoder);
        }
    }
}
