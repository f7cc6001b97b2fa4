//! The conversion plan of a Hugging Face checkpoint: GGUF tensor names, types and shapes
//! ([`plan`]), each tensor's bytes ([`tensor_bytes`]), and the GGUF metadata
//! ([`gguf_metadata`]), as llama.cpp's `convert_hf_to_gguf.py` (and BitNet's converter) write
//! them.
//!
//! - Names: `model.embed_tokens` -> `token_embd`, `model.layers.N.self_attn.q_proj` ->
//!   `blk.N.attn_q`, ..., `model.norm` -> `output_norm`, `lm_head` -> `output` (left out when
//!   the embeddings are tied).
//! - Llama's Q and K rows are permuted for interleaved-pair RoPE, as llama.cpp's
//!   `LlamaModel.permute` does (`permute(q, n_head, n_head)`, `permute(k, n_head, n_head_kv)`).
//!   BitNet, Qwen2 and Qwen3 keep transformers' order (their GGUFs use NeoX RoPE; facts.md).
//! - Qwen2's q/k/v biases become `blk.N.attn_{q,k,v}.bias`, Qwen3's per-head norms
//!   `blk.N.attn_{q,k}_norm.weight`, both F32. Phi-3 keeps its stacked `qkv_proj` and
//!   `gate_up_proj` as `attn_qkv` and `ffn_up`, and its longrope factors become
//!   `rope_factors_short.weight` / `rope_factors_long.weight` with the attention factor
//!   llama.cpp's converter computes.
//! - Types: `q4_k_m` and `q8_0` follow llama-quantize's per-tensor choice
//!   ([`crate::quant::ftype::plan`]) from f32 sources; `f16` makes every matrix F16; `i2_s`
//!   (BitNet only) makes the seven linear weights of each layer I2_S, the embedding (and an
//!   untied head) F16. Norms stay F32.

use super::{HfArch, HfCheckpoint, HfConfig, HfError};
use crate::formats::gguf::Value;
use crate::formats::safetensors::Dtype;
use crate::quant::ftype::{self, FileType, ModelFacts, TensorIn};
use crate::quant::{self, BlockI2S, GgmlType, I2S_TRAILER_BYTES, QK_I2S};

/// The weight type asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Quantization {
    Q4KM,
    Q8_0,
    F16,
    I2S,
}

impl Quantization {
    /// The name as `--quantize` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Quantization::Q4KM => "q4_k_m",
            Quantization::Q8_0 => "q8_0",
            Quantization::F16 => "f16",
            Quantization::I2S => "i2_s",
        }
    }

    /// `general.file_type` (llama_ftype), where llama.cpp defines one.
    fn file_type_id(self) -> Option<u32> {
        match self {
            Quantization::Q4KM => Some(FileType::Q4KM.id()),
            Quantization::Q8_0 => Some(FileType::Q8_0.id()),
            Quantization::F16 => Some(1),
            Quantization::I2S => None,
        }
    }
}

/// How a tensor's bytes are made from the checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorRecipe {
    /// Read the float tensor, permute its rows for RoPE when `rope_heads` is set, quantize.
    Float { hf: String, rope_heads: Option<u64> },
    /// A Gemma norm: `1 + w` (transformers computes `x * (1 + w)`; GGUF stores the factor), the
    /// sum rounded to the checkpoint's own float type as llama.cpp's converter computes it.
    ShiftedNorm { hf: String },
    /// Values from the config (Phi-3's RoPE factors).
    Values(Vec<f32>),
    /// BitNet's packed 2-bit weights (`uint8 [rows/4, cols]`) and their `weight_scale`, which
    /// the model multiplies by (`autobitlinear`) or divides by (`bitlinear`).
    PackedTernary {
        hf: String,
        scale: String,
        scale_divides: bool,
    },
}

/// One tensor of the GGUF being made.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputTensor {
    /// The GGUF name.
    pub name: String,
    pub dtype: GgmlType,
    /// Outermost first (`[rows, cols]`).
    pub shape: Vec<u64>,
    pub recipe: TensorRecipe,
}

