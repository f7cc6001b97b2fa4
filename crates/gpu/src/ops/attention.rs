//! Causal grouped-query attention over a KV cache: appending the new K/V rows, attending
//! (split over the context for decode, flash-decoding style) and combining the splits. All
//! three are modes of attention.wgsl; natively a prefill attends by KV head instead (its
//! `main_group` entry point, [`AttentionOp::by_kv_head`]), loading each key and value row once
//! for the query heads that share it, or, where the device has cooperative matrices, on them
//! (`attention_coop.wgsl`, flash attention in one dispatch: [`AttentionOp::uses_coop`]); and
//! natively a one-token decode combines its pieces in the attend dispatch (`main_decode`,
//! [`AttentionOp::combines_in_attend`]): one dispatch a layer.

pub use super::super::kernels::params::AttentionParams;
use super::rope::RopeTable;
use super::{check, need, Position};
use crate::kernels::ops::ATTENTION_COOP_WG as COOP_WG;
use crate::kernels::Kernel;
use crate::matmul::{grid, Dispatch};
use crate::{GpuContext, GpuError, Pooled};
use tritium_core::ops::{AttentionScores, RopeStyle};

const MODE_APPEND: u32 = 0;
const MODE_ATTEND: u32 = 1;
const MODE_COMBINE: u32 = 2;

/// Keys per piece below which a context is not split further. A decode whose keys fit one
/// piece skips the combine (main_decode's lone piece), so short contexts gain from longer
/// pieces, while much longer ones slow long contexts (a workgroup's walk over its keys costs
/// more per key than the hand-off saves). It bounds the pieces of [`DECODE_KEYS_PER_SPLIT`]
/// from below: a 640-position cache is cut into 8 pieces, of which 5 (of 128 keys) hold keys
/// once the context is that long.
const MIN_SPLIT: u32 = 128;
/// Cache positions per piece in decode. Many short pieces keep more workgroups in flight than
/// a few long ones (each key is a dependent load in a workgroup's loop); past about 8 pieces
/// for a 640-position cache the combine's extra partial results gain nothing more.
const DECODE_KEYS_PER_SPLIT: u32 = 80;
/// Most pieces per query.
const MAX_SPLITS: u32 = 64;

/// Query tokens per workgroup of that kernel (its `QB`).
const COOP_QUERIES: u32 = 16;
/// The largest head that kernel takes (its accumulators).
const COOP_MAX_HEAD_DIM: u32 = 128;
/// Workgroup memory that kernel declares at the largest head: queries 16 x 128 halves,
/// scores 1 Ki f32, probabilities 1 Ki halves.
const COOP_WORKGROUP_BYTES: u32 = 10 * 1024;
/// The cache holds its positions rounded up to this, so that the cooperative attention's
/// 16-key tiles never read past it.
const CACHE_POSITIONS_MULTIPLE: u32 = 16;

/// How K and V are stored.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KvDtype {
    /// f16 pairs packed into u32 with `pack2x16float` (works without `shader-f16`).
    F16,
    F32,
}

impl KvDtype {
    pub fn bytes(self) -> u64 {
        match self {
            KvDtype::F16 => 2,
            KvDtype::F32 => 4,
        }
    }
}

/// K and V of every layer, each `(max_ctx, n_kv_heads, head_dim)` (positions rounded up to a
/// multiple of 16, never written), one buffer per layer.
pub struct KvCache {
    pub k: Vec<wgpu::Buffer>,
    pub v: Vec<wgpu::Buffer>,
    pub max_ctx: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub dtype: KvDtype,
}

impl KvCache {
    pub fn new(
        ctx: &GpuContext,
        n_layers: usize,
        max_ctx: u32,
        n_kv_heads: u32,
        head_dim: u32,
        dtype: KvDtype,
    ) -> Result<Self, GpuError> {
        check(head_dim % 8 == 0 && (8..=256).contains(&head_dim), || {
            format!("attention with head_dim {head_dim} (must be a multiple of 8, at most 256)")
        })?;
        check(max_ctx > 0 && n_kv_heads > 0, || {
            "a KV cache with no positions or no heads".into()
        })?;
        let rows = max_ctx.next_multiple_of(CACHE_POSITIONS_MULTIPLE);
        let bytes = u64::from(rows) * u64::from(n_kv_heads) * u64::from(head_dim) * dtype.bytes();
        if bytes > ctx.max_binding_bytes() {
            return Err(GpuError::TooLarge {
                what: format!("KV cache layer ({max_ctx} positions)"),
                bytes,
                limit: ctx.max_binding_bytes(),
            });
        }
        let mut k = Vec::with_capacity(n_layers);
        let mut v = Vec::with_capacity(n_layers);
        for layer in 0..n_layers {
            k.push(ctx.storage(&format!("kv.k{layer}"), bytes)?);
            v.push(ctx.storage(&format!("kv.v{layer}"), bytes)?);
        }
        Ok(KvCache {
            k,
            v,
            max_ctx,
            n_kv_heads,
            head_dim,
            dtype,
        })
    }
}

