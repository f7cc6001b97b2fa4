//! A model's weights by name, read from a [`TensorSource`] and uploaded to a backend.

use super::config::{Arch, ModelConfig};
use crate::backend::{Backend, Tensor, Weight, WeightData};
use crate::formats::gguf::GgufFile;
use crate::formats::source::ByteSource;
use crate::quant::{self, GgmlType};
use crate::Error;

/// Where tensors come from (a GGUF file; an RDRR store).
pub trait TensorSource {
    /// The dtype and shape (innermost first, as GGUF stores it) of a tensor, if present.
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)>;
    /// A tensor's bytes.
    fn read(&self, name: &str) -> Result<Vec<u8>, Error>;
}

/// The tensors of a GGUF file.
pub struct GgufTensors<'a> {
    pub file: &'a GgufFile,
    pub src: &'a dyn ByteSource,
}

impl TensorSource for GgufTensors<'_> {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        self.file.tensor(name).map(|t| (t.dtype, t.dims.clone()))
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        Ok(self.file.read_tensor(self.src, name)?)
    }
}

/// One transformer block's weights.
pub struct LayerWeights {
    pub attn_norm: Tensor,
    pub wq: Weight,
    pub wk: Weight,
    pub wv: Weight,
    pub wo: Weight,
    /// BitNet: norm of the attention output before `wo`.
    pub attn_sub_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    pub w_gate: Weight,
    pub w_up: Weight,
    pub w_down: Weight,
    /// BitNet: norm of the FFN hidden state before `w_down`.
    pub ffn_sub_norm: Option<Tensor>,
}

/// Every weight of a model, as backend handles.
pub struct Weights {
    pub token_embd: Weight,
    pub output_norm: Tensor,
    /// The LM head (`output.weight`, or the embedding when tied).
    pub output: Weight,
    pub layers: Vec<LayerWeights>,
}

struct Loader<'a, B: Backend> {
    b: &'a mut B,
    src: &'a dyn TensorSource,
}

impl<B: Backend> Loader<'_, B> {
    fn missing(name: &str) -> Error {
        Error::Usage(format!("the model has no tensor {name}"))
    }

    /// A `[rows, cols]` matrix (GGUF shape `[cols, rows]`).
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight, Error> {
        let (dtype, shape) = self.src.meta(name).ok_or_else(|| Self::missing(name))?;
        if shape != [cols as u64, rows as u64] {
            return Err(Error::Usage(format!(
                "{name} has shape {shape:?}, expected [{cols}, {rows}]"
            )));
        }
        let bytes = self.src.read(name)?;
        // Upstream llama.cpp's BitNet files carry a ternary weight's scale as its own tensor.
        let scale_name = format!("{}.scale", name.trim_end_matches(".weight"));
        let scale = match self.src.meta(&scale_name) {
            Some(_) => {
                let v = self.vector_values(&scale_name)?;
                Some(*v.first().ok_or_else(|| Self::missing(&scale_name))?)
            }
            None => None,
        };
        self.b.load_weight(WeightData {
            name,
            dtype,
            rows,
            cols,
            bytes: &bytes,
            scale,
        })
    }

    /// A vector as f32.
    fn vector_values(&mut self, name: &str) -> Result<Vec<f32>, Error> {
        let (dtype, shape) = self.src.meta(name).ok_or_else(|| Self::missing(name))?;
        let n: u64 = shape.iter().product();
        let bytes = self.src.read(name)?;
        Ok(quant::dequantize(dtype, &bytes, n as usize)?)
    }

    /// A norm weight of `dim` values.
    fn norm(&mut self, name: &str, dim: usize) -> Result<Tensor, Error> {
        let v = self.vector_values(name)?;
        if v.len() != dim {
            return Err(Error::Usage(format!(
                "{name} has {} values, expected {dim}",
                v.len()
            )));
        }
        self.b.load_vector(name, &v)
    }
}

impl Weights {
    /// Load every weight the architecture needs; errors name the tensor.
    pub fn load<B: Backend>(
        b: &mut B,
        c: &ModelConfig,
        src: &dyn TensorSource,
    ) -> Result<Self, Error> {
        let mut l = Loader { b, src };
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, c.dim)?;
        let output_norm = l.norm("output_norm.weight", c.dim)?;
        let output = if src.meta("output.weight").is_some() {
            l.matrix("output.weight", c.n_vocab, c.dim)?
        } else {
            token_embd
        };
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let bitnet = c.arch == Arch::BitNet;
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(LayerWeights {
                attn_norm: l.norm(&n("attn_norm"), c.dim)?,
                wq: l.matrix(&n("attn_q"), q_dim, c.dim)?,
                wk: l.matrix(&n("attn_k"), kv_dim, c.dim)?,
                wv: l.matrix(&n("attn_v"), kv_dim, c.dim)?,
                wo: l.matrix(&n("attn_output"), c.dim, q_dim)?,
                attn_sub_norm: if bitnet {
                    Some(l.norm(&n("attn_sub_norm"), q_dim)?)
                } else {
                    None
                },
                ffn_norm: l.norm(&n("ffn_norm"), c.dim)?,
                w_gate: l.matrix(&n("ffn_gate"), c.ffn_dim, c.dim)?,
                w_up: l.matrix(&n("ffn_up"), c.ffn_dim, c.dim)?,
                w_down: l.matrix(&n("ffn_down"), c.dim, c.ffn_dim)?,
                ffn_sub_norm: if bitnet {
                    Some(l.norm(&n("ffn_sub_norm"), c.ffn_dim)?)
                } else {
                    None
                },
            });
        }
        Ok(Weights {
            token_embd,
            output_norm,
            output,
            layers,
        })
    }
}

/// The optional per-pair RoPE frequency divisors (`rope_freqs.weight`, how GGUF carries
/// Llama-3 frequency scaling).
pub fn rope_freq_factors(src: &dyn TensorSource) -> Result<Option<Vec<f32>>, Error> {
    let name = "rope_freqs.weight";
    let Some((dtype, shape)) = src.meta(name) else {
        return Ok(None);
    };
    let n: u64 = shape.iter().product();
    Ok(Some(quant::dequantize(
        dtype,
        &src.read(name)?,
        n as usize,
    )?))
}
