//! F32, F16 and GGML's legacy block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): matvec, matmul and
//! embedding kernels.
//!
//! # Kernels
//! One WGSL skeleton per kind of kernel (`matvec_legacy.wgsl`, `matmul_legacy.wgsl`,
//! `embedding_legacy.wgsl`), written against a small interface that each format implements in
//! its own prepended file (`shaders/quant/legacy_<format>.wgsl`, helpers in
//! `shaders/quant/legacy_blocks.wgsl`): `decode_block` (32 weights, exactly the CPU's values;
//! matmul and embedding) and `block_dot` (the same block's dot product with x; matvec). No
//! shader is copied per format.
//!
//! # Layout on the GPU
//! The blocks are 18, 20, 22, 24 and 34 bytes: in the file's array of structs almost no block
//! starts on a 4-byte boundary, let alone 16, so reading them in place costs unaligned byte
//! gathers. [`planes`] therefore repacks each chunk of rows losslessly (the same bits, struct
//! of arrays, zero-padded only at the end of each plane to a multiple of 16 bytes):
//!
//! | format | binding 3 (codes)             | binding 4 (scales)          | binding 5   |
//! |--------|-------------------------------|-----------------------------|-------------|
//! | Q4_0   | `qs`, one 16 B slot per block | `d` f16                     |             |
//! | Q4_1   | `qs`, one 16 B slot per block | `d`, `m` f16 (one word)     |             |
//! | Q5_0   | `qs`, one 16 B slot per block | `d` f16                     | `qh` u32    |
//! | Q5_1   | `qs`, one 16 B slot per block | `d`, `m` f16 (one word)     | `qh` u32    |
//! | Q8_0   | `qs`, two 16 B slots per block| `d` f16                     |             |
//! | F16    | 16 B slots of 8 weights       |                             |             |
//! | F32    | 16 B slots of 4 weights       |                             |             |
//!
//! and in every plane the rows are interleaved by groups of [`ROW_GROUP`] = 32: element `s`
//! (a slot, a scale, a `qh` word) of row `r` sits at `base * per_row + s * group_rows +
//! (r - base)`, `base = r - r % 32`, `group_rows = min(32, rows - base)`. The matvec gives each
//! invocation of a 32-wide slice one row; at every step the slice reads 32 neighbouring slots
//! (512 contiguous bytes, aligned `vec4<u32>` loads) and 32 neighbouring scales, and all its
//! invocations use the same 32 values of x (a broadcast from workgroup memory), so x costs
//! neither bandwidth nor per-invocation loads. The matmul's tile loads and the embedding's row
//! reads use the same planes. F32 rows whose length is not a multiple of 4 and F16 rows whose
//! length is not a multiple of 8 (no real model has them) stay the file's bytes and are read
//! element-wise.
//!
//! # Dispatch and workgroup sizes (tuned on an H100 and an H200 through Vulkan)
//! - Matvec: WG 256, [`MATVEC_ROWS_PER_WORKGROUP`] = 32 rows per workgroup, 8 column slices
//!   (CPU adapters: WG 4, 16 rows per invocation, see [`crate::gpu::matmul::SOFTWARE_MATVEC_WG`]).
//!   Measured (weights read per second): F16 and F32 about 3.0 TB/s on an H100 and 4.0-4.3 TB/s
//!   on an H200 (at or above a copy kernel); the block formats are bound by instruction issue
//!   (decoding costs 3 to 5 instructions per weight, with the products kept exact in f32).
//! - Matmul: WG 128, tiles of [`MATMUL_TILE_ROWS`] = 64 rows x `WG / 4` = 32 tokens, row tiles
//!   first; each invocation accumulates 4 rows x 4 tokens.
//! - Embedding: WG 64, one workgroup per token (see `src/gpu/embedding.rs`).

use super::{Kernel, KernelSource};
use crate::quant::GgmlType;

/// Rows of one matvec workgroup (`ROW_LANES` in `matvec_legacy.wgsl`).
pub const MATVEC_ROWS_PER_WORKGROUP: u32 = 32;
/// Rows of one matmul tile (`TILE_ROWS` in `matmul_legacy.wgsl`).
pub const MATMUL_TILE_ROWS: u32 = 64;

