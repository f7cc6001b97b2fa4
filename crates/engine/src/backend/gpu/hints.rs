//! The wgpu backend's part of a model's runtime hints ([`crate::backend::hints`]): each kernel
//! hint mapped onto the choices this backend makes, narrowed by what the device has. They are
//! taken before the model loads, so every plan and tape is made with them.
//!
//! | hint | the kernels it picks here |
//! |---|---|
//! | `preferredKernels.matmul = f32` | every product on f32 activations: one token `matvec_<type>`, several `matmul_<type>` (no int8 `matvec_q8_*`, no f16 `matmul_f16`) |
//! | `matmul = f16` | products of several tokens on cooperative matrices (`dequant_f16_*` + `matmul_f16`, f16 operands, f32 sums) where the device has them (the default there); one token unchanged |
//! | `matmul = gemv_f16` | one-token products through the matrix-vector kernel `matvec_<type>` on f32 activations (no int8); there is no f16-arithmetic GEMV |
//! | `matmul = q4_fused` | one-token products read the quantized blocks with integer dot products (`matvec_q8_<type>`, int8 activations), for every type that has that kernel |
//! | `matmul = q4_fused_batched` | products of several tokens through the tiled kernel that decodes the weights in place (`matmul_<type>`, f32 operands), not through f16 tiles |
//! | `attention = tiled_f16`, `attentionTier = tiled` | a prefill over an f16 KV cache on cooperative matrices (`attention_coop_hd*`), where the device has them (the default there) |
//! | `attention = streaming_f16`, `attentionTier = streaming` | every attention cut into at least 2 pieces, each an online softmax over its keys, then combined (`attention`/`attention_group` + combine, or `attention_decode`); no tiles |
//! | `attention = basic_f32`, `attentionTier = basic` | every attention in one piece through the per-head kernel `attention` (no tiles, no KV-head groups, no pieces) |
//! | `rmsnorm = f32` | the RMSNorm kernels reduce through workgroup memory (their variant without subgroups) |
//! | `rmsnorm = f16_subgroup` | the RMSNorm kernels reduce through subgroups (the default where the device has them); in f32 |
//! | `rmsnorm = f16` | ignored: no f16 norm kernel |
//! | `dequant = *` | ignored: each weight is decoded by its own stored type's kernels |
//! | `softmax = f32` | already so: attention's softmax is an f32 online softmax |
//! | `softmax = f16_online` | ignored: no f16 softmax |
//! | `workgroupOverrides.rmsnorm = [x, 1, 1]` | the plain `rmsnorm` dispatch in workgroups of x (a power of two up to 256) |
//! | `workgroupOverrides.<other>` | ignored: the other kernels' layouts fix their workgroups |
//! | `disableFeatures: subgroups` | every kernel in its variant without subgroups (and so no cooperative matrices) |
//! | `disableFeatures: shader-f16` | no kernel with f16 arithmetic: no cooperative-matrix products or attention |
//!
//! `attentionTier` forces, so where it and `preferredKernels.attention` disagree the tier wins.
//! `disableFeatures` is applied first: a hint that needs a feature it turned off is ignored.
//! Exact arithmetic (`--exact`, or `forceF32Accumulation`) keeps every product on f32 operands,
//! so hints that ask for int8 or f16 operands are ignored under it. There is no auto-tuner, so
//! nothing takes precedence over `workgroupOverrides`.

use super::plan::GpuOp;
use super::GpuBackend;
use crate::backend::hints::{HintNote, HintOutcome, RuntimeOptimizations};
use crate::backend::Arithmetic;
use crate::formats::rdrr::{
    AttentionKernel, AttentionTier, DequantKernel, GpuFeature, MatmulKernel, RmsNormKernel,
    SoftmaxKernel,
};
use crate::gpu::kernels::Kernel;
use crate::gpu::matmul::{has_coop_subgroups, MatmulOp};
use crate::gpu::ops::{AttentionOp, KvCache};

/// Which classes of ops a hint changed the kernels of, with the hints that did (the plan's
/// lines say so).
#[derive(Clone, Debug, Default)]
pub(super) struct HintMarks {
    /// One-token products (int8 or f32 activations).
    one_token: Vec<String>,
    /// Products of several tokens where cooperative matrices were theirs.
    several: Vec<String>,
    attention: Vec<String>,
    /// The norms' reductions.
    norms: Vec<String>,
    /// The plain RMSNorm's workgroup.
    norm_width: Vec<String>,
    /// A feature hint took the device's cooperative matrices away.
    coop_off_by_feature: bool,
}

