//! Q4_0: 32 weights `x = d * (q - 8)`, 4-bit `q`.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::legacy::{inverse, nibbles32, nibbles32_i16, signed_absmax, trunc_clamp, QK};
use crate::quant::planes::{legacy_blocks, Field};
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q4_0: Blocks<BlockQ4_0, QK> = Blocks::NEW;

/// A Q4_0 block (ggml's `block_q4_0`): element `j` is the low nibble of `qs[j]`, element
/// `16 + j` the high nibble.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: F16Le,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// On the GPU: `qs` in one 16-byte slot per block (binding 3), `d` (binding 4).
const PLANES: &[Field] = &[
    Field::new(offset_of!(BlockQ4_0, qs), 16, 16),
    Field::new(offset_of!(BlockQ4_0, d), 2, 2),
];

impl Block<QK> for BlockQ4_0 {
    const DTYPE: GgmlType = GgmlType::Q4_0;
    const QUANTIZE: Option<fn(&[f32; QK]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let codes = nibbles32(&b.qs).iter().map(|q| q - 8).collect();
        IntBlock::one_group(codes, b.d.to_f32(), 0.0)
    });
    const INT_DECODE: Option<IntDecode<Self, QK>> = Some(|b, codes, scales, offsets| {
        nibbles32_i16(&b.qs, 8, codes);
        scales[0] = b.d.to_f32();
        offsets[0] = 0.0;
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ4_0, d)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_q4_0.wgsl",
        decode_q8: Some("quant/legacy_q4_0_q8.wgsl"),
        f16_tiles: true,
        planes: |data, rows, cols| legacy_blocks(18, PLANES, data, rows, cols),
    });

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * (i32::from(q & 0x0f) - 8) as f32;
            out[j + QK / 2] = d * (i32::from(q >> 4) - 8) as f32;
        }
    }
}

impl BlockQ4_0 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let lo = trunc_clamp(x[j] * id + 8.5, 15);
            let hi = trunc_clamp(x[j + QK / 2] * id + 8.5, 15);
            *q = lo | (hi << 4);
        }
        BlockQ4_0 {
            d: F16Le::from_f32(d),
            qs,
        }
    }
}
