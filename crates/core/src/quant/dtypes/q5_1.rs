//! Q5_1: 32 weights `x = d * q + m`, 5-bit `q` packed as in Q5_0.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::legacy::{
    inverse, min_max, nibbles32, pack_q5, q5_i16, trunc_clamp, unpack_q5, with_qh, QK,
};
use crate::quant::planes::{legacy_blocks, Field};
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q5_1: Blocks<BlockQ5_1, QK> = Blocks::NEW;

/// A Q5_1 block (ggml's `block_q5_1`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// On the GPU: `qs` in one 16-byte slot per block (binding 3), `d` and `m` as one word
/// (binding 4), `qh` as a u32 (binding 5).
const PLANES: &[Field] = &[
    Field::new(offset_of!(BlockQ5_1, qs), 16, 16),
    Field::new(offset_of!(BlockQ5_1, d), 4, 4),
    Field::new(offset_of!(BlockQ5_1, qh), 4, 4),
];

impl Block<QK> for BlockQ5_1 {
    const DTYPE: GgmlType = GgmlType::Q5_1;
    const QUANTIZE: Option<fn(&[f32; QK]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let codes = with_qh(nibbles32(&b.qs), &b.qh);
        IntBlock::one_group(codes, b.d.to_f32(), b.m.to_f32())
    });
    const INT_DECODE: Option<IntDecode<Self, QK>> = Some(|b, codes, scales, offsets| {
        q5_i16(&b.qs, &b.qh, 0, codes);
        scales[0] = b.d.to_f32();
        offsets[0] = b.m.to_f32();
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ5_1, d), offset_of!(BlockQ5_1, m)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_q5_1.wgsl",
        decode_q8: Some("quant/legacy_q5_1_q8.wgsl"),
        f16_tiles: true,
        planes: |data, rows, cols| legacy_blocks(24, PLANES, data, rows, cols),
    });

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let q = unpack_q5(self.qh, &self.qs);
        for (o, &q) in out.iter_mut().zip(&q) {
            *o = d * f32::from(q) + m;
        }
    }
}

impl BlockQ5_1 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clamp((v - min) * id + 0.5, 31);
        }
        let (qh, qs) = pack_q5(&q);
        BlockQ5_1 {
            d: F16Le::from_f32(d),
            m: F16Le::from_f32(min),
            qh,
            qs,
        }
    }
}