/// The most invocations the reductions' workgroup arrays hold (`REDUCE_N` natively).
const MAX_REDUCTION_WG: u32 = 256;

impl GpuBackend {
    /// [`crate::backend::Backend::apply_hints`] for this backend (see the module's table).
    pub(super) fn take_hints(&mut self, h: &RuntimeOptimizations, notes: &mut Vec<HintNote>) {
        let first = notes.len();
        self.disable_features(h, notes);
        self.matmul_hint(h, notes);
        self.attention_hints(h, notes);
        self.norm_hints(h, notes);
        let k = &h.preferred_kernels;
        if let Some(d) = k.dequant {
            let (kind, ours) = match d {
                DequantKernel::Q4k => ("Q4_K", "the q4_k kernels"),
                DequantKernel::Q8 => ("Q8_0", "the q8_0 kernels"),
                DequantKernel::F16Passthrough => ("F16", "the f16 kernels, read as stored"),
            };
            notes.push(HintNote::ignored(
                format!("preferredKernels.dequant = {d}"),
                format!(
                    "each weight is decoded inside the products by the kernels of its own stored \
                     type ({kind} weights by {ours}); another decoder would need the weights \
                     converted, which would change the model's numbers"
                ),
            ));
        }
        if let Some(s) = k.softmax {
            let hint = format!("preferredKernels.softmax = {s}");
            notes.push(match s {
                SoftmaxKernel::F32 => HintNote::default(
                    hint,
                    "every attention kernel takes an f32 online softmax over its keys",
                ),
                SoftmaxKernel::F16Online => HintNote::ignored(
                    hint,
                    "no f16 softmax: attention keeps its f32 online softmax",
                ),
            });
        }
        self.workgroup_overrides(h, notes);
        self.hint_notes = notes[first..].to_vec();
        self.tapes.clear();
    }

    /// What became of the hints this backend was given ([`GpuBackend::take_hints`]).
    pub fn hint_notes(&self) -> &[HintNote] {
        &self.hint_notes
    }

    /// Record an applied hint against the ops it changed.
    fn mark(&mut self, note: &HintNote, class: fn(&mut HintMarks) -> &mut Vec<String>) {
        if note.outcome == HintOutcome::Applied {
            class(&mut self.hint_marks).push(note.hint.clone());
        }
    }

    fn disable_features(&mut self, h: &RuntimeOptimizations, notes: &mut Vec<HintNote>) {
        for f in &h.disable_features {
            let hint = format!("disableFeatures: {}", f.as_str());
            let coop_before = has_coop_subgroups(&self.ctx);
            let note = match f {
                GpuFeature::Subgroups if self.ctx.features.subgroups => {
                    let coop = has_coop_subgroups(&self.ctx);
                    self.ctx.features.subgroups = false;
                    HintNote::applied(
                        hint,
                        format!(
                            "every kernel in its variant without subgroup operations (reductions \
                             through workgroup memory){}",
                            if coop {
                                "; the cooperative-matrix products and attention, which need \
                                 32-wide subgroups, are off too"
                            } else {
                                ""
                            }
                        ),
                    )
                }
                GpuFeature::Subgroups => HintNote::default(hint, "the device has no subgroups"),
                GpuFeature::ShaderF16 if self.ctx.features.shader_f16 => {
                    let coop = self.ctx.features.cooperative_matrix;
                    self.ctx.features.shader_f16 = false;
                    self.ctx.features.cooperative_matrix = false;
                    let cache = "an f16 KV cache is packed with pack2x16float, which needs no \
                                 feature, and stays as the arithmetic chose";
                    match coop {
                        true => HintNote::applied(
                            hint,
                            format!(
                                "no kernel takes f16 arithmetic: the cooperative-matrix products \
                                 and attention (f16 operands) are off; {cache}"
                            ),
                        ),
                        false => HintNote::default(
                            hint,
                            format!(
                                "no kernel took f16 arithmetic here (the device has no \
                                 cooperative matrices); the f16 variants are off now; {cache}"
                            ),
                        ),
                    }
                }
                GpuFeature::ShaderF16 => HintNote::default(hint, "the device has no shader-f16"),
                GpuFeature::Other(_) => HintNote::ignored(
                    hint,
                    "not a feature tritium's kernels use (they use subgroups and shader-f16)",
                ),
            };
            // The plan's lines name the norms' reductions, and the products and attention
            // where cooperative matrices were theirs.
            if coop_before && note.outcome == HintOutcome::Applied {
                self.mark(&note, |m| &mut m.several);
                self.mark(&note, |m| &mut m.attention);
                self.hint_marks.coop_off_by_feature = true;
            }
            if matches!(f, GpuFeature::Subgroups) {
                self.mark(&note, |m| &mut m.norms);
            }
            notes.push(note);
        }
    }