impl OutputTensor {
    /// The element count, saturating at `u64::MAX` (where `n_bytes` then finds no size).
    pub fn elements(&self) -> u64 {
        self.shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Bytes of the tensor as `dtype`.
    pub fn n_bytes(&self) -> Option<u64> {
        self.dtype.tensor_bytes(self.elements())
    }
}

/// The tokenizer facts the GGUF metadata keeps for a model whose vocabulary is a
/// `tokenizer.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenizerSettings {
    pub chat_template: Option<String>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
}

/// Per-layer tensors: (HF suffix, GGUF name, is a linear weight).
const LAYER_TENSORS: [(&str, &str, bool); 13] = [
    ("input_layernorm", "attn_norm", false),
    ("self_attn.q_proj", "attn_q", true),
    ("self_attn.k_proj", "attn_k", true),
    ("self_attn.v_proj", "attn_v", true),
    ("self_attn.q_norm", "attn_q_norm", false),
    ("self_attn.k_norm", "attn_k_norm", false),
    ("self_attn.o_proj", "attn_output", true),
    ("self_attn.attn_sub_norm", "attn_sub_norm", false),
    ("post_attention_layernorm", "ffn_norm", false),
    ("mlp.gate_proj", "ffn_gate", true),
    ("mlp.up_proj", "ffn_up", true),
    ("mlp.down_proj", "ffn_down", true),
    ("mlp.ffn_sub_norm", "ffn_sub_norm", false),
];

/// Phi-3's per-layer tensors: q/k/v and gate/up stacked, as llama.cpp keeps them.
const PHI3_LAYER_TENSORS: [(&str, &str, bool); 6] = [
    ("input_layernorm", "attn_norm", false),
    ("self_attn.qkv_proj", "attn_qkv", true),
    ("self_attn.o_proj", "attn_output", true),
    ("post_attention_layernorm", "ffn_norm", false),
    ("mlp.gate_up_proj", "ffn_up", true),
    ("mlp.down_proj", "ffn_down", true),
];

/// Gemma's per-layer tensors (its norm after attention is `post_attention_norm`, the one
/// before the FFN `pre_feedforward_layernorm`; q/k norms Gemma 3's only).
const GEMMA_LAYER_TENSORS: [(&str, &str, bool); 13] = [
    ("input_layernorm", "attn_norm", false),
    ("self_attn.q_proj", "attn_q", true),
    ("self_attn.k_proj", "attn_k", true),
    ("self_attn.v_proj", "attn_v", true),
    ("self_attn.q_norm", "attn_q_norm", false),
    ("self_attn.k_norm", "attn_k_norm", false),
    ("self_attn.o_proj", "attn_output", true),
    ("post_attention_layernorm", "post_attention_norm", false),
    ("pre_feedforward_layernorm", "ffn_norm", false),
    ("mlp.gate_proj", "ffn_gate", true),
    ("mlp.up_proj", "ffn_up", true),
    ("mlp.down_proj", "ffn_down", true),
    ("post_feedforward_layernorm", "post_ffw_norm", false),
];

/// The GGUF architecture name.
fn gguf_arch(arch: HfArch) -> &'static str {
    match arch {
        HfArch::Llama => "llama",
        HfArch::BitNet => "bitnet-b1.58",
        HfArch::Qwen2 => "qwen2",
        HfArch::Qwen3 => "qwen3",
        HfArch::Phi3 => "phi3",
        HfArch::Gemma2 => "gemma2",
        HfArch::Gemma3 => "gemma3",
    }
}

/// Whether the checkpoint's embeddings are tied (no separate LM head; Gemma's always are).
fn tied(ck: &HfCheckpoint<'_>) -> bool {
    ck.config.tie_word_embeddings.unwrap_or(ck.arch.is_gemma()) || !ck.has("lm_head.weight")
}

