//! IQ2_XXS: 256 weights in eight 32-weight sub-blocks of four 8-weight grid rows,
//! `x = (d * (0.5 + s) / 4) * grid[q][j] * sign`. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{iq2_row, iq2_scale, IQ2XXS_GRID};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ2_XXS: Blocks<BlockIQ2XXS, QK_K> = Blocks::NEW;

/// Sub-block `s` is `qs[8s..8s + 8]`: four grid-row bytes (rows of [`IQ2XXS_GRID`]), then a
/// little-endian u32 holding four 7-bit sign indices (bits `7l`) and the 4-bit scale (bits 28..32).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ2XXS {
    pub d: F16Le,
    pub qs: [u8; QK_K / 4],
}
const _: () = assert!(std::mem::size_of::<BlockIQ2XXS>() == 66);

impl Block<QK_K> for BlockIQ2XXS {
    const DTYPE: GgmlType = GgmlType::IQ2_XXS;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ2XXS, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (sub, q) in out.chunks_exact_mut(32).zip(self.qs.chunks_exact(8)) {
            let aux = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
            let db = iq2_scale(d, (aux >> 28) as u8);
            for (l, row) in sub.chunks_exact_mut(8).enumerate() {
                let sign_index = (aux >> (7 * l)) as usize & 127;
                iq2_row(db, IQ2XXS_GRID[usize::from(q[l])], sign_index, row);
            }
        }
    }
}
