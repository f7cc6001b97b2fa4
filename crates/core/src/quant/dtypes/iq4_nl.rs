//! IQ4_NL: 32 weights, `x = d * KVALUES[q]` with 4-bit `q` indexing a non-linear table.
//! Dequantize only (no quantizer). Laid out as Q4_0 (an f16 `d`, then 16 bytes of nibbles in
//! the same order), so it runs on the GPU as a member of the legacy family with Q4_0's planes;
//! its integer form is the table's values, which fit in i8.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::planes::{legacy_blocks, Field};
use crate::quant::q8dot::IntBlock;
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

/// On the GPU, as Q4_0: `qs` in one 16-byte slot per block (binding 3), `d` (binding 4).
const PLANES: &[Field] = &[
    Field::new(offset_of!(BlockIQ4NL, qs), 16, 16),
    Field::new(offset_of!(BlockIQ4NL, d), 2, 2),
];

/// The integer codes of a block, element order: `KVALUES_IQ4NL` of each nibble (element `j`
/// from the low nibble of `qs[j]`, `16 + j` from its high nibble).
pub(super) fn table_codes(qs: &[u8; 16], codes: &mut [i16; 32]) {
    let (lo, hi) = codes.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(qs) {
        *l = i16::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
        *h = i16::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
}

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
    // One group of 32: `w = d * KVALUES[q]` exactly as the CPU decodes it (an f16 times an
    // 8-bit integer is exact in f32), offset 0, like Q4_0's `d * (q - 8)`.
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let mut codes = [0i16; 32];
        table_codes(&b.qs, &mut codes);
        IntBlock::one_group(
            codes.iter().map(|&c| i32::from(c)).collect(),
            b.d.to_f32(),
            0.0,
        )
    });
    const INT_DECODE: Option<IntDecode<Self, 32>> = Some(|b, codes, scales, offsets| {
        table_codes(&b.qs, codes);
        scales[0] = b.d.to_f32();
        offsets[0] = 0.0;
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ4NL, d)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_iq4_nl.wgsl",
        decode_q8: Some("quant/legacy_iq4_nl_q8.wgsl"),
        f16_tiles: true,
        planes: |data, rows, cols| legacy_blocks(18, PLANES, data, rows, cols),
    });

    fn dequantize(&self, out: &mut [f32; 32]) {
        decode_iq4_32(self.d.to_f32(), &self.qs, out);
    }
}
