//! llama.cpp's file types ("Q4_K_M", "Q6_K", "Q8_0") and its per-tensor type choice, so that
//! `tritium quantize` writes the same tensors as `llama-quantize` (no importance matrix).
//!
//! Ported from `llama_tensor_get_type` and its helpers in llama.cpp's `src/llama-quant.cpp`
//! (the version vendored by llama-cpp-python 0.3.36):
//! - tensors are visited in llama.cpp's order ([`llama_order`]: by layer, then by name); the
//!   attention-V and FFN-down counters that `use_more_bits` reads advance in that order;
//! - only tensors with at least two dimensions whose name ends in `weight` (and that are not
//!   norms, expert routers or a list of small special tensors) are quantized; the rest are copied;
//! - the output matrix (and the token embedding when the model ties them) becomes Q6_K, or Q8_0
//!   when its rows are not a whole number of the target's blocks or the file type is Q8_0;
//! - `attn_v` (and fused QKV) and `ffn_down` get Q6_K in Q4_K_M files on the layers
//!   `use_more_bits` picks; fused QKV is Q5_K in Q4_K_M;
//! - a row length that is not a multiple of the chosen type's block falls back: Q4_K to Q5_0,
//!   Q5_K to Q5_1, Q6_K to Q8_0 (F16 where even 32 does not divide it);
//! - a tensor whose chosen type is already its type is copied byte for byte, never requantized.
//!
//! Model-specific branches that llama.cpp keys on are kept: Falcon, 8-expert models, and the
//! "70B" rule for Llama, inferred as llama.cpp's own `llama_quant_model_from_metadata` does
//! (80 layers and grouped KV heads).

use super::{GgmlType, QuantError};

/// A llama.cpp file type (`llama_ftype`) that `tritium quantize` can write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FileType {
    /// `LLAMA_FTYPE_MOSTLY_Q4_K_M` (15).
    Q4KM,
    /// `LLAMA_FTYPE_MOSTLY_Q6_K` (18).
    Q6K,
    /// `LLAMA_FTYPE_MOSTLY_Q8_0` (7).
    Q8_0,
}

impl FileType {
    pub const ALL: [FileType; 3] = [FileType::Q4KM, FileType::Q6K, FileType::Q8_0];

    /// Parse `q4_k_m`, `Q6_K`, `q8_0` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// llama.cpp's name.
    pub fn name(self) -> &'static str {
        match self {
            FileType::Q4KM => "Q4_K_M",
            FileType::Q6K => "Q6_K",
            FileType::Q8_0 => "Q8_0",
        }
    }

    /// The `llama_ftype` value stored in `general.file_type`.
    pub fn id(self) -> u32 {
        match self {
            FileType::Q4KM => 15,
            FileType::Q6K => 18,
            FileType::Q8_0 => 7,
        }
    }

    /// `llama_ftype_get_default_type`.
    pub fn default_type(self) -> GgmlType {
        match self {
            FileType::Q4KM => GgmlType::Q4_K,
            FileType::Q6K => GgmlType::Q6_K,
            FileType::Q8_0 => GgmlType::Q8_0,
        }
    }
}

impl std::fmt::Display for FileType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the type choice needs to know about the model (from its GGUF metadata).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelFacts {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: u32,
    /// `{arch}.expert_count` (0 when absent).
    pub n_expert: u32,
    /// `{arch}.attention.head_count` (of the first layer when it is an array; 0 when absent).
    pub n_head: u32,
    /// `{arch}.attention.head_count_kv` (as `n_head` when absent).
    pub n_head_kv: u32,
}

impl ModelFacts {
    /// llama.cpp's `LLM_TYPE_70B`, as `llama_quant_model_from_metadata` infers it.
    fn is_70b(&self) -> bool {
        self.arch == "llama" && self.n_layer == 80 && self.n_head != self.n_head_kv
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }
}

