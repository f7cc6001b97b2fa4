//! Weights on the GPU: kept in their quantized form (a family may repack a block format into
//! aligned planes, losslessly), and split by rows into chunks that each fit one storage binding,
//! so a 657 MB embedding works on a device with a 128 MiB binding limit.

use super::{GpuContext, GpuError};
use crate::quant::{self, GgmlType};

/// Rows `first_row .. first_row + rows` of a weight, as one buffer per plane.
pub struct WeightChunk {
    pub first_row: u32,
    pub rows: u32,
    pub planes: Vec<wgpu::Buffer>,
}

/// A `[rows, cols]` weight matrix on the GPU.
pub struct GpuWeight {
    pub name: String,
    pub dtype: GgmlType,
    pub rows: u32,
    pub cols: u32,
    pub chunks: Vec<WeightChunk>,
    /// The per-tensor scale of ternary formats that carry one (I2_S), times any scale the model
    /// gives in a separate tensor (upstream BitNet TQ1_0/TQ2_0 files); 1 otherwise. The I2_S,
    /// TQ1_0 and TQ2_0 kernels multiply their output by it.
    pub scale: f32,
    /// Bytes of weight data on the GPU (what a matvec must read).
    pub bytes: u64,
}

/// Bytes one row of `cols` weights occupies in the file format (without a per-tensor trailer:
/// [`GgmlType::row_bytes`]).
pub fn row_bytes(dtype: GgmlType, cols: u64) -> Option<u64> {
    dtype.row_bytes(cols)
}

/// Rows of a large chunk are turned into planes and uploaded about this many file bytes at a
/// time, so loading never holds a second copy of a whole tensor (the browser's wasm memory
/// only grows).
const PIECE_BYTES: u64 = 4 << 20;
/// Pieces are whole groups of the 32 rows that planes interleave by.
const PIECE_ROW_MULTIPLE: u64 = 32;

/// The planes of a chunk of `rows` rows (`row` bytes each in `data`), built `piece_rows` rows
/// at a time (a multiple of 32): `alloc` receives each plane's size and makes its buffers,
/// `write(buffers, plane, offset, bytes)` fills them piece by piece. The result equals
/// [`planes`] of the whole chunk (padded with zeros to a multiple of 4 bytes, as
/// [`GpuContext::storage_init`] pads): every family's planes are block-local and interleave
/// rows by groups of 32, so a chunk's planes are its pieces' planes one after the other, and
/// only the last piece can carry padding.
#[allow(clippy::too_many_arguments)]
fn planes_in_pieces<B, E>(
    dtype: GgmlType,
    data: &[u8],
    rows: u64,
    cols: u32,
    row: u64,
    piece_rows: u64,
    alloc: impl FnOnce(&[u64]) -> Result<B, E>,
    mut write: impl FnMut(&B, usize, u64, &[u8]),
) -> Result<B, E> {
    let piece = |first: u64, n: u64| {
        planes(
            dtype,
            &data[(first * row) as usize..((first + n) * row) as usize],
            n as u32,
            cols,
        )
    };
    let first = piece(0, piece_rows);
    let last_rows = match rows % piece_rows {
        0 => piece_rows,
        r => r,
    };
    let last_first = rows - last_rows;
    let last = piece(last_first, last_rows);
    // Bytes per row of each plane, exact for a whole piece (no padding there).
    let per_row: Vec<u64> = first.iter().map(|p| p.len() as u64 / piece_rows).collect();
    let sizes: Vec<u64> = per_row
        .iter()
        .zip(&last)
        .map(|(r, l)| (r * last_first + l.len() as u64).next_multiple_of(4))
        .collect();
    let buffers = alloc(&sizes)?;
    let mut put = |first_row: u64, planes: &[Vec<u8>]| {
        for (i, p) in planes.iter().enumerate() {
            let offset = per_row[i] * first_row;
            if p.len() % 4 == 0 {
                write(&buffers, i, offset, p);
            } else {
                let mut padded = p.clone();
                padded.resize(p.len().next_multiple_of(4), 0);
                write(&buffers, i, offset, &padded);
            }
        }
    };
    put(0, &first);
    drop(first);
    let mut at = piece_rows;
    while at < last_first {
        put(at, &piece(at, piece_rows));
        at += piece_rows;
    }
    put(last_first, &last);
    Ok(buffers)
}

/// Split a chunk of rows into the planes its dtype's kernels read
/// ([`quant::Kernels::planes`]; a type without kernels: its bytes, padded; public for
/// tests/kernel_snapshot.rs).
#[doc(hidden)]
pub fn planes(dtype: GgmlType, data: &[u8], rows: u32, cols: u32) -> Vec<Vec<u8>> {
    let planes = quant::kernels(dtype).map_or(quant::planes::padded as quant::Planes, |k| k.planes);
    planes(data, rows, cols)
}

impl GpuContext {
    /// Upload a `[rows, cols]` weight given in its file format (for I2_S including the trailing
    /// scale), split so that no binding exceeds this device's limit.
    pub fn upload_weight(
        &self,
        name: &str,
        dtype: GgmlType,
        rows: u32,
        cols: u32,
        data: &[u8],
    ) -> Result<GpuWeight, GpuError> {
        self.upload_weight_split(name, dtype, rows, cols, data, self.max_binding_bytes())
    }