/// The buffers of one attention call, all f32.
pub struct AttentionBuffers<'a> {
    /// `(n_tokens, n_heads, head_dim)`, RoPE applied unless [`AttentionCall::rope`] is given.
    pub q: &'a wgpu::Buffer,
    /// New keys `(n_tokens, n_kv_heads, head_dim)`, the same.
    pub k: &'a wgpu::Buffer,
    /// New values `(n_tokens, n_kv_heads, head_dim)`.
    pub v: &'a wgpu::Buffer,
    /// `(n_tokens, n_heads, head_dim)`, distinct from the others.
    pub out: &'a wgpu::Buffer,
    /// Also the int8 records of `out` (`crate::q8`'s layout, rows of `n_heads *
    /// head_dim` values), written by the combine: only where [`AttentionOp::quantizes`].
    pub records: Option<&'a wgpu::Buffer>,
    /// q, k and v are products of this norm record of rows of `.1` values
    /// ([`crate::q8::q8_matvec_add_norm`]), not of the normed rows: the attend applies
    /// the norm's factor to them. Only for a decode that combines in the attend
    /// ([`AttentionOp::takes_norm`]).
    pub norm: Option<(&'a wgpu::Buffer, u32)>,
}

/// What one attention call covers.
#[derive(Copy, Clone)]
pub struct AttentionCall<'a> {
    pub layer: usize,
    pub n_heads: u32,
    pub n_tokens: u32,
    /// Pieces each query's context is cut into; `None` chooses (many for decode, one when
    /// the tokens and heads alone fill the GPU).
    pub splits: Option<u32>,
    /// Rotate q and the new keys here, with this table, instead of in RoPE ops before
    /// (the q and k buffers are then left unrotated).
    pub rope: Option<&'a RopeTable>,
    /// One token cut into pieces: combine them in the attend dispatch where the platform
    /// allows ([`AttentionOp::combines_in_attend`]) instead of a dispatch of their own.
    pub combine_in_attend: bool,
    /// A window and soft cap of the scores (the cooperative-matrix attention takes neither:
    /// a call with them attends without it).
    pub scores: AttentionScores,
}

/// Append the new K/V at `position`, then `out = softmax(q k^T / sqrt(head_dim)) v` causally
/// (over a window of keys and with soft-capped scores where [`AttentionCall::scores`] says).
pub struct AttentionOp {
    append: Dispatch,
    attend: Dispatch,
    combine: Option<Dispatch>,
    /// The attend dispatch appends too (one token).
    fused: bool,
    pub n_splits: u32,
    /// The pieces' partial results (with one split: an unused 16 bytes).
    partials: Pooled,
    /// The decode attend's arrival counters ([`Kernel::AttentionDecode`]).
    _arrivals: Option<wgpu::Buffer>,
    _buffers: Vec<Pooled>,
}

/// What [`AttentionOp::choose`] picks for a call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AttentionChoice {
    /// The attend's kernel: [`Kernel::AttentionCoop`], [`Kernel::AttentionGroup`],
    /// [`Kernel::AttentionDecode`] or [`Kernel::Attention`].
    pub attend: Kernel,
    /// Pieces each query's context is cut into (1: none).
    pub pieces: u32,
    /// The pieces are combined in a dispatch of their own.
    pub combine: bool,
}

