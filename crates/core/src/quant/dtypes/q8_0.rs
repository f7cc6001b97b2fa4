//! Q8_0: 32 weights `x = q * d`, signed 8-bit `q`.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::legacy::{inverse, QK};
use crate::quant::planes::{legacy_blocks, Field};
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q8_0: Blocks<BlockQ8_0, QK> = Blocks::NEW;

/// A Q8_0 block (ggml's `block_q8_0`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: F16Le,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// On the GPU: `qs` in two 16-byte slots per block (binding 3), `d` (binding 4).
const PLANES: &[Field] = &[
    Field::new(offset_of!(BlockQ8_0, qs), 32, 16),
    Field::new(offset_of!(BlockQ8_0, d), 2, 2),
];

impl Block<QK> for BlockQ8_0 {
    const DTYPE: GgmlType = GgmlType::Q8_0;
    const QUANTIZE: Option<fn(&[f32; QK]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let codes = b.qs.iter().map(|&q| i32::from(q)).collect();
        IntBlock::one_group(codes, b.d.to_f32(), 0.0)
    });
    const INT_DECODE: Option<IntDecode<Self, QK>> = Some(|b, codes, scales, offsets| {
        for (c, &q) in codes.iter_mut().zip(&b.qs) {
            *c = i16::from(q);
        }
        scales[0] = b.d.to_f32();
        offsets[0] = 0.0;
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ8_0, d)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Legacy,
        decode: "quant/legacy_q8_0.wgsl",
        decode_q8: Some("quant/legacy_q8_0_q8.wgsl"),
        f16_tiles: true,
        planes: |data, rows, cols| legacy_blocks(34, PLANES, data, rows, cols),
    });

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = f32::from(q) * d;
        }
    }
}

impl BlockQ8_0 {
    /// ggml's `quantize_row_q8_0_ref`: `d = amax / 127`, `q = round(x / d)` with rounding half
    /// away from zero (`roundf`, gguf-py's `np_roundf`), computed as `x * (1/d)`.
    pub fn quantize(x: &[f32; QK]) -> Self {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse(d);
        let mut qs = [0i8; QK];
        for (q, &v) in qs.iter_mut().zip(x) {
            // |v * id| <= 127 (plus rounding), so the saturating cast never saturates.
            *q = (v * id).round() as i8;
        }
        BlockQ8_0 {
            d: F16Le::from_f32(d),
            qs,
        }
    }
}
