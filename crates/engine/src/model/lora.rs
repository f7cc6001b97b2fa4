//! LoRA adapters: low-rank updates `y = W x + s * B (A x)` of a base model's projections,
//! applied at run time as ops of their own while the base weights stay as loaded; several at
//! once, each with its own scale, chosen per request ([`super::Model::set_adapters`]).
//!
//! What a file holds ([`AdapterData`]) is read into f32 matrices and checked against the base
//! model's configuration before anything is uploaded: llama.cpp's GGUF adapters
//! (`general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha`, tensors
//! `blk.N.<weight>.weight.lora_a|lora_b` with `lora_a: (rank, cols)` and `lora_b: (rows,
//! rank)` as the base weight's `(rows, cols)`) and RDRR adapter manifests (`adapterType:
//! lora`, `loraConfig {rank, alpha}`, tensors `layers.N.<module>.lora_a|lora_b` of shapes
//! `[cols, rank]` and `[rank, rows]`: `x . A . B`, transposed here).
//!
//! The scale of a pair is `s = scale * alpha / rank` (`scale` the caller's, `rank` the pair's
//! `lora_b` rows; `s = scale` where the adapter states no alpha), as llama.cpp and peft compute
//! it. `alpha / rank` is folded into `B` when it is uploaded; the caller's scale is a vector of
//! the adapter's own that a pass multiplies `A x` by, so changing it rewrites `rank` values
//! and re-plans nothing.

use super::config::{Arch, ModelConfig};
use crate::backend::{Backend, Names, Tensor, Weight, WeightData};
use crate::error::ModelError;
use crate::pass::Pass;
use crate::quant::GgmlType;
use crate::Error;

/// The projections an adapter may update.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// The base weight's GGUF name in block `blk.N.` (without `.weight`).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Target::Q => "attn_q",
            Target::K => "attn_k",
            Target::V => "attn_v",
            Target::O => "attn_output",
            Target::Gate => "ffn_gate",
            Target::Up => "ffn_up",
            Target::Down => "ffn_down",
        }
    }

    /// The Hugging Face module name (`q_proj`, ...), as peft's `target_modules` and RDRR
    /// adapters name it.
    pub fn module_name(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
        }
    }

    /// The base weight's `(rows, cols)`: its output and input widths.
    pub fn shape(self, c: &ModelConfig) -> (usize, usize) {
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        match self {
            Target::Q => (q_dim, c.dim),
            Target::K | Target::V => (kv_dim, c.dim),
            Target::O => (c.dim, q_dim),
            Target::Gate | Target::Up => (c.ffn_dim, c.dim),
            Target::Down => (c.dim, c.ffn_dim),
        }
    }
}

/// Where a file's matrix pair lands: one target, or several stacked in its rows (Phi-3's
/// `attn_qkv`, and its `ffn_up` of gate and up when `lora_b` has both's rows), whose `lora_b`
/// rows split as the base weight's do.
fn targets_of(name: &str, c: &ModelConfig, b_rows: usize) -> Option<Vec<Target>> {
    let one = Target::ALL
        .into_iter()
        .find(|t| name == t.gguf_name() || name == t.module_name());
    match (one, name) {
        (Some(Target::Up), _) if c.arch == Arch::Phi3 && b_rows == 2 * c.ffn_dim => {
            Some(vec![Target::Gate, Target::Up])
        }
        (Some(t), _) => Some(vec![t]),
        (None, "attn_qkv" | "qkv_proj") => Some(vec![Target::Q, Target::K, Target::V]),
        (None, "gate_up_proj") => Some(vec![Target::Gate, Target::Up]),
        _ => None,
    }
}

/// One low-rank pair in f32, row-major as the base weight's products take it: `a: (rank,
/// cols)`, `b: (rows, rank)` with `alpha / rank` already multiplied in.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraPair {
    pub layer: usize,
    pub target: Target,
    pub rank: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
}