pub const FILES: &[(&str, &str)] = &[
    (
        "quant/legacy_blocks.wgsl",
        include_str!("../../../shaders/quant/legacy_blocks.wgsl"),
    ),
    (
        "quant/legacy_f32.wgsl",
        include_str!("../../../shaders/quant/legacy_f32.wgsl"),
    ),
    (
        "quant/legacy_f16.wgsl",
        include_str!("../../../shaders/quant/legacy_f16.wgsl"),
    ),
    (
        "quant/legacy_q4_0.wgsl",
        include_str!("../../../shaders/quant/legacy_q4_0.wgsl"),
    ),
    (
        "quant/legacy_q4_1.wgsl",
        include_str!("../../../shaders/quant/legacy_q4_1.wgsl"),
    ),
    (
        "quant/legacy_q5_0.wgsl",
        include_str!("../../../shaders/quant/legacy_q5_0.wgsl"),
    ),
    (
        "quant/legacy_q5_1.wgsl",
        include_str!("../../../shaders/quant/legacy_q5_1.wgsl"),
    ),
    (
        "quant/legacy_q8_0.wgsl",
        include_str!("../../../shaders/quant/legacy_q8_0.wgsl"),
    ),
    (
        "matvec_legacy.wgsl",
        include_str!("../../../shaders/matvec_legacy.wgsl"),
    ),
    (
        "quant/legacy_q4_0_q8.wgsl",
        include_str!("../../../shaders/quant/legacy_q4_0_q8.wgsl"),
    ),
    (
        "quant/legacy_q4_1_q8.wgsl",
        include_str!("../../../shaders/quant/legacy_q4_1_q8.wgsl"),
    ),
    (
        "quant/legacy_q5_0_q8.wgsl",
        include_str!("../../../shaders/quant/legacy_q5_0_q8.wgsl"),
    ),
    (
        "quant/legacy_q5_1_q8.wgsl",
        include_str!("../../../shaders/quant/legacy_q5_1_q8.wgsl"),
    ),
    (
        "quant/legacy_q8_0_q8.wgsl",
        include_str!("../../../shaders/quant/legacy_q8_0_q8.wgsl"),
    ),
    (
        "matvec_legacy_q8.wgsl",
        include_str!("../../../shaders/matvec_legacy_q8.wgsl"),
    ),
    (
        "matvec_legacy_q8_add_norm.wgsl",
        include_str!("../../../shaders/matvec_legacy_q8_add_norm.wgsl"),
    ),
    (
        "matmul_legacy.wgsl",
        include_str!("../../../shaders/matmul_legacy.wgsl"),
    ),
    (
        "embedding_legacy.wgsl",
        include_str!("../../../shaders/embedding_legacy.wgsl"),
    ),
];

/// The conversion of weights to f16 tiles for the cooperative-matrix matmul, native only (see
/// [`super::kquants::NATIVE_FILES`]).
#[cfg(not(target_arch = "wasm32"))]
pub const NATIVE_FILES: &[(&str, &str)] = &[(
    "dequant_f16_legacy.wgsl",
    include_str!("../../../shaders/dequant_f16_legacy.wgsl"),
)];
#[cfg(target_arch = "wasm32")]
pub const NATIVE_FILES: &[(&str, &str)] = &[];

/// The files of the conversion to f16 tiles ([`Kernel::DequantF16`]) of a block format (F32
/// keeps the f32 matmul: rounding its weights to f16 would lose what the file kept).
fn dequant_f16_files(t: GgmlType) -> Option<&'static [&'static str]> {
    const P: &str = "matmul_params.wgsl";
    const T: &str = "f16_tiles.wgsl";
    const B: &str = "quant/legacy_blocks.wgsl";
    const S: &str = "dequant_f16_legacy.wgsl";
    if NATIVE_FILES.is_empty() {
        return None;
    }
    Some(match t {
        GgmlType::F16 => &[P, T, B, "quant/legacy_f16.wgsl", S],
        GgmlType::Q4_0 => &[P, T, B, "quant/legacy_q4_0.wgsl", S],
        GgmlType::Q4_1 => &[P, T, B, "quant/legacy_q4_1.wgsl", S],
        GgmlType::Q5_0 => &[P, T, B, "quant/legacy_q5_0.wgsl", S],
        GgmlType::Q5_1 => &[P, T, B, "quant/legacy_q5_1.wgsl", S],
        GgmlType::Q8_0 => &[P, T, B, "quant/legacy_q8_0.wgsl", S],
        _ => return None,
    })
}

