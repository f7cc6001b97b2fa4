//! A model's weights by name, read from a [`TensorSource`] and uploaded to a backend.

use super::config::{Arch, ModelConfig};
use crate::backend::{Backend, Names, Tensor, Weight, WeightData};
use crate::error::ModelError;
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
    /// Where a tensor's bytes lie, unchanged, in local files: pieces that joined in order are
    /// [`TensorSource::read`]'s bytes (several where an RDRR tensor spans shards). `None` where
    /// they are not in local files as they are (OPFS, memory, converted checkpoints), or the
    /// tensor is absent. The ranges are as the model's index states them; readers check them
    /// against the files.
    fn location(&self, _name: &str) -> Option<Vec<FileSpan>> {
        None
    }
}

/// A range of a local file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpan {
    pub path: std::path::PathBuf,
    pub offset: u64,
    pub len: u64,
}

/// A [`TensorSource`] whose reads are asynchronous (the browser's main thread reads OPFS
/// files and `Blob`s only through promises). The loader awaits one tensor at a time, so
/// memory holds at most one tensor's bytes besides the metadata.
#[allow(async_fn_in_trait)]
pub trait AsyncTensorSource {
    /// As [`TensorSource::meta`].
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)>;
    /// As [`TensorSource::read`].
    async fn read(&self, name: &str) -> Result<Vec<u8>, Error>;
    /// As [`TensorSource::location`].
    fn location(&self, _name: &str) -> Option<Vec<FileSpan>> {
        None
    }
}

/// A [`TensorSource`] seen as an [`AsyncTensorSource`] whose reads are always ready.
pub struct ReadySource<'a>(pub &'a dyn TensorSource);

impl AsyncTensorSource for ReadySource<'_> {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        self.0.meta(name)
    }

    async fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        self.0.read(name)
    }

    fn location(&self, name: &str) -> Option<Vec<FileSpan>> {
        self.0.location(name)
    }
}

/// Run a future that never waits (a load from a [`ReadySource`]) to its end, without an
/// executor: one poll.
pub(crate) fn run_ready<T>(
    future: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(Error::Internal(
            "a synchronous tensor read did not complete at once",
        )),
    }
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
    /// Biases of q, k and v (`attn_q.bias`, ...: Qwen2), where the file has them.
    pub bq: Option<Tensor>,
    pub bk: Option<Tensor>,
    pub bv: Option<Tensor>,
    /// Qwen3: RMSNorm weights over each head of q and of k (`head_dim` values).
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    /// BitNet: norm of the attention output before `wo`.
    pub attn_sub_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    pub w_gate: Weight,
    pub w_up: Weight,
    pub w_down: Weight,
    /// BitNet: norm of the FFN hidden state before `w_down`.
    pub ffn_sub_norm: Option<Tensor>,
    /// Gemma: norms of the attention's and the FFN's outputs before the residual adds
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub attn_post_norm: Option<Tensor>,
    pub ffn_post_norm: Option<Tensor>,
}

/// Every weight of a model, as backend handles.
pub struct Weights {
    pub token_embd: Weight,
    pub output_norm: Tensor,
    /// The LM head (`output.weight`, or the embedding when tied).
    pub output: Weight,
    /// Where the config has a RoPE attention factor `m`: `m^2` over each head's rotated
    /// dimensions of q and 1 over the rest; where it has a q multiplier (Gemma 27B), that over
    /// every dimension (`head_dim` values).
    pub q_scale: Option<Tensor>,
    /// Gemma: sqrt(dim) over each embedding row (`dim` values).
    pub embed_scale: Option<Tensor>,
    pub layers: Vec<LayerWeights>,
    /// LoRA adapters loaded for this model, and the ones its passes apply.
    pub lora: super::lora::Adapters,
}

struct Loader<'a, B: Backend, S: AsyncTensorSource> {
    b: &'a mut B,
    src: &'a S,
    names: &'a mut Names,
}

