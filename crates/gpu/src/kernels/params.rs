//! Every uniform struct the kernels take, mirrored in WGSL by a struct of the same name (same
//! fields, same order): the bottom of the GPU runtime, which the kernel registry and the ops
//! above it import. [`registered`] lists them for the layout test (tests/gpu_uniforms.rs).

use crate::gpu_uniform;
use crate::uniforms::UniformLayout;

gpu_uniform! {
    /// Parameters of the QuantizeQ8 kernel.
    pub struct Q8Params {
        /// Tokens.
        pub n_tokens: u32,
        /// Values per token (a multiple of 32).
        pub cols: u32,
        /// Input row length: `x[t * x_stride + col]` (a multiple of 4).
        pub x_stride: u32,
        /// u32 words per record (`record_bytes(cols) / 4`).
        pub record_words: u32,
        /// The norm's row length of `main_silu_norm`'s norm record, else 0.
        pub norm_cols: u32,
        pub pad0: u32,
        pub pad1: u32,
        pub pad2: u32,
    }
}

gpu_uniform! {
    /// Parameters of argmax.wgsl and top_k.wgsl (one level of the reduction).
    pub struct SelectParams {
        pub n_rows: u32,
        /// Candidates per row at this level.
        pub n_in: u32,
        /// Candidates per workgroup.
        pub chunk: u32,
        /// Candidates kept per workgroup.
        pub k: u32,
        /// 0 reads logits; later levels read (index, value) pairs.
        pub level: u32,
        /// Argmax: 1 writes each row's bare index.
        pub last: u32,
        pub pad0: u32,
        pub pad1: u32,
    }
}

gpu_uniform! {
    /// Parameters of attention.wgsl.
    pub struct AttentionParams {
        /// 0 append, 1 attend, 2 combine.
        pub mode: u32,
        pub n_tokens: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub max_ctx: u32,
        /// Pieces the context of each query is cut into (1: no combine pass).
        pub n_splits: u32,
        /// 1: the cache holds f16 pairs packed in u32; 0: f32.
        pub kv_f16: u32,
        /// Score scale, `1 / sqrt(head_dim)`.
        pub scale: f32,
        /// Fewest keys per piece (short contexts use fewer pieces).
        pub min_split: u32,
        /// Dimensions RoPE rotates in the new keys and the queries (0: they come rotated).
        pub rope_dim: u32,
        /// 1: NeoX pairs `(i, i + rope_dim / 2)`; 0: interleaved pairs `(2i, 2i + 1)`.
        pub rope_neox: u32,
        /// Attend: 1 also appends the one new token's K and V (decode: no append dispatch).
        pub fused: u32,
        /// Combine: 1 also writes the output's q8 records (into binding 9).
        pub quantize: u32,
        /// Decode attend ([`super::Kernel::AttentionDecode`]): q, k and v are products of a norm
        /// record of rows of this many values, whose factor the attend applies
        /// (`attention_norm.wgsl`); else 0.
        pub norm_cols: u32,
        /// Keys a query sees: the last `window` positions up to its own (0: all before it).
        pub window: u32,
        /// Scores become `softcap * tanh(score / softcap)` (0: as they are).
        pub softcap: f32,
        pub pad0: u32,
        pub pad1: u32,
        pub pad2: u32,
    }
}

gpu_uniform! {
    /// Parameters of elementwise.wgsl (the driver of relu_squared, silu_mul and add).
    pub struct ElementwiseParams {
        pub n: u32,
        /// 1: the first operand is the output buffer itself.
        pub in_place: u32,
        /// ReLU² only: 1 multiplies by the second operand.
        pub gated: u32,
        /// 0: the second operand has `n` values; else it has `cols`, repeated over rows.
        pub cols: u32,
        /// The soft cap of softcap.wgsl (unused by the others).
        pub scalar: f32,
        pub pad0: u32,
        pub pad1: u32,
        pub pad2: u32,
    }
}

gpu_uniform! {
    /// The position of the first token of the batch (shared by RoPE and attention ops).
    pub struct PositionParams {
        pub pos0: u32,
        pub pad0: u32,
        pub pad1: u32,
        pub pad2: u32,
    }
}

gpu_uniform! {
    /// Parameters of rope.wgsl.
    pub struct RopeParams {
        pub n_tokens: u32,
        pub n_heads: u32,
        pub head_dim: u32,
        pub rot_dim: u32,
        /// 1: NeoX pairs `(i, i + rot_dim/2)`; 0: interleaved pairs `(2i, 2i+1)`.
        pub neox: u32,
        pub pad0: u32,
        pub pad1: u32,
        pub pad2: u32,
    }
}

