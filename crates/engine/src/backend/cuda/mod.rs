//! The CUDA backend (`--backend cuda`): a pass's ops as NVRTC-compiled kernels on one stream
//! (`tritium-native-gds`). Weights stay in their file format on the device and are decoded
//! inside the products: few-token products are one warp per weight row over f32 or int8
//! activations (`gemv_*`, `gemv_q8_*`, `bitlinear_*`); larger ones decode the weight to f16
//! (or f32 under exact arithmetic) and multiply with cuBLAS. Attention streams the KV cache
//! with an online softmax split along positions. Passes of few tokens (decoding) are captured
//! once per plan and token count as a CUDA graph and replayed: every kernel reads the tokens'
//! ids, positions and sequences from device arrays written before the replay, so one graph
//! serves every position.
//!
//! Each op computes what the pass states ([`Activations`], [`KvType`]), as the CPU reference
//! defines it; the norms, RoPE and activation functions are evaluated in f64 as the CPU does.
//!
//! Here: the backend's state, buffers and launches; `plan.rs` checks a pass and sizes its
//! scratch; `fusion.rs` finds and runs the fusions; `ops.rs` runs each op; `passes.rs` replays
//! or launches recorded passes, reads results back and implements [`Backend`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tritium_native_gds::kernels::{
    format_suffix, GEMV_MAX_TOKENS, MAX_HEAD_DIM, TOPK_MAX, TOPK_MERGE_MAX, TOPK_SEG,
};
use tritium_native_gds::{Arg, Blas, Device, DeviceBuffer, GdsError, GemmType, Graph, HostBuffer};
use tritium_native_gds::{Event, Kernel, Module};

use super::{
    check_batch, Arithmetic, AttentionScores, Backend, Batch, Elementwise, KvShape, KvType, Limits,
    Logits, Names, Op, Pass, Readback, Tensor, Tokens, VramBudget, Weight, WeightData,
};
use crate::error::{BackendError, BatchError};
use crate::ops::{RopeConfig, RopeStyle};
use crate::pass::Activations;
use crate::quant::{self, GgmlType};
use crate::Error;

mod fusion;
mod ops;
mod passes;
mod plan;
mod stream;
pub use stream::{BlockTiming, StreamStats};

use fusion::{Fused, Quant, Quantized};

/// Few-token passes (decoding) are captured as graphs; larger ones are launched op by op.
const GRAPH_MAX_TOKENS: usize = GEMV_MAX_TOKENS;
/// Positions per attention split, at least (and a multiple of: one round of
/// `attention_group_*`'s four warps, 8 positions each).
const ATTENTION_SPLIT: usize = 32;
/// Head dimensions of `attention_group_*` (a block per KV head and up to `GROUP_HEADS` of its
/// query heads); others take `attention_part_*` (a block per query head).
const GROUP_HEAD_DIMS: [usize; 4] = [64, 96, 128, 256];
const GROUP_HEADS: usize = 4;
/// Bytes of the device slot of a Q6_K block (`Q6K_SLOT` in quant.cuh).
const Q6K_SLOT: usize = 224;

fn kv_kind(dtype: KvType) -> &'static str {
    match dtype {
        KvType::F16 => "f16",
        KvType::F32 => "f32",
    }
}

fn rope_style_code(style: RopeStyle) -> u32 {
    match style {
        RopeStyle::Interleaved => 0,
        RopeStyle::NeoX => 1,
    }
}

/// `data`'s blocks of `block` bytes, each at the start of a zero-filled slot of `slot` bytes.
fn pad_blocks(data: &[u8], block: usize, slot: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len() / block * slot];
    for (src, dst) in data.chunks_exact(block).zip(out.chunks_exact_mut(slot)) {
        dst[..block].copy_from_slice(src);
    }
    out
}
/// Most splits of a prefill's attention (bounds its scratch).
const PREFILL_SPLITS: usize = 2;
/// Query tokens per block of `flash_attention_*`, and the head dimensions it is built for.
const FLASH_TILE: usize = 64;
const FLASH_HEAD_DIMS: [usize; 3] = [64, 96, 128];

