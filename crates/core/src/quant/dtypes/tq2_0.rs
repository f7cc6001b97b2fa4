//! TQ2_0: 256 ternary weights `d * t` as 2-bit codes.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{BitLinearInput, Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::planes::{pad16, split_blocks};
use crate::quant::q8dot::IntBlock;
use crate::quant::ternary::{int_form, ternarize, ternary_groups, QK_K};
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const TQ2_0: Blocks<BlockTQ2_0, QK_K> = Blocks::NEW;

/// 2-bit codes `c = t + 1`. Element `128 h + 32 s + m` is bits `2s..2s+2` of `qs[32 h + m]`.
/// Code 3 (never written) decodes to +2, as in ggml and gguf-py.
///
/// On the GPU: two planes, block order kept, each padded to 16 bytes: `qs` (64 B = 16 words per
/// block, binding 3) and `d` (2 B per block, binding 4).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTQ2_0 {
    pub qs: [u8; 64],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);

const D: usize = offset_of!(BlockTQ2_0, d);

impl Block<QK_K> for BlockTQ2_0 {
    const DTYPE: GgmlType = GgmlType::TQ2_0;
    const QUANTIZE: Option<fn(&[f32; QK_K]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| int_form(&b.codes(), b.d.to_f32()));
    const INT_DECODE: Option<IntDecode<Self, QK_K>> = Some(|b, codes, scales, offsets| {
        // Element 128h + 32s + m is bits 2s of qs[32h + m].
        for h in 0..2 {
            let qs = &b.qs[32 * h..32 * h + 32];
            for s in 0..4 {
                let codes = &mut codes[128 * h + 32 * s..128 * h + 32 * s + 32];
                for (c, &q) in codes.iter_mut().zip(qs) {
                    *c = i16::from((q >> (2 * s)) & 3) - 1;
                }
            }
        }
        ternary_groups(b.d.to_f32(), scales, offsets);
    });
    const SCALE_FIELDS: &'static [usize] = &[D];
    const BITLINEAR: Option<BitLinearInput> = Some(BitLinearInput::FakeQuant);
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Ternary,
        decode: "quant/tq2_0.wgsl",
        decode_q8: Some("quant/tq2_0_q8.wgsl"),
        f16_tiles: false,
        planes: |data, _, _| {
            let fields = [0..D, D..66];
            split_blocks(data, 66, &fields)
                .into_iter()
                .map(pad16)
                .collect()
        },
    });

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (o, c) in out.iter_mut().zip(self.codes()) {
            *o = d * (i32::from(c) - 1) as f32;
        }
    }
}

impl BlockTQ2_0 {
    /// The block's 2-bit codes (weight `d * (code - 1)`), in element order.
    pub fn codes(&self) -> [u8; QK_K] {
        std::array::from_fn(|e| {
            let (h, s, m) = (e / 128, (e / 32) % 4, e % 32);
            (self.qs[32 * h + m] >> (2 * s)) & 3
        })
    }

    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (d, c) = ternarize(x);
        let mut qs = [0u8; 64];
        for (e, &code) in c.iter().enumerate() {
            let (h, s, m) = (e / 128, (e / 32) % 4, e % 32);
            qs[32 * h + m] |= code << (2 * s);
        }
        BlockTQ2_0 {
            qs,
            d: F16Le::from_f32(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Dtype;

    #[test]
    fn planes_keep_every_byte() {
        let data: Vec<u8> = (0..2 * 66).map(|i| (i * 5 % 251) as u8).collect();
        let p = (TQ2_0.kernels().unwrap().planes)(&data, 1, 512);
        assert_eq!(&p[0][64..128], &data[66..130]);
        assert_eq!(&p[1][..4], &[data[64], data[65], data[130], data[131]]);
        assert!(p.iter().all(|q| q.len() % 16 == 0));
    }
}