impl AttentionOp {
    pub fn new(
        ctx: &GpuContext,
        cache: &KvCache,
        position: &Position,
        io: AttentionBuffers<'_>,
        call: AttentionCall<'_>,
    ) -> Result<Self, GpuError> {
        let AttentionCall {
            layer,
            n_heads,
            n_tokens,
            splits,
            rope,
            combine_in_attend,
            scores,
        } = call;
        let (k_cache, v_cache) = match (cache.k.get(layer), cache.v.get(layer)) {
            (Some(k), Some(v)) => (k, v),
            _ => {
                return Err(GpuError::Unsupported(format!(
                    "attention layer {layer} of a {}-layer KV cache",
                    cache.k.len()
                )))
            }
        };
        let (d, n_kv) = (cache.head_dim, cache.n_kv_heads);
        check(n_heads > 0 && n_heads % n_kv == 0, || {
            format!("{n_heads} query heads over {n_kv} KV heads")
        })?;
        check(n_tokens > 0, || "attention over zero tokens".into())?;
        // 16-byte cache slots per head row.
        let slots = d * cache.dtype.bytes() as u32 / 16;
        let kernel = Kernel::Attention;
        let mut wg = kernel.source().map_or(256, |s| s.default_workgroup_size);
        // A CPU adapter pays per invocation, and in the browser also for zero-initializing
        // the workgroup's arrays, in every group of 4 invocations on SwiftShader (in 64-wide
        // workgroups that initialization costs about as much as the attention itself): the
        // fewest invocations that cover a head row's vec4s there.
        if ctx.is_software() {
            wg = (d / 4).next_power_of_two().clamp(16, wg);
        }
        check(slots <= wg && d / 4 <= wg, || {
            format!("head_dim {d} needs more than {wg} threads per workgroup")
        })?;
        let pipeline = ctx.kernel(kernel, Some(wg))?;
        let choice = Self::choose(
            ctx,
            cache,
            n_heads,
            n_tokens,
            splits,
            combine_in_attend,
            scores,
        );
        let coop = matches!(choice.attend, Kernel::AttentionCoop(_));
        let window = u32::try_from(scores.window).unwrap_or(u32::MAX);
        check(scores.softcap >= 0.0 && scores.softcap.is_finite(), || {
            format!("an attention soft cap of {}", scores.softcap)
        })?;
        let coop_pipeline = match coop {
            true => Some(ctx.kernel(Kernel::AttentionCoop(d), Some(COOP_WG))?),
            false => None,
        };
        let grouped = choice.attend == Kernel::AttentionGroup;
        let group_pipeline = match grouped {
            true => Some(ctx.kernel(Kernel::AttentionGroup, Some(wg))?),
            false => None,
        };
        let q_bytes = u64::from(n_tokens) * u64::from(n_heads) * u64::from(d) * 4;
        let kv_bytes = u64::from(n_tokens) * u64::from(n_kv) * u64::from(d) * 4;
        need("attention q", io.q, q_bytes)?;
        need("attention out", io.out, q_bytes)?;
        need("attention k", io.k, kv_bytes)?;
        need("attention v", io.v, kv_bytes)?;

        let n_splits = choice.pieces;
        check((1..=MAX_SPLITS).contains(&n_splits), || {
            format!("{n_splits} attention splits (1 ..= {MAX_SPLITS})")
        })?;
        // Per piece: head_dim / 4 vec4 of acc, and one vec4 (m, l, 0, 0).
        let partial_vec4s = if n_splits > 1 {
            u64::from(n_tokens) * u64::from(n_heads) * u64::from(n_splits) * u64::from(d / 4 + 1)
        } else {
            1
        };
        let partials = ctx.scratch("attention.partials", partial_vec4s * 16)?;
        if let Some(r) = io.records {
            check(Self::quantizes(n_splits, d), || {
                format!("q8 records of an attention with {n_splits} pieces and head_dim {d}")
            })?;
            let cols = n_heads * d;
            need(
                "attention records",
                r,
                u64::from(n_tokens) * crate::q8::record_bytes(cols),
            )?;
        }
        if let Some((b, cols)) = io.norm {
            check(cols > 0 && cols % 32 == 0, || {
                format!(
                    "a norm record of rows of {cols} values in attention (needs a multiple of 32)"
                )
            })?;
            need(
                "attention norm record",
                b,
                crate::q8::norm_record_bytes(cols),
            )?;
        }
        if let Some(t) = rope {
            check(t.config.head_dim as u32 == d, || {
                format!(
                    "RoPE over heads of {} in attention over heads of {d}",
                    t.config.head_dim
                )
            })?;
        }
        // Without RoPE the table binding takes a buffer of its own (no other binding may
        // alias a writable one).
        let mut no_rope = None;
        let freqs: &wgpu::Buffer = match rope {
            Some(t) => &t.buffer,
            None => no_rope.insert(ctx.scratch("attention.no_rope", 16)?),
        };
        // Decode appends inside the attend dispatch, and natively combines its pieces there.
        let fused = n_tokens == 1;
        let in_attend = choice.attend == Kernel::AttentionDecode;
        let decode_pipeline = match in_attend {
            true => Some(ctx.kernel(Kernel::AttentionDecode, Some(wg))?),
            false => None,
        };
        check(io.norm.is_none() || in_attend, || {
            "a norm folded into the attention of a pass that does not decode in one dispatch".into()
        })?;
        let params = |mode| AttentionParams {
            mode,
            n_tokens,
            n_heads,
            n_kv_heads: n_kv,
            head_dim: d,
            max_ctx: cache.max_ctx,
            n_splits,
            kv_f16: u32::from(cache.dtype == KvDtype::F16),
            scale: 1.0 / (d as f32).sqrt(),
            min_split: MIN_SPLIT,
            rope_dim: rope.map_or(0, |t| t.config.rot_dim as u32),
            rope_neox: u32::from(rope.is_some_and(|t| t.config.style == RopeStyle::NeoX)),
            fused: u32::from(fused && mode == MODE_ATTEND),
            quantize: u32::from(
                io.records.is_some()
                    && (mode == MODE_COMBINE || (in_attend && mode == MODE_ATTEND)),
            ),
            norm_cols: io.norm.map_or(0, |(_, cols)| cols),
            window,
            softcap: scores.softcap,
            ..Default::default()
        };
        let max_dim = ctx.limits.max_compute_workgroups_per_dimension;
        check(n_tokens <= max_dim && n_heads <= max_dim, || {
            format!("attention over {n_tokens} tokens and {n_heads} heads in one dispatch")
        })?;
        // Binding 9 is writable (the combine's records), so it may not alias another binding:
        // the append and a combine without records bind a buffer of their own there.
        let spare = ctx.scratch("attention.spare", 16)?;
        let mut buffers = Vec::new();
        let mut dispatch = |mode: u32, [a, b, c]: [&wgpu::Buffer; 3], workgroups| {
            let u = ctx.uniform("attention.params", &params(mode));
            let bind_group = ctx.bind(
                &pipeline,
                &[
                    &u,
                    &position.buffer,
                    a,
                    b,
                    k_cache,
                    v_cache,
                    io.out,
                    &partials,
                    freqs,
                    c,
                ],
            );
            buffers.push(u);
            Dispatch {
                pipeline: pipeline.clone(),
                bind_group,
                workgroups,
            }
        };
        // The attend's bindings after its uniform (the fused decode's new key at 9).
        let attend_bindings = [
            &position.buffer,
            io.q,
            io.v,
            k_cache,
            v_cache,
            io.out,
            &partials,
            freqs,
            io.k,
        ];
        // The attend by KV head, bound as the attend.
        let group_attend = group_pipeline.map(|gp| {
            let u = ctx.uniform("attention.params", &params(MODE_ATTEND));
            let mut bindings = vec![&*u];
            bindings.extend(attend_bindings);
            let bind_group = ctx.bind(&gp, &bindings);
            (
                u,
                Dispatch {
                    pipeline: gp,
                    bind_group,
                    workgroups: [n_splits, n_kv, n_tokens],
                },
            )
        });
        // The attend on cooperative matrices: its own bindings.
        let coop_attend = coop_pipeline.map(|cp| {
            let u = ctx.uniform("attention.params", &params(MODE_ATTEND));
            let bind_group = ctx.bind(
                &cp,
                &[&u, &position.buffer, io.q, k_cache, v_cache, io.out, freqs],
            );
            (
                u,
                Dispatch {
                    pipeline: cp,
                    bind_group,
                    workgroups: [n_tokens.div_ceil(COOP_QUERIES), n_heads, 1],
                },
            )
        });
        let append_threads = n_tokens * n_kv * slots;
        let append = dispatch(
            MODE_APPEND,
            [io.k, io.v, &spare],
            grid(append_threads.div_ceil(wg), max_dim),
        );
        // The decode attend that combines its pieces itself: the attend's bindings, then the
        // records, the arrival counters (zero, and zero again after every dispatch) and the
        // norm record (without one, the RoPE table: read-only, like the norm).
        let mut arrivals = None;
        let decode_attend = match decode_pipeline {
            Some(dp) => {
                let u = ctx.uniform("attention.params", &params(MODE_ATTEND));
                let counts = arrivals.insert(ctx.storage_init(
                    "attention.arrivals",
                    &vec![0u8; (n_tokens * n_heads) as usize * 4],
                )?);
                let mut bindings = vec![&*u];
                bindings.extend(attend_bindings);
                bindings.extend([io.records.unwrap_or(&spare), &*counts]);
                bindings.push(io.norm.map_or(freqs, |(b, _)| b));
                let bind_group = ctx.bind(&dp, &bindings);
                Some((
                    u,
                    Dispatch {
                        pipeline: dp,
                        bind_group,
                        workgroups: [n_splits, n_heads, n_tokens],
                    },
                ))
            }
            None => None,
        };
        let (group_uniform, attend) = match coop_attend.or(group_attend).or(decode_attend) {
            Some((u, d)) => (Some(u), d),
            None => (
                None,
                dispatch(
                    MODE_ATTEND,
                    [io.q, io.v, io.k],
                    [n_splits, n_heads, n_tokens],
                ),
            ),
        };
        let combine = (n_splits > 1 && !in_attend).then(|| {
            let records = io.records.unwrap_or(&spare);
            dispatch(MODE_COMBINE, [io.q, io.q, records], [n_heads, n_tokens, 1])
        });
        buffers.extend(group_uniform);
        buffers.extend(no_rope);
        buffers.push(spare);
        Ok(AttentionOp {
            append,
            attend,
            combine,
            fused,
            n_splits,
            partials,
            _arrivals: arrivals,
            _buffers: buffers,
        })
    }