struct CudaWeight {
    name: String,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    /// Its own buffer (held for its memory; kernels use `ptr`); `None` for a weight of a block
    /// read from storage when used ([`stream::Streamer`]), which lives at `ptr` in a slot or a
    /// resident block's buffer.
    #[allow(dead_code)]
    buf: Option<DeviceBuffer>,
    /// Where the weight is on the device (0 until a deferred weight has its place).
    ptr: u64,
    scale: f32,
    suffix: &'static str,
}

struct CudaTensor {
    name: String,
    len: usize,
    buf: DeviceBuffer,
}

/// Device scratch, grown (and every captured graph dropped) when a plan needs more.
#[derive(Default)]
struct Scratch {
    /// Int8 activations (Q8 and BitLinear): max_batch * widest input.
    xq: Option<DeviceBuffer>,
    /// Their per-block scales (Q8) or per-row scales (BitLinear).
    xd: Option<DeviceBuffer>,
    /// f16 operands of large products.
    xh: Option<DeviceBuffer>,
    /// A weight decoded to f16 or f32 for cuBLAS.
    wide: Option<DeviceBuffer>,
    /// Attention splits' partial results.
    part: Option<DeviceBuffer>,
    /// Top-k candidates and results.
    topk: Option<DeviceBuffer>,
}

/// What a plan needs of [`Scratch`], in bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Needs {
    xq: usize,
    xd: usize,
    xh: usize,
    wide: usize,
    part: usize,
    topk: usize,
}

/// A pass of the CUDA backend: its ops, checked, and what they need.
pub struct CudaPlan {
    id: u64,
    ops: Arc<[Op]>,
    needs: Needs,
    /// The embedding table's rows (token ids are checked against it).
    vocab: Option<usize>,
}

/// A recorded pass: its plan and batch.
pub struct CudaRecorded {
    plan_id: u64,
    ops: Arc<[Op]>,
    needs: Needs,
    vocab: Option<usize>,
    batch: Batch,
}

/// A submitted pass: where its readback lands and the event after it.
pub struct CudaPending {
    read: PendingRead,
    event: Option<Event>,
    host: Option<HostBuffer>,
}

enum PendingRead {
    Nothing,
    /// `values` f32 of logits.
    Full {
        values: usize,
    },
    /// `rows` rows of `k` candidates, `(values, ids)` one after the other; `take` kept.
    Top {
        rows: usize,
        k: usize,
        take: usize,
    },
    /// `rows` whole rows (`values` f32 in all) whose best `take` the host selects (more
    /// candidates than the device's top-k takes).
    HostTop {
        rows: usize,
        values: usize,
        take: usize,
    },
}

/// The per-token device arrays a pass reads: ids, positions, sequences, and the best id of the
/// last top-k (what a chained pass embeds).
struct TokenArrays {
    ids: DeviceBuffer,
    pos: DeviceBuffer,
    seq: DeviceBuffer,
    best: DeviceBuffer,
    /// Query tiles of flash attention: (first token, tokens) pairs, each inside one span.
    tiles: DeviceBuffer,
}

