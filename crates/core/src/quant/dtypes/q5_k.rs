//! Q5_K: Q4_K plus a fifth bit per weight.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels, Q8Tuning, Span};
use crate::quant::kquants::{
    k4_int_decode, k4_int_form, permute_k4_scales_at, permute_q5k_qh, permuted_blocks, quantize_k4,
    scale_min_k4, QK_K,
};
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q5_K: Blocks<BlockQ5K, QK_K> = Blocks::NEW;

/// As Q4_K plus a fifth bit: bit `s` of `qh[l]` is the high bit of element `l` of sub-block
/// `s`.
///
/// On the GPU (176 bytes = 11 x 16): the blocks as stored but for the scale bytes (as Q4_K's)
/// and the 32 `qh` bytes, rearranged by unit ([`crate::quant::permute_q5k_qh`]) so that a
/// unit's fifth bits are one word.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// Rearrange one block's header and fifth bits for the GPU.
fn permute(block: &mut [u8]) {
    permute_k4_scales_at(block, offset_of!(BlockQ5K, scales));
    let at = offset_of!(BlockQ5K, qh);
    let qh = &mut block[at..at + 32];
    let bits: [u8; 32] = (&*qh).try_into().expect("32 qh bytes");
    qh.copy_from_slice(&permute_q5k_qh(&bits));
}

impl Block<QK_K> for BlockQ5K {
    const DTYPE: GgmlType = GgmlType::Q5_K;
    const QUANTIZE: Option<fn(&[f32; QK_K]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let d = (b.d.to_f32(), b.dmin.to_f32());
        k4_int_form(d, &b.scales, Some(&b.qh), &b.qs)
    });
    const INT_DECODE: Option<IntDecode<Self, QK_K>> = Some(|b, codes, scales, offsets| {
        let d = (b.d.to_f32(), b.dmin.to_f32());
        k4_int_decode(d, &b.scales, Some(&b.qh), &b.qs, (codes, scales, offsets))
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ5K, d), offset_of!(BlockQ5K, dmin)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        // One unit per step at every size (see `matvec_q8_span` in crates/gpu/src/kernels/kquants.rs).
        family: Family::KQuant(Q8Tuning {
            narrow_at_any_width: false,
            span: Span::One,
        }),
        decode: "quant/q5_k.wgsl",
        decode_q8: Some("quant/q5_k_q8.wgsl"),
        f16_tiles: true,
        planes: |data, _, _| permuted_blocks(data, 176, permute),
    });

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        for (s, sub) in out.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(s, &self.scales);
            let (ds, dm) = (d * f32::from(sc), dmin * f32::from(m));
            let c = s / 2;
            let shift = 4 * (s % 2);
            let qs = &self.qs[32 * c..32 * c + 32];
            for ((o, &ql), &qh) in sub.iter_mut().zip(qs).zip(&self.qh) {
                let q = ((ql >> shift) & 0x0f) | (((qh >> s) & 1) << 4);
                *o = ds * f32::from(q) - dm;
            }
        }
    }
}

impl BlockQ5K {
    /// ggml's `quantize_row_q5_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (packed, d, dmin, l_codes) = quantize_k4(x, 31, -0.5, 15);
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        // Chunk c of 64 codes: the low nibbles of codes 64c..64c+32 and the high nibbles of
        // 64c+32..64c+64 share qs[32c..32c+32]; their fifth bits are bits 2c and 2c+1 of qh.
        for c in 0..4 {
            for j in 0..32 {
                let (l1, l2) = (l_codes[64 * c + j], l_codes[64 * c + j + 32]);
                qh[j] |= ((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1));
                qs[32 * c + j] = (l1 & 0x0f) | ((l2 & 0x0f) << 4);
            }
        }
        BlockQ5K {
            d,
            dmin,
            scales: packed,
            qh,
            qs,
        }
    }
}