gpu_uniform! {
    /// Parameters of rms_norm.wgsl.
    pub struct RmsNormParams {
        pub n_rows: u32,
        pub dim: u32,
        pub eps: f32,
        pub pad0: u32,
    }
}

gpu_uniform! {
    /// Parameters of softmax.wgsl.
    pub struct SoftmaxParams {
        pub n_rows: u32,
        pub cols: u32,
        /// Multiplies the inputs first (1 / temperature).
        pub scale: f32,
        /// 0: a workgroup per row; 1: chunk statistics; 2: merge and write.
        pub mode: u32,
        /// Columns per workgroup (modes 1 and 2).
        pub chunk: u32,
        pub n_chunks: u32,
        pub pad0: u32,
        pub pad1: u32,
    }
}

gpu_uniform! {
    /// Parameters of every embedding kernel.
    pub struct EmbeddingParams {
        /// Tokens to gather.
        pub n_tokens: u32,
        /// Row length.
        pub cols: u32,
        /// Rows of this chunk.
        pub rows: u32,
        /// Table row of this chunk's first row.
        pub row_offset: u32,
    }
}

gpu_uniform! {
    /// Parameters of the QuantizeActivations kernel.
    pub struct QuantizeParams {
        /// Tokens.
        pub n_tokens: u32,
        /// Values per token (a multiple of 4).
        pub cols: u32,
        /// Input row length: `x[t * x_stride + col]` (a multiple of 4).
        pub x_stride: u32,
        /// u32 words per output record (`record_bytes(cols) / 4`).
        pub record_words: u32,
    }
}

gpu_uniform! {
    /// Parameters of the FakeQuantizeActivations kernel.
    pub struct FakeQuantParams {
        /// Tokens.
        pub n_tokens: u32,
        /// Values per token (a multiple of 4).
        pub cols: u32,
        /// Input row length: `x[t * x_stride + col]` (a multiple of 4).
        pub x_stride: u32,
        /// Output row length: `y[t * y_stride + col]` (a multiple of 4).
        pub y_stride: u32,
    }
}

gpu_uniform! {
    /// Parameters of the RmsNormQuantize kernel.
    pub struct NormQuantParams {
        pub n_rows: u32,
        /// Values per row (a multiple of 4).
        pub dim: u32,
        pub eps: f32,
        /// u32 words per output record (`record_bytes(dim) / 4`).
        pub record_words: u32,
    }
}

gpu_uniform! {
    /// Parameters of the NormBitLinear kernel (`norm_bitlinear.wgsl`).
    pub struct NormBitLinearParams {
        /// Input length (a multiple of 128, at most [`crate::bitlinear::NORM_BITLINEAR_MAX_DIM`]).
        pub dim: u32,
        pub eps: f32,
        /// Rows of each weight (0 for an absent one).
        pub rows0: u32,
        pub rows1: u32,
        pub rows2: u32,
        /// Per-tensor weight scales.
        pub scale0: f32,
        pub scale1: f32,
        pub scale2: f32,
    }
}

gpu_uniform! {
    /// Parameters of every matvec/matmul kernel.
    pub struct MatmulParams {
        /// Rows of this chunk.
        pub rows: u32,
        /// Row length (input features).
        pub cols: u32,
        /// Tokens in the batch (1 for matvec).
        pub n_tokens: u32,
        /// Index of this chunk's first row in the output.
        pub row_offset: u32,
        /// Output row length (all rows of the weight): `y[t * y_stride + row]`.
        pub y_stride: u32,
        /// Input row length: `x[t * x_stride + col]`.
        pub x_stride: u32,
        /// Per-tensor weight scale ([`crate::weights::GpuWeight::scale`]: applied by I2_S, TQ1_0, TQ2_0).
        pub weight_scale: f32,
        /// The pair kernels ([`crate::kernels::Kernel::MatvecQ8Pair`]): the first
        /// weight's rows; 0 elsewhere.
        pub split: u32,
    }
}

/// Every uniform struct the kernels use, for the layout test.
pub fn registered() -> Vec<UniformLayout> {
    vec![
        UniformLayout::of::<Q8Params>(),
        UniformLayout::of::<SelectParams>(),
        UniformLayout::of::<AttentionParams>(),
        UniformLayout::of::<ElementwiseParams>(),
        UniformLayout::of::<PositionParams>(),
        UniformLayout::of::<RopeParams>(),
        UniformLayout::of::<RmsNormParams>(),
        UniformLayout::of::<SoftmaxParams>(),
        UniformLayout::of::<EmbeddingParams>(),
        UniformLayout::of::<QuantizeParams>(),
        UniformLayout::of::<FakeQuantParams>(),
        UniformLayout::of::<NormQuantParams>(),
        UniformLayout::of::<NormBitLinearParams>(),
        UniformLayout::of::<MatmulParams>(),
    ]
}