    fn matmul_hint(&mut self, h: &RuntimeOptimizations, notes: &mut Vec<HintNote>) {
        let Some(k) = h.preferred_kernels.matmul else {
            return;
        };
        let hint = format!("preferredKernels.matmul = {k}");
        let exact = self.arithmetic == Arithmetic::Exact;
        let coop = self.ctx.policy.coop_products && has_coop_subgroups(&self.ctx);
        let int_dot = self.rules.int_dot;
        let note = match k {
            MatmulKernel::F32 if !int_dot && !coop => HintNote::default(
                hint,
                "every product takes f32 activations here already (no int8 decode, no \
                 cooperative matrices)",
            ),
            MatmulKernel::F32 => {
                self.rules.int_dot = false;
                self.ctx.policy.coop_products = false;
                HintNote::applied(
                    hint,
                    "every product on f32 activations: one token through matvec_<type>, several \
                     through matmul_<type> (weights decoded in the kernel); no int8 activations \
                     (matvec_q8_*), no f16 operands (matmul_f16)",
                )
            }
            MatmulKernel::F16 if exact => HintNote::ignored(
                hint,
                "exact arithmetic (--exact or forceF32Accumulation) keeps f32 operands",
            ),
            MatmulKernel::F16 if !coop => HintNote::ignored(
                hint,
                "the device has no cooperative matrices (16x16x16 f16 with 32-wide subgroups and \
                 shader-f16): products keep f32 operands; and no f16 matrix-vector kernel exists \
                 for one token",
            ),
            MatmulKernel::F16 => HintNote::default(
                hint,
                "products of several tokens take cooperative matrices (dequant_f16_* + \
                 matmul_f16: f16 operands, f32 sums); one-token products are unchanged",
            ),
            MatmulKernel::GemvF16 if !int_dot => HintNote::default(
                hint,
                "one-token products take matvec_<type> on f32 activations already (no f16-arithmetic \
                 GEMV exists)",
            ),
            MatmulKernel::GemvF16 => {
                self.rules.int_dot = false;
                HintNote::applied(
                    hint,
                    "one-token products through the matrix-vector kernel matvec_<type> on f32 \
                     activations (weights read as stored, f16 for F16 weights) instead of int8 \
                     integer dot products; no f16-arithmetic GEMV exists",
                )
            }
            MatmulKernel::Q4Fused if exact => HintNote::ignored(
                hint,
                "exact arithmetic (--exact or forceF32Accumulation) keeps f32 activations; the \
                 integer-dot kernels take int8",
            ),
            MatmulKernel::Q4Fused if int_dot => HintNote::default(
                hint,
                "one-token products read the quantized blocks with integer dot products \
                 (matvec_q8_<type>) already",
            ),
            MatmulKernel::Q4Fused => {
                self.rules.int_dot = true;
                HintNote::applied(
                    hint,
                    "one-token products read the quantized blocks with integer dot products \
                     (matvec_q8_<type>, int8 activations) for every type with that kernel",
                )
            }
            MatmulKernel::Q4FusedBatched if !coop => HintNote::default(
                hint,
                "products of several tokens take the tiled kernel that decodes the weights in \
                 place (matmul_<type>) already: the device has no cooperative matrices",
            ),
            MatmulKernel::Q4FusedBatched => {
                self.ctx.policy.coop_products = false;
                HintNote::applied(
                    hint,
                    "products of several tokens through the tiled kernel that decodes the weights \
                     in place (matmul_<type>, f32 operands) instead of f16 tiles (dequant_f16_* + \
                     matmul_f16)",
                )
            }
        };
        if int_dot != self.rules.int_dot {
            self.mark(&note, |m| &mut m.one_token);
        }
        if coop && !self.ctx.policy.coop_products {
            self.mark(&note, |m| &mut m.several);
        }
        notes.push(note);
    }

