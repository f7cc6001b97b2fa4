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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tritium_native_gds::kernels::{
    format_suffix, GEMV_MAX_TOKENS, MAX_HEAD_DIM, TOPK_MAX, TOPK_MERGE_MAX, TOPK_SEG,
};
use tritium_native_gds::{Arg, Blas, Device, DeviceBuffer, GdsError, GemmType, Graph, HostBuffer};
use tritium_native_gds::{Event, Kernel, Module};

use super::{
    check_batch, Arithmetic, Backend, Batch, Elementwise, KvShape, KvType, Limits, Logits, Names,
    Op, Pass, Readback, Tensor, Tokens, Weight, WeightData,
};
use crate::error::{BackendError, BatchError};
use crate::ops::{RopeConfig, RopeStyle};
use crate::pass::Activations;
use crate::quant::{self, GgmlType};
use crate::Error;

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
    buf: DeviceBuffer,
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
    rope: Option<(DeviceBuffer, RopeConfig)>,
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
}

/// Consecutive ops run as one kernel, each step computed as its own kernel computes it (the
/// self-test checks the results equal the unfused ones bit for bit).
#[derive(Clone, Debug, PartialEq)]
enum Fused {
    /// `add` (residual, into `x`; `y`: none for a norm alone), then RMSNorm of `x` into `out`,
    /// then the norm's output quantized for the product after it (`quant`).
    Norm {
        x: Tensor,
        y: Option<Tensor>,
        weight: Tensor,
        out: Tensor,
        rows: usize,
        dim: usize,
        eps: f32,
        quant: Quant,
    },
    /// An elementwise function whose output a product takes as int8 blocks.
    ElementwiseQ8 {
        f: Elementwise,
        out: Tensor,
        first: Tensor,
        second: Tensor,
        rows: usize,
        cols: usize,
    },
    /// RoPE of q and of k, then attention over them: one launch turns both and stores k and
    /// v in the cache (`rope_store_*`), then attention as the op runs it; `quant`: its output
    /// quantized for the int8 product after it by the splits' merge.
    RopeAttention {
        layer: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        heads: usize,
        quant: bool,
    },
    /// Two or three one-token products (int8 or BitLinear) of one format and width over the
    /// same activations.
    Products {
        bitlinear: bool,
        x: Tensor,
        rows: usize,
        products: Vec<(Weight, Tensor)>,
    },
}

/// How a fused norm leaves its output for the next product.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Quant {
    None,
    Q8,
    BitLinear,
}

impl Fused {
    /// Ops it stands for.
    fn ops(&self) -> usize {
        match self {
            Fused::Norm { y, .. } => 1 + usize::from(y.is_some()),
            Fused::ElementwiseQ8 { .. } => 1,
            Fused::RopeAttention { .. } => 3,
            Fused::Products { products, .. } => products.len(),
        }
    }
}

#[derive(Default)]
struct Profile {
    pending: Vec<(String, Event, Event)>,
    totals: HashMap<String, (u64, f64)>,
}