/// The files of one kernel: its parameters, the shared block helpers, the format's decoder,
/// then the skeleton.
macro_rules! files_for {
    ($dtype:expr, $params:literal, $skeleton:literal) => {{
        const B: &str = "quant/legacy_blocks.wgsl";
        let files: &'static [&'static str] = match $dtype {
            GgmlType::F32 => &[$params, B, "quant/legacy_f32.wgsl", $skeleton],
            GgmlType::F16 => &[$params, B, "quant/legacy_f16.wgsl", $skeleton],
            GgmlType::Q4_0 => &[$params, B, "quant/legacy_q4_0.wgsl", $skeleton],
            GgmlType::Q4_1 => &[$params, B, "quant/legacy_q4_1.wgsl", $skeleton],
            GgmlType::Q5_0 => &[$params, B, "quant/legacy_q5_0.wgsl", $skeleton],
            GgmlType::Q5_1 => &[$params, B, "quant/legacy_q5_1.wgsl", $skeleton],
            GgmlType::Q8_0 => &[$params, B, "quant/legacy_q8_0.wgsl", $skeleton],
            _ => return None,
        };
        files
    }};
}

/// The integer-dot decode kernel of a block format: the f32 matvec's decode files, the
/// activation record helpers, the format's `block_dot_q8`, the skeleton, then `$tail`.
macro_rules! q8_files_for {
    ($dtype:expr $(, $tail:literal)*) => {{
        const P: &str = "matmul_params.wgsl";
        const B: &str = "quant/legacy_blocks.wgsl";
        const Q: &str = "quant/q8.wgsl";
        const S: &str = "matvec_legacy_q8.wgsl";
        let files: &'static [&'static str] = match $dtype {
            GgmlType::Q4_0 => {
                &[P, B, "quant/legacy_q4_0.wgsl", Q, "quant/legacy_q4_0_q8.wgsl", S $(, $tail)*]
            }
            GgmlType::Q4_1 => {
                &[P, B, "quant/legacy_q4_1.wgsl", Q, "quant/legacy_q4_1_q8.wgsl", S $(, $tail)*]
            }
            GgmlType::Q5_0 => {
                &[P, B, "quant/legacy_q5_0.wgsl", Q, "quant/legacy_q5_0_q8.wgsl", S $(, $tail)*]
            }
            GgmlType::Q5_1 => {
                &[P, B, "quant/legacy_q5_1.wgsl", Q, "quant/legacy_q5_1_q8.wgsl", S $(, $tail)*]
            }
            GgmlType::Q8_0 => {
                &[P, B, "quant/legacy_q8_0.wgsl", Q, "quant/legacy_q8_0_q8.wgsl", S $(, $tail)*]
            }
            _ => return None,
        };
        files
    }};
}

