//! Q4_1: 32 weights `x = d * q + m`, 4-bit `q`, nibbles as in Q4_0.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::legacy::{inverse, min_max, nibbles32, nibbles32_i16, trunc_clamp, QK};
use crate::quant::planes::{legacy_blocks, Field};
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q4_1: Blocks<BlockQ4_1, QK> = Blocks::NEW;

/// A Q4_1 block (ggml's `block_q4_1`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// On the GPU: `qs` in one 16-byte slot per block (binding 3), `d` and `m` as one word
/// (binding 4).
const PLANES: &[Field] = &[
    Field::new(offset_of!(BlockQ4_1, qs), 16, 16),
    Field::new(offset_of!(BlockQ4_1, d), 4, 4),
];

impl Block<QK> for BlockQ4_1 {
    const DTYPE: GgmlType = GgmlType::Q4_1;
    const QUANTIZE: Option<fn(&[f32; QK]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> =
        Some(|b| IntBlock::one_group(nibbles32(&b.qs), b.d.to_f32(), b.m.to_f32()));
    const INT_DECODE: Option<IntDecode<Self, QK>> = Some(|b, codes, scales, offsets| {
        nibbles32_i16(&b.qs, 0, codes);
        scales[0] = b.d.to_f32();
        offsets[0] = b.m.to_f32();
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ4_1, d), offset_of!(BlockQ4_1, m)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_q4_1.wgsl",
        decode_q8: Some("quant/legacy_q4_1_q8.wgsl"),
        f16_tiles: true,
        planes: |data, rows, cols| legacy_blocks(20, PLANES, data, rows, cols),
    });

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * f32::from(q & 0x0f) + m;
            out[j + QK / 2] = d * f32::from(q >> 4) + m;
        }
    }
}

impl BlockQ4_1 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let lo = trunc_clamp((x[j] - min) * id + 0.5, 15);
            let hi = trunc_clamp((x[j + QK / 2] - min) * id + 0.5, 15);
            *q = lo | (hi << 4);
        }
        BlockQ4_1 {
            d: F16Le::from_f32(d),
            m: F16Le::from_f32(min),
            qs,
        }
    }
}
