//! Q4_K: 256 weights in eight 32-weight sub-blocks, `x = (d * sc[s]) * q - dmin * m[s]`.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels, Q8Tuning, Span};
use crate::quant::kquants::{
    k4_int_decode, k4_int_form, permute_k4_scales_at, permuted_blocks, quantize_k4, scale_min_k4,
    QK_K,
};
use crate::quant::q8dot::IntBlock;
use crate::quant::F16Le;
use crate::quant::GgmlType;

/// The registry entry.
pub const Q4_K: Blocks<BlockQ4K, QK_K> = Blocks::NEW;

/// 6-bit `sc` and `m` packed in `scales` (see [`scale_min_k4`]), 4-bit `q`: in each 32-byte
/// chunk `c` of `qs`, the low nibbles are sub-block `2c`, the high nibbles sub-block `2c + 1`.
///
/// On the GPU (144 bytes = 9 x 16, already vec4-aligned): the blocks as stored but for the 12
/// scale bytes, rearranged ([`crate::quant::permute_k4_scales`]) so that a pair of sub-blocks'
/// four 6-bit values are one byte-aligned word.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

impl Block<QK_K> for BlockQ4K {
    const DTYPE: GgmlType = GgmlType::Q4_K;
    const QUANTIZE: Option<fn(&[f32; QK_K]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let d = (b.d.to_f32(), b.dmin.to_f32());
        k4_int_form(d, &b.scales, None, &b.qs)
    });
    const INT_DECODE: Option<IntDecode<Self, QK_K>> = Some(|b, codes, scales, offsets| {
        let d = (b.d.to_f32(), b.dmin.to_f32());
        k4_int_decode(d, &b.scales, None, &b.qs, (codes, scales, offsets))
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ4K, d), offset_of!(BlockQ4K, dmin)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        // Two units per step where large and wider than 2048 columns; the measurements are
        // at `matvec_q8_span` in crates/gpu/src/kernels/kquants.rs.
        family: Family::KQuant(Q8Tuning {
            narrow_at_any_width: false,
            span: Span::TwoWhenLargeAndWiderThan(2048),
        }),
        decode: "quant/q4_k.wgsl",
        decode_q8: Some("quant/q4_k_q8.wgsl"),
        f16_tiles: true,
        planes: |data, _, _| {
            permuted_blocks(data, 144, |b| {
                permute_k4_scales_at(b, offset_of!(BlockQ4K, scales))
            })
        },
    });

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        for (c, chunk) in out.chunks_exact_mut(64).enumerate() {
            let (lo, hi) = chunk.split_at_mut(32);
            let (sc0, m0) = scale_min_k4(2 * c, &self.scales);
            let (sc1, m1) = scale_min_k4(2 * c + 1, &self.scales);
            let (d0, dm0) = (d * f32::from(sc0), dmin * f32::from(m0));
            let (d1, dm1) = (d * f32::from(sc1), dmin * f32::from(m1));
            let qs = &self.qs[32 * c..32 * c + 32];
            for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
                *l = d0 * f32::from(q & 0x0f) - dm0;
                *h = d1 * f32::from(q >> 4) - dm1;
            }
        }
    }
}

impl BlockQ4K {
    /// ggml's `quantize_row_q4_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (packed, d, dmin, l_codes) = quantize_k4(x, 15, -1.0, 20);
        let mut qs = [0u8; QK_K / 2];
        for c in 0..4 {
            for l in 0..32 {
                qs[32 * c + l] = l_codes[64 * c + l] | (l_codes[64 * c + l + 32] << 4);
            }
        }
        BlockQ4K {
            d,
            dmin,
            scales: packed,
            qs,
        }
    }
}
