//! What a dtype is: one implementation per block type.
//!
//! A block struct implements [`Block`] once, in the dtype's own file under `dtypes/`: its GGUF
//! type and block size, its CPU decode (and, where ggml defines one, encode), its integer form
//! for the q8 reference, which bytes hold its f16 scales, and what its GPU kernels are made of
//! ([`Kernels`]: data only; the GPU runtime reads it). [`Blocks`] turns the typed block into a
//! [`Dtype`], the type-erased view the rest of the crate looks up in the registry
//! (`dtypes.rs`). F32, F16, BF16 (element types) and I2_S (a per-tensor trailer) implement
//! [`Dtype`] by hand.

use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use bytemuck::Pod;

use super::q8dot::{row_dot, IntBlock, RowDotQ8, QK8};
use super::{GgmlType, QuantError};

/// One GGML block layout: `N` weights in `size_of::<Self>()` bytes, read in place from file
/// bytes (alignment 1).
pub trait Block<const N: usize>: Pod + Send + Sync {
    /// The GGUF type this block is.
    const DTYPE: GgmlType;
    /// ggml's `quantize_row_*_ref` for one block, where there is one (`None`: dequantize only).
    const QUANTIZE: Option<fn(&[f32; N]) -> Self> = None;
    /// The block as integer codes in groups that share a scale and an offset, the reference
    /// of the integer-dot kernels ([`super::q8dot::vec_dot_q8`]); `None`: no integer form.
    const INT_FORM: Option<fn(&Self) -> IntBlock> = None;
    /// Weights per group of the integer form (16 or 32, so that a group lies in one activation
    /// block), the same for every group: [`Self::INT_DECODE`] fills `N / INT_GROUP` groups.
    const INT_GROUP: usize = QK8;
    /// [`Self::INT_FORM`] into storage the caller provides, what the CPU's fast integer
    /// product reads ([`super::q8dot::Q8Dot`]): `(block, codes, scales, offsets)` writes the
    /// same codes and, for each of the `N / INT_GROUP` groups, the same scale and offset.
    /// Present exactly where `INT_FORM` is (checked with the GGUF table), and equal to it
    /// (tested per dtype).
    const INT_DECODE: Option<IntDecode<Self, N>> = None;
    /// Byte offsets of the block's f16 scale fields: the benchmarks and self-tests make random
    /// bytes into tame blocks by clearing the top exponent bit of each ([`Dtype::tame`]).
    const SCALE_FIELDS: &'static [usize] = &[];
    /// How a BitLinear op feeds weights of this type, where it is a BitLinear weight type.
    const BITLINEAR: Option<BitLinearInput> = None;
    /// What its GPU kernels are made of; `None`: CPU only.
    const KERNELS: Option<&'static Kernels> = None;

    /// Decode one block, bit identical to gguf-py.
    fn dequantize(&self, out: &mut [f32; N]);
}

/// [`Block::INT_DECODE`]: one block into its codes and its groups' scales and offsets.
pub type IntDecode<B, const N: usize> = fn(&B, &mut [i16; N], &mut [f32], &mut [f32]);

/// How a BitLinear op feeds a ternary weight.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BitLinearInput {
    /// Int8 activation records with a per-token scale, which the integer kernels read
    /// (I2_S): the quantization is a step of its own in the plan.
    Records,
    /// The quantized activations written back as f32 `x_q / s` (or, for one token with the
    /// integer-dot kernel, as q8 records) by the BitLinear op itself (TQ1_0, TQ2_0).
    FakeQuant,
}

/// A set of WGSL kernel skeletons with one decode interface (`crates/gpu/src/kernels/<family>.rs`):
/// each member dtype is a decode file prepended to them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Family {
    /// F32, F16 and 32-weight blocks: `decode_block` and `block_dot`
    /// (`crates/gpu/shaders/quant/legacy_blocks.wgsl`), planes interleaved by 32 rows.
    Legacy,
    /// 256-weight super-blocks decoded in units of 32 weights (`kq_load`, `KqRaw` in
    /// `crates/gpu/shaders/quant/kquants.wgsl`), at most 4 planes; with the integer-dot matvec's tuning.
    KQuant(Q8Tuning),
    /// Upstream ggml's ternary types: `tq_word`, `tq_scale` (`matvec_ternary*.wgsl`).
    Ternary,
    /// I2_S BitLinear on int8 activation records (`matvec_i2s.wgsl`, `matmul_i2s.wgsl`).
    I2S,
}

/// What the K-quant integer-dot matvec does differently by format (see
/// `crates/gpu/src/kernels/kquants.rs`, `matvec_q8_workgroup_size` and `matvec_q8_span`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Q8Tuning {
    /// Large matrices take 32 invocations at any row length, not only up to 2048 columns.
    pub narrow_at_any_width: bool,
    /// Units of 32 weights per step.
    pub span: Span,
}

