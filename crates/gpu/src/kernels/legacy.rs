//! The legacy family: F32, F16 and GGML's 32-weight block formats (the dtypes whose
//! [`Family`](crate::quant::Family) is `Legacy`): matvec, matmul and embedding kernels.
//!
//! # Kernels
//! One WGSL skeleton per kind of kernel (`matvec_legacy.wgsl`, `matmul_legacy.wgsl`,
//! `embedding_legacy.wgsl`), written against a small interface that each format implements in
//! its own prepended file (its [`Kernels::decode`], `shaders/quant/legacy_<format>.wgsl`,
//! helpers in `shaders/quant/legacy_blocks.wgsl`): `decode_block` (32 weights, exactly the
//! CPU's values; matmul and embedding) and `block_dot` (the same block's dot product with x;
//! matvec). No shader is copied per format. IQ4_NL is a member with Q4_0's layout, its 4-bit
//! codes mapped through ggml's `kvalues_iq4nl` to int8 values (`quant/legacy_iq4_nl.wgsl`).
//!
//! # Layout on the GPU
//! The blocks are 18 to 34 bytes: in the file's array of structs almost no block starts on a
//! 4-byte boundary, let alone 16, so reading them in place costs unaligned byte gathers. Each
//! format's planes ([`Kernels::planes`], next to its block struct in `crates/core/src/quant/dtypes/`)
//! therefore repack each chunk of rows losslessly (the same bits, struct of arrays, zero-padded
//! only at the end of each plane to a multiple of 16 bytes): the codes in 16-byte slots at
//! binding 3, the f16 scales (and offsets) at binding 4, Q5's `qh` words at binding 5; F32 and
//! F16 rows in 16-byte slots of 4 and 8 weights.
//!
//! In every plane the rows are interleaved by groups of
//! [`ROW_GROUP`](crate::quant::planes::ROW_GROUP) = 32: element `s` (a slot, a scale, a `qh`
//! word) of row `r` sits at `base * per_row + s * group_rows + (r - base)`, `base = r - r % 32`,
//! `group_rows = min(32, rows - base)`. The matvec gives each invocation of a 32-wide slice one
//! row; at every step the slice reads 32 neighbouring slots (512 contiguous bytes, aligned
//! `vec4<u32>` loads) and 32 neighbouring scales, and all its invocations use the same 32 values
//! of x (a broadcast from workgroup memory), so x costs neither bandwidth nor per-invocation
//! loads. The matmul's tile loads and the embedding's row reads use the same planes. F32 rows
//! whose length is not a multiple of 4 and F16 rows whose length is not a multiple of 8 (no real
//! model has them) stay the file's bytes and are read element-wise.
//!
//! # Dispatch and workgroup sizes
//! - Matvec: WG 256, [`MATVEC_ROWS_PER_WORKGROUP`] = 32 rows per workgroup, 8 column slices
//!   (CPU adapters: WG 4, 16 rows per invocation, see [`crate::matmul::SOFTWARE_MATVEC_WG`]).
//!   F16 and F32 read their weights about as fast as a copy kernel copies; the block formats
//!   are bound by instruction issue (decoding costs 3 to 5 instructions per weight, with the
//!   products kept exact in f32).
//! - Matmul: WG 128, tiles of [`MATMUL_TILE_ROWS`] = 64 rows x `WG / 4` = 32 tokens, row tiles
//!   first; each invocation accumulates 4 rows x 4 tokens.
//! - Embedding: WG 64, one workgroup per token (see `src/embedding.rs`).

use std::borrow::Cow;

use super::{Kernel, KernelSource, NATIVE};
use crate::quant::Kernels;

/// Rows of one matvec workgroup (`ROW_LANES` in `matvec_legacy.wgsl`).
pub const MATVEC_ROWS_PER_WORKGROUP: u32 = 32;
/// Rows of one matmul tile (`TILE_ROWS` in `matmul_legacy.wgsl`).
pub const MATMUL_TILE_ROWS: u32 = 64;

/// The files of `kernel` for a format of this family: the kind's parameters, the shared block
/// helpers, the format's decoder (and, for the integer-dot kernels, the activation record
/// helpers and the format's `block_dot_q8`), then the skeleton.
pub fn source(kernel: Kernel, k: &Kernels) -> Option<KernelSource> {
    const P: &str = "matmul_params.wgsl";
    const B: &str = "quant/legacy_blocks.wgsl";
    let d = k.decode;
    let q8 = |tail: &[&'static str]| -> Option<Vec<&'static str>> {
        let mut files = vec![
            P,
            B,
            d,
            "quant/q8.wgsl",
            k.decode_q8?,
            "matvec_legacy_q8.wgsl",
        ];
        files.extend_from_slice(tail);
        Some(files)
    };
    let (files, entry, default_workgroup_size) = match kernel {
        Kernel::Matvec(_) | Kernel::MatvecAdd(_) => {
            (vec![P, B, d, "matvec_legacy.wgsl"], "main", 256)
        }
        Kernel::Matmul(_) => (vec![P, B, d, "matmul_legacy.wgsl"], "main", 128),
        Kernel::Embedding(_) => (
            vec!["embedding_params.wgsl", B, d, "embedding_legacy.wgsl"],
            "main",
            64,
        ),
        Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_) => (q8(&[])?, "main", 256),
        // The product added to the residual with the next norm's record: the record block
        // arithmetic (scale_for_absmax, q8_quarter.wgsl), the shared epilogue, the entry.
        Kernel::MatvecQ8AddNorm(_) => (
            q8(&[
                "absmax_scale.wgsl",
                "q8_quarter.wgsl",
                "q8_add_norm.wgsl",
                "matvec_legacy_q8_add_norm.wgsl",
            ])?,
            "main_add_norm",
            256,
        ),
        // The conversion to f16 tiles for the cooperative-matrix matmul, native only.
        Kernel::DequantF16(_) if NATIVE && k.f16_tiles => (
            vec![P, "f16_tiles.wgsl", B, d, "dequant_f16_legacy.wgsl"],
            "main",
            super::kquants::COOP_WG,
        ),
        _ => return None,
    };
    Some(KernelSource {
        files: Cow::Owned(files),
        entry,
        default_workgroup_size,
    })
}

/// Rows of one matvec workgroup of `workgroup_size` invocations (`ROWS` in
/// `matvec_legacy.wgsl`): [`MATVEC_ROWS_PER_WORKGROUP`], or 16 per invocation in workgroups
/// narrower than that (CPU adapters).
pub fn matvec_rows_per_workgroup(workgroup_size: u32) -> u32 {
    if workgroup_size < MATVEC_ROWS_PER_WORKGROUP {
        16 * workgroup_size
    } else {
        MATVEC_ROWS_PER_WORKGROUP
    }
}

/// Workgroups for `rows` rows and `n_tokens` tokens.
pub fn workgroups(kernel: Kernel, rows: u32, n_tokens: u32, workgroup_size: u32) -> u32 {
    match kernel {
        Kernel::Matvec(_) | Kernel::MatvecAdd(_) => {
            rows.div_ceil(matvec_rows_per_workgroup(workgroup_size))
        }
        Kernel::MatvecQ8(_) | Kernel::MatvecQ8Add(_) | Kernel::MatvecQ8AddNorm(_) => {
            rows.div_ceil(MATVEC_ROWS_PER_WORKGROUP)
        }
        Kernel::Matmul(_) => {
            let tile_tokens = (workgroup_size / 4).max(1);
            rows.div_ceil(MATMUL_TILE_ROWS) * n_tokens.div_ceil(tile_tokens)
        }
        _ => n_tokens,
    }
}