/// The GGUF tensors of the checkpoint, in GGUF order, with their types. Every tensor of the
/// checkpoint must be used (`rotary_emb.inv_freq` buffers aside); anything else is an error.
pub fn plan(ck: &HfCheckpoint<'_>, q: Quantization) -> Result<Vec<OutputTensor>, HfError> {
    let c = &ck.config;
    match (ck.arch, q) {
        (HfArch::BitNet, Quantization::I2S) => {}
        (HfArch::BitNet, other) => {
            return Err(HfError::Unsupported(format!(
                "BitNet checkpoints convert to i2_s, not {}",
                other.name()
            )))
        }
        (_, Quantization::I2S) => {
            return Err(HfError::Unsupported(
                "i2_s is for BitNet checkpoints (BitNetForCausalLM)".into(),
            ))
        }
        _ => {}
    }
    let mut used = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let float = |used: &mut std::collections::BTreeSet<String>,
                 out: &mut Vec<OutputTensor>,
                 hf: &str,
                 name: &str,
                 rope_heads: Option<u64>|
     -> Result<(), HfError> {
        let (dtype, shape) = ck.info(hf)?;
        if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(HfError::Tensor {
                name: hf.to_string(),
                message: format!("dtype {dtype:?}, expected F32, F16 or BF16"),
            });
        }
        used.insert(hf.to_string());
        out.push(OutputTensor {
            name: name.to_string(),
            dtype: GgmlType::F32,
            shape,
            recipe: TensorRecipe::Float {
                hf: hf.to_string(),
                rope_heads,
            },
        });
        Ok(())
    };
    // A Gemma norm, its factor `1 + w` stored.
    let shifted = |used: &mut std::collections::BTreeSet<String>,
                   out: &mut Vec<OutputTensor>,
                   hf: &str,
                   name: &str|
     -> Result<(), HfError> {
        float(used, out, hf, name, None)?;
        if let Some(t) = out.last_mut() {
            t.recipe = TensorRecipe::ShiftedNorm { hf: hf.to_string() };
        }
        Ok(())
    };
    float(
        &mut used,
        &mut out,
        "model.embed_tokens.weight",
        "token_embd.weight",
        None,
    )?;
    let bitnet = ck.arch == HfArch::BitNet;
    let scale_divides = ck.config.quantization_field("linear_class") != Some("autobitlinear");
    let layer_tensors: &[(&str, &str, bool)] = match ck.arch {
        HfArch::Phi3 => &PHI3_LAYER_TENSORS,
        HfArch::Gemma2 | HfArch::Gemma3 => &GEMMA_LAYER_TENSORS,
        _ => &LAYER_TENSORS,
    };
    let has_qk_norm = matches!(ck.arch, HfArch::Qwen3 | HfArch::Gemma3);
    for i in 0..c.num_hidden_layers {
        for &(suffix, gguf, linear) in layer_tensors {
            let sub_norm = gguf.ends_with("sub_norm");
            let qk_norm = gguf.ends_with("k_norm") || gguf.ends_with("q_norm");
            if (sub_norm && !bitnet) || (qk_norm && !has_qk_norm) {
                continue;
            }
            let hf = format!("model.layers.{i}.{suffix}.weight");
            let name = format!("blk.{i}.{gguf}.weight");
            if ck.arch.is_gemma() && !linear {
                shifted(&mut used, &mut out, &hf, &name)?;
                continue;
            }
            let rope_heads = match (ck.arch, gguf) {
                (HfArch::Llama, "attn_q") => Some(c.num_attention_heads),
                (HfArch::Llama, "attn_k") => Some(c.n_kv_heads()),
                _ => None,
            };
            if bitnet && linear && ck.info(&hf)?.0 == Dtype::U8 {
                let scale = format!("model.layers.{i}.{suffix}.weight_scale");
                let (_, packed_shape) = ck.info(&hf)?;
                let [rows4, cols] = packed_shape[..] else {
                    return Err(HfError::Tensor {
                        name: hf,
                        message: format!("packed shape {packed_shape:?} is not 2-D"),
                    });
                };
                ck.info(&scale)?;
                used.insert(hf.clone());
                used.insert(scale.clone());
                out.push(OutputTensor {
                    name,
                    dtype: GgmlType::F32,
                    shape: vec![rows4 * 4, cols],
                    recipe: TensorRecipe::PackedTernary {
                        hf,
                        scale,
                        scale_divides,
                    },
                });
            } else {
                float(&mut used, &mut out, &hf, &name, rope_heads)?;
            }
            // Qwen2: the q, k and v biases right after their weights (F32 vectors).
            if ck.arch == HfArch::Qwen2 && matches!(gguf, "attn_q" | "attn_k" | "attn_v") {
                let hf = format!("model.layers.{i}.{suffix}.bias");
                float(
                    &mut used,
                    &mut out,
                    &hf,
                    &format!("blk.{i}.{gguf}.bias"),
                    None,
                )?;
            }
        }
    }
    if ck.arch.is_gemma() {
        shifted(
            &mut used,
            &mut out,
            "model.norm.weight",
            "output_norm.weight",
        )?;
    } else {
        float(
            &mut used,
            &mut out,
            "model.norm.weight",
            "output_norm.weight",
            None,
        )?;
    }
    if !tied(ck) {
        float(&mut used, &mut out, "lm_head.weight", "output.weight", None)?;
    } else if ck.has("lm_head.weight") {
        used.insert("lm_head.weight".to_string());
    }
    if let (HfArch::Phi3, Some((short, long, _))) = (ck.arch, c.longrope()) {
        let pairs = (c.rope_dims() / 2) as usize;
        for (name, values) in [("long", long), ("short", short)] {
            if values.len() != pairs {
                return Err(HfError::Config(format!(
                    "rope {name}_factor has {} values; {pairs} rotated pairs need one each",
                    values.len()
                )));
            }
            out.push(OutputTensor {
                name: format!("rope_factors_{name}.weight"),
                dtype: GgmlType::F32,
                shape: vec![pairs as u64],
                recipe: TensorRecipe::Values(values),
            });
        }
    }
    if let Some(extra) = ck
        .names()
        .find(|n| !used.contains(*n) && !n.ends_with("rotary_emb.inv_freq"))
    {
        return Err(HfError::Unsupported(format!(
            "tensor {extra} has no place in a {} model",
            gguf_arch(ck.arch)
        )));
    }
    assign_types(ck, q, &mut out)?;
    Ok(out)
}

