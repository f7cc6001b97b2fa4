//! The bottom of the kernel registry: the typed [`Kernel`], the pipeline key, a kernel's
//! source files, and the table of every file under `shaders/` (which build.rs writes). The
//! kernel families (`super::legacy`, `super::kquants`, ...) and everything above them import
//! these; this file imports nothing of the GPU runtime.

use std::borrow::Cow;

use crate::quant::GgmlType;

/// Every compute kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `y = W x` for one token (decode), weights in the given format.
    Matvec(GgmlType),
    /// `y = W x` for one token (decode) on int8 activation records ([`crate::q8`]):
    /// integer dot products, the block scales applied per group.
    MatvecQ8(GgmlType),
    /// [`Kernel::Matvec`] added to what `y` holds (`y += W x`), legacy formats.
    MatvecAdd(GgmlType),
    /// [`Kernel::MatvecQ8`] added to what `y` holds (`y += W x`: a residual add in the same
    /// dispatch).
    MatvecQ8Add(GgmlType),
    /// Two [`Kernel::MatvecQ8`] products of one input in one dispatch (q and k, gate and up:
    /// `matvec_kquants_q8_pair.wgsl`), K-quant formats.
    MatvecQ8Pair(GgmlType),
    /// [`Kernel::MatvecQ8Add`] that also writes the norm record of the sum for the RMSNorm
    /// that reads it next (`q8_add_norm.wgsl`: one q8 block of 32 rows a workgroup): the
    /// products of that norm read the record, and [`Kernel::SiluMulQuantizeQ8Norm`] applies
    /// the norm's factor to them, so the norm has no dispatch.
    MatvecQ8AddNorm(GgmlType),
    /// `Y = X W^T` for several tokens (prefill).
    Matmul(GgmlType),
    /// Weights in the given format to f16 tiles, the weight operand of [`Kernel::MatmulF16`].
    DequantF16(GgmlType),
    /// Activations to f16 tiles scaled per token, the input operand of [`Kernel::MatmulF16`].
    ScaleF16,
    /// `Y = X W^T` for several tokens (prefill) on cooperative matrices over f16 tiles of both
    /// operands, f32 accumulation (where the device has them:
    /// [`crate::GpuFeatures::cooperative_matrix`]; see `MatmulOp::coop_f16`); `true`:
    /// added to what `Y` holds (a residual add in the product's dispatch).
    MatmulF16(bool),
    /// The column slices of a split [`Kernel::MatmulF16`] summed into its output (`true`:
    /// added to it).
    SplitSum(bool),
    /// Rows of an embedding table gathered by token id.
    Embedding(GgmlType),
    /// Per-token int8 absmax quantization of activations (BitLinear input).
    QuantizeActivations,
    /// [`Kernel::QuantizeActivations`] written as [`Kernel::MatvecQ8`] records (every block
    /// scaled by `1 / s`): the BitLinear input of the integer-dot TQ1_0/TQ2_0 decode.
    QuantizeActivationsQ8,
    /// Per-32 int8 quantization of activations, the input of [`Kernel::MatvecQ8`].
    QuantizeQ8,
    /// `x = silu(x) * up` (the SiluMul elementwise op) and [`Kernel::QuantizeQ8`] of the
    /// product, in one dispatch (the input of the integer-dot `ffn_down` product).
    SiluMulQuantizeQ8,
    /// [`Kernel::SiluMulQuantizeQ8`] of gate and up products of a norm record
    /// ([`Kernel::MatvecQ8AddNorm`]): the norm's factor applied to both first.
    SiluMulQuantizeQ8Norm,
    /// RMSNorm followed by [`Kernel::QuantizeQ8`] of its output, in one dispatch (the input of
    /// the integer-dot decode products after a norm: q/k/v, gate/up).
    RmsNormQuantizeQ8,
    /// The same quantization written back as f32 `x_q / s` (BitLinear input for kernels that
    /// take f32 activations: TQ1_0, TQ2_0).
    FakeQuantizeActivations,
    /// RMSNorm followed by the int8 activation quantization of its output, in one dispatch
    /// (the input of an I2_S BitLinear during decode).
    RmsNormQuantize,
    /// RMSNorm, the int8 activation quantization and one token's I2_S products in one
    /// dispatch (`norm_bitlinear.wgsl`), with its `MODE`: 0 up to three weights (q/k/v),
    /// 1 the gated FFN (`relu(gate)^2 * up`), 2 added to a residual; and its invocations per
    /// row (`TPR`: `norm_bitlinear_threads_per_row` of the BitLinear ops).
    NormBitLinear(u32, u32),
    RmsNorm,
    Rope,
    Attention,
    /// The prefill attention by KV head (`attention.wgsl`'s `main_group`): a workgroup
    /// attends for the 2 to 4 query heads that share a KV head, loading its rows once.
    AttentionGroup,
    /// The one-token attention with the combine of its pieces in the attend dispatch
    /// (`attention.wgsl`'s `main_decode`: the last piece of a head to finish combines them;
    /// natively, see `AttentionOp::combines_in_attend`).
    AttentionDecode,
    /// The prefill attention on cooperative matrices for heads of the given size
    /// (`attention_coop.wgsl`, flash attention over the f16 cache; native only, see
    /// `AttentionOp::uses_coop`).
    AttentionCoop(u32),
    Softmax,
    ReluSquared,
    SiluMul,
    Add,
    /// `out *= b` element-wise (with the driver's `cols`: scaling columns).
    Mul,
    /// `gelu(g) * u` (GELU's tanh form).
    GeluMul,
    /// `x = cap * tanh(x / cap)` in place.
    Softcap,
    Argmax,
    TopK,
    /// An empty dispatch (benchmarks measure the per-dispatch overhead with it).
    Noop,
    /// A plain buffer copy (benchmarks measure the bandwidth a kernel can reach with it).
    Copy,
}

/// Which optional device capabilities a pipeline is compiled for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Variant {
    pub f16: bool,
    pub subgroups: bool,
}

/// The pipeline cache key: kernel, variant and the workgroup size (a WGSL `override`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub kernel: Kernel,
    pub variant: Variant,
    pub workgroup_size: u32,
    /// Invocations per row and rows per invocation (`TPR`, `RPT`) of the matvec kernels that
    /// take them ([`super::ternary::matvec_mapping`]), or `None`: the kernel's defaults.
    pub mapping: Option<(u32, u32)>,
    /// Units per step (`SPAN`) of the K-quant integer-dot matvecs
    /// ([`super::kquants::matvec_q8_span`]), or `None`: the kernel's default.
    pub span: Option<u32>,
}

/// The shader files of one kernel, in the order they are concatenated (helpers first), and
/// the kernel's entry point.
#[derive(Debug, Clone)]
pub struct KernelSource {
    pub files: Cow<'static, [&'static str]>,
    pub entry: &'static str,
    /// The workgroup size used when the caller has no preference.
    pub default_workgroup_size: u32,
}

// `static SHADERS: &[(&str, &str)]`: every file under `shaders/` as `(path there, contents)`,
// sorted by path; in the browser's build without the native-only files (see build.rs).
include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// Whether the native-only kernels exist: the cooperative-matrix prefill (WebGPU has no
/// cooperative matrices, and the browser's package does not carry their files).
pub const NATIVE: bool = cfg!(not(target_arch = "wasm32"));

/// `shaders/` file contents by name.
pub(super) fn shader_file(name: &str) -> Option<&'static str> {
    SHADERS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The names of every registered shader file (each should appear once).
pub fn registered_files() -> Vec<&'static str> {
    SHADERS.iter().map(|(n, _)| *n).collect()
}
