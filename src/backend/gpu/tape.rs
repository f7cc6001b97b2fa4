//! The tape of the GPU backend: the ops of a pass, each stored with the key of its arguments
//! ([`Key`]) so that a later pass of the same size finds it at the same place and only records
//! it ([`GpuBackend::step`]), and their recording into one command encoder
//! ([`GpuBackend::encode`], one compute pass per run of ops between buffer copies, or one per op
//! with timestamps while profiling).

use super::{Elementwise, GpuBackend, Tensor, Weight};
use crate::backend::profile::Profiler;
use crate::gpu::bitlinear::{
    BitLinearOp, NormBitLinearMode, NormBitLinearOp, QuantizeActivationsOp, RmsNormQuantizeOp,
};
use crate::gpu::embedding::EmbeddingOp;
use crate::gpu::matmul::MatmulOp;
use crate::gpu::ops::{AttentionOp, ElementwiseOp, RmsNormOp, RopeOp, TopKOp};
use crate::gpu::q8::{QuantizeQ8Op, RmsNormQuantizeQ8Op};
use crate::gpu::GpuError;
use crate::Error;

/// The arguments that identify one op on the tape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Embed(Weight, Tensor),
    RmsNorm(Tensor, Tensor, Tensor, usize, usize, u32),
    Matmul(Weight, Tensor, Tensor, usize),
    /// A product of `rows` tokens added to its output in its dispatch.
    MatmulAdd(Weight, Tensor, Tensor, usize),
    /// The product only (I2_S: the input's records come from a Quantize or RmsNormQuantize
    /// step); the quantization too for the TQ formats.
    BitLinear(Weight, Tensor, Tensor, usize),
    /// Int8 records of `rows` rows of `cols` of a tensor.
    Quantize(Tensor, usize, usize),
    /// An RmsNorm (its arguments) that also writes the records of its output.
    RmsNormQuantize(Tensor, Tensor, Tensor, usize, usize, u32),
    /// Int8 records (blocks of 32) of one row of `cols` of a tensor.
    QuantizeQ8(Tensor, usize),
    /// Gate, up, values: SiluMul into the gate and the gate's records; with the norm whose
    /// factor it applies (normed tensor, row length) where they are products of its record.
    SiluMulQuantizeQ8(Tensor, Tensor, usize, Option<(Tensor, usize)>),
    /// A one-row RmsNorm (its arguments but the row count) that also writes the q8 records of
    /// its output.
    RmsNormQuantizeQ8(Tensor, Tensor, Tensor, usize, u32),
    /// A one-token RMSNorm (input, weight, eps bits) with the I2_S products it feeds
    /// (weights, the tensors written) in one dispatch.
    NormBitLinear(
        Tensor,
        Tensor,
        u32,
        Vec<Weight>,
        Vec<Tensor>,
        NormBitLinearMode,
    ),
    /// A one-token integer-dot product from the input's int8 records.
    /// The product, or (`true`) the product added to the output; from the input's norm record
    /// (`true`).
    MatvecQ8(Weight, Tensor, Tensor, bool, bool),
    /// Two one-token integer-dot products of one input in one dispatch: weights, input,
    /// outputs; from a norm record (`true`).
    MatvecQ8Pair(Weight, Weight, Tensor, Tensor, Tensor, bool),
    /// A one-token integer-dot product (weight, input) added to its residual, which also
    /// writes the norm record of the sum for the RMSNorm (weight, output, eps bits) after it.
    MatvecQ8AddNorm(Weight, Tensor, Tensor, Tensor, Tensor, u32),
    Rope(Tensor, usize),
    /// Layer, q/k/v/out, query heads, RoPE folded in, the output's q8 records written too,
    /// q/k/v products of a norm record whose factor the attention applies.
    Attention(usize, [Tensor; 4], usize, bool, bool, bool),
    Elementwise(Elementwise, Tensor, Option<Tensor>, Option<Tensor>, usize),
    CopyRow(Tensor, usize, usize, Tensor),
    TopK(Tensor, usize, usize, usize),
}

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

pub(super) struct Tape {
    pub(super) steps: Vec<(Key, Step)>,
    /// The backend's `tape_clock` when a pass last used it.
    pub(super) last_used: u64,
}

