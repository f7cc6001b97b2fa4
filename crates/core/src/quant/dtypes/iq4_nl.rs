//! IQ4_NL: 32 weights, `x = d * KVALUES[q]` with 4-bit `q` indexing a non-linear table. CPU
//! only, dequantize only.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ4_NL: Blocks<BlockIQ4NL, 32> = Blocks::NEW;

/// ggml's `kvalues_iq4nl`, the levels IQ4_NL and IQ4_XS codes index.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Element `e < 16` is the low nibble of `qs[e]`, element `e + 16` its high nibble.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4NL {
    pub d: F16Le,
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);

/// Decode 32 weights whose codes are the nibbles of the 16 bytes `qs` (low nibbles first)
/// with scale `dl`, into `out` (32 values).
pub(super) fn decode_iq4_32(dl: f32, qs: &[u8], out: &mut [f32]) {
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
        *h = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
}

impl Block<32> for BlockIQ4NL {
    const DTYPE: GgmlType = GgmlType::IQ4_NL;
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ4NL, d)];

    fn dequantize(&self, out: &mut [f32; 32]) {
        decode_iq4_32(self.d.to_f32(), &self.qs, out);
    }
}
