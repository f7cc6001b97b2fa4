//! TQ1_0: 256 ternary weights `d * t` in base-3 packing, 1.6875 bits per weight.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{BitLinearInput, Block, Blocks, Family, IntDecode, Kernels};
use crate::quant::planes::{pad16, split_blocks};
use crate::quant::q8dot::IntBlock;
use crate::quant::ternary::{int_decode, int_form, pack_trits, ternarize, trit, QK_K};
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const TQ1_0: Blocks<BlockTQ1_0, QK_K> = Blocks::NEW;

/// 5 trits per byte for elements 0..240, 4 trits per byte for 240..256.
///
/// A byte holding trits `t0..t4` (most significant first) stores
/// `ceil(256 * (81 t0 + 27 t1 + 9 t2 + 3 t3 + t4) / 243)`; trit `n` is recovered as
/// `((byte * 3^n mod 256) * 3) >> 8`. Element order:
/// - `qs[0..32]`: element `32 n + m` is trit `n` of `qs[m]` (elements 0..160);
/// - `qs[32..48]`: element `160 + 16 n + m` is trit `n` of `qs[32 + m]` (160..240);
/// - `qh[0..4]`: element `240 + 4 n + m` is trit `n` of `qh[m]` (240..256, 4 trits).
///
/// On the GPU: three planes, block order kept, each padded to 16 bytes: `qs` (48 B = 3 x 16 per
/// block, binding 3), `d` (2 B per block, binding 4) and `qh` (4 B per block, binding 5). The
/// `qh` words have a plane of their own so that each block's three 16-byte units of `qs` are
/// aligned loads and the `qh` words of a row's blocks, which the integer-dot matvec takes in a
/// pass of their own, are consecutive.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTQ1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);

const QS: usize = offset_of!(BlockTQ1_0, qs);
const QH: usize = offset_of!(BlockTQ1_0, qh);
const D: usize = offset_of!(BlockTQ1_0, d);

impl Block<QK_K> for BlockTQ1_0 {
    const DTYPE: GgmlType = GgmlType::TQ1_0;
    const QUANTIZE: Option<fn(&[f32; QK_K]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| int_form(&b.codes(), b.d.to_f32()));
    const INT_DECODE: Option<IntDecode<Self, QK_K>> = Some(|b, codes, scales, offsets| {
        int_decode(&b.codes(), b.d.to_f32(), (codes, scales, offsets))
    });
    const SCALE_FIELDS: &'static [usize] = &[D];
    const BITLINEAR: Option<BitLinearInput> = Some(BitLinearInput::FakeQuant);
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        family: Family::Ternary,
        decode: "quant/tq1_0.wgsl",
        decode_q8: Some("quant/tq1_0_q8.wgsl"),
        f16_tiles: false,
        planes: |data, _, _| {
            let fields = [QS..QH, D..54, QH..D];
            split_blocks(data, 54, &fields)
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

impl BlockTQ1_0 {
    /// The block's codes (trits 0..=2, weight `d * (code - 1)`), in element order.
    pub fn codes(&self) -> [u8; QK_K] {
        let mut c = [0u8; QK_K];
        for n in 0..5 {
            for m in 0..32 {
                c[32 * n + m] = trit(self.qs[m], n);
            }
            for m in 0..16 {
                c[160 + 16 * n + m] = trit(self.qs[32 + m], n);
            }
        }
        for n in 0..4 {
            for m in 0..4 {
                c[240 + 4 * n + m] = trit(self.qh[m], n);
            }
        }
        c
    }

    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (d, c) = ternarize(x);
        let mut qs = [0u8; 48];
        for (m, q) in qs[..32].iter_mut().enumerate() {
            *q = pack_trits(&std::array::from_fn::<u8, 5, _>(|n| c[32 * n + m]));
        }
        for (m, q) in qs[32..].iter_mut().enumerate() {
            *q = pack_trits(&std::array::from_fn::<u8, 5, _>(|n| c[160 + 16 * n + m]));
        }
        let qh = std::array::from_fn(|m| {
            pack_trits(&std::array::from_fn::<u8, 4, _>(|n| c[240 + 4 * n + m]))
        });
        BlockTQ1_0 {
            qs,
            qh,
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
        let data: Vec<u8> = (0..3 * 54).map(|i| (i * 7 % 251) as u8).collect();
        let p = (TQ1_0.kernels().unwrap().planes)(&data, 1, 768);
        assert_eq!(p.len(), 3);
        // Block 1's qs, d and qh.
        assert_eq!(&p[0][48..96], &data[54..102]);
        assert_eq!(&p[1][2..4], &data[54 + 52..54 + 54]);
        assert_eq!(&p[2][4..8], &data[54 + 48..54 + 52]);
        assert!(p.iter().all(|q| q.len() % 16 == 0));
    }
}
