//! Upload layouts: a chunk of rows in the file format rearranged, losslessly, into the planes
//! (storage bindings) a family's kernels read. Pure byte shuffling; each dtype picks its layout
//! in its own file ([`super::Kernels::planes`]).

use std::ops::Range;

/// Rows interleaved together in the planes of the legacy family.
pub const ROW_GROUP: usize = 32;

/// Zero-pad a plane to a whole number (at least one) of 16-byte `vec4<u32>` slots, so an
/// `array<vec4<..>>` binding covers every byte.
pub fn pad16(mut plane: Vec<u8>) -> Vec<u8> {
    plane.resize(plane.len().next_multiple_of(16).max(16), 0);
    plane
}

/// The chunk as one plane, padded ([`pad16`]).
pub fn padded(data: &[u8], _rows: u32, _cols: u32) -> Vec<Vec<u8>> {
    vec![pad16(data.to_vec())]
}

/// One field of a block in the legacy layout: its byte range and the size of the pieces it is
/// interleaved in (16-byte slots for codes, the whole field for scales and `qh`).
pub struct Field {
    pub bytes: Range<usize>,
    pub piece: usize,
}

impl Field {
    /// `len` bytes from `at`, interleaved in pieces of `piece` bytes.
    pub const fn new(at: usize, len: usize, piece: usize) -> Field {
        Field {
            bytes: at..at + len,
            piece,
        }
    }
}

/// Interleave a row-major plane of `rows` rows of `per_row` pieces of `piece` bytes by groups
/// of [`ROW_GROUP`] rows: piece `s` of row `r` moves to `base * per_row + s * group_rows +
/// (r - base)` with `base = r - r % 32` and `group_rows = min(32, rows - base)`
/// (`interleaved()` in crates/gpu/shaders/quant/legacy_blocks.wgsl).
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

/// The legacy layout of F32 and F16: rows in 16-byte slots (4 or 8 weights), interleaved by
/// groups of 32 rows. Rows that are not whole slots stay the file's bytes (the kernels read
/// them element-wise).
pub fn row_slots(data: &[u8], rows: u32, cols: u32) -> Vec<Vec<u8>> {
    let rows = rows as usize;
    if rows == 0 || data.is_empty() {
        return padded(data, rows as u32, cols);
    }
    let row_bytes = data.len() / rows;
    if row_bytes % 16 != 0 || row_bytes * rows != data.len() {
        return padded(data, rows as u32, cols);
    }
    vec![pad16(interleave(data, rows, row_bytes / 16, 16))]
}

/// The legacy layout of 32-weight blocks of `size` bytes: struct of arrays, one plane per
/// field in `fields` order (codes, scales, `qh`), each interleaved by groups of 32 rows and
/// padded. Anything but whole blocks stays the file's bytes.
pub fn legacy_blocks(
    size: usize,
    fields: &[Field],
    data: &[u8],
    rows: u32,
    cols: u32,
) -> Vec<Vec<u8>> {
    let (rows, cols) = (rows as usize, cols as usize);
    let blocks_per_row = cols / 32;
    if rows == 0
        || data.is_empty()
        || blocks_per_row == 0
        || data.len() != rows * blocks_per_row * size
    {
        return padded(data, rows as u32, cols as u32);
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

/// Split blocks of `size` bytes into one plane per byte range, block order kept (no padding).
pub fn split_blocks(data: &[u8], size: usize, fields: &[Range<usize>]) -> Vec<Vec<u8>> {
    let n = data.len() / size;
    fields
        .iter()
        .map(|f| {
            let mut plane = Vec::with_capacity(n * f.len());
            for block in data.chunks_exact(size) {
                plane.extend_from_slice(&block[f.clone()]);
            }
            plane
        })
        .collect()
}
