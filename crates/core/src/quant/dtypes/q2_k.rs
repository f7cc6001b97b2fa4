//! Q2_K: 256 weights in sixteen 16-weight sub-blocks, `x = (d * sc[s]) * q - dmin * m[s]` with
//! 2-bit `q` and 4-bit `sc`, `m`. CPU only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q2_K: Blocks<BlockQ2K, QK_K> = Blocks::NEW;

/// `scales[s]`: low nibble `sc`, high nibble `m` of sub-block `s = e / 16`. For element
/// `e = 128h + 32j + l`, `q` is bits `2j` of `qs[32h + l]`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: F16Le,
    pub dmin: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

impl Block<QK_K> for BlockQ2K {
    const DTYPE: GgmlType = GgmlType::Q2_K;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ2K, d), offset_of!(BlockQ2K, dmin)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        for (s, sub) in out.chunks_exact_mut(16).enumerate() {
            let sc = self.scales[s];
            // gguf-py: `dl * q - ml` with `dl = d * sc` and `ml = dmin * m` rounded apart.
            let dl = d * f32::from(sc & 0x0f);
            let ml = dmin * f32::from(sc >> 4);
            let (h, j, l0) = (s / 8, (s % 8) / 2, 16 * (s % 2));
            let qs = &self.qs[32 * h + l0..32 * h + l0 + 16];
            for (o, &q) in sub.iter_mut().zip(qs) {
                *o = dl * f32::from((q >> (2 * j)) & 3) - ml;
            }
        }
    }
}