/// Int8 rows in the scratch: of which tensor, how many, and for which kind of product.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Quantized {
    x: Tensor,
    rows: usize,
    cols: usize,
    bitlinear: bool,
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
            rope: None,
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
        })
    }

    /// Choose the KV cache's element type (before the model loads; `None`: the default).
    pub fn set_kv_type(&mut self, t: Option<KvType>) {
        self.kv_request = t;
    }

    /// Capture few-token passes as CUDA graphs (the default) or launch every op each time.
    pub fn set_graphs(&mut self, on: bool) {
        self.use_graphs = on;
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
    /// cache, more tokens than a graph takes, a head dimension it is built for).
    fn flash(kv: &KvShape, n: usize) -> bool {
        kv.dtype == KvType::F16 && n > GRAPH_MAX_TOKENS && FLASH_HEAD_DIMS.contains(&kv.head_dim)
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

    /// Check a pass's ops against the buffers and say what scratch they need.
    fn check(&self, pass: &Pass) -> Result<(Needs, Option<usize>), Error> {
        let n = pass.tokens;
        let mut needs = Needs::default();
        let mut vocab = None;
        for op in &pass.ops {
            match *op {
                Op::Embed { table, out } => {
                    let w = self.weight(table)?;
                    self.need(out, n * w.cols, "embedding")?;
                    vocab = Some(w.rows);
                }
                Op::RmsNorm {
                    x,
                    weight,
                    out,
                    rows,
                    dim,
                    ..
                } => {
                    self.need(x, rows * dim, "rms_norm x")?;
                    self.need(out, rows * dim, "rms_norm out")?;
                    self.need(weight, dim, "rms_norm weight")?;
                }
                Op::MatMul {
                    w,
                    x,
                    out,
                    rows,
                    act,
                } => {
                    let cw = self.weight(w)?;
                    self.need(x, rows * cw.cols, "matmul x")?;
                    self.need(out, rows * cw.rows, "matmul out")?;
                    match act {
                        Activations::Q8 => {
                            if !quant::q8dot::has_q8_dot(cw.dtype) {
                                return Err(BackendError::UnsupportedWeight {
                                    name: cw.name.clone(),
                                    why: format!("int8 activations with {} weights", cw.dtype),
                                }
                                .into());
                            }
                            needs.xq = needs.xq.max(rows * cw.cols);
                            needs.xd = needs.xd.max(rows * cw.cols / 32 * 4);
                        }
                        Activations::F16 => {
                            needs.xh = needs.xh.max(rows * cw.cols * 2);
                            needs.xd = needs.xd.max(rows * 4);
                            needs.wide = needs.wide.max(cw.rows * cw.cols * 2);
                        }
                        Activations::F32 if rows > GEMV_MAX_TOKENS => {
                            needs.wide = needs.wide.max(cw.rows * cw.cols * 4);
                        }
                        Activations::F32 => {}
                    }
                }
                Op::BitLinear { w, x, out, rows } => {
                    let cw = self.weight(w)?;
                    if quant::bitlinear_input(cw.dtype).is_none() {
                        return Err(BackendError::UnsupportedWeight {
                            name: cw.name.clone(),
                            why: format!(
                                "BitLinear over {} weights (ternary types only)",
                                cw.dtype
                            ),
                        }
                        .into());
                    }
                    self.need(x, rows * cw.cols, "bitlinear x")?;
                    self.need(out, rows * cw.rows, "bitlinear out")?;
                    needs.xq = needs.xq.max(rows * cw.cols);
                    needs.xd = needs.xd.max(rows * 4);
                    if Self::int8_bitlinear(cw, rows) {
                        needs.wide = needs.wide.max(cw.rows * cw.cols);
                    }
                }
                Op::Rope { x, heads } => {
                    let cfg = &self.rope.as_ref().ok_or(BackendError::NoCache("RoPE"))?.1;
                    self.need(x, n * heads * cfg.head_dim, "rope x")?;
                    if cfg.rot_dim > MAX_HEAD_DIM {
                        return Err(BackendError::UnsupportedWeight {
                            name: "rope".into(),
                            why: format!(
                                "{} rotated dimensions (CUDA turns at most {MAX_HEAD_DIM})",
                                cfg.rot_dim
                            ),
                        }
                        .into());
                    }
                }
                Op::Attention {
                    layer,
                    q,
                    k,
                    v,
                    out,
                    heads,
                } => {
                    let kv = self.kv()?;
                    if layer >= kv.n_layers {
                        return Err(BackendError::NoCacheLayer { layer }.into());
                    }
                    if kv.head_dim > MAX_HEAD_DIM
                        || kv.n_kv_heads == 0
                        || heads % kv.n_kv_heads != 0
                    {
                        return Err(BackendError::UnsupportedWeight {
                            name: format!("attention of layer {layer}"),
                            why: format!(
                                "{heads} heads over {} KV heads of {} (CUDA takes head_dim <= {MAX_HEAD_DIM} and whole groups)",
                                kv.n_kv_heads, kv.head_dim
                            ),
                        }
                        .into());
                    }
                    let (kv_row, q_row) = (kv.n_kv_heads * kv.head_dim, heads * kv.head_dim);
                    self.need(q, n * q_row, "attention q")?;
                    self.need(k, n * kv_row, "attention k")?;
                    self.need(v, n * kv_row, "attention v")?;
                    self.need(out, n * q_row, "attention out")?;
                    let splits = if Self::flash(&kv, n) {
                        0
                    } else if n <= GRAPH_MAX_TOKENS {
                        Self::graph_splits(&kv).1
                    } else {
                        PREFILL_SPLITS
                    };
                    needs.part = needs.part.max(n * heads * splits * (kv.head_dim + 2) * 4);
                }
                Op::Elementwise {
                    f,
                    out,
                    first,
                    second,
                    len,
                } => {
                    self.need(out, len, "elementwise out")?;
                    self.need(first.unwrap_or(out), len, "elementwise first operand")?;
                    match (f.takes_second(), second) {
                        (true, Some(s)) => self.need(s, len, "elementwise second operand")?,
                        (true, None) => {
                            return Err(BackendError::MissingOperand { op: f.name() }.into())
                        }
                        (false, _) => {}
                    }
                }
                Op::CopyRow {
                    src,
                    row,
                    cols,
                    dst,
                    dst_row,
                } => {
                    self.need(src, (row + 1) * cols, "copy_row src")?;
                    self.need(dst, (dst_row + 1) * cols, "copy_row dst")?;
                }
                Op::Read {
                    logits,
                    rows,
                    vocab,
                    what,
                } => {
                    self.need(logits, rows * vocab, "logits")?;
                    if let Readback::TopK(k) = what {
                        let k = k.max(1);
                        let segs = vocab.div_ceil(TOPK_SEG);
                        if k <= TOPK_MAX && segs * k <= TOPK_MERGE_MAX {
                            needs.topk = needs.topk.max((rows * segs * k + rows * k) * 8);
                        }
                    }
                }
            }
        }
        Ok((needs, vocab))
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

    /// Queue one op for a pass of `n` tokens whose longest sequence reaches `max_len`.
    fn run(&mut self, op: &Op, n: usize, max_len: usize) -> Result<(), Error> {
        self.run_op(op, n, max_len)?;
        if let (Some(q), Some(t)) = (self.quantized, op.writes()) {
            if q.x == t {
                self.quantized = None;
            }
        }
        Ok(())
    }

    /// Queue `ops` (a pass of `n` tokens), consecutive ones fused where
    /// [`CudaBackend::fusion_at`] finds a fusion.
    fn run_ops(&mut self, ops: &[Op], n: usize, max_len: usize) -> Result<(), Error> {
        let mut i = 0;
        while i < ops.len() {
            match self.fusion_at(&ops[i..]) {
                Some(f) => {
                    i += f.ops();
                    self.run_fused(f, n, max_len)?;
                }
                None => {
                    self.run(&ops[i], n, max_len)?;
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// How the op after a norm or an elementwise op takes `t` (`rows` x `cols`) when it is an
    /// int8 product of it: as int8 blocks or as BitLinear's rows.
    fn quant_for(&self, next: Option<&Op>, t: Tensor, rows: usize, cols: usize) -> Quant {
        let width = |w: Weight| self.weight(w).map_or(0, |cw| cw.cols);
        match next {
            Some(&Op::MatMul {
                w,
                x,
                rows: r,
                act: Activations::Q8,
                ..
            }) if x == t && r == rows && width(w) == cols => Quant::Q8,
            Some(&Op::BitLinear { w, x, rows: r, .. })
                if x == t && r == rows && width(w) == cols =>
            {
                Quant::BitLinear
            }
            _ => Quant::None,
        }
    }

    /// The fusion that starts at `ops[0]`, if any.
    fn fusion_at(&self, ops: &[Op]) -> Option<Fused> {
        if !self.fusions {
            return None;
        }
        match *ops.first()? {
            Op::Elementwise {
                f: Elementwise::Add,
                out,
                first,
                second: Some(y),
                len,
            } if first.is_none_or(|a| a == out) => match ops.get(1) {
                Some(&Op::RmsNorm {
                    x,
                    weight,
                    out: no,
                    rows,
                    dim,
                    eps,
                }) if x == out && rows * dim == len && no != x && y != no => Some(Fused::Norm {
                    x,
                    y: Some(y),
                    weight,
                    out: no,
                    rows,
                    dim,
                    eps,
                    quant: self.quant_for(ops.get(2), no, rows, dim),
                }),
                _ => None,
            },
            Op::RmsNorm {
                x,
                weight,
                out,
                rows,
                dim,
                eps,
            } if out != x => {
                let quant = self.quant_for(ops.get(1), out, rows, dim);
                (quant != Quant::None).then_some(Fused::Norm {
                    x,
                    y: None,
                    weight,
                    out,
                    rows,
                    dim,
                    eps,
                    quant,
                })
            }
            Op::Elementwise {
                f,
                out,
                first,
                second,
                len,
            } => match ops.get(1) {
                Some(&Op::MatMul {
                    w,
                    x,
                    rows,
                    act: Activations::Q8,
                    ..
                }) if x == out => {
                    let cols = self.weight(w).ok()?.cols;
                    let first = first.unwrap_or(out);
                    let second = second.unwrap_or(first);
                    (rows * cols == len && second != out).then_some(Fused::ElementwiseQ8 {
                        f,
                        out,
                        first,
                        second,
                        rows,
                        cols,
                    })
                }
                _ => None,
            },
            Op::MatMul {
                x,
                rows,
                act: Activations::Q8,
                ..
            }
            | Op::BitLinear { x, rows, .. }
                if rows <= GEMV_MAX_TOKENS =>
            {
                let bitlinear = matches!(ops[0], Op::BitLinear { .. });
                let key = |op: &Op| -> Option<(Weight, Tensor, &'static str, usize)> {
                    let (w, out) = match *op {
                        Op::MatMul {
                            w,
                            x: ox,
                            out,
                            rows: r,
                            act: Activations::Q8,
                        } if !bitlinear && ox == x && r == rows => (w, out),
                        Op::BitLinear {
                            w,
                            x: ox,
                            out,
                            rows: r,
                        } if bitlinear && ox == x && r == rows => (w, out),
                        _ => return None,
                    };
                    let cw = self.weight(w).ok()?;
                    Some((w, out, cw.suffix, cw.cols))
                };
                let (_, _, suffix, cols) = key(&ops[0])?;
                let mut products = Vec::new();
                for op in ops.iter().take(3) {
                    match key(op) {
                        Some((w, out, s, c))
                            if s == suffix
                                && c == cols
                                && out != x
                                && products.iter().all(|&(_, o)| o != out) =>
                        {
                            products.push((w, out))
                        }
                        _ => break,
                    }
                }
                (products.len() >= 2).then_some(Fused::Products {
                    bitlinear,
                    x,
                    rows,
                    products,
                })
            }
            Op::Rope { x: qx, heads } => {
                let (
                    Some(&Op::Rope { x: kx, heads: kh }),
                    Some(&Op::Attention {
                        layer,
                        q,
                        k,
                        v,
                        out,
                        heads: ah,
                    }),
                ) = (ops.get(1), ops.get(2))
                else {
                    return None;
                };
                let kv = self.kv().ok()?;
                let head_dim = self.rope.as_ref()?.1.head_dim;
                (qx == q
                    && kx == k
                    && q != k
                    && heads == ah
                    && kh == kv.n_kv_heads
                    && head_dim == kv.head_dim
                    && layer < kv.n_layers)
                    .then_some(Fused::RopeAttention {
                        layer,
                        q,
                        k,
                        v,
                        out,
                        heads,
                        quant: kv.head_dim % 32 == 0
                            && matches!(ops.get(3), Some(&Op::MatMul {
                                w,
                                x,
                                act: Activations::Q8,
                                ..
                            }) if x == out && self.weight(w).is_ok_and(|cw| cw.cols == heads * kv.head_dim)),
                    })
            }
            _ => None,
        }
    }

    /// Quantize `want.x`'s rows into the int8 scratch (blocks of 32, or BitLinear's per-row
    /// scale) unless it holds them already.
    fn quantize(&mut self, want: Quantized) -> Result<(), Error> {
        if self.quantized == Some(want) {
            return Ok(());
        }
        let args = [
            Arg::Ptr(self.ptr(want.x)),
            Arg::Ptr(Self::scratch_ptr(&self.scratch.xq)),
            Arg::Ptr(Self::scratch_ptr(&self.scratch.xd)),
            Arg::U32(want.cols as u32),
        ];
        if want.bitlinear {
            self.launch("bitlinear_quantize", (want.rows, 1), 256, &args)?;
        } else {
            let grid = ((want.cols / 32).div_ceil(4), want.rows);
            self.launch("quantize_q8", grid, 128, &args)?;
        }
        self.quantized = Some(want);
        Ok(())
    }

    /// Queue a fusion.
    fn run_fused(&mut self, f: Fused, n: usize, max_len: usize) -> Result<(), Error> {
        let (xq, xd) = (
            Self::scratch_ptr(&self.scratch.xq),
            Self::scratch_ptr(&self.scratch.xd),
        );
        match f {
            Fused::Norm {
                x,
                y,
                weight,
                out,
                rows,
                dim,
                eps,
                quant,
            } => {
                let args = [
                    Arg::Ptr(self.ptr(x)),
                    Arg::Ptr(y.map_or(0, |y| self.ptr(y))),
                    Arg::Ptr(self.ptr(weight)),
                    Arg::Ptr(self.ptr(out)),
                    Arg::U32(dim as u32),
                    Arg::F32(eps),
                    Arg::U32(match quant {
                        Quant::None => 0,
                        Quant::Q8 => 1,
                        Quant::BitLinear => 2,
                    }),
                    Arg::Ptr(xq),
                    Arg::Ptr(xd),
                ];
                self.launch("norm_fused", (rows, 1), NORM_BLOCK, &args)?;
                self.quantized = match quant {
                    Quant::None => self.quantized.filter(|q| q.x != x && q.x != out),
                    q => Some(Quantized {
                        x: out,
                        rows,
                        cols: dim,
                        bitlinear: q == Quant::BitLinear,
                    }),
                };
                Ok(())
            }
            Fused::ElementwiseQ8 {
                f,
                out,
                first,
                second,
                rows,
                cols,
            } => {
                let len = rows * cols;
                let args = [
                    Arg::U32(elementwise_code(f)),
                    Arg::Ptr(self.ptr(out)),
                    Arg::Ptr(self.ptr(first)),
                    Arg::Ptr(self.ptr(second)),
                    Arg::U32(len as u32),
                    Arg::Ptr(xq),
                    Arg::Ptr(xd),
                ];
                self.launch("elementwise_q8", ((len / 32).div_ceil(4), 1), 128, &args)?;
                self.quantized = Some(Quantized {
                    x: out,
                    rows,
                    cols,
                    bitlinear: false,
                });
                Ok(())
            }
            Fused::RopeAttention {
                layer,
                q,
                k,
                v,
                out,
                heads,
                quant,
            } => {
                let kv = self.kv()?;
                let (freqs, cfg) = self.rope.as_ref().ok_or(BackendError::NoCache("RoPE"))?;
                let (kc, vc) = {
                    let (k, v) = &self.cache[layer];
                    (k.ptr(), v.ptr())
                };
                let args = [
                    Arg::Ptr(self.ptr(q)),
                    Arg::Ptr(self.ptr(k)),
                    Arg::Ptr(self.ptr(v)),
                    Arg::Ptr(kc),
                    Arg::Ptr(vc),
                    Arg::Ptr(self.tokens.pos.ptr()),
                    Arg::Ptr(self.tokens.seq.ptr()),
                    Arg::Ptr(freqs.ptr()),
                    Arg::U32(heads as u32),
                    Arg::U32(kv.n_kv_heads as u32),
                    Arg::U32(kv.head_dim as u32),
                    Arg::U32(cfg.rot_dim as u32),
                    Arg::U32(rope_style_code(cfg.style)),
                    Arg::U32(kv.max_ctx as u32),
                ];
                let name = format!("rope_store_{}", kv_kind(kv.dtype));
                self.launch(&name, (n, 1), 256, &args)?;
                let quantized = self.attend(layer, q, out, heads, n, max_len, quant)?;
                self.quantized = match quantized {
                    true => Some(Quantized {
                        x: out,
                        rows: n,
                        cols: heads * kv.head_dim,
                        bitlinear: false,
                    }),
                    false => self.quantized.filter(|t| ![q, k, out].contains(&t.x)),
                };
                Ok(())
            }
            Fused::Products {
                bitlinear,
                x,
                rows,
                products,
            } => {
                let first = self.weight(products[0].0)?;
                let (cols, suffix) = (first.cols, first.suffix);
                self.quantize(Quantized {
                    x,
                    rows,
                    cols,
                    bitlinear,
                })?;
                let mut args = Vec::with_capacity(19);
                let mut total = 0;
                for i in 0..3 {
                    match products.get(i) {
                        Some(&(w, out)) => {
                            let cw = self.weight(w)?;
                            total += cw.rows;
                            args.extend([
                                Arg::Ptr(cw.buf.ptr()),
                                Arg::Ptr(cw.row_bytes as u64),
                                Arg::Ptr(self.ptr(out)),
                                Arg::U32(cw.rows as u32),
                                Arg::F32(cw.scale),
                            ]);
                        }
                        None => args.extend([
                            Arg::Ptr(0),
                            Arg::Ptr(0),
                            Arg::Ptr(0),
                            Arg::U32(0),
                            Arg::F32(0.0),
                        ]),
                    }
                }
                let wpr = warps_per_row(cols);
                args.extend([
                    Arg::Ptr(xq),
                    Arg::Ptr(xd),
                    Arg::U32(cols as u32),
                    Arg::U32(rows as u32),
                    Arg::U32(wpr as u32),
                ]);
                let kind = if bitlinear { "bitlinear" } else { "gemv_q8" };
                self.launch(
                    &format!("{kind}_multi_{suffix}"),
                    (total.div_ceil(4 / wpr), 1),
                    128,
                    &args,
                )
            }
        }
    }

    /// Attention of the pass's `n` tokens (`q`, `heads` heads) over layer `layer`'s cache, the
    /// tokens' keys and values already stored, into `out`; with `quant`, `out` is also left
    /// in the int8 scratch where the kernels that run can do it (the returned flag says so).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        layer: usize,
        q: Tensor,
        out: Tensor,
        heads: usize,
        n: usize,
        max_len: usize,
        quant: bool,
    ) -> Result<bool, Error> {
        let kv = self.kv()?;
        let kind = kv_kind(kv.dtype);
        let (pos, seq) = (self.tokens.pos.ptr(), self.tokens.seq.ptr());
        let (kc, vc) = {
            let (k, v) = &self.cache[layer];
            (k.ptr(), v.ptr())
        };
        if Self::flash(&kv, n) {
            let args = [
                Arg::Ptr(self.ptr(q)),
                Arg::Ptr(kc),
                Arg::Ptr(vc),
                Arg::Ptr(self.ptr(out)),
                Arg::Ptr(self.tokens.tiles.ptr()),
                Arg::Ptr(pos),
                Arg::Ptr(seq),
                Arg::U32(heads as u32),
                Arg::U32(kv.n_kv_heads as u32),
                Arg::U32(kv.max_ctx as u32),
            ];
            let name = format!("flash_attention_{}", kv.head_dim);
            return self
                .launch(&name, (self.tiles, heads), 128, &args)
                .map(|_| false);
        }
        let (split, nsplit) = if n <= GRAPH_MAX_TOKENS {
            Self::graph_splits(&kv)
        } else {
            let split = max_len
                .div_ceil(PREFILL_SPLITS)
                .next_multiple_of(ATTENTION_SPLIT)
                .max(ATTENTION_SPLIT);
            (split, max_len.div_ceil(split))
        };
        let part = Self::scratch_ptr(&self.scratch.part);
        if GROUP_HEAD_DIMS.contains(&kv.head_dim) {
            let args = [
                Arg::Ptr(self.ptr(q)),
                Arg::Ptr(kc),
                Arg::Ptr(vc),
                Arg::Ptr(part),
                Arg::Ptr(pos),
                Arg::Ptr(seq),
                Arg::U32(heads as u32),
                Arg::U32(kv.n_kv_heads as u32),
                Arg::U32(kv.max_ctx as u32),
                Arg::U32(split as u32),
                Arg::U32(nsplit as u32),
            ];
            let per_kv = (heads / kv.n_kv_heads).div_ceil(GROUP_HEADS);
            self.launch(
                &format!("attention_group_{kind}_{}", kv.head_dim),
                (n * kv.n_kv_heads * per_kv, nsplit),
                128,
                &args,
            )?;
        } else {
            let args = [
                Arg::Ptr(self.ptr(q)),
                Arg::Ptr(kc),
                Arg::Ptr(vc),
                Arg::Ptr(part),
                Arg::Ptr(pos),
                Arg::Ptr(seq),
                Arg::U32(heads as u32),
                Arg::U32(kv.n_kv_heads as u32),
                Arg::U32(kv.head_dim as u32),
                Arg::U32(kv.max_ctx as u32),
                Arg::U32(split as u32),
                Arg::U32(nsplit as u32),
            ];
            self.launch(
                &format!("attention_part_{kind}"),
                (n * heads, nsplit),
                128,
                &args,
            )?;
        }
        let (xq, xd) = match quant {
            true => (
                Self::scratch_ptr(&self.scratch.xq),
                Self::scratch_ptr(&self.scratch.xd),
            ),
            false => (0, 0),
        };
        let args = [
            Arg::Ptr(part),
            Arg::Ptr(self.ptr(out)),
            Arg::Ptr(pos),
            Arg::U32(heads as u32),
            Arg::U32(kv.head_dim as u32),
            Arg::U32(split as u32),
            Arg::U32(nsplit as u32),
            Arg::Ptr(xq),
            Arg::Ptr(xd),
        ];
        self.launch("attention_merge", (n * heads, 1), 128, &args)?;
        Ok(quant)
    }

    fn run_op(&mut self, op: &Op, n: usize, max_len: usize) -> Result<(), Error> {
        let (ids, pos, seq) = (
            self.tokens.ids.ptr(),
            self.tokens.pos.ptr(),
            self.tokens.seq.ptr(),
        );
        match *op {
            Op::Embed { table, out } => {
                let w = self.weight(table)?;
                let (name, args) = (
                    format!("embed_{}", w.suffix),
                    [
                        Arg::Ptr(w.buf.ptr()),
                        Arg::Ptr(w.row_bytes as u64),
                        Arg::Ptr(ids),
                        Arg::Ptr(self.ptr(out)),
                        Arg::U32(w.cols as u32),
                        Arg::U32(w.rows as u32),
                        Arg::F32(w.scale),
                    ],
                );
                self.launch(&name, (n, 1), 128, &args)
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                rows,
                dim,
                eps,
            } => self.run_fused(
                Fused::Norm {
                    x,
                    y: None,
                    weight,
                    out,
                    rows,
                    dim,
                    eps,
                    quant: Quant::None,
                },
                n,
                max_len,
            ),
            Op::MatMul {
                w,
                x,
                out,
                rows,
                act,
            } => self.matmul(w, x, self.ptr(out), rows, act),
            Op::BitLinear { w, x, out, rows } => {
                let cw = self.weight(w)?;
                let (cols, wrows, suffix, wptr, rb, scale) = (
                    cw.cols,
                    cw.rows,
                    cw.suffix,
                    cw.buf.ptr(),
                    cw.row_bytes,
                    cw.scale,
                );
                let (xq, s) = (
                    Self::scratch_ptr(&self.scratch.xq),
                    Self::scratch_ptr(&self.scratch.xd),
                );
                let yp = self.ptr(out);
                self.quantize(Quantized {
                    x,
                    rows,
                    cols,
                    bitlinear: true,
                })?;
                if Self::int8_bitlinear(self.weight(w)?, rows) {
                    let wide = Self::scratch_ptr(&self.scratch.wide);
                    let decode = [
                        Arg::Ptr(wptr),
                        Arg::Ptr(rb as u64),
                        Arg::Ptr(wide),
                        Arg::U32(wrows as u32),
                        Arg::U32(cols as u32),
                    ];
                    let chunks = wrows * cols / 32;
                    self.launch("dequant_i8_i2_s", (chunks.div_ceil(128), 1), 128, &decode)?;
                    self.timed(
                        || format!("cublas I8 {wrows}x{cols} by {rows}"),
                        |me| {
                            me.blas()?
                                .gemm(GemmType::I8, wrows, rows, cols, wide, xq, yp)
                                .map_err(gds)
                        },
                    )?;
                    let args = [
                        Arg::Ptr(yp),
                        Arg::Ptr(s),
                        Arg::U32(wrows as u32),
                        Arg::U32(rows as u32),
                        Arg::F32(scale),
                    ];
                    return self.launch(
                        "bitlinear_scale",
                        ((wrows * rows).div_ceil(256), 1),
                        256,
                        &args,
                    );
                }
                let name = format!("bitlinear_{suffix}");
                for t0 in (0..rows).step_by(GEMV_MAX_TOKENS) {
                    let nt = (rows - t0).min(GEMV_MAX_TOKENS);
                    self.launch(
                        &name,
                        (wrows.div_ceil(4 / warps_per_row(cols)), 1),
                        128,
                        &[
                            Arg::Ptr(wptr),
                            Arg::Ptr(rb as u64),
                            Arg::Ptr(xq + (t0 * cols) as u64),
                            Arg::Ptr(s + (t0 * 4) as u64),
                            Arg::Ptr(yp + (t0 * wrows * 4) as u64),
                            Arg::U32(wrows as u32),
                            Arg::U32(cols as u32),
                            Arg::U32(nt as u32),
                            Arg::F32(scale),
                            Arg::U32(warps_per_row(cols) as u32),
                        ],
                    )?;
                }
                Ok(())
            }
            Op::Rope { x, heads } => {
                let (freqs, cfg) = self.rope.as_ref().ok_or(BackendError::NoCache("RoPE"))?;
                let args = [
                    Arg::Ptr(self.ptr(x)),
                    Arg::Ptr(pos),
                    Arg::Ptr(freqs.ptr()),
                    Arg::U32(heads as u32),
                    Arg::U32(cfg.head_dim as u32),
                    Arg::U32(cfg.rot_dim as u32),
                    Arg::U32(rope_style_code(cfg.style)),
                ];
                self.launch("rope", (n, 1), 256, &args)
            }
            Op::Attention {
                layer,
                q,
                k,
                v,
                out,
                heads,
            } => {
                let kv = self.kv()?;
                let kv_row = kv.n_kv_heads * kv.head_dim;
                let (kc, vc) = {
                    let (k, v) = &self.cache[layer];
                    (k.ptr(), v.ptr())
                };
                let store = [
                    Arg::Ptr(self.ptr(k)),
                    Arg::Ptr(self.ptr(v)),
                    Arg::Ptr(kc),
                    Arg::Ptr(vc),
                    Arg::Ptr(pos),
                    Arg::Ptr(seq),
                    Arg::U32(kv_row as u32),
                    Arg::U32(kv.max_ctx as u32),
                ];
                self.launch(
                    &format!("kv_store_{}", kv_kind(kv.dtype)),
                    (n, 1),
                    256,
                    &store,
                )?;
                self.attend(layer, q, out, heads, n, max_len, false)
                    .map(|_| ())
            }
            Op::Elementwise {
                f,
                out,
                first,
                second,
                len,
            } => {
                let code = elementwise_code(f);
                let a = self.ptr(first.unwrap_or(out));
                let b = second.map_or(a, |s| self.ptr(s));
                let args = [
                    Arg::U32(code),
                    Arg::Ptr(self.ptr(out)),
                    Arg::Ptr(a),
                    Arg::Ptr(b),
                    Arg::U32(len as u32),
                ];
                self.launch("elementwise", (len.div_ceil(256), 1), 256, &args)
            }
            Op::CopyRow {
                src,
                row,
                cols,
                dst,
                dst_row,
            } => self
                .dev
                .copy(
                    self.ptr(dst) + (dst_row * cols * 4) as u64,
                    self.ptr(src) + (row * cols * 4) as u64,
                    cols * 4,
                )
                .map_err(gds),
            Op::Read {
                logits,
                rows,
                vocab,
                what: Readback::TopK(k),
            } => {
                let k = k.max(1);
                let segs = vocab.div_ceil(TOPK_SEG);
                if k > TOPK_MAX || segs * k > TOPK_MERGE_MAX {
                    // Read in full and selected on the host ([`CudaBackend::read`]).
                    return Ok(());
                }
                let (cv, ci, ov, oi) = self.topk_slots(rows, segs, k);
                let lp = self.ptr(logits);
                self.launch(
                    "topk_segments",
                    (segs, rows),
                    256,
                    &[
                        Arg::Ptr(lp),
                        Arg::U32(vocab as u32),
                        Arg::U32(k as u32),
                        Arg::Ptr(cv),
                        Arg::Ptr(ci),
                    ],
                )?;
                let best = self.tokens.best.ptr();
                self.launch(
                    "topk_merge",
                    (rows, 1),
                    256,
                    &[
                        Arg::Ptr(cv),
                        Arg::Ptr(ci),
                        Arg::U32(segs as u32),
                        Arg::U32(k as u32),
                        Arg::Ptr(ov),
                        Arg::Ptr(oi),
                        Arg::Ptr(best),
                    ],
                )
            }
            Op::Read { .. } => Ok(()),
        }
    }

    /// Where top-k's candidates and results sit in the scratch: candidate values and ids,
    /// result values and ids (the results contiguous, values then ids, for one download).
    fn topk_slots(&self, rows: usize, segs: usize, k: usize) -> (u64, u64, u64, u64) {
        let base = Self::scratch_ptr(&self.scratch.topk);
        let cand = (rows * segs * k * 4) as u64;
        let out = (rows * k * 4) as u64;
        (base, base + cand, base + 2 * cand, base + 2 * cand + out)
    }

    /// `out = W x` for `rows` tokens with operands `act`.
    fn matmul(
        &mut self,
        w: Weight,
        xt: Tensor,
        y: u64,
        rows: usize,
        act: Activations,
    ) -> Result<(), Error> {
        let cw = self.weight(w)?;
        let (cols, wrows, suffix, wptr, rb, scale) = (
            cw.cols,
            cw.rows,
            cw.suffix,
            cw.buf.ptr(),
            cw.row_bytes,
            cw.scale,
        );
        let wpr = warps_per_row(cols);
        let grid = (wrows.div_ceil(4 / wpr), 1);
        let x = self.ptr(xt);
        match act {
            Activations::F32 if rows <= GEMV_MAX_TOKENS => self.launch(
                &format!("gemv_{suffix}"),
                grid,
                128,
                &[
                    Arg::Ptr(wptr),
                    Arg::Ptr(rb as u64),
                    Arg::Ptr(x),
                    Arg::Ptr(y),
                    Arg::U32(wrows as u32),
                    Arg::U32(cols as u32),
                    Arg::U32(rows as u32),
                    Arg::F32(scale),
                    Arg::U32(wpr as u32),
                ],
            ),
            Activations::Q8 => {
                let (xq, xd) = (
                    Self::scratch_ptr(&self.scratch.xq),
                    Self::scratch_ptr(&self.scratch.xd),
                );
                let name = format!("gemv_q8_{suffix}");
                self.quantize(Quantized {
                    x: xt,
                    rows,
                    cols,
                    bitlinear: false,
                })?;
                for t0 in (0..rows).step_by(GEMV_MAX_TOKENS) {
                    let nt = (rows - t0).min(GEMV_MAX_TOKENS);
                    self.launch(
                        &name,
                        grid,
                        128,
                        &[
                            Arg::Ptr(wptr),
                            Arg::Ptr(rb as u64),
                            Arg::Ptr(xq + (t0 * cols) as u64),
                            Arg::Ptr(xd + (t0 * cols / 32 * 4) as u64),
                            Arg::Ptr(y + (t0 * wrows * 4) as u64),
                            Arg::U32(wrows as u32),
                            Arg::U32(cols as u32),
                            Arg::U32(nt as u32),
                            Arg::F32(scale),
                            Arg::U32(wpr as u32),
                        ],
                    )?;
                }
                Ok(())
            }
            Activations::F32 | Activations::F16 => {
                let f16 = act == Activations::F16;
                let wide = Self::scratch_ptr(&self.scratch.wide);
                let decode = [
                    Arg::Ptr(wptr),
                    Arg::Ptr(rb as u64),
                    Arg::Ptr(wide),
                    Arg::U32(wrows as u32),
                    Arg::U32(cols as u32),
                ];
                let chunks = wrows * cols / 32;
                let kind = if f16 { "f16" } else { "f32" };
                self.launch(
                    &format!("dequant_{kind}_{suffix}"),
                    (chunks.div_ceil(128), 1),
                    128,
                    &decode,
                )?;
                let (xh, back) = (
                    Self::scratch_ptr(&self.scratch.xh),
                    Self::scratch_ptr(&self.scratch.xd),
                );
                let (operand, t) = if f16 {
                    // `back` shares the scale scratch with int8 rows.
                    self.quantized = None;
                    self.launch(
                        "f16_operands",
                        (rows, 1),
                        256,
                        &[
                            Arg::Ptr(x),
                            Arg::Ptr(xh),
                            Arg::Ptr(back),
                            Arg::U32(cols as u32),
                        ],
                    )?;
                    (xh, GemmType::F16)
                } else {
                    (x, GemmType::F32)
                };
                self.timed(
                    || format!("cublas {t:?} {wrows}x{cols} by {rows}"),
                    |me| {
                        me.blas()?
                            .gemm(t, wrows, rows, cols, wide, operand, y)
                            .map_err(gds)
                    },
                )?;
                if f16 || scale != 1.0 {
                    self.launch(
                        "scale_rows",
                        ((wrows * rows).div_ceil(256), 1),
                        256,
                        &[
                            Arg::Ptr(y),
                            Arg::Ptr(if f16 { back } else { 0 }),
                            Arg::U32(wrows as u32),
                            Arg::U32(rows as u32),
                            Arg::F32(scale),
                        ],
                    )?;
                }
                Ok(())
            }
        }
    }

    /// Queue a pass's ops: replay its graph (captured on first use) for few tokens, or launch
    /// them one by one.
    fn run_pass(&mut self, rec: &CudaRecorded) -> Result<(), Error> {
        let n = rec.batch.tokens();
        let max_len = rec
            .batch
            .spans
            .iter()
            .map(|s| s.pos0 + s.len)
            .max()
            .unwrap_or(0);
        // cuBLAS products (a weight decoded to f16 or f32) are launched, not captured.
        let graphable = self.use_graphs
            && self.profile.is_none()
            && n <= GRAPH_MAX_TOKENS
            && rec.needs.wide == 0;
        self.quantized = None;
        if !graphable {
            return self.run_ops(&rec.ops, n, max_len);
        }
        let key = (rec.plan_id, n);
        if !self.graphs.contains_key(&key) {
            self.dev.begin_capture().map_err(gds)?;
            let result = self.run_ops(&rec.ops, n, max_len);
            let graph = self.dev.end_capture();
            result?;
            self.graphs.insert(key, graph.map_err(gds)?);
        }
        let g = &self.graphs[&key];
        self.dev.launch_graph(g).map_err(gds)
    }

    fn host(&mut self, bytes: usize) -> Result<HostBuffer, Error> {
        if let Some(i) = self.host_pool.iter().position(|h| h.bytes() >= bytes) {
            return Ok(self.host_pool.swap_remove(i));
        }
        self.dev.host_buffer(bytes.next_power_of_two()).map_err(gds)
    }

    /// Queue the pass's readback.
    fn read(&mut self, rec: &CudaRecorded) -> Result<(PendingRead, Option<HostBuffer>), Error> {
        let Some(&Op::Read {
            logits,
            rows,
            vocab,
            what,
        }) = rec
            .ops
            .iter()
            .rev()
            .find(|op| matches!(op, Op::Read { .. }))
        else {
            return Ok((PendingRead::Nothing, None));
        };
        let full = |this: &mut Self| -> Result<(PendingRead, Option<HostBuffer>), Error> {
            let values = rows * vocab;
            let mut host = this.host(values * 4)?;
            this.dev
                .download(&mut host, this.ptr(logits), values * 4)
                .map_err(gds)?;
            Ok((PendingRead::Full { values }, Some(host)))
        };
        match what {
            Readback::Nothing => Ok((PendingRead::Nothing, None)),
            Readback::All | Readback::Last => full(self),
            Readback::TopK(k) => {
                let kk = k.max(1);
                let segs = vocab.div_ceil(TOPK_SEG);
                if kk > TOPK_MAX || segs * kk > TOPK_MERGE_MAX {
                    let (_, host) = full(self)?;
                    return Ok((
                        PendingRead::HostTop {
                            rows,
                            values: rows * vocab,
                            take: k,
                        },
                        host,
                    ));
                }
                let (_, _, ov, _) = self.topk_slots(rows, segs, kk);
                let bytes = rows * kk * 8;
                let mut host = self.host(bytes)?;
                self.dev.download(&mut host, ov, bytes).map_err(gds)?;
                Ok((
                    PendingRead::Top {
                        rows,
                        k: kk,
                        take: k,
                    },
                    Some(host),
                ))
            }
        }
    }
}

impl Backend for CudaBackend {
    type Plan = CudaPlan;
    type Recorded = CudaRecorded;
    type Pending = CudaPending;

    fn describe(&self) -> String {
        let i = self.dev.info();
        format!("cuda: {} ({})", i.name, i.arch())
    }

    fn limits(&self) -> Limits {
        Limits {
            max_batch: self.max_batch,
            max_tensor_len: u32::MAX as usize,
            runs_ahead: true,
            arithmetic: self.arithmetic,
        }
    }

    fn kv_request(&self) -> Option<KvType> {
        self.kv_request
    }

    fn set_arithmetic(&mut self, arithmetic: Arithmetic) {
        self.arithmetic = arithmetic;
    }

    /// Under fast arithmetic: int8 activations for one token where the format has an integer
    /// form (dp4a), f32 for a few tokens (the products read the weight once for all of them),
    /// f16 operands on tensor cores (cuBLAS) beyond.
    fn activations(&self, w: Weight, rows: usize) -> Activations {
        if self.arithmetic == Arithmetic::Exact {
            return Activations::F32;
        }
        match self.weights.get(w.0 as usize) {
            Some(c) if Activations::q8_for(c.dtype, c.cols, rows) => Activations::Q8,
            Some(_) if rows > GEMV_MAX_TOKENS => Activations::F16,
            _ => Activations::F32,
        }
    }

    fn load_weight(&mut self, w: WeightData<'_>) -> Result<Weight, Error> {
        let unsupported = |why: String| {
            Error::from(BackendError::UnsupportedWeight {
                name: w.name.to_string(),
                why,
            })
        };
        let suffix = format_suffix(w.dtype.name())
            .ok_or_else(|| unsupported(format!("{} weights on CUDA", w.dtype)))?;
        if w.cols == 0 || w.cols % 32 != 0 {
            return Err(unsupported(format!(
                "rows of {} values (CUDA takes whole 32-value chunks)",
                w.cols
            )));
        }
        let row_bytes = w.dtype.row_bytes(w.cols as u64).ok_or_else(|| {
            unsupported(format!(
                "rows of {} {} values are not whole blocks",
                w.cols, w.dtype
            ))
        })? as usize;
        let n = w.rows as u64 * w.cols as u64;
        let own_scale = quant::tensor_scale(w.dtype, w.bytes, n as usize)?.unwrap_or(1.0);
        let data_len = row_bytes * w.rows;
        if w.bytes.len() < data_len {
            return Err(BackendError::WeightBytes {
                name: w.name.to_string(),
                have: w.bytes.len(),
                rows: w.rows,
                cols: w.cols,
                dtype: w.dtype,
                need: data_len,
            }
            .into());
        }
        let data = &w.bytes[..data_len];
        // Codes the reference refuses (I2_S code 3) are refused here too, not computed.
        if w.dtype == GgmlType::I2_S {
            if let Some(at) = data
                .iter()
                .position(|&b| (0..4).any(|g| (b >> (2 * g)) & 3 == 3))
            {
                return Err(quant::QuantError::InvalidCode {
                    dtype: w.dtype,
                    index: (at * 4) as u64,
                    code: 3,
                }
                .into());
            }
        }
        // Q6_K's 210-byte blocks go to 224-byte slots (quant.cuh's Q6K_SLOT: 16-byte aligned
        // fields).
        let padded;
        let (data, row_bytes) = if w.dtype == GgmlType::Q6_K {
            padded = pad_blocks(data, 210, Q6K_SLOT);
            (&padded[..], row_bytes / 210 * Q6K_SLOT)
        } else {
            (data, row_bytes)
        };
        let buf = self.dev.alloc(data.len()).map_err(gds)?;
        self.dev.upload(buf.ptr(), data).map_err(gds)?;
        self.bytes += data.len() as u64;
        self.weights.push(CudaWeight {
            name: w.name.to_string(),
            dtype: w.dtype,
            rows: w.rows,
            cols: w.cols,
            row_bytes,
            buf,
            scale: own_scale * w.scale.unwrap_or(1.0),
            suffix,
        });
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn load_vector(&mut self, name: &str, values: &[f32]) -> Result<Tensor, Error> {
        let t = self.alloc(name, values.len())?;
        self.dev
            .upload(self.ptr(t), bytemuck::cast_slice(values))
            .map_err(gds)?;
        Ok(t)
    }

    fn alloc(&mut self, name: &str, len: usize) -> Result<Tensor, Error> {
        let buf = self.dev.alloc(len * 4).map_err(gds)?;
        self.bytes += (len * 4) as u64;
        self.tensors.push(CudaTensor {
            name: name.to_string(),
            len,
            buf,
        });
        Ok(Tensor(self.tensors.len() as u32 - 1))
    }

    fn init_cache(&mut self, kv: KvShape, rope: &RopeConfig) -> Result<(), Error> {
        let elems = kv.n_seqs * kv.max_ctx * kv.n_kv_heads * kv.head_dim;
        let bytes = elems
            * match kv.dtype {
                KvType::F16 => 2,
                KvType::F32 => 4,
            };
        self.cache.clear();
        for _ in 0..kv.n_layers {
            let k = self.dev.alloc(bytes).map_err(gds)?;
            let v = self.dev.alloc(bytes).map_err(gds)?;
            self.cache.push((k, v));
        }
        self.bytes += (2 * bytes * kv.n_layers) as u64;
        let freqs = rope.inv_freqs();
        let fbuf = self.dev.alloc(freqs.len().max(1) * 8).map_err(gds)?;
        self.dev
            .upload(fbuf.ptr(), bytemuck::cast_slice(&freqs))
            .map_err(gds)?;
        self.rope = Some((fbuf, rope.clone()));
        self.kv = Some(kv);
        self.graphs.clear();
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        let h = &self.have;
        self.bytes + (h.xq + h.xd + h.xh + h.wide + h.part + h.topk) as u64
    }

    fn plan(&self, pass: &Pass) -> Result<CudaPlan, Error> {
        let (needs, vocab) = self.check(pass)?;
        Ok(CudaPlan {
            id: self.next_plan.fetch_add(1, Ordering::Relaxed),
            ops: pass.ops.clone().into(),
            needs,
            vocab,
        })
    }

    fn plan_lines(&self, plan: &CudaPlan, names: &Names) -> Vec<String> {
        let mut lines = Vec::new();
        let mut i = 0;
        while i < plan.ops.len() {
            match self.fusion_at(&plan.ops[i..]) {
                Some(f) => {
                    let k = f.ops();
                    let what = match f {
                        Fused::Norm { .. } => "norm_fused",
                        Fused::ElementwiseQ8 { .. } => "elementwise_q8",
                        Fused::RopeAttention { .. } => "rope_store, attention",
                        Fused::Products { .. } => "products in one launch",
                    };
                    lines.push(format!("fused ({what}):"));
                    for op in &plan.ops[i..i + k] {
                        lines.push(format!("  {}", op.describe(names)));
                    }
                    i += k;
                }
                None => {
                    lines.push(plan.ops[i].describe(names));
                    i += 1;
                }
            }
        }
        lines
    }

    fn set_fusions(&mut self, on: bool) {
        self.fusions = on;
        self.graphs.clear();
    }

    fn record(&mut self, plan: &CudaPlan, batch: &Batch) -> Result<CudaRecorded, Error> {
        check_batch(batch, self.max_batch, self.kv.as_ref())?;
        Ok(CudaRecorded {
            plan_id: plan.id,
            ops: plan.ops.clone(),
            needs: plan.needs,
            vocab: plan.vocab,
            batch: batch.clone(),
        })
    }

    fn submit(&mut self, pass: CudaRecorded, tokens: Tokens<'_>) -> Result<CudaPending, Error> {
        self.dev.bind().map_err(gds)?;
        let n = pass.batch.tokens();
        match tokens {
            Tokens::Ids(ids) => {
                if ids.len() != n {
                    return Err(BatchError::TokenCount {
                        ids: ids.len(),
                        tokens: n,
                    }
                    .into());
                }
                if let (Some(vocab), Some(&id)) = (
                    pass.vocab,
                    ids.iter()
                        .find(|&&id| pass.vocab.is_some_and(|v| id as usize >= v)),
                ) {
                    return Err(BatchError::TokenOutOfVocab { id, n_vocab: vocab }.into());
                }
                self.upload_u32(self.tokens.ids.ptr(), ids)?;
            }
            Tokens::Chained => {
                if n != 1 {
                    return Err(BatchError::TokenCount { ids: 1, tokens: n }.into());
                }
                if !self.chained_ready {
                    return Err(BatchError::ChainWithoutTopK.into());
                }
                self.dev
                    .copy(self.tokens.ids.ptr(), self.tokens.best.ptr(), 4)
                    .map_err(gds)?;
            }
        }
        let (pos, seq): (Vec<u32>, Vec<u32>) = pass
            .batch
            .positions()
            .map(|(s, p)| (p as u32, s as u32))
            .unzip();
        self.upload_u32(self.tokens.pos.ptr(), &pos)?;
        self.upload_u32(self.tokens.seq.ptr(), &seq)?;
        if self.kv.as_ref().is_some_and(|kv| Self::flash(kv, n)) {
            let tiles = flash_tiles(&pass.batch);
            self.upload_u32(self.tokens.tiles.ptr(), &tiles)?;
            self.tiles = tiles.len() / 2;
        }
        self.ensure_scratch(&pass.needs)?;
        self.run_pass(&pass)?;
        let (read, host) = self.read(&pass)?;
        match read {
            PendingRead::Top { .. } => self.chained_ready = true,
            // Selected on the host: the device holds no best id for a chained pass.
            PendingRead::HostTop { .. } => self.chained_ready = false,
            _ => {}
        }
        let event = match read {
            PendingRead::Nothing => None,
            _ => Some(self.dev.record().map_err(gds)?),
        };
        Ok(CudaPending { read, event, host })
    }

    async fn wait(&mut self, pending: CudaPending) -> Result<Logits, Error> {
        if let Some(e) = &pending.event {
            e.synchronize().map_err(gds)?;
        }
        let out = match (&pending.read, &pending.host) {
            (PendingRead::Nothing, _) | (_, None) => Logits::None,
            (PendingRead::Full { values }, Some(h)) => {
                Logits::Full(bytemuck::pod_collect_to_vec(&h.as_slice()[..values * 4]))
            }
            (PendingRead::HostTop { rows, values, take }, Some(h)) => {
                let values: Vec<f32> = bytemuck::pod_collect_to_vec(&h.as_slice()[..values * 4]);
                Logits::Top(host_top(&values, *rows, *take))
            }
            (PendingRead::Top { rows, k, take }, Some(h)) => {
                let bytes = h.as_slice();
                let vals: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[..rows * k * 4]);
                let ids: Vec<u32> =
                    bytemuck::pod_collect_to_vec(&bytes[rows * k * 4..rows * k * 8]);
                Logits::Top(
                    (0..*rows)
                        .map(|r| {
                            (0..*k)
                                .map(|j| (ids[r * k + j], vals[r * k + j]))
                                .filter(|&(id, _)| id != u32::MAX)
                                .take(*take)
                                .collect()
                        })
                        .collect(),
                )
            }
        };
        if let Some(h) = pending.host {
            self.host_pool.push(h);
        }
        Ok(out)
    }
}

impl CudaBackend {
    fn upload_u32(&self, dst: u64, values: &[u32]) -> Result<(), Error> {
        self.dev
            .upload_small(dst, bytemuck::cast_slice(values))
            .map_err(gds)
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
