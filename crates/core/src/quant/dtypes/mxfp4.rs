//! MXFP4 (OCP microscaling FP4): 32 E2M1 weights with one E8M0 scale,
//! `x = 2^(e - 128) * KVALUES_MXFP4[q]` (ggml's doubled E2M1 values with a halved scale). CPU
//! only, dequantize only.

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::GgmlType;

/// The registry entry.
pub const MXFP4: Blocks<BlockMXFP4, 32> = Blocks::NEW;

/// ggml's `kvalues_mxfp4`: twice the E2M1 values, by code.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Element `e < 16` is the low nibble of `qs[e]`, element `e + 16` its high nibble.
///
/// The scale is an exponent byte, not an f16, so [`Block::SCALE_FIELDS`] is empty: random bytes
/// decode to finite values (at most `12 * 2^126`) but not small ones.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockMXFP4 {
    pub e: u8,
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockMXFP4>() == 17);

/// ggml's `ggml_e8m0_to_fp32_half`: `2^(e - 128)` as f32 bits (f32 subnormals for `e < 2`).
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

impl Block<32> for BlockMXFP4 {
    const DTYPE: GgmlType = GgmlType::MXFP4;

    fn dequantize(&self, out: &mut [f32; 32]) {
        let d = e8m0_to_f32_half(self.e);
        let (lo, hi) = out.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&self.qs) {
            *l = d * f32::from(KVALUES_MXFP4[usize::from(q & 0x0f)]);
            *h = d * f32::from(KVALUES_MXFP4[usize::from(q >> 4)]);
        }
    }
}