    /// The kernels an op for this call runs ([`AttentionOp::new`] builds what this says):
    /// on cooperative matrices for a prefill where [`Self::uses_coop`] (plain scores only), by
    /// KV head for a prefill where [`Self::by_kv_head`] and the context's
    /// [`crate::KernelPolicy::grouped_attention`] allow, the decode kernel that combines its
    /// pieces itself for a one-token attention cut into pieces where
    /// [`Self::combines_in_attend`], else the per-head attend (with a combine dispatch when
    /// cut into pieces).
    pub fn choose(
        ctx: &GpuContext,
        cache: &KvCache,
        n_heads: u32,
        n_tokens: u32,
        splits: Option<u32>,
        combine_in_attend: bool,
        scores: AttentionScores,
    ) -> AttentionChoice {
        let d = cache.head_dim;
        let pieces = Self::pieces(ctx, cache, n_tokens, n_heads, splits);
        let coop = scores == AttentionScores::default()
            && Self::uses_coop(ctx, cache.dtype, d, n_tokens, splits);
        let attend = if coop {
            Kernel::AttentionCoop(d)
        } else if ctx.policy.grouped_attention
            && Self::by_kv_head(n_tokens, n_heads, cache.n_kv_heads)
        {
            Kernel::AttentionGroup
        } else if n_tokens == 1 && pieces > 1 && combine_in_attend && Self::combines_in_attend(ctx)
        {
            Kernel::AttentionDecode
        } else {
            Kernel::Attention
        };
        AttentionChoice {
            attend,
            pieces,
            combine: pieces > 1 && attend != Kernel::AttentionDecode,
        }
    }

