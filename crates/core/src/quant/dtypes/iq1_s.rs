//! IQ1_S: 256 weights in eight 32-weight sub-blocks of four 8-weight grid rows of -1, 0, 1,
//! `x = (d * (2s + 1)) * (grid[q][j] + delta)` with `delta = +-1/8`. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{iq1_row, IQ1S_DELTA, IQ1S_GRID};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ1_S: Blocks<BlockIQ1S, QK_K> = Blocks::NEW;

/// Sub-block `s` has the little-endian u16 `s` of `qh`: three high index bits per row (bits
/// `3l`), the 3-bit scale (bits 12..15) and the sign of `delta` (bit 15: negative). Its row `l`
/// is `qs[4s + l] | high << 8` of [`IQ1S_GRID`].
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ1S {
    pub d: F16Le,
    pub qs: [u8; QK_K / 8],
    pub qh: [u8; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockIQ1S>() == 50);

impl Block<QK_K> for BlockIQ1S {
    const DTYPE: GgmlType = GgmlType::IQ1_S;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ1S, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for ((sub, h), qs) in out
            .chunks_exact_mut(32)
            .zip(self.qh.chunks_exact(2))
            .zip(self.qs.chunks_exact(4))
        {
            let h = u16::from_le_bytes([h[0], h[1]]);
            let dl = d * f32::from(2 * ((h >> 12) & 7) + 1);
            let delta = if h & 0x8000 == 0 {
                IQ1S_DELTA
            } else {
                -IQ1S_DELTA
            };
            for (l, (row, &q)) in sub.chunks_exact_mut(8).zip(qs).enumerate() {
                let index = usize::from(q) | (usize::from((h >> (3 * l)) & 7) << 8);
                iq1_row(dl, IQ1S_GRID[index], delta, row);
            }
        }
    }
}