/// The CUDA backend.
pub struct CudaBackend {
    dev: Device,
    module: Module,
    kernels: HashMap<String, Kernel>,
    blas: Option<Blas>,
    max_batch: usize,
    tensors: Vec<CudaTensor>,
    weights: Vec<CudaWeight>,
    kv: Option<KvShape>,
    /// Per layer, keys and values: `(n_seqs, max_ctx, n_kv_heads * head_dim)`.
    cache: Vec<(DeviceBuffer, DeviceBuffer)>,
    /// The RoPE tables ([`crate::pass::Op::Rope`]'s `table`): frequencies and configuration.
    rope: Vec<(DeviceBuffer, RopeConfig)>,
    tokens: TokenArrays,
    scratch: Scratch,
    have: Needs,
    graphs: HashMap<(u64, usize), Graph>,
    host_pool: Vec<HostBuffer>,
    kv_request: Option<KvType>,
    arithmetic: Arithmetic,
    /// Whether a top-k pass was submitted (a chained pass needs one).
    chained_ready: bool,
    bytes: u64,
    next_plan: AtomicU64,
    /// Capture few-token passes as graphs (off: launch op by op, for comparison).
    use_graphs: bool,
    /// What the int8 scratch holds now: products that take the same rows of the same tensor
    /// (Q, K and V; gate and up) quantize them once.
    quantized: Option<Quantized>,
    /// Query tiles in `tokens.tiles` for this pass.
    tiles: usize,
    /// Per-kernel timing (`bench generate --profile`): each launch between two events, passes
    /// launched op by op.
    profile: Option<Profile>,
    /// Run consecutive ops as one kernel where [`CudaBackend::fusion_at`] finds a fusion.
    fusions: bool,
    /// GPU memory for the model, KV cache and scratch ([`CudaBackend::set_vram_budget`]).
    vram_budget: Option<VramBudget>,
    /// Block weights registered by location, placed when the model is loaded.
    deferred: Vec<stream::Deferred>,
    /// Blocks read from storage when used.
    streamer: Option<stream::Streamer>,
}

#[derive(Default)]
struct Profile {
    pending: Vec<(String, Event, Event)>,
    totals: HashMap<String, (u64, f64)>,
}

fn gds(e: GdsError) -> Error {
    Error::Cuda(e)
}

impl CudaBackend {
    /// Open CUDA device `ordinal` and compile (or load from the cache) the kernels for it.
    pub fn new(ordinal: usize, max_batch: usize) -> Result<CudaBackend, Error> {
        let dev = Device::open(ordinal).map_err(gds)?;
        let module = Module::load(&dev, tritium_native_gds::kernels::SOURCE).map_err(gds)?;
        let max_batch = max_batch.max(1);
        let u32s = |n: usize| dev.alloc(n * 4).map_err(gds);
        let tokens = TokenArrays {
            ids: u32s(max_batch)?,
            pos: u32s(max_batch)?,
            seq: u32s(max_batch)?,
            best: u32s(1)?,
            tiles: u32s(2 * (max_batch.div_ceil(FLASH_TILE) + max_batch))?,
        };
        Ok(CudaBackend {
            dev,
            module,
            kernels: HashMap::new(),
            blas: None,
            max_batch,
            tensors: Vec::new(),
            weights: Vec::new(),
            kv: None,
            cache: Vec::new(),
            rope: Vec::new(),
            tokens,
            scratch: Scratch::default(),
            have: Needs::default(),
            graphs: HashMap::new(),
            host_pool: Vec::new(),
            kv_request: None,
            arithmetic: Arithmetic::Fast,
            chained_ready: false,
            bytes: 0,
            next_plan: AtomicU64::new(0),
            use_graphs: std::env::var_os("TRITIUM_CUDA_NO_GRAPHS").is_none(),
            quantized: None,
            tiles: 0,
            profile: None,
            fusions: std::env::var_os("TRITIUM_CUDA_NO_FUSIONS").is_none(),
            vram_budget: None,
            deferred: Vec::new(),
            streamer: None,
        })
    }

    /// Keep the model within `bytes` of GPU memory (before the model loads): the weights of
    /// transformer blocks that lie unchanged in local files stay there, and the blocks that do
    /// not fit beside the rest are read from storage when used (`stream.rs`). The budget covers
    /// the weights, the KV cache and the read staging; the passes' activations and scratch
    /// (sized by the batch) come on top.
    pub fn set_vram_budget(&mut self, budget: Option<VramBudget>) {
        self.vram_budget = budget;
    }