    /// The pieces an op for this call cuts each query's context into: `splits` if given, else
    /// one on cooperative matrices ([`Self::uses_coop`]), else [`Self::default_splits`].
    pub fn pieces(
        ctx: &GpuContext,
        cache: &KvCache,
        n_tokens: u32,
        n_heads: u32,
        splits: Option<u32>,
    ) -> u32 {
        if Self::uses_coop(ctx, cache.dtype, cache.head_dim, n_tokens, splits) {
            return 1;
        }
        splits.unwrap_or_else(|| Self::default_splits(ctx, cache, n_tokens, n_heads))
    }

    /// Pieces per query when the caller does not choose: decode one per
    /// `DECODE_KEYS_PER_SPLIT` positions of the cache; prefill as many as keep a few hundred
    /// workgroups busy. A CPU adapter has a few cores, which the heads and tokens already
    /// fill, and pays for every workgroup it starts, even one whose piece is past the text and
    /// returns at once (on SwiftShader a 4096-position cache cut into pieces made a decode
    /// about 4x slower than a short one): one piece.
    pub fn default_splits(ctx: &GpuContext, cache: &KvCache, n_tokens: u32, n_heads: u32) -> u32 {
        if ctx.is_software() {
            return 1;
        }
        let per_ctx = cache.max_ctx.div_ceil(DECODE_KEYS_PER_SPLIT);
        per_ctx
            .min(512u32.div_ceil(n_tokens.max(1) * n_heads.max(1)))
            .clamp(1, MAX_SPLITS)
    }