/// Units per step (`SPAN`) of a K-quant integer-dot matvec.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// One unit at every size.
    One,
    /// Two on large matrices.
    TwoWhenLarge,
    /// Two on large matrices with rows longer than the given number of columns.
    TwoWhenLargeAndWiderThan(u32),
}

/// The planes a chunk of rows is uploaded as, from its bytes in the file format (I2_S: the
/// codes only), `rows` and `cols`: lossless, block-local and interleaved by groups of at most
/// 32 rows (the GPU uploads a large chunk in pieces of 32 rows, and the planes of the pieces
/// must be the chunk's), bound at 3, 4, 5.. in order.
pub type Planes = fn(data: &[u8], rows: u32, cols: u32) -> Vec<Vec<u8>>;

/// What a dtype's GPU kernels are made of: its family's skeletons and its own decode files,
/// found by name in `crates/gpu/shaders/`.
#[derive(Copy, Clone, Debug)]
pub struct Kernels {
    pub family: Family,
    /// Its decode file for the kernels on f32 activations (`quant/legacy_q5_1.wgsl`, ...).
    pub decode: &'static str,
    /// Its integer-dot file (the `MatvecQ8` kernels on int8 activation records); `None`: no
    /// such kernels.
    pub decode_q8: Option<&'static str>,
    /// Whether prefill may convert it to f16 tiles for the cooperative-matrix product (F32 does
    /// not: rounding its weights to f16 would lose what the file kept).
    pub f16_tiles: bool,
    /// Its upload layout.
    pub planes: Planes,
}

/// A dtype as the rest of the crate sees it, looked up by [`GgmlType`] in the registry.
pub trait Dtype: Send + Sync + 'static {
    /// The GGUF type.
    fn ggml(&self) -> GgmlType;
    /// Decode a whole tensor as stored (I2_S: with its trailer and scale);
    /// `data.len() == ggml().tensor_bytes(out.len())`, checked by the caller.
    fn dequantize(&self, data: &[u8], out: &mut [f32]) -> Result<(), QuantError>;
    /// Decode whole rows, `data.len() == ggml().row_bytes(out.len())`: no trailer, and no
    /// per-tensor scale applied ([`Dtype::tensor_scale`]).
    fn dequantize_rows(&self, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        self.dequantize(data, out)
    }
    /// The per-tensor scale a tensor of `n` weights carries in its bytes (I2_S), which every
    /// product applies; `None` for types without one. `data.len()` is checked here.
    fn tensor_scale(&self, _data: &[u8], _n: usize) -> Result<Option<f32>, QuantError> {
        Ok(None)
    }
    /// Whether [`Dtype::quantize`] can produce this type.
    fn can_quantize(&self) -> bool;
    /// Encode `values`. Errors in this order: quantizing unsupported, a partial block, a
    /// non-finite value.
    fn quantize(&self, values: &[f32]) -> Result<Vec<u8>, QuantError>;
    /// Whether rows may be quantized apart and concatenated (not I2_S, whose scale is the
    /// whole tensor's).
    fn rows_independent(&self) -> bool {
        true
    }
    /// One block (file bytes) in integer form, where the type has one.
    fn int_block(&self, _block: &[u8]) -> Option<IntBlock> {
        None
    }
    /// Whether [`Dtype::int_block`] knows this type.
    fn has_int_form(&self) -> bool {
        false
    }
    /// How a BitLinear op feeds it, where it is a BitLinear weight type.
    fn bitlinear(&self) -> Option<BitLinearInput> {
        None
    }
    /// Make random bytes of a tensor valid data with tame values: every f16 or f32 finite and
    /// below 2 in magnitude (benchmarks and self-tests).
    fn tame(&self, data: &mut [u8]);
    /// What its GPU kernels are made of; `None`: CPU only.
    fn kernels(&self) -> Option<&'static Kernels>;
}

/// The registry entry of a block type: `Blocks::<BlockQ5_1, 32>::NEW` fails to compile where
/// the struct disagrees with the GGUF table.
pub struct Blocks<B, const N: usize>(PhantomData<fn() -> B>);

impl<B: Block<N>, const N: usize> Blocks<B, N> {
    const CHECK: () = {
        let ok = match B::DTYPE.block() {
            Some(g) => g.block_elems == N as u64 && g.block_bytes == size_of::<B>() as u64,
            None => false,
        };
        assert!(ok, "the block struct disagrees with the GGUF table");
        assert!(
            B::INT_FORM.is_some() == B::INT_DECODE.is_some(),
            "an integer form has both its forms"
        );
        assert!(
            B::INT_DECODE.is_none() || ((B::INT_GROUP == 16 || B::INT_GROUP == 32) && N % QK8 == 0),
            "the integer form's groups lie within activation blocks"
        );
        assert!(
            align_of::<B>() == 1,
            "blocks are read in place from file bytes"
        );
    };