    /// What streaming does (`None` where every block is on the device): the schedule, the
    /// reader, GPU bytes held for the blocks, bytes read, and each streamed block's read and
    /// wait times.
    pub fn streaming(&self) -> Option<stream::StreamStats> {
        self.streamer.as_ref().map(|s| s.stats())
    }

    /// Start the streamed blocks' read and wait times from zero.
    pub fn reset_stream_timing(&mut self) {
        if let Some(s) = self.streamer.as_mut() {
            s.reset_timing();
        }
    }

    /// Choose the KV cache's element type (before the model loads; `None`: the default).
    pub fn set_kv_type(&mut self, t: Option<KvType>) {
        self.kv_request = t;
    }

    /// Capture few-token passes as CUDA graphs (the default) or launch every op each time.
    /// While blocks are read from storage between launches, passes always run op by op.
    pub fn set_graphs(&mut self, on: bool) {
        self.use_graphs = on && !self.streamer.as_ref().is_some_and(|s| s.streams());
        self.graphs.clear();
    }

    /// Time every kernel from now on (passes are then launched op by op, not as graphs).
    pub fn enable_profile(&mut self) {
        self.profile = Some(Profile::default());
    }

    /// Forget the profile's totals.
    pub fn clear_profile(&mut self) {
        if self.profile.is_some() {
            self.profile = Some(Profile::default());
        }
    }

    /// GPU time per kernel (name and grid) since profiling began or was cleared: calls and
    /// seconds, largest first.
    pub fn profile(&mut self) -> Result<Vec<(String, u64, f64)>, Error> {
        let Some(p) = self.profile.as_mut() else {
            return Ok(Vec::new());
        };
        self.dev.synchronize().map_err(gds)?;
        for (label, a, b) in p.pending.drain(..) {
            let ms = a.elapsed_ms(&b).map_err(gds)?;
            let t = p.totals.entry(label).or_default();
            t.0 += 1;
            t.1 += f64::from(ms) / 1e3;
        }
        let mut rows: Vec<(String, u64, f64)> = p
            .totals
            .iter()
            .map(|(k, v)| (k.clone(), v.0, v.1))
            .collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        Ok(rows)
    }

    /// Run `f` (which queues work) between two timing events where profiling.
    fn timed<T>(
        &mut self,
        label: impl FnOnce() -> String,
        f: impl FnOnce(&mut Self) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.profile.is_none() {
            return f(self);
        }
        let a = self.dev.record().map_err(gds)?;
        let r = f(self)?;
        let b = self.dev.record().map_err(gds)?;
        if let Some(p) = self.profile.as_mut() {
            p.pending.push((label(), a, b));
        }
        Ok(r)
    }

    /// `(free, total)` device memory, by the driver's count.
    pub fn memory(&self) -> Result<(usize, usize), Error> {
        self.dev.memory().map_err(gds)
    }

    /// The device's description.
    pub fn device(&self) -> &tritium_native_gds::DeviceInfo {
        self.dev.info()
    }

    fn kernel(&mut self, name: &str) -> Result<Kernel, Error> {
        if let Some(k) = self.kernels.get(name) {
            return Ok(k.clone());
        }
        let k = self.module.kernel(name).map_err(gds)?;
        self.kernels.insert(name.to_string(), k.clone());
        Ok(k)
    }

    fn launch(
        &mut self,
        name: &str,
        grid: (usize, usize),
        block: u32,
        args: &[Arg],
    ) -> Result<(), Error> {
        let k = self.kernel(name)?;
        let dim = |v: usize| {
            u32::try_from(v.max(1)).map_err(|_| Error::Internal("a grid past 2^32 blocks"))
        };
        let (gx, gy) = (dim(grid.0)?, dim(grid.1)?);
        self.timed(
            || format!("{name} ({gx}, {gy})"),
            |me| {
                me.dev
                    .launch(&k, (gx, gy, 1), (block, 1, 1), 0, args)
                    .map_err(gds)
            },
        )
    }

