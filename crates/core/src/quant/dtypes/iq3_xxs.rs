//! IQ3_XXS: 256 weights in eight 32-weight sub-blocks of eight 4-weight grid rows,
//! `x = (d * (0.5 + s) / 2) * grid[q][j] * sign`. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{signed_row, IQ3XXS_GRID, KSIGNS_IQ2XS};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ3_XXS: Blocks<BlockIQ3XXS, QK_K> = Blocks::NEW;

/// Weights `4k..4k + 4` are row `qs[k]` of [`IQ3XXS_GRID`]. Sub-block `s` (weights
/// `32s..32s + 32`) has the little-endian u32 `s` of `scales_signs`: four 7-bit sign indices
/// (bits `7l`, for weights `32s + 8l..32s + 8l + 8`, through ggml's `ksigns_iq2xs`) and the
/// 4-bit scale (bits 28..32).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ3XXS {
    pub d: F16Le,
    pub qs: [u8; QK_K / 4],
    pub scales_signs: [u8; QK_K / 8],
}
const _: () = assert!(std::mem::size_of::<BlockIQ3XXS>() == 98);

impl Block<QK_K> for BlockIQ3XXS {
    const DTYPE: GgmlType = GgmlType::IQ3_XXS;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ3XXS, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for ((sub, a), qs) in out
            .chunks_exact_mut(32)
            .zip(self.scales_signs.chunks_exact(4))
            .zip(self.qs.chunks_exact(8))
        {
            let aux = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, (eight, pair)) in sub.chunks_exact_mut(8).zip(qs.chunks_exact(2)).enumerate() {
                let signs = KSIGNS_IQ2XS[(aux >> (7 * l)) as usize & 127];
                let (lo, hi) = eight.split_at_mut(4);
                signed_row(db, u64::from(IQ3XXS_GRID[usize::from(pair[0])]), signs, lo);
                signed_row(
                    db,
                    u64::from(IQ3XXS_GRID[usize::from(pair[1])]),
                    signs >> 4,
                    hi,
                );
            }
        }
    }
}