/// Most tapes kept (one per batch size): decode, full prefill batches and the last, shorter
/// batches of recent prompts. Beyond it the least recently used tape is dropped, and its ops'
/// uniforms and scratch buffers go back to the context's buffer pool for the next tape.
pub(super) const MAX_TAPES: usize = 6;

impl GpuBackend {
    /// The step recorded just before the current one in this pass (with its key), if any.
    pub(super) fn previous_step(&self) -> Option<&(Key, Step)> {
        let at = self.cursor.checked_sub(1)?;
        self.tapes.get(&self.n_tokens)?.steps.get(at)
    }

    /// Advance the tape by one op with `key`, building it with `build` unless the tape
    /// already holds it at this place.
    pub(super) fn step(
        &mut self,
        key: Key,
        build: impl FnOnce(&Self) -> Result<Step, GpuError>,
    ) -> Result<(), Error> {
        // A product waiting for a partner, or a held residual add, is recorded before anything
        // else.
        if let Some(p) = self.pending_q8.take() {
            self.record_q8(p)?;
        }
        self.flush_add()?;
        let cursor = self.cursor;
        let n = self.n_tokens;
        let hit = self
            .tapes
            .get(&n)
            .and_then(|t| t.steps.get(cursor))
            .is_some_and(|(k, _)| *k == key);
        if !hit {
            let step = self.ctx.validated(|| self.label(&key), || build(self))?;
            if !self.tapes.contains_key(&n) {
                self.evict_tapes(MAX_TAPES - 1);
            }
            let clock = self.tape_clock;
            let tape = self.tapes.entry(n).or_insert_with(|| Tape {
                steps: Vec::new(),
                last_used: clock,
            });
            tape.steps.truncate(cursor);
            tape.steps.push((key, step));
        }
        self.cursor += 1;
        self.submit_ready();
        Ok(())
    }

