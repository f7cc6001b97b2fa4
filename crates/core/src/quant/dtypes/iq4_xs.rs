//! IQ4_XS: 256 weights in eight 32-weight sub-blocks, `x = (d * (ls[s] - 32)) * KVALUES[q]`
//! with a 6-bit `ls` per sub-block and IQ4_NL's 4-bit non-linear codes. Dequantize only (no
//! quantizer). On the GPU a member of the K-quant family (sub-block `s` is unit `s`); its
//! integer form is the table's values (they fit in i8), scale `d * (ls - 32)` per 32.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use super::iq4_nl::{decode_iq4_32, table_codes};
use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels, Q8Tuning, Span};
use crate::quant::kquants::QK_K;
use crate::quant::planes::split_blocks;
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const IQ4_XS: Blocks<BlockIQ4XS, QK_K> = Blocks::NEW;

/// Sub-block `s`'s 6-bit scale: low nibble `s % 2` of `scales_l[s / 2]`, high bits `2s` of the
/// little-endian `scales_h`. Its codes are `qs[16s..16s + 16]`, laid out as in IQ4_NL.
///
/// On the GPU (136 bytes, not a multiple of 16): two planes, each block's `qs` (8 x 16,
/// vec4-aligned like the other K-quants) and its 8-byte header (`d`, `scales_h`, `scales_l`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4XS {
    pub d: F16Le,
    pub scales_h: [u8; 2],
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

/// Bytes of a block's header (everything before `qs`).
const HEADER: usize = offset_of!(BlockIQ4XS, qs);

impl BlockIQ4XS {
    /// Sub-block `s`'s scale `d * (ls - 32)`: exact in f32 (an f16 times a 6-bit integer).
    fn sub_scale(&self, s: usize) -> f32 {
        let scales_h = u16::from_le_bytes(self.scales_h);
        let lo = (self.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
        let hi = ((scales_h >> (2 * s)) & 3) as u8;
        let ls = (lo | (hi << 4)) as i8 - 32;
        self.d.to_f32() * f32::from(ls)
    }

    /// The integer codes of sub-block `s` (`KVALUES_IQ4NL` of its nibbles, IQ4_NL's order).
    fn sub_codes(&self, s: usize, codes: &mut [i16; 32]) {
        let qs: &[u8; 16] = self.qs[16 * s..16 * s + 16].try_into().unwrap();
        table_codes(qs, codes);
    }
}

impl Block<QK_K> for BlockIQ4XS {
    const DTYPE: GgmlType = GgmlType::IQ4_XS;
    // Eight groups of 32: `w = (d * (ls - 32)) * KVALUES[q]` exactly as the CPU decodes it
    // (both products exact in f32), offset 0.
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let mut codes = Vec::with_capacity(QK_K);
        let mut sub = [0i16; 32];
        for s in 0..QK_K / 32 {
            b.sub_codes(s, &mut sub);
            codes.extend(sub.iter().map(|&c| i32::from(c)));
        }
        let groups = (0..QK_K / 32).map(|s| (32, b.sub_scale(s), 0.0)).collect();
        IntBlock { codes, groups }
    });
    const INT_GROUP: usize = 32;
    const INT_DECODE: Option<IntDecode<Self, QK_K>> = Some(|b, codes, scales, offsets| {
        for (s, sub) in codes.chunks_exact_mut(32).enumerate() {
            b.sub_codes(s, sub.try_into().unwrap());
        }
        for (s, (sc, o)) in scales.iter_mut().zip(offsets).enumerate() {
            *sc = b.sub_scale(s);
            *o = 0.0;
        }
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockIQ4XS, d)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        // Not tuned: 64 invocations and one unit per step at every size (the defaults of
        // `matvec_q8_workgroup_size` and `matvec_q8_span` in crates/gpu/src/kernels/kquants.rs).
        family: Family::KQuant(Q8Tuning {
            narrow_at_any_width: false,
            span: Span::One,
        }),
        decode: "quant/iq4_xs.wgsl",
        decode_q8: Some("quant/iq4_xs_q8.wgsl"),
        f16_tiles: true,
        planes: |data, _, _| split_blocks(data, 136, &[HEADER..136, 0..HEADER]),
    });

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        for (s, (sub, qs)) in out
            .chunks_exact_mut(32)
            .zip(self.qs.chunks_exact(16))
            .enumerate()
        {
            decode_iq4_32(self.sub_scale(s), qs, sub);
        }
    }
}