impl<B: Backend, S: AsyncTensorSource> Loader<'_, B, S> {
    fn missing(name: &str) -> Error {
        ModelError::MissingTensor {
            name: name.to_string(),
        }
        .into()
    }

    /// A `[rows, cols]` matrix (GGUF shape `[cols, rows]`).
    async fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight, Error> {
        let (dtype, shape) = self.src.meta(name).ok_or_else(|| Self::missing(name))?;
        if shape != [cols as u64, rows as u64] {
            return Err(ModelError::WrongShape {
                name: name.to_string(),
                shape,
                expected: format!("[{cols}, {rows}]"),
            }
            .into());
        }
        let location = self.src.location(name);
        let bytes = self
            .bytes_unless_located(name, dtype, rows as u64 * cols as u64, location.as_deref())
            .await?;
        // Upstream llama.cpp's BitNet files carry a ternary weight's scale as its own tensor.
        let scale_name = format!("{}.scale", name.trim_end_matches(".weight"));
        let scale = match self.src.meta(&scale_name) {
            Some(_) => {
                let v = self.vector_values(&scale_name).await?;
                Some(*v.first().ok_or_else(|| Self::missing(&scale_name))?)
            }
            None => None,
        };
        let w = self.b.load_weight(WeightData {
            name,
            dtype,
            rows,
            cols,
            bytes: &bytes,
            scale,
            layer: layer_of(name),
            location: location.as_deref(),
        })?;
        self.names.weight_named(w, name, dtype, rows, cols);
        Ok(w)
    }

    /// The row blocks of a matrix that stacks several (`attn_qkv`: q, k, v; `ffn_up`: gate,
    /// up), of `parts` rows each, as separate weights (`name[i]`). Rows are whole blocks of the
    /// format, so each part is a run of the tensor's bytes, and of its file ranges.
    async fn stacked(
        &mut self,
        name: &str,
        parts: &[usize],
        cols: usize,
    ) -> Result<Vec<Weight>, Error> {
        let rows: usize = parts.iter().sum();
        let (dtype, shape) = self.src.meta(name).ok_or_else(|| Self::missing(name))?;
        if shape != [cols as u64, rows as u64] {
            return Err(ModelError::WrongShape {
                name: name.to_string(),
                shape,
                expected: format!("[{cols}, {rows}]"),
            }
            .into());
        }
        let row_bytes =
            dtype
                .tensor_bytes(cols as u64)
                .ok_or_else(|| ModelError::PartialBlocks {
                    name: format!("{name} (a row)"),
                    elements: cols as u64,
                    dtype: dtype.to_string(),
                })? as usize;
        let location = self.src.location(name);
        let bytes = self
            .bytes_unless_located(name, dtype, rows as u64 * cols as u64, location.as_deref())
            .await?;
        let mut weights = Vec::new();
        let mut row = 0;
        for (i, &n) in parts.iter().enumerate() {
            let part = format!("{name}[{i}]");
            let range = row * row_bytes..(row + n) * row_bytes;
            let spans = location
                .as_deref()
                .map(|s| sub_spans(s, range.start as u64, range.len() as u64));
            let w = self.b.load_weight(WeightData {
                name: &part,
                dtype,
                rows: n,
                cols,
                bytes: bytes.get(range.clone()).unwrap_or_default(),
                scale: None,
                layer: layer_of(name),
                location: spans.as_deref(),
            })?;
            self.names.weight_named(w, &part, dtype, n, cols);
            weights.push(w);
            row += n;
        }
        Ok(weights)
    }

    /// A matrix's `n` values' bytes; none where the backend reads this block weight from its
    /// files itself ([`Backend::reads_located`]), once the files are known to hold exactly
    /// that many bytes.
    async fn bytes_unless_located(
        &mut self,
        name: &str,
        dtype: GgmlType,
        n: u64,
        location: Option<&[FileSpan]>,
    ) -> Result<Vec<u8>, Error> {
        match location {
            Some(spans) if layer_of(name).is_some() && self.b.reads_located(dtype) => {
                let need = dtype
                    .tensor_bytes(n)
                    .ok_or_else(|| ModelError::PartialBlocks {
                        name: name.to_string(),
                        elements: n,
                        dtype: dtype.to_string(),
                    })?;
                let have: u64 = spans.iter().map(|s| s.len).sum();
                if have != need {
                    return Err(ModelError::WrongByteLength {
                        name: name.to_string(),
                        have,
                        need,
                    }
                    .into());
                }
                Ok(Vec::new())
            }
            _ => read_exact(self.src, name, dtype, n).await,
        }
    }

    /// A vector as f32.
    async fn vector_values(&mut self, name: &str) -> Result<Vec<f32>, Error> {
        vector_values(self.src, name)
            .await?
            .ok_or_else(|| Self::missing(name))
    }

    /// A vector of `len` values if the file has it (a bias), else `None`.
    async fn optional(&mut self, name: &str, len: usize) -> Result<Option<Tensor>, Error> {
        match self.src.meta(name) {
            Some(_) => self.norm(name, len).await.map(Some),
            None => Ok(None),
        }
    }

    /// A vector of the model's constants (not from the file).
    fn constant(&mut self, name: &str, v: &[f32]) -> Result<Tensor, Error> {
        let t = self.b.load_vector(name, v)?;
        self.names.tensor_named(t, name);
        Ok(t)
    }

    /// A norm weight of `dim` values.
    async fn norm(&mut self, name: &str, dim: usize) -> Result<Tensor, Error> {
        let v = self.vector_values(name).await?;
        if v.len() != dim {
            return Err(ModelError::WrongLength {
                name: name.to_string(),
                len: v.len(),
                expected: dim,
            }
            .into());
        }
        let t = self.b.load_vector(name, &v)?;
        self.names.tensor_named(t, name);
        Ok(t)
    }
}