/// Whether `dtype` is one of this family's formats.
pub fn is_legacy(dtype: GgmlType) -> bool {
    use GgmlType::*;
    matches!(dtype, F32 | F16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
}

pub fn source(kernel: Kernel) -> Option<KernelSource> {
    let (files, default_workgroup_size) = match kernel {
        Kernel::Matvec(t) | Kernel::MatvecAdd(t) => (
            files_for!(t, "matmul_params.wgsl", "matvec_legacy.wgsl"),
            256,
        ),
        Kernel::Matmul(t) => (
            files_for!(t, "matmul_params.wgsl", "matmul_legacy.wgsl"),
            128,
        ),
        Kernel::Embedding(t) => (
            files_for!(t, "embedding_params.wgsl", "embedding_legacy.wgsl"),
            64,
        ),
        Kernel::MatvecQ8(t) | Kernel::MatvecQ8Add(t) => (q8_files_for!(t), 256),
        // The product added to the residual with the next norm's record: the record block
        // arithmetic (scale_for_absmax, q8_quarter.wgsl), the shared epilogue, the entry.
        Kernel::MatvecQ8AddNorm(t) => {
            return Some(KernelSource {
                files: q8_files_for!(
                    t,
                    "absmax_scale.wgsl",
                    "q8_quarter.wgsl",
                    "q8_add_norm.wgsl",
                    "matvec_legacy_q8_add_norm.wgsl"
                ),
                entry: "main_add_norm",
                default_workgroup_size: 256,
            })
        }
        Kernel::DequantF16(t) => (dequant_f16_files(t)?, super::kquants::COOP_WG),
        _ => return None,
    };
    Some(KernelSource {
        files,
        entry: "main",
        default_workgroup_size,
    })
}

/// Rows interleaved together in every plane.
pub const ROW_GROUP: usize = 32;

/// One field of a block: its byte range and the size of the pieces it is interleaved in
/// (16-byte slots for codes, the whole field for scales and `qh`).
struct Field {
    bytes: std::ops::Range<usize>,
    piece: usize,
}

/// The planes of a block format, in binding order (codes, scales, `qh`), and the block size.
fn block_fields(dtype: GgmlType) -> Option<(usize, Vec<Field>)> {
    let f = |bytes: std::ops::Range<usize>, piece: usize| Field { bytes, piece };
    // Field offsets of BlockQ4_0 .. BlockQ8_0 in src/quant/legacy.rs.
    Some(match dtype {
        GgmlType::Q4_0 => (18, vec![f(2..18, 16), f(0..2, 2)]),
        GgmlType::Q4_1 => (20, vec![f(4..20, 16), f(0..4, 4)]),
        GgmlType::Q5_0 => (22, vec![f(6..22, 16), f(0..2, 2), f(2..6, 4)]),
        GgmlType::Q5_1 => (24, vec![f(8..24, 16), f(0..4, 4), f(4..8, 4)]),
        GgmlType::Q8_0 => (34, vec![f(2..34, 16), f(0..2, 2)]),
        _ => return None,
    })
}

/// Zero-pad a plane to a multiple of 16 bytes (at least 16), so an `array<vec4<..>>` binding
/// covers every byte.
fn pad16(mut v: Vec<u8>) -> Vec<u8> {
    v.resize(v.len().next_multiple_of(16).max(16), 0);
    v
}

/// Interleave a row-major plane of `rows` rows of `per_row` pieces of `piece` bytes by groups
/// of [`ROW_GROUP`] rows: piece `s` of row `r` moves to `base * per_row + s * group_rows +
/// (r - base)` with `base = r - r % 32` and `group_rows = min(32, rows - base)`
/// (`interleaved()` in shaders/quant/legacy_blocks.wgsl).
fn interleave(plane: &[u8], rows: usize, per_row: usize, piece: usize) -> Vec<u8> {
    let mut out = vec![0u8; plane.len()];
    for (r, row) in plane.chunks_exact(per_row * piece).enumerate().take(rows) {
        let base = r - r % ROW_GROUP;
        let group_rows = ROW_GROUP.min(rows - base);
        for (s, src) in row.chunks_exact(piece).enumerate() {
            let at = (base * per_row + s * group_rows + (r - base)) * piece;
            out[at..at + piece].copy_from_slice(src);
        }
    }
    out
}

/// The planes a chunk of rows is uploaded as (see the module doc): the block formats split
/// into codes, scales and (Q5_x) `qh`, F32 rows whose length is a multiple of 4 and F16 rows
/// whose length is a multiple of 8 as 16-byte slots; each plane interleaved by groups of 32
/// rows. Other F32/F16 row lengths (and any other type) stay the file's bytes.
pub fn planes(dtype: GgmlType, data: &[u8], rows: u32, cols: u32) -> Vec<Vec<u8>> {
    let (rows, cols) = (rows as usize, cols as usize);
    let plain = || vec![pad16(data.to_vec())];
    if rows == 0 || data.is_empty() {
        return plain();
    }
    match dtype {
        GgmlType::F32 | GgmlType::F16 => {
            let row_bytes = data.len() / rows;
            if row_bytes % 16 != 0 || row_bytes * rows != data.len() {
                return plain();
            }
            return vec![pad16(interleave(data, rows, row_bytes / 16, 16))];
        }
        _ => {}
    }
    let Some((size, fields)) = block_fields(dtype) else {
        return plain();
    };
    let blocks_per_row = cols / 32;
    if blocks_per_row == 0 || data.len() != rows * blocks_per_row * size {
        return plain();
    }
    fields
        .iter()
        .map(|field| {
            let mut soa = Vec::with_capacity(data.len() / size * field.bytes.len());
            for block in data.chunks_exact(size) {
                soa.extend_from_slice(&block[field.bytes.clone()]);
            }
            let per_row = blocks_per_row * field.bytes.len() / field.piece;
            pad16(interleave(&soa, rows, per_row, field.piece))
        })
        .collect()
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

/// Uniform structs of this family (checked against the WGSL by tests/gpu_uniforms.rs): none
/// of its own; it uses `MatmulParams` and `EmbeddingParams`, registered with their ops.
pub fn uniforms() -> Vec<crate::gpu::uniforms::UniformLayout> {
    Vec::new()
}
