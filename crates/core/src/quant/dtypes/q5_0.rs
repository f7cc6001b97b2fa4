//! Q5_0: 32 weights `x = d * (q - 16)`, 5-bit `q`: the low 4 bits as in Q4_0, bit 4 of element
//! `j` is bit `j` of the little-endian u32 `qh`.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::legacy::{
    inverse, nibbles32, pack_q5, q5_i16, signed_absmax, trunc_clamp, unpack_q5, with_qh, QK,
};
use crate::quant::planes::{legacy_blocks, Field};
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q5_0: Blocks<BlockQ5_0, QK> = Blocks::NEW;

/// A Q5_0 block (ggml's `block_q5_0`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// On the GPU: `qs` in one 16-byte slot per block (binding 3), `d` (binding 4), `qh` as a u32
/// (binding 5).
const PLANES: &[Field] = &[
    Field::new(offset_of!(BlockQ5_0, qs), 16, 16),
    Field::new(offset_of!(BlockQ5_0, d), 2, 2),
    Field::new(offset_of!(BlockQ5_0, qh), 4, 4),
];

impl Block<QK> for BlockQ5_0 {
    const DTYPE: GgmlType = GgmlType::Q5_0;
    const QUANTIZE: Option<fn(&[f32; QK]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let codes = with_qh(nibbles32(&b.qs), &b.qh);
        IntBlock::one_group(codes.iter().map(|q| q - 16).collect(), b.d.to_f32(), 0.0)
    });
    const INT_DECODE: Option<IntDecode<Self, QK>> = Some(|b, codes, scales, offsets| {
        q5_i16(&b.qs, &b.qh, 16, codes);
        scales[0] = b.d.to_f32();
        offsets[0] = 0.0;
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ5_0, d)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_q5_0.wgsl",
        decode_q8: Some("quant/legacy_q5_0_q8.wgsl"),
        f16_tiles: true,
        planes: |data, rows, cols| legacy_blocks(22, PLANES, data, rows, cols),
    });

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let q = unpack_q5(self.qh, &self.qs);
        for (o, &q) in out.iter_mut().zip(&q) {
            *o = d * (i32::from(q) - 16) as f32;
        }
    }
}

impl BlockQ5_0 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clamp(v * id + 16.5, 31);
        }
        let (qh, qs) = pack_q5(&q);
        BlockQ5_0 {
            d: F16Le::from_f32(d),
            qh,
            qs,
        }
    }
}