/// Choose each tensor's GGML type for `q`.
fn assign_types(
    ck: &HfCheckpoint<'_>,
    q: Quantization,
    out: &mut [OutputTensor],
) -> Result<(), HfError> {
    let is_matrix = |t: &OutputTensor| t.shape.len() >= 2 && t.name.ends_with("weight");
    match q {
        Quantization::F16 => {
            for t in out.iter_mut().filter(|t| is_matrix(t)) {
                t.dtype = GgmlType::F16;
            }
        }
        Quantization::I2S => {
            for t in out.iter_mut() {
                let linear = t.name.starts_with("blk.") && is_matrix(t);
                if linear {
                    if t.elements() % QK_I2S as u64 != 0 {
                        return Err(HfError::Tensor {
                            name: t.name.clone(),
                            message: format!("{} weights are not whole I2_S blocks", t.elements()),
                        });
                    }
                    t.dtype = GgmlType::I2_S;
                } else if is_matrix(t) {
                    t.dtype = GgmlType::F16;
                }
            }
        }
        Quantization::Q4KM | Quantization::Q8_0 => {
            let ftype = if q == Quantization::Q4KM {
                FileType::Q4KM
            } else {
                FileType::Q8_0
            };
            let dims: Vec<Vec<u64>> = out
                .iter()
                .map(|t| t.shape.iter().rev().copied().collect())
                .collect();
            let inputs: Vec<TensorIn<'_>> = out
                .iter()
                .zip(&dims)
                .map(|(t, d)| TensorIn {
                    name: &t.name,
                    dims: d,
                    dtype: GgmlType::F32,
                })
                .collect();
            let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let facts = ModelFacts {
                arch: gguf_arch(ck.arch).to_string(),
                n_layer: to_u32(ck.config.num_hidden_layers),
                n_expert: 0,
                n_head: to_u32(ck.config.num_attention_heads),
                n_head_kv: to_u32(ck.config.n_kv_heads()),
            };
            let chosen: Vec<(usize, GgmlType)> = ftype::plan(ftype, &facts, &inputs)?
                .into_iter()
                .map(|p| (p.index, p.target))
                .collect();
            for (i, target) in chosen {
                out[i].dtype = target;
            }
        }
    }
    Ok(())
}

