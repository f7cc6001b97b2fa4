//! IQ4_XS: 256 weights in eight 32-weight sub-blocks, `x = (d * (ls[s] - 32)) * KVALUES[q]`
//! with a 6-bit `ls` per sub-block and IQ4_NL's 4-bit non-linear codes. CPU only, dequantize
//! only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use super::iq4_nl::decode_iq4_32;
use crate::quant::block::{Block, Blocks};
use crate::quant::kquants::QK_K;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ4_XS: Blocks<BlockIQ4XS, QK_K> = Blocks::NEW;

/// Sub-block `s`'s 6-bit scale: low nibble `s % 2` of `scales_l[s / 2]`, high bits `2s` of the
/// little-endian `scales_h`. Its codes are `qs[16s..16s + 16]`, laid out as in IQ4_NL.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4XS {
    pub d: F16Le,
    pub scales_h: [u8; 2],
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

impl Block<QK_K> for BlockIQ4XS {
    const DTYPE: GgmlType = GgmlType::IQ4_XS;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ4XS, d)];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let scales_h = u16::from_le_bytes(self.scales_h);
        for (s, (sub, qs)) in out
            .chunks_exact_mut(32)
            .zip(self.qs.chunks_exact(16))
            .enumerate()
        {
            let lo = (self.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
            let hi = ((scales_h >> (2 * s)) & 3) as u8;
            let ls = (lo | (hi << 4)) as i8 - 32;
            decode_iq4_32(d * f32::from(ls), qs, sub);
        }
    }
}