/// An adapter read from its file and checked against a base model.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterData {
    /// What the adapter is called (its file or folder name).
    pub name: String,
    pub pairs: Vec<LoraPair>,
}

/// How an adapter file names and lays out its tensors.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// llama.cpp's: `blk.N.attn_q.weight.lora_a`, shapes as the base weight's products take
    /// them.
    Gguf,
    /// RDRR's: `layers.N.q_proj.lora_a`, `x . A . B` (shapes `[cols, rank]`, `[rank, rows]`).
    Rdrr,
}

/// A tensor of an adapter file: its name and shape, outermost dimension first.
#[derive(Clone, Debug)]
pub struct AdapterTensor {
    pub name: String,
    pub shape: Vec<u64>,
}

pub(crate) fn bad(name: &str, reason: impl Into<String>) -> Error {
    ModelError::Adapter {
        adapter: name.to_string(),
        reason: reason.into(),
    }
    .into()
}

impl AdapterData {
    /// Read and check an adapter: `tensors` its tensor list, `read(name)` a tensor's values in
    /// f32 (row-major, as `shape` says), `alpha` its `lora_alpha` (0 or `None`: the pairs are
    /// not scaled by `alpha / rank`). Every pair must match `base`'s shapes; a tensor that is
    /// neither half of a pair of a projection the blocks have is an error naming it (llama.cpp's
    /// norm vectors excepted, which are skipped as llama.cpp skips them).
    pub fn read(
        name: &str,
        layout: Layout,
        tensors: &[AdapterTensor],
        alpha: Option<f32>,
        base: &ModelConfig,
        mut read: impl FnMut(&str) -> Result<Vec<f32>, Error>,
    ) -> Result<AdapterData, Error> {
        if base.arch == Arch::BitNet {
            return Err(bad(
                name,
                "adapters apply to the Llama family and Gemma; BitNet's ternary layers take none",
            ));
        }
        let alpha = alpha.filter(|a| *a != 0.0);
        if let Some(a) = alpha {
            if !a.is_finite() {
                return Err(bad(name, format!("lora alpha {a} is not a number")));
            }
        }
        // Pair the halves by their base name (`blk.3.attn_q.weight`, `layers.3.q_proj`).
        let mut pairs: std::collections::BTreeMap<&str, [Option<&AdapterTensor>; 2]> =
            Default::default();
        for t in tensors {
            let (stem, half) = match (
                t.name.strip_suffix(".lora_a"),
                t.name.strip_suffix(".lora_b"),
            ) {
                (Some(s), _) => (s, 0),
                (_, Some(s)) => (s, 1),
                _ if t.name.ends_with("_norm.weight") => {
                    // llama.cpp leaves an adapter's norm vectors out too.
                    continue;
                }
                _ => {
                    return Err(bad(
                        name,
                        format!("tensor '{}' is not half of a lora_a/lora_b pair", t.name),
                    ))
                }
            };
            let slot = &mut pairs.entry(stem).or_default()[half];
            if slot.is_some() {
                return Err(bad(name, format!("tensor '{}' is listed twice", t.name)));
            }
            *slot = Some(t);
        }
        if pairs.is_empty() {
            return Err(bad(name, "the adapter holds no lora_a/lora_b pairs"));
        }
        let mut out = Vec::new();
        for (stem, halves) in pairs {
            let [Some(ta), Some(tb)] = halves else {
                return Err(bad(
                    name,
                    format!("'{stem}' has only one of lora_a and lora_b"),
                ));
            };
            let (layer, module) = parse_stem(stem, layout)
                .ok_or_else(|| bad(name, format!("'{stem}' is not a projection of a block (tritium applies adapters to the blocks' q, k, v, o, gate, up and down projections)")))?;
            if layer >= base.n_layers {
                return Err(bad(
                    name,
                    format!(
                        "'{stem}' is in block {layer}; the base model has {} blocks (a different base model?)",
                        base.n_layers
                    ),
                ));
            }
            // Each half as (outer, inner) of the product's orientation: a (rank, cols), b
            // (rows, rank); RDRR's are the transposes.
            let dims = |t: &AdapterTensor| -> Option<(usize, usize)> {
                match t.shape[..] {
                    [outer, inner] => {
                        Some((usize::try_from(outer).ok()?, usize::try_from(inner).ok()?))
                    }
                    _ => None,
                }
            };
            let (Some(da), Some(db)) = (dims(ta), dims(tb)) else {
                return Err(bad(
                    name,
                    format!("'{stem}': lora_a and lora_b must be matrices"),
                ));
            };
            let (a_shape, b_shape) = match layout {
                Layout::Gguf => (da, db),
                Layout::Rdrr => ((da.1, da.0), (db.1, db.0)),
            };
            let targets = targets_of(module, base, b_shape.0).ok_or_else(|| {
                bad(
                    name,
                    format!("'{stem}': the base model has no projection '{module}'"),
                )
            })?;
            let rows: Vec<usize> = targets.iter().map(|t| t.shape(base).0).collect();
            let (total_rows, cols) = (rows.iter().sum::<usize>(), targets[0].shape(base).1);
            let rank = a_shape.0;
            if rank == 0 || a_shape.1 != cols || b_shape != (total_rows, rank) {
                let (sa, sb) = (&ta.shape, &tb.shape);
                return Err(bad(
                    name,
                    format!(
                        "'{stem}' has lora_a {sa:?} and lora_b {sb:?}; the base model's \
                         {total_rows}x{cols} projection needs rank x {cols} and \
                         {total_rows} x rank (a different base model?)"
                    ),
                ));
            }
            let mut a = read(&ta.name)?;
            let mut b = read(&tb.name)?;
            if a.len() != rank * cols || b.len() != total_rows * rank {
                return Err(bad(
                    name,
                    format!("'{stem}': the tensors hold other element counts than their shapes"),
                ));
            }
            if let Some(v) = a.iter().chain(&b).find(|v| !v.is_finite()) {
                return Err(bad(name, format!("'{stem}' holds {v}")));
            }
            if layout == Layout::Rdrr {
                a = transpose(&a, cols, rank);
                b = transpose(&b, rank, total_rows);
            }
            if let Some(alpha) = alpha {
                let s = alpha / rank as f32;
                b.iter_mut().for_each(|v| *v *= s);
            }
            let mut row = 0;
            for (&target, &n) in targets.iter().zip(&rows) {
                out.push(LoraPair {
                    layer,
                    target,
                    rank,
                    a: a.clone(),
                    b: b[row * rank..(row + n) * rank].to_vec(),
                });
                row += n;
            }
        }
        out.sort_by_key(|p| (p.layer, p.target));
        if let Some(w) = out
            .windows(2)
            .find(|w| (w[0].layer, w[0].target) == (w[1].layer, w[1].target))
        {
            return Err(bad(
                name,
                format!(
                    "block {} {} is updated by two pairs",
                    w[0].layer,
                    w[0].target.module_name()
                ),
            ));
        }
        Ok(AdapterData {
            name: name.to_string(),
            pairs: out,
        })
    }