/// The GGUF name of a checkpoint tensor that is stored as it is (no recipe but a rename, and
/// for Llama's q and k the RoPE row permutation), with the heads to permute its rows for
/// (Llama's `attn_q` / `attn_k`, see [`permute_for_rope`]). `None` for a name with no place in
/// the architecture, and for what this rename cannot give: Gemma's norms (stored as `1 + w`),
/// BitNet's packed weights, Phi-3's RoPE factors (they come from the config).
pub fn renamed(config: &HfConfig, arch: HfArch, hf: &str) -> Option<(String, Option<u64>)> {
    match hf {
        "model.embed_tokens.weight" => return Some(("token_embd.weight".into(), None)),
        "model.norm.weight" => return Some(("output_norm.weight".into(), None)),
        "lm_head.weight" => return Some(("output.weight".into(), None)),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let i: u64 = layer
        .parse()
        .ok()
        .filter(|&i| i < config.num_hidden_layers)?;
    if layer != i.to_string() {
        return None;
    }
    let (suffix, kind) = rest.rsplit_once('.')?;
    let table: &[(&str, &str, bool)] = match arch {
        HfArch::Phi3 => &PHI3_LAYER_TENSORS,
        HfArch::Gemma2 | HfArch::Gemma3 => &GEMMA_LAYER_TENSORS,
        _ => &LAYER_TENSORS,
    };
    let &(_, gguf, linear) = table.iter().find(|(s, _, _)| *s == suffix)?;
    let sub_norm = gguf.ends_with("sub_norm");
    let qk_norm = gguf.ends_with("q_norm") || gguf.ends_with("k_norm");
    let qk_norms = matches!(arch, HfArch::Qwen3 | HfArch::Gemma3);
    if arch == HfArch::BitNet || arch.is_gemma() || sub_norm || (qk_norm && !qk_norms) {
        return None;
    }
    let bias = arch == HfArch::Qwen2 && matches!(gguf, "attn_q" | "attn_k" | "attn_v");
    match kind {
        "weight" => {}
        "bias" if bias => return Some((format!("blk.{i}.{gguf}.bias"), None)),
        _ => return None,
    }
    let rope_heads = match (arch, gguf) {
        (HfArch::Llama, "attn_q") => Some(config.num_attention_heads),
        (HfArch::Llama, "attn_k") => Some(config.n_kv_heads()),
        _ => None,
    };
    debug_assert!(linear || rope_heads.is_none());
    Some((format!("blk.{i}.{gguf}.weight"), rope_heads))
}

/// [`permute_for_rope`] on the raw bytes of a `[rows, ...]` tensor whose rows are
/// `row_bytes` long each (any type whose rows are whole blocks: the permutation moves rows).
pub fn permute_rows_for_rope(
    bytes: &[u8],
    rows: usize,
    heads: usize,
    row_bytes: usize,
) -> Result<Vec<u8>, String> {
    if heads == 0 || rows % (2 * heads) != 0 || Some(bytes.len()) != rows.checked_mul(row_bytes) {
        return Err(format!(
            "{} bytes of {rows} rows do not split into {heads} heads of pairs",
            bytes.len()
        ));
    }
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..heads {
        for j in 0..2 {
            for i in 0..half {
                let from = h * head_dim + j * half + i;
                let to = h * head_dim + 2 * i + j;
                out[to * row_bytes..(to + 1) * row_bytes]
                    .copy_from_slice(&bytes[from * row_bytes..(from + 1) * row_bytes]);
            }
        }
    }
    Ok(out)
}

/// llama.cpp's `LlamaModel.permute` on a row-major `[rows, cols]` matrix: within each of
/// `heads` heads, row `j * half + i` moves to row `2 * i + j` (`half` = head_dim / 2), which
/// turns rotate-half RoPE pairs into the adjacent pairs GGUF's `llama` RoPE rotates.
pub fn permute_for_rope(values: &[f32], rows: usize, heads: usize) -> Result<Vec<f32>, String> {
    if heads == 0 || rows % (2 * heads) != 0 || values.len() % rows.max(1) != 0 {
        return Err(format!(
            "{rows} rows do not split into {heads} heads of pairs"
        ));
    }
    let cols = values.len() / rows;
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut out = vec![0f32; values.len()];
    for h in 0..heads {
        for j in 0..2 {
            for i in 0..half {
                let from = h * head_dim + j * half + i;
                let to = h * head_dim + 2 * i + j;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&values[from * cols..(from + 1) * cols]);
            }
        }
    }
    Ok(out)
}

