//! IQ2_XS: 256 weights in thirty-two 8-weight grid rows, each 16 weights with a 4-bit scale,
//! `x = (d * (0.5 + s) / 4) * grid[q][j] * sign`. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{iq2_row, iq2_scale, IQ2XS_GRID};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ2_XS: Blocks<BlockIQ2XS, QK_K> = Blocks::NEW;

/// Weights `8k..8k + 8` are the little-endian u16 `k` of `qs`: a 9-bit row of [`IQ2XS_GRID`]
/// and a 7-bit sign index above it. The scale of weights `16s..16s + 16` is nibble `s % 2` of
/// `scales[s / 2]`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ2XS {
    pub d: F16Le,
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIQ2XS>() == 74);

impl Block<QK_K> for BlockIQ2XS {
    const DTYPE: GgmlType = GgmlType::IQ2_XS;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ2XS, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (k, (row, q)) in out
            .chunks_exact_mut(8)
            .zip(self.qs.chunks_exact(2))
            .enumerate()
        {
            let s = k / 2;
            let db = iq2_scale(d, self.scales[s / 2] >> (4 * (s % 2)));
            let q = u16::from_le_bytes([q[0], q[1]]);
            iq2_row(
                db,
                IQ2XS_GRID[usize::from(q & 511)],
                usize::from(q >> 9),
                row,
            );
        }
    }
}