    fn attention_hints(&mut self, h: &RuntimeOptimizations, notes: &mut Vec<HintNote>) {
        let preferred = h.preferred_kernels.attention.map(|k| match k {
            AttentionKernel::TiledF16 => AttentionTier::Tiled,
            AttentionKernel::StreamingF16 => AttentionTier::Streaming,
            AttentionKernel::BasicF32 => AttentionTier::Basic,
        });
        let mut asks = Vec::new();
        if let Some(k) = h.preferred_kernels.attention {
            let hint = format!("preferredKernels.attention = {k}");
            match h.attention_tier {
                Some(t) if Some(t) != preferred => notes.push(HintNote::ignored(
                    hint,
                    format!("attentionTier = {t} forces the attention's tier"),
                )),
                _ => asks.push((hint, preferred)),
            }
        }
        if let Some(t) = h.attention_tier {
            asks.push((format!("attentionTier = {t}"), Some(t)));
        }
        for (hint, tier) in asks {
            let Some(tier) = tier else { continue };
            let note = self.attention_tier(hint, tier);
            self.mark(&note, |m| &mut m.attention);
            notes.push(note);
        }
    }

    fn attention_tier(&mut self, hint: String, tier: AttentionTier) -> HintNote {
        match tier {
            AttentionTier::Tiled if self.arithmetic == Arithmetic::Exact => HintNote::ignored(
                hint,
                "exact arithmetic (--exact or forceF32Accumulation) keeps f32 operands; the tiles \
                 take f16",
            ),
            AttentionTier::Tiled if !has_coop_subgroups(&self.ctx) => HintNote::ignored(
                hint,
                "the device has no cooperative matrices (16x16x16 f16 with 32-wide subgroups and \
                 shader-f16): attention keeps its other kernels",
            ),
            AttentionTier::Tiled => {
                self.attention_tier = Some(tier);
                HintNote::default(
                    hint,
                    "a prefill over an f16 KV cache (heads of a multiple of 16, up to 128) attends \
                     on cooperative matrices (attention_coop_hd*); an f32 cache keeps the other \
                     kernels",
                )
            }
            AttentionTier::Streaming => {
                self.attention_tier = Some(tier);
                self.ctx.policy.coop_attention = false;
                HintNote::applied(
                    hint,
                    "every attention cuts each query's context into at least 2 pieces, each an \
                     online softmax over its keys, then combines them (attention or \
                     attention_group with a combine, or attention_decode); no tiles; the KV \
                     cache stays the type the arithmetic chose",
                )
            }
            AttentionTier::Basic => {
                self.attention_tier = Some(tier);
                self.ctx.policy.coop_attention = false;
                self.ctx.policy.grouped_attention = false;
                HintNote::applied(
                    hint,
                    "every attention in one piece through the per-head kernel (attention), in \
                     f32: no tiles, no KV-head groups, no pieces",
                )
            }
        }
    }

    fn norm_hints(&mut self, h: &RuntimeOptimizations, notes: &mut Vec<HintNote>) {
        let Some(k) = h.preferred_kernels.rmsnorm else {
            return;
        };
        let hint = format!("preferredKernels.rmsnorm = {k}");
        let subgroups = self.ctx.features.subgroups;
        let note = match k {
            RmsNormKernel::F32 if !subgroups => HintNote::default(
                hint,
                "the RMSNorm kernels reduce through workgroup memory in f32 already (no \
                 subgroups here)",
            ),
            RmsNormKernel::F32 => {
                self.ctx.policy.norm_subgroups = false;
                HintNote::applied(
                    hint,
                    "the RMSNorm kernels (rmsnorm, rms_norm+quantize*) reduce through workgroup \
                     memory, in f32, instead of through subgroups",
                )
            }
            RmsNormKernel::F16 => {
                HintNote::ignored(hint, "no f16 RMSNorm kernel: norms compute in f32")
            }
            RmsNormKernel::F16Subgroup if subgroups => {
                self.ctx.policy.norm_subgroups = true;
                HintNote::default(
                    hint,
                    "the RMSNorm kernels reduce through subgroups (in f32: there is no f16 norm)",
                )
            }
            RmsNormKernel::F16Subgroup => HintNote::ignored(
                hint,
                "no subgroups (the device has none, or disableFeatures turned them off): the \
                 norms reduce through workgroup memory",
            ),
        };
        self.mark(&note, |m| &mut m.norms);
        notes.push(note);
    }