    /// [`GpuContext::upload_weight`] with an explicit largest chunk (tests use small ones to
    /// exercise splitting on any device).
    pub fn upload_weight_split(
        &self,
        name: &str,
        dtype: GgmlType,
        rows: u32,
        cols: u32,
        data: &[u8],
        max_chunk_bytes: u64,
    ) -> Result<GpuWeight, GpuError> {
        let n = u64::from(rows) * u64::from(cols);
        let expected = dtype
            .tensor_bytes(n)
            .ok_or(quant::QuantError::PartialBlock {
                dtype,
                n_elements: n,
                block: dtype.row_granularity(),
            })?;
        if data.len() as u64 != expected || u64::from(cols) % dtype.row_granularity() != 0 {
            return Err(quant::QuantError::SizeMismatch {
                dtype,
                n_elements: n,
                expected,
                got: data.len() as u64,
            }
            .into());
        }
        let scale = quant::tensor_scale(dtype, data, n as usize)?.unwrap_or(1.0);
        let row = row_bytes(dtype, u64::from(cols)).unwrap_or(expected);
        // Leave room for planes padded to 4 bytes.
        let rows_per_chunk = (max_chunk_bytes.saturating_sub(16) / row.max(1)).min(u64::from(rows));
        if rows_per_chunk == 0 {
            return Err(GpuError::TooLarge {
                what: format!("one row of {name}"),
                bytes: row,
                limit: max_chunk_bytes,
            });
        }
        let mut chunks = Vec::new();
        let mut first = 0u64;
        while first < u64::from(rows) {
            let count = rows_per_chunk.min(u64::from(rows) - first);
            let bytes = &data[(first * row) as usize..((first + count) * row) as usize];
            let label = |i: usize| format!("{name}[{first}..+{count}].{i}");
            let piece_rows = (PIECE_BYTES / row.max(1)) / PIECE_ROW_MULTIPLE * PIECE_ROW_MULTIPLE;
            let planes = if count <= piece_rows.max(PIECE_ROW_MULTIPLE) {
                planes(dtype, bytes, count as u32, cols)
                    .iter()
                    .enumerate()
                    .map(|(i, p)| self.storage_init(&label(i), p))
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                planes_in_pieces(
                    dtype,
                    bytes,
                    count,
                    cols,
                    row,
                    piece_rows,
                    |sizes| {
                        sizes
                            .iter()
                            .enumerate()
                            .map(|(i, &size)| self.storage(&label(i), size))
                            .collect::<Result<Vec<_>, _>>()
                    },
                    |buffers, plane, offset, bytes| {
                        self.queue.write_buffer(&buffers[plane], offset, bytes);
                    },
                )?
            };
            chunks.push(WeightChunk {
                first_row: first as u32,
                rows: count as u32,
                planes,
            });
            first += count;
        }
        Ok(GpuWeight {
            name: name.to_string(),
            dtype,
            rows,
            cols,
            chunks,
            scale,
            bytes: row * u64::from(rows),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uploading in pieces gives the same bytes as the planes of the whole chunk.
    #[test]
    fn planes_in_pieces_equal_whole_planes() {
        // Every dtype with kernels, at rows of 2, 3 and 8 times its granularity (for F32 and
        // F16 row lengths that are whole 16-byte slots and ones that are not).
        let mut cases = Vec::new();
        for d in quant::dtypes::all()
            .iter()
            .filter(|d| d.kernels().is_some())
        {
            let g = d.ggml().row_granularity() as u32;
            cases.extend([2, 3, 8].map(|k| (d.ggml(), k * g)));
        }
        cases.extend([(GgmlType::F32, 20), (GgmlType::F16, 24), (GgmlType::F32, 5)]);
        for (dtype, cols) in cases {
            let row = row_bytes(dtype, u64::from(cols)).unwrap();
            for rows in [65u64, 96, 97, 130] {
                let data: Vec<u8> = (0..row * rows).map(|i| (i * 7 + i / 13) as u8).collect();
                let mut whole = planes(dtype, &data, rows as u32, cols);
                for p in &mut whole {
                    p.resize(p.len().next_multiple_of(4), 0);
                }
                let built = planes_in_pieces(
                    dtype,
                    &data,
                    rows,
                    cols,
                    row,
                    32,
                    |sizes| {
                        Ok::<_, ()>(std::cell::RefCell::new(
                            sizes
                                .iter()
                                .map(|&n| vec![0xAAu8; n as usize])
                                .collect::<Vec<_>>(),
                        ))
                    },
                    |bufs, plane, offset, bytes| {
                        let mut bufs = bufs.borrow_mut();
                        let at = offset as usize;
                        bufs[plane][at..at + bytes.len()].copy_from_slice(bytes);
                    },
                )
                .unwrap()
                .into_inner();
                assert_eq!(built, whole, "{dtype:?} cols {cols} rows {rows}");
            }
        }
    }
}