/// One input tensor: name, dimensions innermost first (as GGUF stores them), type.
#[derive(Clone, Debug)]
pub struct TensorIn<'a> {
    pub name: &'a str,
    pub dims: &'a [u64],
    pub dtype: GgmlType,
}

/// The decision for one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// Index into the input list.
    pub index: usize,
    pub name: String,
    pub source: GgmlType,
    pub target: GgmlType,
    /// The row length did not fit the chosen type and a fallback type was used.
    pub fell_back: bool,
}

impl TensorPlan {
    /// The bytes are copied unchanged.
    pub fn is_copy(&self) -> bool {
        self.source == self.target
    }
}

/// The layer of `blk.N.…` names, as `sscanf(name, "blk.%d.", &layer)` reads it (-1 otherwise).
fn layer_of(name: &str) -> i64 {
    let Some(rest) = name.strip_prefix("blk.") else {
        return -1;
    };
    let rest = rest.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'-') => (-1, &rest[1..]),
        Some(b'+') => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return -1;
    }
    digits[..end].parse::<i64>().map(|v| sign * v).unwrap_or(-1)
}

/// Indices of `names` in llama.cpp's order (`weight_name_comparer`: by layer, non-layer
/// tensors first, then by name bytes).
pub fn llama_order(names: &[&str]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| {
        (layer_of(names[a]), names[a].as_bytes()).cmp(&(layer_of(names[b]), names[b].as_bytes()))
    });
    order
}

/// `ggml_n_dims`: dimensions up to the last one that is not 1 (at least 1).
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1)
}