impl Weights {
    /// Load every weight the architecture needs; errors name the tensor.
    pub fn load<B: Backend>(
        b: &mut B,
        c: &ModelConfig,
        src: &dyn TensorSource,
        names: &mut Names,
    ) -> Result<Self, Error> {
        run_ready(Self::load_async(b, c, &ReadySource(src), names))
    }

    /// [`Weights::load`] from an asynchronous source, a tensor at a time.
    pub async fn load_async<B: Backend, S: AsyncTensorSource>(
        b: &mut B,
        c: &ModelConfig,
        src: &S,
        names: &mut Names,
    ) -> Result<Self, Error> {
        let mut l = Loader { b, src, names };
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, c.dim).await?;
        let output_norm = l.norm("output_norm.weight", c.dim).await?;
        let output = if src.meta("output.weight").is_some() {
            l.matrix("output.weight", c.n_vocab, c.dim).await?
        } else {
            token_embd
        };
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let bitnet = c.arch == Arch::BitNet;
        let qk_norm = c.arch.has_qk_norm();
        // Grown one loaded layer at a time: never sized by the count the metadata claims.
        let mut layers = Vec::new();
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let bias = |s: &str| format!("blk.{i}.{s}.bias");
            let attn_norm = l.norm(&n("attn_norm"), c.dim).await?;
            let (wq, wk, wv) = match src.meta(&n("attn_qkv")) {
                Some(_) => {
                    let w = l
                        .stacked(&n("attn_qkv"), &[q_dim, kv_dim, kv_dim], c.dim)
                        .await?;
                    (w[0], w[1], w[2])
                }
                None => (
                    l.matrix(&n("attn_q"), q_dim, c.dim).await?,
                    l.matrix(&n("attn_k"), kv_dim, c.dim).await?,
                    l.matrix(&n("attn_v"), kv_dim, c.dim).await?,
                ),
            };
            let (q_norm, k_norm) = match qk_norm {
                true => (
                    Some(l.norm(&n("attn_q_norm"), c.head_dim).await?),
                    Some(l.norm(&n("attn_k_norm"), c.head_dim).await?),
                ),
                false => (None, None),
            };
            // Phi-3: gate and up stacked in `ffn_up`, gate first (llama.cpp's swiglu takes
            // silu of the first half).
            let (w_gate, w_up) = match src.meta(&n("ffn_gate")) {
                None if c.arch == Arch::Phi3 => {
                    let w = l
                        .stacked(&n("ffn_up"), &[c.ffn_dim, c.ffn_dim], c.dim)
                        .await?;
                    (w[0], w[1])
                }
                _ => (
                    l.matrix(&n("ffn_gate"), c.ffn_dim, c.dim).await?,
                    l.matrix(&n("ffn_up"), c.ffn_dim, c.dim).await?,
                ),
            };
            layers.push(LayerWeights {
                attn_norm,
                wq,
                wk,
                wv,
                bq: l.optional(&bias("attn_q"), q_dim).await?,
                bk: l.optional(&bias("attn_k"), kv_dim).await?,
                bv: l.optional(&bias("attn_v"), kv_dim).await?,
                q_norm,
                k_norm,
                wo: l.matrix(&n("attn_output"), c.dim, q_dim).await?,
                attn_sub_norm: if bitnet {
                    Some(l.norm(&n("attn_sub_norm"), q_dim).await?)
                } else {
                    None
                },
                ffn_norm: l.norm(&n("ffn_norm"), c.dim).await?,
                w_gate,
                w_up,
                w_down: l.matrix(&n("ffn_down"), c.dim, c.ffn_dim).await?,
                ffn_sub_norm: if bitnet {
                    Some(l.norm(&n("ffn_sub_norm"), c.ffn_dim).await?)
                } else {
                    None
                },
                attn_post_norm: match c.arch.is_gemma() {
                    true => Some(l.norm(&n("post_attention_norm"), c.dim).await?),
                    false => None,
                },
                ffn_post_norm: match c.arch.is_gemma() {
                    true => Some(l.norm(&n("post_ffw_norm"), c.dim).await?),
                    false => None,
                },
            });
        }
        let q_scale = match (c.rope_attn_factor, c.q_multiplier) {
            (1.0, 1.0) => None,
            (m, k) => {
                let v: Vec<f32> = (0..c.head_dim)
                    .map(|i| if i < c.rope.rot_dim { m * m * k } else { k })
                    .collect();
                Some(l.constant("rope.q_scale", &v)?)
            }
        };
        let embed_scale = match c.embed_scale {
            Some(e) => Some(l.constant("embed_scale", &vec![e; c.dim])?),
            None => None,
        };
        Ok(Weights {
            token_embd,
            output_norm,
            output,
            q_scale,
            embed_scale,
            layers,
            lora: Default::default(),
        })
    }
}