    /// Submit the steps of a pass of several tokens recorded since the last submission, once
    /// there are at least as many as were submitted before (and at least `FIRST_PART`): parts
    /// of 8, 8, 16, 32, ... steps, so the device starts on a prefill's first layer while the
    /// host records the rest (recording a Llama-1B prefill of 512 tokens took 1.27-2.2 ms on
    /// the H200's host, a tenth of the pass, which the device otherwise waited for). A step
    /// before the cursor never changes (a miss truncates the tape at the cursor only), the
    /// uniforms a pass writes (position, token ids) are written when it begins, and the queue
    /// keeps the parts in order, so the pass computes the same as in one submission; its last
    /// part and the readback go with [`GpuBackend::encode_pass`]. One-token passes (decode,
    /// run ahead of the host already) and profiled passes (their timestamps resolve at the
    /// end) stay whole.
    fn submit_ready(&mut self) {
        const FIRST_PART: usize = 8;
        let ready = self.cursor - self.submitted;
        if !self.submit_in_parts
            || self.n_tokens < 2
            || self.profiler.is_some()
            || ready < FIRST_PART.max(self.submitted)
        {
            return;
        }
        let started = web_time::Instant::now();
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("forward part"),
            });
        self.encode(&mut encoder, None);
        let commands = encoder.finish();
        let recorded = web_time::Instant::now();
        self.ctx.queue.submit([commands]);
        self.submitted = self.cursor;
        self.timings.parts += 1;
        self.timings.record_s += (recorded - started).as_secs_f64();
        self.timings.submit_s += recorded.elapsed().as_secs_f64();
    }

    /// Drop the least recently used tapes until at most `keep` remain.
    fn evict_tapes(&mut self, keep: usize) {
        while self.tapes.len() > keep {
            let oldest = self
                .tapes
                .iter()
                .min_by_key(|(_, t)| t.last_used)
                .map(|(n, _)| *n);
            match oldest {
                Some(n) => {
                    self.tapes.remove(&n);
                }
                None => break,
            }
        }
    }

    /// How many tapes (batch sizes) the backend holds.
    pub fn tapes(&self) -> usize {
        self.tapes.len()
    }

    /// What the tape of `n_tokens`-token passes does, op by op (the profile's labels).
    pub fn tape_ops(&self, n_tokens: usize) -> Vec<String> {
        self.tapes
            .get(&n_tokens)
            .map(|t| t.steps.iter().map(|(k, _)| self.label(k)).collect())
            .unwrap_or_default()
    }

    /// Record the current tape's steps not yet submitted into one command encoder.
    pub(super) fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        mut profiler: Option<&mut Profiler>,
    ) {
        let Some(tape) = self.tapes.get(&self.n_tokens) else {
            return;
        };
        let end = self.cursor.min(tape.steps.len());
        let steps = &tape.steps[self.submitted.min(end)..end];
        let mut i = 0;
        while i < steps.len() {
            if let (
                _,
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    bytes,
                },
            ) = &steps[i]
            {
                encoder.copy_buffer_to_buffer(
                    self.buf(*src),
                    *src_offset,
                    self.buf(*dst),
                    0,
                    *bytes,
                );
                i += 1;
                continue;
            }
            if let Some(p) = profiler.as_mut() {
                let label = self.label(&steps[i].0);
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("forward"),
                    timestamp_writes: p.next(label),
                });
                steps[i].1.record(&mut pass);
                i += 1;
                continue;
            }
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("forward"),
                timestamp_writes: None,
            });
            while i < steps.len() && !matches!(steps[i].1, Step::Copy { .. }) {
                steps[i].1.record(&mut pass);
                i += 1;
            }
        }
        if let Some(p) = profiler {
            p.resolve(encoder);
        }
    }

    /// What an op is, for the profile: kind, dtype and shape.
    fn label(&self, key: &Key) -> String {
        let weight = |w: &Weight| {
            let w = &self.weights[w.0 as usize];
            format!("{} {}x{}", w.dtype, w.rows, w.cols)
        };
        let n = self.n_tokens;
        match key {
            Key::Embed(w, _) => format!("embed {}", weight(w)),
            Key::RmsNorm(_, _, _, rows, dim, _) => format!("rms_norm {rows}x{dim}"),
            Key::Matmul(w, _, _, rows) => format!("matmul {} (x{rows})", weight(w)),
            Key::MatmulAdd(w, _, _, rows) => format!("matmul+add {} (x{rows})", weight(w)),
            Key::BitLinear(w, _, _, rows) => format!("bitlinear {} (x{rows})", weight(w)),
            Key::Quantize(_, rows, cols) => format!("quantize {rows}x{cols}"),
            Key::QuantizeQ8(_, cols) => format!("quantize_q8 1x{cols}"),
            Key::SiluMulQuantizeQ8(_, _, cols, norm) => format!(
                "{}silu_mul+quantize_q8 1x{cols}",
                if norm.is_some() {
                    "rms_norm factor+"
                } else {
                    ""
                }
            ),
            Key::RmsNormQuantizeQ8(_, _, _, dim, _) => format!("rms_norm+quantize_q8 1x{dim}"),
            Key::MatvecQ8(w, _, _, add, norm) => format!(
                "matvec_q8{} {}{}",
                if *add { "+add" } else { "" },
                weight(w),
                if *norm { " (norm record)" } else { "" },
            ),
            Key::MatvecQ8Pair(a, b, _, _, _, norm) => format!(
                "matvec_q8 {} + {}{}",
                weight(a),
                weight(b),
                if *norm { " (norm record)" } else { "" },
            ),
            Key::MatvecQ8AddNorm(w, ..) => format!("matvec_q8+add+norm record {}", weight(w)),
            Key::RmsNormQuantize(_, _, _, rows, dim, _) => {
                format!("rms_norm+quantize {rows}x{dim}")
            }
            Key::NormBitLinear(_, _, _, ws, _, mode) => {
                let shapes: Vec<String> = ws.iter().map(weight).collect();
                format!("rms_norm+bitlinear {mode:?} {}", shapes.join(" + "))
            }
            Key::Rope(_, heads) => format!("rope {n}x{heads} heads"),
            Key::Attention(_, _, heads, rope, q8, norm) => format!(
                "{}attention{}{} {n}x{heads} heads",
                if *norm { "rms_norm factor+" } else { "" },
                if *rope { "+rope" } else { "" },
                if *q8 { "+quantize_q8" } else { "" }
            ),
            Key::Elementwise(f, _, _, _, len) => format!("{f:?} {len}"),
            Key::CopyRow(..) => "copy".into(),
            Key::TopK(_, rows, vocab, k) => format!("top-{k} {rows}x{vocab}"),
        }
    }
}