    fn workgroup_overrides(&mut self, h: &RuntimeOptimizations, notes: &mut Vec<HintNote>) {
        let rms_norm = Kernel::RmsNorm.label();
        let max = self
            .ctx
            .limits
            .max_compute_invocations_per_workgroup
            .min(MAX_REDUCTION_WG);
        for (name, &[x, y, z]) in &h.workgroup_overrides {
            let hint = format!("workgroupOverrides.{name} = [{x}, {y}, {z}]");
            let note = if *name == rms_norm {
                if y != 1 || z != 1 {
                    HintNote::ignored(hint, "rmsnorm's workgroups are one-dimensional: [x, 1, 1]")
                } else if !x.is_power_of_two() || x > max {
                    HintNote::ignored(
                        hint,
                        format!(
                            "rmsnorm's reduction needs a power of two from 1 to {max} \
                             invocations (this device's limit, at most {MAX_REDUCTION_WG})"
                        ),
                    )
                } else {
                    self.ctx.policy.rms_norm_workgroup = Some(x);
                    self.hint_marks.norm_width.push(hint.clone());
                    HintNote::applied(
                        hint,
                        format!(
                            "the plain RMSNorm dispatch (rmsnorm) in workgroups of {x}, one per \
                             row; the norms fused into other ops keep their layouts"
                        ),
                    )
                }
            } else if Kernel::all().iter().any(|k| k.label() == *name) {
                HintNote::ignored(
                    hint,
                    format!(
                        "{name}'s workgroup is fixed by its layout (the rows, tiles or subgroup \
                         split each invocation takes); only {rms_norm} takes an override"
                    ),
                )
            } else {
                HintNote::ignored(
                    hint,
                    format!(
                        "no kernel of that name (tritium's are named like rmsnorm, matmul_f16, \
                         matvec_q4_k, attention); only {rms_norm} takes an override"
                    ),
                )
            };
            notes.push(note);
        }
    }

    /// The pieces every attention over `cache` of `n_tokens` tokens and `n_heads` heads is cut
    /// into (`None`: the op chooses): a caller's [`GpuBackend::set_attention_splits`], else the
    /// hinted tier's (basic: one; streaming: the op's own count, at least 2).
    pub(super) fn attention_splits_for(
        &self,
        cache: &KvCache,
        n_tokens: usize,
        n_heads: usize,
    ) -> Option<u32> {
        if self.attention_splits.is_some() {
            return self.attention_splits;
        }
        match self.attention_tier {
            Some(AttentionTier::Basic) => Some(1),
            Some(AttentionTier::Streaming) => Some(
                AttentionOp::default_splits(&self.ctx, cache, n_tokens as u32, n_heads as u32)
                    .max(2),
            ),
            Some(AttentionTier::Tiled) | None => None,
        }
    }