/// The optional per-pair RoPE frequency divisors for a context of `ctx` positions:
/// `rope_freqs.weight` (how GGUF carries Llama-3 frequency scaling), or Phi-3's
/// `rope_factors_short.weight` / `rope_factors_long.weight`, the long ones for contexts past
/// `rope.scaling.original_context_length` (as llama.cpp picks them). Every factor must be
/// finite and positive (they divide the rotation frequencies), one per rotated pair.
pub async fn rope_freq_factors_async<S: AsyncTensorSource>(
    src: &S,
    c: &ModelConfig,
    ctx: usize,
) -> Result<Option<Vec<f32>>, Error> {
    let long = c.rope_original_context.is_some_and(|orig| ctx > orig);
    let name = match (src.meta("rope_freqs.weight"), long) {
        (Some(_), _) => "rope_freqs.weight",
        (None, false) => "rope_factors_short.weight",
        (None, true) => "rope_factors_long.weight",
    };
    let Some(factors) = vector_values(src, name).await? else {
        if long && src.meta("rope_factors_short.weight").is_some() {
            return Err(Error::from(ModelError::MissingTensor {
                name: name.to_string(),
            }));
        }
        return Ok(None);
    };
    if factors.len() != c.rope.rot_dim / 2 {
        return Err(ModelError::WrongLength {
            name: name.to_string(),
            len: factors.len(),
            expected: c.rope.rot_dim / 2,
        }
        .into());
    }
    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(ModelError::BadHyperParameter {
            key: name.into(),
            value: bad.to_string(),
            expected: "finite and above 0 in every element".into(),
        }
        .into());
    }
    Ok(Some(factors))
}

