//! IQ2_S: 256 weights in thirty-two 8-weight grid rows with explicit sign bytes, each 16
//! weights with a 4-bit scale, `x = (d * (0.5 + s) / 4) * grid[q][j] * sign`. CPU only,
//! dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{iq2_scale, signed_row, IQ2S_GRID};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ2_S: Blocks<BlockIQ2S, QK_K> = Blocks::NEW;

/// Weights `8k..8k + 8`: row `qs[k] | (bits 2 (k % 4) of qh[k / 4]) << 8` of [`IQ2S_GRID`],
/// negated where bit `j` of `signs[k]` is set. The scale of weights `16s..16s + 16` is nibble
/// `s % 2` of `scales[s / 2]`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ2S {
    pub d: F16Le,
    pub qs: [u8; QK_K / 8],
    pub signs: [u8; QK_K / 8],
    pub qh: [u8; QK_K / 32],
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIQ2S>() == 82);

impl Block<QK_K> for BlockIQ2S {
    const DTYPE: GgmlType = GgmlType::IQ2_S;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ2S, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (k, row) in out.chunks_exact_mut(8).enumerate() {
            let s = k / 2;
            let db = iq2_scale(d, self.scales[s / 2] >> (4 * (s % 2)));
            let high = usize::from((self.qh[k / 4] >> (2 * (k % 4))) & 3);
            let index = usize::from(self.qs[k]) | (high << 8);
            signed_row(db, IQ2S_GRID[index], self.signs[k], row);
        }
    }
}