    /// The kernel an op of a plan runs, and the hints that changed it, for the plan's lines
    /// (products, norms and attention: the ops hints choose kernels for).
    pub(super) fn kernel_of(&self, op: &GpuOp, tokens: usize) -> Option<String> {
        let lower = |k: Kernel| k.label();
        let m = &self.hint_marks;
        let none: Vec<String> = Vec::new();
        // Hints that changed the kernel of a product of `rows` tokens through `w`: one-token
        // products where an integer-dot kernel exists for it (the int8 choice is theirs),
        // several where it converts to f16 tiles (the cooperative-matrix choice is theirs).
        let product = |w: crate::backend::Weight, rows: usize| {
            let gw = self.weight(w);
            if rows == 1 && crate::gpu::q8::has_q8_matvec(gw.dtype, gw.cols) {
                m.one_token.clone()
            } else if rows > 1
                && Kernel::DequantF16(gw.dtype).source().is_some()
                && gw.cols % 32 == 0
            {
                m.several.clone()
            } else {
                none.clone()
            }
        };
        let (kernel, marks) = match *op {
            GpuOp::Matmul(w, _, _, rows) | GpuOp::MatmulShared(w, _, _, rows) => {
                let gw = self.weight(w);
                let coop =
                    u32::try_from(rows).is_ok_and(|n| MatmulOp::takes_coop(&self.ctx, gw, n));
                let kernel = match (coop, matches!(op, GpuOp::MatmulShared(..))) {
                    (true, true) => lower(Kernel::MatmulF16(false)),
                    (true, false) => format!(
                        "{} + {}",
                        lower(Kernel::DequantF16(gw.dtype)),
                        lower(Kernel::MatmulF16(false))
                    ),
                    (false, _) if rows == 1 => lower(Kernel::Matvec(gw.dtype)),
                    (false, _) => lower(Kernel::Matmul(gw.dtype)),
                };
                (kernel, product(w, rows))
            }
            GpuOp::MatmulAdd(w, _, _, rows) => {
                let gw = self.weight(w);
                let kernel = match rows {
                    1 => lower(Kernel::MatvecAdd(gw.dtype)),
                    _ => lower(Kernel::MatmulF16(true)),
                };
                (kernel, product(w, rows))
            }
            GpuOp::MatvecQ8(w, _, _, add, _) => {
                let t = self.weight(w).dtype;
                let k = if add {
                    Kernel::MatvecQ8Add(t)
                } else {
                    Kernel::MatvecQ8(t)
                };
                (lower(k), m.one_token.clone())
            }
            GpuOp::MatvecQ8Pair(w, ..) => (
                lower(Kernel::MatvecQ8Pair(self.weight(w).dtype)),
                m.one_token.clone(),
            ),
            GpuOp::MatvecQ8AddNorm(w, ..) => (
                lower(Kernel::MatvecQ8AddNorm(self.weight(w).dtype)),
                m.one_token.clone(),
            ),
            GpuOp::RmsNorm(..) => {
                let wg = crate::gpu::ops::workgroup_size(&self.ctx, Kernel::RmsNorm);
                let mut marks = m.norms.clone();
                marks.extend(m.norm_width.iter().cloned());
                (
                    format!("{}, {wg} wide", self.norm_kernel(Kernel::RmsNorm, wg)),
                    marks,
                )
            }
            GpuOp::RmsNormQuantizeQ8(..) | GpuOp::RmsNormQuantize(..) => {
                let k = match op {
                    GpuOp::RmsNormQuantizeQ8(..) => Kernel::RmsNormQuantizeQ8,
                    _ => Kernel::RmsNormQuantize,
                };
                let wg = k.source().map_or(64, |s| s.default_workgroup_size);
                (self.norm_kernel(k, wg), m.norms.clone())
            }
            GpuOp::Attention(_, _, heads, _, _, _, scores) => {
                let cache = self.caches.first()?;
                let splits = self.attention_splits_for(cache, tokens, heads);
                let (n, h) = (tokens as u32, heads as u32);
                let c = AttentionOp::choose(
                    &self.ctx,
                    cache,
                    h,
                    n,
                    splits,
                    self.combine_in_attend,
                    scores.scores(),
                );
                let mut kernel = lower(c.attend);
                if c.pieces > 1 {
                    kernel += &format!(", {} pieces", c.pieces);
                }
                if c.combine {
                    kernel += " + combine";
                }
                // A tier changed this attention where it cut it into other pieces, or kept it
                // off the KV-head groups or the cooperative matrices it would have taken.
                let pieces = AttentionOp::pieces(&self.ctx, cache, n, h, self.attention_splits);
                let ungrouped = !self.ctx.policy.grouped_attention
                    && AttentionOp::by_kv_head(n, h, cache.n_kv_heads);
                let uncoop = n > 1
                    && cache.dtype == crate::gpu::ops::KvDtype::F16
                    && (m.coop_off_by_feature
                        || (!self.ctx.policy.coop_attention && has_coop_subgroups(&self.ctx)));
                let changed =
                    !m.attention.is_empty() && (pieces != c.pieces || ungrouped || uncoop);
                (
                    kernel,
                    match changed {
                        true => m.attention.clone(),
                        false => none.clone(),
                    },
                )
            }
            _ => return None,
        };
        Some(match marks.is_empty() {
            true => kernel,
            false => format!("{kernel} (hinted: {})", marks.join(", ")),
        })
    }

    /// A norm kernel's name with the reduction its variant takes.
    fn norm_kernel(&self, k: Kernel, wg: u32) -> String {
        let reduction = match self.ctx.variant_for(k, wg).subgroups {
            true => "subgroup reduction",
            false => "workgroup-memory reduction",
        };
        format!("{} ({reduction})", k.label())
    }
}