/// transformers' `unpack_weights`: packed `[rows/4, cols]` bytes hold, at bits `2k..2k+1`, the
/// code (weight + 1) of row `k * rows/4 + r`. Returns the codes (0, 1, 2 for -1, 0, +1) of the
/// `[rows, cols]` matrix in row-major order.
pub fn unpack_ternary(packed: &[u8], rows: usize, cols: usize) -> Result<Vec<u8>, String> {
    if rows % 4 != 0 || packed.len() != rows / 4 * cols {
        return Err(format!(
            "{} packed bytes do not hold a [{rows}, {cols}] ternary matrix",
            packed.len()
        ));
    }
    let quarter = rows / 4;
    let mut codes = vec![0u8; rows * cols];
    for r in 0..quarter {
        for c in 0..cols {
            let b = packed[r * cols + c];
            for k in 0..4 {
                let code = (b >> (2 * k)) & 3;
                if code == 3 {
                    return Err(format!("code 3 (not ternary) at packed [{r}, {c}]"));
                }
                codes[(k * quarter + r) * cols + c] = code;
            }
        }
    }
    Ok(codes)
}

/// I2_S bytes from ternary codes and the weight scale.
fn i2s_from_codes(codes: &[u8], scale: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(codes.len() / 4 + I2S_TRAILER_BYTES);
    for chunk in codes.chunks_exact(QK_I2S) {
        let mut block = [0u8; QK_I2S];
        block.copy_from_slice(chunk);
        out.extend_from_slice(&BlockI2S::from_codes(&block).qs);
    }
    out.extend_from_slice(&scale.to_le_bytes());
    out.resize(codes.len() / 4 + I2S_TRAILER_BYTES, 0);
    out
}

/// Encodes floats as a GGML type: `(dtype, values, row_len)`.
pub type QuantizeFn = dyn Fn(GgmlType, &[f32], usize) -> Result<Vec<u8>, quant::QuantError>;

/// The bytes of `t`. `quantize(dtype, values, row_len)` encodes floats (the caller may spread
/// the work over threads; the result must equal [`quant::quantize`]).
pub fn tensor_bytes(
    ck: &HfCheckpoint<'_>,
    t: &OutputTensor,
    quantize: &QuantizeFn,
) -> Result<Vec<u8>, HfError> {
    let tensor_error = |message: String| HfError::Tensor {
        name: t.name.clone(),
        message,
    };
    let row_len = t.shape.last().copied().unwrap_or(1) as usize;
    match &t.recipe {
        TensorRecipe::Float { hf, rope_heads } => {
            let mut values = ck.f32(hf)?;
            if let Some(heads) = rope_heads {
                let rows = t.shape.first().copied().unwrap_or(0) as usize;
                values = permute_for_rope(&values, rows, *heads as usize).map_err(tensor_error)?;
            }
            Ok(quantize(t.dtype, &values, row_len)?)
        }
        TensorRecipe::ShiftedNorm { hf } => {
            let (dtype, _) = ck.info(hf)?;
            let round = |x: f32| match dtype {
                Dtype::BF16 => half::bf16::from_f32(x).to_f32(),
                Dtype::F16 => half::f16::from_f32(x).to_f32(),
                _ => x,
            };
            let values: Vec<f32> = ck.f32(hf)?.iter().map(|&w| round(w + 1.0)).collect();
            Ok(quantize(t.dtype, &values, row_len)?)
        }
        TensorRecipe::Values(values) => Ok(quantize(t.dtype, values, row_len)?),
        TensorRecipe::PackedTernary {
            hf,
            scale,
            scale_divides,
        } => {
            let (rows, cols) = (t.shape[0] as usize, t.shape[1] as usize);
            let codes = unpack_ternary(&ck.raw(hf)?, rows, cols).map_err(tensor_error)?;
            let ws = *ck
                .f32(scale)?
                .first()
                .ok_or_else(|| tensor_error(format!("{scale} is empty")))?;
            let s = if *scale_divides { 1.0 / ws } else { ws };
            if !s.is_finite() {
                return Err(tensor_error(format!("weight scale {ws} gives scale {s}")));
            }
            match t.dtype {
                GgmlType::I2_S => Ok(i2s_from_codes(&codes, s)),
                other => {
                    let values: Vec<f32> =
                        codes.iter().map(|&c| (f32::from(c) - 1.0) * s).collect();
                    Ok(quantize(other, &values, row_len)?)
                }
            }
        }
    }
}