    /// The largest rank of the adapter's pairs.
    pub fn max_rank(&self) -> usize {
        self.pairs.iter().map(|p| p.rank).max().unwrap_or(0)
    }
}

/// `(rows, cols)` row-major to `(cols, rows)`.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// `blk.3.attn_q.weight` (GGUF) or `layers.3.q_proj` (RDRR; also with the Hugging Face
/// prefixes `model.layers.3.self_attn.q_proj`) as `(3, module)`.
fn parse_stem(stem: &str, layout: Layout) -> Option<(usize, &str)> {
    match layout {
        Layout::Gguf => {
            let rest = stem.strip_prefix("blk.")?;
            let (layer, rest) = rest.split_once('.')?;
            Some((layer.parse().ok()?, rest.strip_suffix(".weight")?))
        }
        Layout::Rdrr => {
            let rest = stem
                .strip_prefix("model.layers.")
                .or_else(|| stem.strip_prefix("layers."))?;
            let (layer, rest) = rest.split_once('.')?;
            let module = rest
                .strip_prefix("self_attn.")
                .or_else(|| rest.strip_prefix("mlp."))
                .unwrap_or(rest);
            Some((layer.parse().ok()?, module))
        }
    }
}

/// The rank of an uploaded pair is a multiple of this.
const RANK_ALIGN: usize = 32;