/// A tensor's element count from its shape, with overflow an error.
fn element_count(name: &str, shape: &[u64]) -> Result<u64, Error> {
    shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            ModelError::ShapeOverflow {
                name: name.to_string(),
            }
            .into()
        })
}

/// A tensor's bytes, which must be exactly what `n` elements of `dtype` occupy (the same
/// check for every backend and every source: a tensor one byte short or long is refused).
/// The pieces of `spans` (a tensor's bytes in order) that hold its bytes `start .. start + len`.
fn sub_spans(spans: &[FileSpan], start: u64, len: u64) -> Vec<FileSpan> {
    let (mut at, end) = (0u64, start + len);
    let mut out = Vec::new();
    for s in spans {
        let (lo, hi) = (at.max(start), (at + s.len).min(end));
        if lo < hi {
            out.push(FileSpan {
                path: s.path.clone(),
                offset: s.offset + (lo - at),
                len: hi - lo,
            });
        }
        at += s.len;
    }
    out
}

/// The block a tensor belongs to (`blk.N.`), if any.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

async fn read_exact<S: AsyncTensorSource>(
    src: &S,
    name: &str,
    dtype: GgmlType,
    n: u64,
) -> Result<Vec<u8>, Error> {
    let need = dtype
        .tensor_bytes(n)
        .ok_or_else(|| ModelError::PartialBlocks {
            name: name.to_string(),
            elements: n,
            dtype: dtype.to_string(),
        })?;
    let bytes = src.read(name).await?;
    if bytes.len() as u64 != need {
        return Err(ModelError::WrongByteLength {
            name: name.to_string(),
            have: bytes.len() as u64,
            need,
        }
        .into());
    }
    Ok(bytes)
}

/// A vector tensor's values as f32, `None` when the source has no such tensor.
async fn vector_values<S: AsyncTensorSource>(
    src: &S,
    name: &str,
) -> Result<Option<Vec<f32>>, Error> {
    let Some((dtype, shape)) = src.meta(name) else {
        return Ok(None);
    };
    let n = element_count(name, &shape)?;
    let bytes = read_exact(src, name, dtype, n).await?;
    let n = usize::try_from(n).map_err(|_| ModelError::ShapeOverflow {
        name: name.to_string(),
    })?;
    Ok(Some(quant::dequantize(dtype, &bytes, n)?))
}

#[cfg(test)]
mod tests {
    use super::{sub_spans, FileSpan};

    #[test]
    fn sub_spans_cut_across_pieces() {
        let s = |p: &str, offset, len| FileSpan {
            path: p.into(),
            offset,
            len,
        };
        let spans = [s("a", 100, 10), s("b", 0, 20)];
        assert_eq!(sub_spans(&spans, 0, 10), vec![s("a", 100, 10)]);
        assert_eq!(sub_spans(&spans, 4, 10), vec![s("a", 104, 6), s("b", 0, 4)]);
        assert_eq!(sub_spans(&spans, 12, 18), vec![s("b", 2, 18)]);
        assert_eq!(sub_spans(&spans, 30, 0), vec![]);
    }

    #[test]
    fn layers_come_from_block_names() {
        assert_eq!(super::layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(super::layer_of("blk.0.ffn_down.weight"), Some(0));
        assert_eq!(super::layer_of("token_embd.weight"), None);
        assert_eq!(super::layer_of("blk.x.attn_q.weight"), None);
        assert_eq!(super::layer_of("output.weight"), None);
    }
}
