//! Q3_K: 256 weights in sixteen 16-weight sub-blocks, `x = (d * (sc[s] - 32)) * (q - 4 (1 - hm))`
//! with 6-bit `sc`, 2-bit `q` and one high-mask bit `hm` per weight. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q3_K: Blocks<BlockQ3K, QK_K> = Blocks::NEW;

/// For element `e = 128h + 32j + l`: `q` is bits `2j` of `qs[32h + l]`, `hm` is bit `e / 32` of
/// `hmask[e % 32]` (a set bit means no offset). The sixteen 6-bit scales ([`q3k_scale`]): low
/// nibbles in `scales[0..8]` (scale `s` and `s + 8` share byte `s`), high bit pairs in
/// `scales[8..12]` (scale `s` at bits `2 (s / 4)` of byte `8 + s % 4`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// The signed scale (-32..=31) of sub-block `s` (0..16).
pub fn q3k_scale(s: usize, scales: &[u8; 12]) -> i8 {
    let lo = (scales[s % 8] >> (4 * (s / 8))) & 0x0f;
    let hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 0x03;
    (lo | (hi << 4)) as i8 - 32
}

impl Block<QK_K> for BlockQ3K {
    const DTYPE: GgmlType = GgmlType::Q3_K;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ3K, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (s, sub) in out.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(q3k_scale(s, &self.scales));
            let (h, j, l0) = (s / 8, (s % 8) / 2, 16 * (s % 2));
            // The high-mask bit of element e is bit e / 32 = 4h + j.
            let bit = 4 * h + j;
            for (l, o) in (l0..l0 + 16).zip(sub.iter_mut()) {
                let q = (self.qs[32 * h + l] >> (2 * j)) & 3;
                let offset = 4 * (1 - ((self.hmask[l] >> bit) & 1));
                *o = dl * f32::from(q as i8 - offset as i8);
            }
        }
    }
}