/// One uploaded pair.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Term {
    layer: usize,
    target: Target,
    rank: usize,
    a: Weight,
    b: Weight,
}

/// An adapter on a backend.
pub struct Adapter {
    pub name: String,
    /// The largest rank of its pairs as uploaded (padded to a multiple of 32).
    pub max_rank: usize,
    terms: Vec<Term>,
    /// The caller's scale over `max_rank` values (what `A x` is multiplied by).
    scale: Tensor,
    /// The scale the vector holds now.
    scale_now: f32,
}

/// Which loaded adapter (an index into the model's list).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdapterId(pub usize);

/// The adapters a model has loaded and the ones its passes apply.
#[derive(Default)]
pub struct Adapters {
    pub loaded: Vec<Adapter>,
    /// Applied, in order, with their scales.
    active: Vec<(AdapterId, f32)>,
    /// `A x`: `(max_batch, largest rank)`; `B (A x)`: `(max_batch, widest projection)`.
    scratch: Option<(Tensor, Tensor, usize)>,
}

impl Adapters {
    /// Upload an adapter already checked against `c` ([`AdapterData::read`]).
    pub fn load<B: Backend>(
        &mut self,
        b: &mut B,
        c: &ModelConfig,
        data: &AdapterData,
        names: &mut Names,
    ) -> Result<AdapterId, Error> {
        // Ranks padded to whole 32-value chunks (zero rows of A, zero columns of B: the update
        // is unchanged) so that every backend's products take B (CUDA's rows are whole chunks).
        let padded = |rank: usize| rank.next_multiple_of(RANK_ALIGN);
        let max_rank = padded(data.max_rank());
        let id = self.loaded.len();
        let mut terms = Vec::with_capacity(data.pairs.len());
        for p in &data.pairs {
            let (rows, cols) = p.target.shape(c);
            let rank = padded(p.rank);
            let mut a = p.a.clone();
            a.resize(rank * cols, 0.0);
            let mut bm = vec![0f32; rows * rank];
            for (dst, src) in bm.chunks_exact_mut(rank).zip(p.b.chunks_exact(p.rank)) {
                dst[..p.rank].copy_from_slice(src);
            }
            let mut upload = |half: &str, v: &[f32], rows: usize, cols: usize| {
                let label = format!("lora{id}.blk.{}.{}.{half}", p.layer, p.target.gguf_name());
                let w = b.load_weight(WeightData {
                    name: &label,
                    dtype: GgmlType::F32,
                    rows,
                    cols,
                    bytes: bytemuck::cast_slice(v),
                    scale: None,
                    layer: None,
                    location: None,
                })?;
                names.weight_named(w, &label, GgmlType::F32, rows, cols);
                Ok::<_, Error>(w)
            };
            terms.push(Term {
                layer: p.layer,
                target: p.target,
                rank,
                a: upload("lora_a", &a, rank, cols)?,
                b: upload("lora_b", &bm, rows, rank)?,
            });
        }
        let label = format!("lora{id}.scale");
        let scale = b.load_vector(&label, &vec![1.0; max_rank])?;
        names.tensor_named(scale, &label);
        let n = b.limits().max_batch;
        let widest = Target::ALL.iter().map(|t| t.shape(c).0).max().unwrap_or(0);
        if self.scratch.is_none_or(|(_, _, r)| r < max_rank) {
            let mid = b.alloc("lora_mid", n * max_rank)?;
            names.tensor_named(mid, "lora_mid");
            let out = match self.scratch {
                Some((_, out, _)) => out,
                None => {
                    let t = b.alloc("lora_out", n * widest)?;
                    names.tensor_named(t, "lora_out");
                    t
                }
            };
            self.scratch = Some((mid, out, max_rank));
        }
        self.loaded.push(Adapter {
            name: data.name.clone(),
            max_rank,
            terms,
            scale,
            scale_now: 1.0,
        });
        Ok(AdapterId(id))
    }

