//! Weights on the GPU: kept in their quantized form (a family may repack a block format into
//! aligned planes, losslessly), and split by rows into chunks that each fit one storage binding,
//! so a 657 MB embedding works on a device with a 128 MiB binding limit.

use super::kernels::{kquants, legacy, ternary};
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

/// Bytes one row of `cols` weights occupies in the file format (I2_S: the packed codes only).
pub fn row_bytes(dtype: GgmlType, cols: u64) -> Option<u64> {
    match dtype {
        GgmlType::I2_S => (cols % 128 == 0).then_some(cols / 4),
        t => t.tensor_bytes(cols),
    }
}

/// Split a chunk of rows into the planes its family's kernels read.
fn planes(dtype: GgmlType, data: &[u8], rows: u32, cols: u32) -> Vec<Vec<u8>> {
    use GgmlType::*;
    match dtype {
        Q4_K | Q5_K | Q6_K => kquants::planes(dtype, data, rows, cols),
        I2_S | TQ1_0 | TQ2_0 => ternary::planes(dtype, data, rows, cols),
        _ => legacy::planes(dtype, data, rows, cols),
    }
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
        let scale = if dtype == GgmlType::I2_S {
            quant::i2s_weight_scale(data, n as usize)?
        } else {
            1.0
        };
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
            let planes = planes(dtype, bytes, count as u32, cols)
                .iter()
                .enumerate()
                .map(|(i, p)| self.storage_init(&format!("{name}[{first}..+{count}].{i}"), p))
                .collect::<Result<Vec<_>, _>>()?;
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