/// `tensor_allows_quantization` with the default parameters (output quantized, not copy-only).
fn allows_quantization(name: &str, dims: &[u64], arch: &str) -> bool {
    if n_dims(dims) < 2 || !name.ends_with("weight") {
        return false;
    }
    const NEVER: [&str; 35] = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    if NEVER.iter().any(|s| name.contains(s)) {
        return false;
    }
    // Positional embeddings and token types (BERT): `LLM_TN(arch)(POS_EMBD / TOKEN_TYPES)`.
    if name == "position_embd.weight" || name == "token_types.weight" {
        return false;
    }
    if arch == "glm5-next" {
        const GLM5: [&str; 14] = [
            "hc_",
            "indexer.attn_q_b",
            "indexer.attn_k",
            "indexer.proj",
            "indexer_compressor_gate",
            "indexer_compressor_ape",
            "ssm_f_a.weight",
            "ssm_f_b.weight",
            "ssm_g_a.weight",
            "ssm_g_b.weight",
            "ssm_beta.weight",
            "attn_kv_a_mqa.weight",
            "attn_k_b.weight",
            "attn_v_b.weight",
        ];
        if GLM5.iter().any(|s| name.contains(s)) {
            return false;
        }
    }
    true
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

/// `tensor_get_category` (first match wins, as there).
fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    let rules = [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    rules
        .into_iter()
        .find(|(s, _)| name.contains(s))
        .map_or(Other, |(_, c)| c)
}

fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// in between.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// Block size of a type (1 for non-block types).
fn block_elems(t: GgmlType) -> u64 {
    t.block().map_or(1, |g| g.block_elems)
}

/// `tensor_type_fallback` for the types our file types can choose.
fn fallback(ncols: u64, target: GgmlType) -> Result<(GgmlType, bool), QuantError> {
    let qk = block_elems(target);
    if ncols % qk == 0 {
        return Ok((target, false));
    }
    let mut t = match target {
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::TQ1_0 | GgmlType::TQ2_0 => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        t if qk <= 32 => t,
        t => {
            return Err(QuantError::Invalid(format!(
                "no tensor type fallback is defined for type {t}"
            )))
        }
    };
    if ncols % block_elems(t) != 0 {
        t = GgmlType::F16;
    }
    Ok((t, true))
}

/// The counters `llama_tensor_get_type_impl` keeps across tensors.
struct State {
    n_attention_wv: i64,
    i_attention_wv: i64,
    n_layer: i64,
    i_ffn_down: i64,
    has_tied_embeddings: bool,
}

/// `llama_tensor_get_type_impl` for our file types (default parameters, no imatrix).
fn choose(
    st: &mut State,
    facts: &ModelFacts,
    ftype: FileType,
    t: &TensorIn<'_>,
    cat: Category,
) -> Result<GgmlType, QuantError> {
    let mut new_type = ftype.default_type();
    let q4km = ftype == FileType::Q4KM;
    let n_expert = facts.n_expert.max(1);
    let glm5_keep = ["attn_q_a", "attn_q_b", "nextn.eh_proj"];
    if facts.arch == "glm5-next" && glm5_keep.iter().any(|s| t.name.contains(s)) {
        // "don't let these tensors be quantized below Q8_0" (every default type here is quantized).
        return Ok(GgmlType::Q8_0);
    }
    if cat == Category::Output || (st.has_tied_embeddings && cat == Category::TokenEmbd) {
        let nx = t.dims.first().copied().unwrap_or(0);
        if facts.is_falcon() || nx % block_elems(new_type) != 0 {
            new_type = GgmlType::Q8_0;
        } else if new_type != GgmlType::Q8_0 {
            new_type = GgmlType::Q6_K;
        }
    } else if cat == Category::TokenEmbd {
        // Untied token embeddings keep the default type for these file types.
    } else if is_attn_v(cat) {
        if q4km && use_more_bits(st.i_attention_wv, st.n_attention_wv) {
            new_type = GgmlType::Q6_K;
        }
        if facts.is_70b() && matches!(new_type, GgmlType::Q3_K | GgmlType::Q4_K) {
            new_type = GgmlType::Q5_K;
        }
        if facts.n_expert == 8 {
            new_type = GgmlType::Q8_0;
        }
        st.i_attention_wv += 1;
    } else if cat == Category::AttnK {
        if facts.n_expert == 8 {
            new_type = GgmlType::Q8_0;
        }
    } else if cat == Category::FfnDown {
        let i_layer = if n_expert > 1 {
            let l = layer_of(t.name);
            if l < 0 || l >= st.n_layer {
                return Err(QuantError::Invalid(format!(
                    "{}: cannot determine the layer (block_count {})",
                    t.name, st.n_layer
                )));
            }
            l
        } else {
            st.i_ffn_down
        };
        let n_layer = st.n_layer;
        if q4km {
            if facts.is_falcon() {
                new_type = if i_layer < n_layer / 16 {
                    GgmlType::Q6_K
                } else if use_more_bits(i_layer, n_layer) {
                    GgmlType::Q5_K
                } else {
                    GgmlType::Q4_K
                };
            } else if use_more_bits(i_layer, n_layer) {
                new_type = GgmlType::Q6_K;
            }
        }
        st.i_ffn_down += 1;
    } else if cat == Category::AttnOutput && !facts.is_falcon() && facts.n_expert == 8 && q4km {
        new_type = GgmlType::Q5_K;
    }
    // llama.cpp's later `ATTENTION_QKV -> Q5_K` branch is unreachable there (fused QKV is an
    // attention-V category, handled above), so it is left out here.
    Ok(new_type)
}

/// Each tensor's target type for `ftype`, in llama.cpp's write order.
pub fn plan(
    ftype: FileType,
    facts: &ModelFacts,
    tensors: &[TensorIn<'_>],
) -> Result<Vec<TensorPlan>, QuantError> {
    let names: Vec<&str> = tensors.iter().map(|t| t.name).collect();
    let order = llama_order(&names);
    let cats: Vec<Category> = names.iter().map(|n| category(n)).collect();
    let mut st = State {
        n_attention_wv: cats.iter().filter(|&&c| is_attn_v(c)).count() as i64,
        i_attention_wv: 0,
        n_layer: i64::from(facts.n_layer),
        i_ffn_down: 0,
        has_tied_embeddings: !cats.contains(&Category::Output),
    };
    let mut out = Vec::with_capacity(tensors.len());
    for i in order {
        let t = &tensors[i];
        let (target, fell_back) = if allows_quantization(t.name, t.dims, &facts.arch) {
            let chosen = choose(&mut st, facts, ftype, t, cats[i])?;
            fallback(t.dims.first().copied().unwrap_or(0), chosen)?
        } else {
            (t.dtype, false)
        };
        out.push(TensorPlan {
            index: i,
            name: t.name.to_string(),
            source: t.dtype,
            target,
            fell_back,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_llama_cpp_for_30_layers() {
        // n/8 = 3, 7n/8 = 26: layers 0..3, 26..30, and 3 + 3k + 2.
        let picked: Vec<i64> = (0..30).filter(|&i| use_more_bits(i, 30)).collect();
        assert_eq!(
            picked,
            vec![0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
        );
    }

    #[test]
    fn order_is_by_layer_then_name() {
        let names = [
            "blk.10.attn_v.weight",
            "output_norm.weight",
            "blk.2.ffn_down.weight",
            "token_embd.weight",
            "blk.2.attn_k.weight",
        ];
        let order: Vec<&str> = llama_order(&names).into_iter().map(|i| names[i]).collect();
        assert_eq!(
            order,
            [
                "output_norm.weight",
                "token_embd.weight",
                "blk.2.attn_k.weight",
                "blk.2.ffn_down.weight",
                "blk.10.attn_v.weight",
            ]
        );
    }

    #[test]
    fn fallbacks() {
        assert_eq!(
            fallback(576, GgmlType::Q4_K).unwrap(),
            (GgmlType::Q5_0, true)
        );
        assert_eq!(
            fallback(576, GgmlType::Q6_K).unwrap(),
            (GgmlType::Q8_0, true)
        );
        assert_eq!(
            fallback(576, GgmlType::Q5_K).unwrap(),
            (GgmlType::Q5_1, true)
        );
        assert_eq!(
            fallback(1536, GgmlType::Q4_K).unwrap(),
            (GgmlType::Q4_K, false)
        );
        assert_eq!(
            fallback(100, GgmlType::Q6_K).unwrap(),
            (GgmlType::F16, true)
        );
        assert_eq!(
            fallback(100, GgmlType::Q8_0).unwrap(),
            (GgmlType::F16, true)
        );
    }

    #[test]
    fn norms_and_vectors_are_copied() {
        assert!(!allows_quantization(
            "blk.0.attn_norm.weight",
            &[576, 576],
            "llama"
        ));
        assert!(!allows_quantization(
            "blk.0.attn_q.bias",
            &[576, 576],
            "llama"
        ));
        assert!(!allows_quantization(
            "blk.0.attn_q.weight",
            &[576, 1],
            "llama"
        ));
        assert!(allows_quantization(
            "blk.0.attn_q.weight",
            &[576, 576],
            "llama"
        ));
        assert!(!allows_quantization(
            "blk.0.ffn_gate_inp.weight",
            &[576, 8],
            "llama"
        ));
    }

    #[test]
    fn parse_names() {
        assert_eq!(FileType::parse("q4_k_m"), Some(FileType::Q4KM));
        assert_eq!(FileType::parse("Q6_K"), Some(FileType::Q6K));
        assert_eq!(FileType::parse("q8_0"), Some(FileType::Q8_0));
        assert_eq!(FileType::parse("q5_k_m"), None);
    }

    #[test]
    fn layer_parsing_follows_sscanf() {
        assert_eq!(layer_of("blk.12.attn_v.weight"), 12);
        assert_eq!(layer_of("blk.x.attn_v.weight"), -1);
        assert_eq!(layer_of("output.weight"), -1);
        assert_eq!(layer_of("blk.3"), 3);
    }
}