    /// The adapters applied now, with their scales.
    pub fn active(&self) -> &[(AdapterId, f32)] {
        &self.active
    }

    /// Apply `active` from the next pass on (an adapter at most once, each scale finite).
    /// Returns whether the list of adapters changed (the passes' ops differ then) and whether
    /// anything changed (the KV cache's keys and values are stale then).
    pub fn set<B: Backend>(
        &mut self,
        b: &mut B,
        active: &[(AdapterId, f32)],
    ) -> Result<(bool, bool), Error> {
        for (i, &(id, scale)) in active.iter().enumerate() {
            let a = self.loaded.get(id.0).ok_or_else(|| {
                bad(
                    &format!("#{}", id.0),
                    format!("no such adapter ({} loaded)", self.loaded.len()),
                )
            })?;
            if !scale.is_finite() {
                return Err(bad(&a.name, format!("scale {scale} is not a number")));
            }
            if active[..i].iter().any(|&(other, _)| other == id) {
                return Err(bad(&a.name, "given twice"));
            }
        }
        let ops_change = self.active.len() != active.len()
            || self.active.iter().zip(active).any(|(a, b)| a.0 != b.0);
        let any_change = ops_change || self.active != active;
        for &(id, scale) in active {
            let a = &mut self.loaded[id.0];
            if a.scale_now != scale {
                b.write_vector(a.scale, &vec![scale; a.max_rank])?;
                a.scale_now = scale;
            }
        }
        self.active = active.to_vec();
        Ok((ops_change, any_change))
    }

    /// After `out = W x` of `target` in block `layer` over `n` rows: `out += s * B (A x)` for
    /// each applied adapter that updates it.
    pub fn apply(
        &self,
        p: &mut Pass,
        layer: usize,
        target: Target,
        [x, out]: [Tensor; 2],
        n: usize,
        out_width: usize,
    ) {
        let Some((mid, tmp, _)) = self.scratch else {
            return;
        };
        for &(id, _) in &self.active {
            let a = &self.loaded[id.0];
            for t in a
                .terms
                .iter()
                .filter(|t| t.layer == layer && t.target == target)
            {
                p.matmul(t.a, x, mid, n); // mid: (n, rank)
                p.scale_columns(mid, a.scale, n, t.rank);
                p.matmul(t.b, mid, tmp, n); // tmp: (n, out_width)
                p.add(out, tmp, n * out_width);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_parse_in_both_layouts() {
        assert_eq!(
            parse_stem("blk.12.attn_q.weight", Layout::Gguf),
            Some((12, "attn_q"))
        );
        assert_eq!(parse_stem("blk.x.attn_q.weight", Layout::Gguf), None);
        assert_eq!(parse_stem("output.weight", Layout::Gguf), None);
        assert_eq!(
            parse_stem("layers.0.q_proj", Layout::Rdrr),
            Some((0, "q_proj"))
        );
        assert_eq!(
            parse_stem("model.layers.7.mlp.down_proj", Layout::Rdrr),
            Some((7, "down_proj"))
        );
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        assert_eq!(
            transpose(&[1., 2., 3., 4., 5., 6.], 2, 3),
            vec![1., 4., 2., 5., 3., 6.]
        );
    }
}