/// The GGUF metadata llama.cpp's converter writes for the checkpoint, plus what the tokenizer
/// settings give (`tokenizer.chat_template`, BOS/EOS ids). The vocabulary itself stays in
/// `tokenizer.json`.
pub fn gguf_metadata(
    config: &HfConfig,
    arch: HfArch,
    q: Quantization,
    name: &str,
    tokenizer: &TokenizerSettings,
) -> Vec<(String, Value)> {
    let a = gguf_arch(arch);
    let u32v = |v: u64| Value::U32(u32::try_from(v).unwrap_or(u32::MAX));
    let mut m: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String(name.into())),
    ];
    let mut add = |k: &str, v: Value| m.push((format!("{a}.{k}"), v));
    add("vocab_size", u32v(config.vocab_size));
    add(
        "context_length",
        u32v(config.max_position_embeddings.unwrap_or(2048)),
    );
    add("embedding_length", u32v(config.hidden_size));
    add("block_count", u32v(config.num_hidden_layers));
    add("feed_forward_length", u32v(config.intermediate_size));
    add("rope.dimension_count", u32v(config.rope_dims()));
    add("attention.head_count", u32v(config.num_attention_heads));
    add("attention.head_count_kv", u32v(config.n_kv_heads()));
    if config.head_dim() * config.num_attention_heads != config.hidden_size {
        add("attention.key_length", u32v(config.head_dim()));
        add("attention.value_length", u32v(config.head_dim()));
    }
    add(
        "attention.layer_norm_rms_epsilon",
        Value::F32(config.rms_norm_eps.unwrap_or(1e-5) as f32),
    );
    add("rope.freq_base", Value::F32(config.rope_theta() as f32));
    if let (HfArch::Phi3, Some((_, _, orig))) = (arch, config.longrope()) {
        // As llama.cpp's Phi-3 converter: sqrt(1 + ln(scale) / ln(original)) for a context
        // `scale` times the original one.
        let max = config.max_position_embeddings.unwrap_or(orig) as f64;
        let scale = max / orig as f64;
        let factor = match scale > 1.0 {
            true => (1.0 + scale.ln() / (orig as f64).ln()).sqrt(),
            false => 1.0,
        };
        add("rope.scaling.original_context_length", u32v(orig));
        add("rope.scaling.attn_factor", Value::F32(factor as f32));
    }
    if arch.is_gemma() {
        // As llama.cpp's Gemma converters: the window, its layers where the config states
        // them, the soft caps, Gemma 3's local RoPE base and linear scaling.
        if let Some(w) = config.sliding_window {
            add("attention.sliding_window", u32v(w));
        }
        if let Some(layers) = config.window_layers() {
            add(
                "attention.sliding_window_pattern",
                Value::Array(crate::formats::gguf::Array::Bool(layers)),
            );
        }
        if arch == HfArch::Gemma2 {
            let cap = |v: Option<f64>, default: f64| Value::F32(v.unwrap_or(default) as f32);
            add(
                "attn_logit_softcapping",
                cap(config.attn_logit_softcapping, 50.0),
            );
            add(
                "final_logit_softcapping",
                cap(config.final_logit_softcapping, 30.0),
            );
        } else if let Some(c) = config.final_logit_softcapping {
            add("final_logit_softcapping", Value::F32(c as f32));
        }
        if let (HfArch::Gemma3, Some(base)) = (arch, config.rope_local_base()) {
            add("rope.freq_base_swa", Value::F32(base as f32));
        }
        if let Some(f) = config.linear_rope_factor() {
            add("rope.scaling.type", Value::String("linear".into()));
            add("rope.scaling.factor", Value::F32(f as f32));
        }
    }
    if let Some(id) = q.file_type_id() {
        m.push(("general.file_type".into(), Value::U32(id)));
    }
    if q != Quantization::F16 {
        m.push(("general.quantization_version".into(), Value::U32(2)));
    }
    if let Some(id) = tokenizer.bos_id {
        m.push(("tokenizer.ggml.bos_token_id".into(), Value::U32(id)));
    }
    if let Some(id) = tokenizer.eos_id {
        m.push(("tokenizer.ggml.eos_token_id".into(), Value::U32(id)));
    }
    if let Some(t) = &tokenizer.chat_template {
        m.push(("tokenizer.chat_template".into(), Value::String(t.clone())));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numpy definition: `w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2)`.
    #[test]
    fn permute_matches_llama_cpp_on_a_small_case() {
        // 2 heads of head_dim 4, 1 column: rows 0..8.
        let v: Vec<f32> = (0..8).map(|x| x as f32).collect();
        let p = permute_for_rope(&v, 8, 2).unwrap();
        // reshape(2, 2, 2): head 0 = [[0,1],[2,3]] -> swap -> [[0,2],[1,3]] -> 0,2,1,3.
        assert_eq!(p, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
        assert!(permute_for_rope(&v, 8, 3).is_err());
    }

    /// The byte form moves whole rows as the f32 form does.
    #[test]
    fn permute_rows_matches_the_f32_permutation() {
        let v: Vec<f32> = (0..24).map(|x| x as f32).collect();
        let want = permute_for_rope(&v, 8, 2).unwrap();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let got = permute_rows_for_rope(&bytes, 8, 2, 12).unwrap();
        let got: Vec<f32> = got
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, want);
        assert!(permute_rows_for_rope(&bytes, 8, 3, 12).is_err());
        assert!(permute_rows_for_rope(&bytes[1..], 8, 2, 12).is_err());
    }

    #[test]
    fn unpack_inverts_transformers_packing() {
        // rows 8, cols 2: packed row r holds rows r, r+2, r+4, r+6 at bits 0, 2, 4, 6.
        let t: [[i8; 2]; 8] = [
            [1, 0],
            [-1, 1],
            [0, 0],
            [1, 1],
            [-1, -1],
            [0, 1],
            [1, -1],
            [0, 0],
        ];
        let mut packed = vec![0u8; 4];
        for (row, vals) in t.iter().enumerate() {
            for (c, &v) in vals.iter().enumerate() {
                let (k, r) = (row / 2, row % 2);
                packed[r * 2 + c] |= ((v + 1) as u8) << (2 * k);
            }
        }
        let codes = unpack_ternary(&packed, 8, 2).unwrap();
        let want: Vec<u8> = t.iter().flatten().map(|&v| (v + 1) as u8).collect();
        assert_eq!(codes, want);
        assert!(unpack_ternary(&[0xff; 4], 8, 2).is_err());
        assert!(unpack_ternary(&packed, 6, 2).is_err());
    }

    #[test]
    fn i2s_from_codes_matches_the_quantizer_on_ternary_input() {
        let codes: Vec<u8> = (0..256).map(|i| (i * 7 % 3) as u8).collect();
        let scale = 0.25f32;
        let values: Vec<f32> = codes
            .iter()
            .map(|&c| (f32::from(c) - 1.0) * scale)
            .collect();
        let direct = i2s_from_codes(&codes, scale);
        let decoded = quant::dequantize(GgmlType::I2_S, &direct, 256).unwrap();
        assert_eq!(decoded, values);
    }
}
