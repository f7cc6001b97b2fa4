//! IQ3_S: 256 weights in eight 32-weight sub-blocks of 4-weight grid rows with explicit sign
//! bits, `x = (d * (1 + 2s)) * grid[q][j] * sign`. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{signed_row, IQ3S_GRID};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ3_S: Blocks<BlockIQ3S, QK_K> = Blocks::NEW;

/// Weights `4k..4k + 4`: row `qs[k] | (bit k % 8 of qh[k / 8]) << 8` of [`IQ3S_GRID`]; weight
/// `e` is negated where bit `e % 8` of `signs[e / 8]` is set. Sub-block `s`'s 4-bit scale is
/// nibble `s % 2` of `scales[s / 2]`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ3S {
    pub d: F16Le,
    pub qs: [u8; QK_K / 4],
    pub qh: [u8; QK_K / 32],
    pub signs: [u8; QK_K / 8],
    pub scales: [u8; QK_K / 64],
}
const _: () = assert!(std::mem::size_of::<BlockIQ3S>() == 110);

impl Block<QK_K> for BlockIQ3S {
    const DTYPE: GgmlType = GgmlType::IQ3_S;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ3S, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (s, sub) in out.chunks_exact_mut(32).enumerate() {
            let sc = (self.scales[s / 2] >> (4 * (s % 2))) & 0x0f;
            let db = d * f32::from(1 + 2 * sc);
            for (r, four) in sub.chunks_exact_mut(4).enumerate() {
                let k = 8 * s + r;
                let high = usize::from((self.qh[k / 8] >> (k % 8)) & 1);
                let row = IQ3S_GRID[usize::from(self.qs[k]) | (high << 8)];
                // Weights 4k.. take bits 4 (k % 2).. of signs[k / 2].
                let signs = self.signs[k / 2] >> (4 * (k % 2));
                signed_row(db, u64::from(row), signs, four);
            }
        }
    }
}