    fn tensor(&self, t: Tensor) -> Result<&CudaTensor, Error> {
        self.tensors.get(t.0 as usize).ok_or_else(|| {
            BackendError::UnknownHandle {
                what: "tensor",
                id: t.0,
            }
            .into()
        })
    }

    fn ptr(&self, t: Tensor) -> u64 {
        self.tensors[t.0 as usize].buf.ptr()
    }

    fn weight(&self, w: Weight) -> Result<&CudaWeight, Error> {
        self.weights.get(w.0 as usize).ok_or_else(|| {
            BackendError::UnknownHandle {
                what: "weight",
                id: w.0,
            }
            .into()
        })
    }

    fn need(&self, t: Tensor, len: usize, what: &'static str) -> Result<(), Error> {
        let c = self.tensor(t)?;
        if c.len < len {
            return Err(BackendError::BufferTooSmall {
                what,
                buffer: c.name.clone(),
                have: c.len,
                need: len,
            }
            .into());
        }
        Ok(())
    }

    fn kv(&self) -> Result<KvShape, Error> {
        self.kv
            .ok_or_else(|| BackendError::NoCache("attention").into())
    }

    /// Whether a BitLinear product of `rows` tokens runs as an int8 cuBLAS product (I2_S weights
    /// decoded to int8 codes: the same exact integer sums as `bitlinear_i2_s`) instead of the
    /// few-token kernel `rows / 8` times.
    fn int8_bitlinear(w: &CudaWeight, rows: usize) -> bool {
        w.dtype == GgmlType::I2_S && rows > GEMV_MAX_TOKENS && w.cols % 4 == 0
    }

    /// Whether a pass of `n` tokens attends with `flash_attention_*` (tensor cores over an f16
    /// cache, more tokens than a graph takes, a head dimension it is built for, scores with
    /// no window or soft cap): the one rule for the launch and for sizing the split scratch.
    fn flash(kv: &KvShape, n: usize, scores: AttentionScores) -> bool {
        kv.dtype == KvType::F16
            && n > GRAPH_MAX_TOKENS
            && FLASH_HEAD_DIMS.contains(&kv.head_dim)
            && scores == AttentionScores::default()
    }

    /// Positions per attention split, and splits, of a captured (few-token) pass: enough
    /// splits for the whole context, at most 128 (the splits past a token's position return
    /// at once).
    fn graph_splits(kv: &KvShape) -> (usize, usize) {
        let split = kv
            .max_ctx
            .div_ceil(128)
            .next_multiple_of(ATTENTION_SPLIT)
            .max(ATTENTION_SPLIT);
        (split, kv.max_ctx.div_ceil(split))
    }

    /// Grow the scratch to `needs` (dropping the captured graphs, which name the old buffers).
    fn ensure_scratch(&mut self, needs: &Needs) -> Result<(), Error> {
        let grow =
            |have: &mut usize, slot: &mut Option<DeviceBuffer>, want: usize, dev: &Device| {
                if want > *have {
                    *slot = None;
                    *slot = Some(dev.alloc(want).map_err(gds)?);
                    *have = want;
                    return Ok::<bool, Error>(true);
                }
                Ok(false)
            };
        let d = &self.dev;
        let s = &mut self.scratch;
        let h = &mut self.have;
        let mut grew = grow(&mut h.xq, &mut s.xq, needs.xq, d)?;
        grew |= grow(&mut h.xd, &mut s.xd, needs.xd, d)?;
        grew |= grow(&mut h.xh, &mut s.xh, needs.xh, d)?;
        grew |= grow(&mut h.wide, &mut s.wide, needs.wide, d)?;
        grew |= grow(&mut h.part, &mut s.part, needs.part, d)?;
        grew |= grow(&mut h.topk, &mut s.topk, needs.topk, d)?;
        if grew {
            self.graphs.clear();
        }
        Ok(())
    }

    fn scratch_ptr(slot: &Option<DeviceBuffer>) -> u64 {
        slot.as_ref().map_or(0, DeviceBuffer::ptr)
    }