    /// Whether the attend of `n_tokens` runs on cooperative matrices ([`Kernel::AttentionCoop`],
    /// flash attention in one dispatch): for a prefill (several tokens) whose caller leaves the
    /// pieces to the op (`splits` None; a number asks for the split attend), over an f16 cache
    /// with heads (`d` values) of a multiple of 16 up to 128, on a device with the 16x16x16 f16
    /// cooperative matrices, 32-wide subgroups (a workgroup is one) and 10 KiB of workgroup
    /// memory.
    pub fn uses_coop(
        ctx: &GpuContext,
        dtype: KvDtype,
        d: u32,
        n_tokens: u32,
        splits: Option<u32>,
    ) -> bool {
        n_tokens > 1
            && splits.is_none()
            && ctx.policy.coop_attention
            && dtype == KvDtype::F16
            && d % 16 == 0
            && d <= COOP_MAX_HEAD_DIM
            && crate::matmul::has_coop_subgroups(ctx)
            && ctx.limits.max_compute_workgroup_storage_size >= COOP_WORKGROUP_BYTES
            && Kernel::AttentionCoop(d).source().is_some()
    }

    /// Whether the attend of `n_tokens` (prefill: more than one) runs by KV head, a workgroup
    /// for the 2 to 4 query heads that share one ([`Kernel::AttentionGroup`]): natively only
    /// (its workgroup arrays are the native sizes).
    pub fn by_kv_head(n_tokens: u32, n_heads: u32, n_kv_heads: u32) -> bool {
        let group = n_heads / n_kv_heads.max(1);
        !cfg!(target_arch = "wasm32") && n_tokens > 1 && (2..=4).contains(&group)
    }

    /// Whether a one-token attention cut into pieces combines them in the attend dispatch
    /// ([`Kernel::AttentionDecode`]: the last piece of each head to finish does it): natively,
    /// on a device with `@coherent` storage ([`crate::GpuFeatures::coherent`]), where
    /// naga makes WGSL's `storageBarrier` a device-scope fence; the hand-off between
    /// workgroups needs both (the WGSL specification's barrier is workgroup-scoped and has no
    /// `@coherent`: the browser keeps the combine's own dispatch).
    pub fn combines_in_attend(ctx: &GpuContext) -> bool {
        !cfg!(target_arch = "wasm32") && ctx.features.coherent
    }

    /// Whether a one-token attention of `n_heads` query heads over `cache`, cut as `splits`
    /// asks ([`Self::pieces`]), takes q, k and v as products of a norm record
    /// ([`AttentionBuffers::norm`]): where it combines its pieces in the attend dispatch, whose
    /// kernel alone has the binding (the others keep to WebGPU's 8 storage buffers a stage).
    pub fn takes_norm(
        ctx: &GpuContext,
        cache: &KvCache,
        n_heads: u32,
        splits: Option<u32>,
        combine_in_attend: bool,
    ) -> bool {
        combine_in_attend
            && Self::combines_in_attend(ctx)
            && Self::pieces(ctx, cache, 1, n_heads, splits) > 1
    }

    /// Whether an attention cut into `n_splits` pieces over heads of `head_dim` can write the
    /// q8 records of its output (the combine writes them, a head's values in whole blocks).
    pub fn quantizes(n_splits: u32, head_dim: u32) -> bool {
        n_splits > 1 && head_dim % 32 == 0
    }

    /// The buffer of the pieces' partial results, for tests that poison it: the combine must
    /// read only the pieces this pass wrote.
    pub fn partials(&self) -> &wgpu::Buffer {
        &self.partials
    }

    /// Append, attend and combine (one token: the attend dispatch appends).
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        if !self.fused {
            self.append.record(pass);
        }
        self.attend.record(pass);
        if let Some(c) = &self.combine {
            c.record(pass);
        }
    }

    /// Only write the new K/V rows into the cache.
    pub fn record_append(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.append.record(pass);
    }
}