    /// The entry, checked against the GGUF table.
    pub const NEW: Self = {
        let () = Self::CHECK;
        Blocks(PhantomData)
    };
}

impl<B: Block<N>, const N: usize> Dtype for Blocks<B, N> {
    fn ggml(&self) -> GgmlType {
        B::DTYPE
    }

    fn dequantize(&self, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        dequantize_blocks(data, out, B::dequantize)
    }

    fn can_quantize(&self) -> bool {
        B::QUANTIZE.is_some()
    }

    fn quantize(&self, values: &[f32]) -> Result<Vec<u8>, QuantError> {
        let encode = B::QUANTIZE.ok_or(QuantError::QuantizeUnsupported(B::DTYPE))?;
        quantize_blocks(B::DTYPE, values, encode)
    }

    fn int_block(&self, block: &[u8]) -> Option<IntBlock> {
        Some(B::INT_FORM?(bytemuck::try_from_bytes::<B>(block).ok()?))
    }

    fn has_int_form(&self) -> bool {
        B::INT_FORM.is_some()
    }

    fn bitlinear(&self) -> Option<BitLinearInput> {
        B::BITLINEAR
    }

    fn tame(&self, data: &mut [u8]) {
        for block in data.chunks_exact_mut(size_of::<B>()) {
            for &at in B::SCALE_FIELDS {
                block[at + 1] &= 0xbf;
            }
        }
    }

    fn kernels(&self) -> Option<&'static Kernels> {
        B::KERNELS
    }
}

/// A registry entry's fast integer row product ([`super::q8dot::Q8Dot`]), where its type has
/// an integer form. Apart from [`Dtype`] on purpose: reached through the registry's
/// `q8_row_dot` by static dispatch, so a build that never runs it (the browser package, which
/// has no CPU backend) leaves it out, where a [`Dtype`] method would keep every dtype's copy
/// alive through the vtable.
pub trait Q8Rows {
    fn q8_row_dot(&self) -> Option<RowDotQ8> {
        None
    }
}

impl<B: Block<N>, const N: usize> Q8Rows for Blocks<B, N> {
    fn q8_row_dot(&self) -> Option<RowDotQ8> {
        B::INT_DECODE.map(|_| row_dot::<B, N> as RowDotQ8)
    }
}

/// View `data` as blocks (all block types have alignment 1) and decode each into `N` outputs.
pub(super) fn dequantize_blocks<B: Pod, const N: usize>(
    data: &[u8],
    out: &mut [f32],
    decode: fn(&B, &mut [f32; N]),
) -> Result<(), QuantError> {
    let blocks: &[B] =
        bytemuck::try_cast_slice(data).map_err(|e| QuantError::Invalid(format!("{e}")))?;
    if blocks.len().checked_mul(N) != Some(out.len()) {
        return Err(QuantError::Invalid(format!(
            "{} blocks cannot fill {} elements",
            blocks.len(),
            out.len()
        )));
    }
    for (block, chunk) in blocks.iter().zip(out.chunks_exact_mut(N)) {
        let chunk = <&mut [f32; N]>::try_from(chunk)
            .map_err(|_| QuantError::Invalid("ragged block".into()))?;
        decode(block, chunk);
    }
    Ok(())
}

/// Fail on the first value that is not finite.
pub(super) fn check_finite(dtype: GgmlType, values: &[f32]) -> Result<(), QuantError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(QuantError::NonFinite {
            dtype,
            index: i as u64,
            value: values[i],
        }),
        None => Ok(()),
    }
}

/// Encode whole blocks of `N` finite values.
fn quantize_blocks<B: Pod, const N: usize>(
    dtype: GgmlType,
    values: &[f32],
    encode: fn(&[f32; N]) -> B,
) -> Result<Vec<u8>, QuantError> {
    if values.len() % N != 0 {
        return Err(QuantError::PartialBlock {
            dtype,
            n_elements: values.len() as u64,
            block: N as u64,
        });
    }
    check_finite(dtype, values)?;
    let mut out = Vec::with_capacity(values.len() / N * size_of::<B>());
    for chunk in values.chunks_exact(N) {
        let chunk =
            <&[f32; N]>::try_from(chunk).map_err(|_| QuantError::Invalid("ragged block".into()))?;
        out.extend_from_slice(bytemuck::bytes_of(&encode(chunk)));
    }
    Ok(out)
}