    fn blas(&mut self) -> Result<&mut Blas, Error> {
        if self.blas.is_none() {
            self.blas = Some(Blas::new(&self.dev).map_err(gds)?);
        }
        Ok(self.blas.as_mut().expect("just made"))
    }
}

/// Flash attention's query tiles of a batch: (first token, tokens) pairs of at most
/// [`FLASH_TILE`] tokens, each inside one span (so a tile's tokens are consecutive positions of
/// one sequence), covering every token once in order.
fn flash_tiles(batch: &Batch) -> Vec<u32> {
    let mut tiles = Vec::new();
    let mut first = 0;
    for span in &batch.spans {
        for i in (0..span.len).step_by(FLASH_TILE) {
            tiles.extend([(first + i) as u32, (span.len - i).min(FLASH_TILE) as u32]);
        }
        first += span.len;
    }
    tiles
}

/// Warps of a block that share one weight row in the few-token products (`row_part` in
/// products.cu): 4 for rows of more than 128 chunks of 32 (a lane would take several), else 1. It
/// depends on the width alone, so a product gives the same sums alone and in a fused launch. On
/// the H100, ffn_down's 2048 rows of 8192 took 22 us with 4 warps a row and 31 with one, while
/// rows of 2048 or 2560 were slower with more (16,384 rows of 2048: 21 us with 2, 13.5 with
/// one; 13,824 of 2560: 27 us with 4, 12.7 with one).
fn warps_per_row(cols: usize) -> usize {
    if cols / 32 > 128 {
        4
    } else {
        1
    }
}

/// Threads of a block of `norm_fused` (every RMSNorm, alone or fused).
const NORM_BLOCK: u32 = 1024;

/// The `elementwise` kernels' code of a function.
fn elementwise_code(f: Elementwise) -> u32 {
    match f {
        Elementwise::Add => 0,
        Elementwise::SiluMul => 1,
        Elementwise::ReluSquared => 2,
        Elementwise::ReluSquaredMul => 3,
        Elementwise::GeluMul => 4,
    }
}

/// The best `take` of each of the `rows` rows of `values`.
fn host_top(values: &[f32], rows: usize, take: usize) -> Vec<Vec<(u32, f32)>> {
    let vocab = values.len() / rows.max(1);
    values
        .chunks(vocab.max(1))
        .take(rows)
        .map(|row| {
            let mut t = crate::cpu::ops::top_k(row, take.max(1));
            t.truncate(take);
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Span;

    #[test]
    fn flash_tiles_cover_every_token_once_and_never_cross_a_span() {
        let batch = Batch {
            spans: vec![
                Span {
                    seq: 0,
                    pos0: 7,
                    len: 130,
                },
                Span {
                    seq: 1,
                    pos0: 0,
                    len: 64,
                },
                Span {
                    seq: 2,
                    pos0: 3,
                    len: 1,
                },
            ],
        };
        let tiles = flash_tiles(&batch);
        let pairs: Vec<(u32, u32)> = tiles.chunks(2).map(|t| (t[0], t[1])).collect();
        assert_eq!(pairs, [(0, 64), (64, 64), (128, 2), (130, 64), (194, 1)]);
        // The device array holds this many (tiles of the largest batch, one per span at worst).
        let most = 2 * (512usize.div_ceil(FLASH_TILE) + 512);
        let many = Batch {
            spans: (0..512)
                .map(|s| Span {
                    seq: s,
                    pos0: 0,
                    len: 1,
                })
                .collect(),
        };
        assert!(flash_tiles(&many).len() <= most);
        assert!(flash_tiles(&Batch::one(0, 512)).len() <= most);
    }

    #[test]
    fn four_warps_a_row_only_for_long_rows() {
        assert_eq!(warps_per_row(2048), 1);
        assert_eq!(warps_per_row(4096), 1);
        assert_eq!(warps_per_row(6912), 4);
        assert_eq!(warps_per_row(8192), 4);
    }
}
