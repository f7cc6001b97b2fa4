//! Q6_K: 256 weights in sixteen 16-weight sub-blocks, `x = (d * scales[e / 16]) * (q - 32)`
//! with 6-bit `q`.

use std::mem::offset_of;

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks, Family, IntDecode, Kernels, Q8Tuning, Span};
use crate::quant::kquants::{make_qx_quants, nearest_int, GROUP_MAX_EPS, QK_K};
use crate::quant::planes::split_blocks;
use crate::quant::q8dot::IntBlock;
use crate::quant::{F16Le, GgmlType};

/// The registry entry.
pub const Q6_K: Blocks<BlockQ6K, QK_K> = Blocks::NEW;

/// For element `e = 128h + r`: low 4 bits are nibble `r / 64` of `ql[64h + r % 64]`, high 2
/// bits are bits `2 (r / 32)` of `qh[32h + r % 32]`. `d` comes last.
///
/// On the GPU (210 bytes, not even 4-byte aligned): two planes, each block's first 208 bytes
/// (`ql`, `qh`, `scales`: 13 x 16, vec4-aligned like the other K-quants) and the `d` of every
/// block, two per word.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// Bytes of a block before its trailing `d`.
const BODY: usize = offset_of!(BlockQ6K, d);

impl Block<QK_K> for BlockQ6K {
    const DTYPE: GgmlType = GgmlType::Q6_K;
    const QUANTIZE: Option<fn(&[f32; QK_K]) -> Self> = Some(Self::quantize);
    const INT_FORM: Option<fn(&Self) -> IntBlock> = Some(|b| {
        let d = b.d.to_f32();
        let codes = (0..256)
            .map(|e| {
                let (h, r) = (e / 128, e % 128);
                let l = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
                let hb = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
                i32::from(l | (hb << 4)) - 32
            })
            .collect();
        let groups = b
            .scales
            .iter()
            .map(|&s| (16, d * f32::from(s), 0.0))
            .collect();
        IntBlock { codes, groups }
    });
    const INT_GROUP: usize = 16;
    const INT_DECODE: Option<IntDecode<Self, QK_K>> = Some(|b, codes, scales, offsets| {
        // Element 128h + 32k + m: low bits from nibble k / 2 of ql[64h + 32(k % 2) + m], high
        // bits from bits 2k of qh[32h + m].
        for h in 0..2 {
            let (ql, qh) = (&b.ql[64 * h..64 * h + 64], &b.qh[32 * h..32 * h + 32]);
            for k in 0..4 {
                let ql = &ql[32 * (k % 2)..32 * (k % 2) + 32];
                let codes = &mut codes[128 * h + 32 * k..128 * h + 32 * k + 32];
                for ((c, &l), &hb) in codes.iter_mut().zip(ql).zip(qh) {
                    let l = (l >> (4 * (k / 2))) & 0x0f;
                    let hb = (hb >> (2 * k)) & 3;
                    *c = i16::from(l | (hb << 4)) - 32;
                }
            }
        }
        let d = b.d.to_f32();
        for ((s, o), &sc) in scales.iter_mut().zip(offsets).zip(&b.scales) {
            *s = d * f32::from(sc);
            *o = 0.0;
        }
    });
    const SCALE_FIELDS: &'static [usize] = &[offset_of!(BlockQ6K, d)];
    const KERNELS: Option<&'static Kernels> = Some(&Kernels {
        // 32 invocations for large matrices of any width and two units per step there (see
        // `matvec_q8_workgroup_size` and `matvec_q8_span` in crates/gpu/src/kernels/kquants.rs).
        family: Family::KQuant(Q8Tuning {
            narrow_at_any_width: true,
            span: Span::TwoWhenLarge,
        }),
        decode: "quant/q6_k.wgsl",
        decode_q8: Some("quant/q6_k_q8.wgsl"),
        f16_tiles: true,
        planes: |data, _, _| split_blocks(data, 210, &[0..BODY, BODY..210]),
    });

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (e, o) in out.iter_mut().enumerate() {
            let (h, r) = (e / 128, e % 128);
            let ql = (self.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
            let qh = (self.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            let q = i32::from(ql | (qh << 4)) - 32;
            *o = (d * f32::from(self.scales[e / 16])) * q as f32;
        }
    }
}

impl BlockQ6K {
    /// ggml's `quantize_row_q6_K_ref` for one super-block.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        // Codes biased by +32 (0..=63).
        let mut l_codes = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut max_scale = 0f32;
        let mut max_abs_scale = 0f32;
        for (ib, scale_out) in scales.iter_mut().enumerate() {
            let xs: [f32; 16] = std::array::from_fn(|l| x[16 * ib + l]);
            let (scale, codes) = make_qx_quants::<16>(32, &xs);
            l_codes[16 * ib..16 * ib + 16].copy_from_slice(&codes);
            *scale_out = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            return BlockQ6K::zeroed();
        }

        let iscale = -128.0 / max_scale;
        let d = F16Le::from_f32(1.0 / iscale);
        let mut sc = [0i8; 16];
        for (s, &scale) in sc.iter_mut().zip(&scales) {
            // ggml: `int8_t = MIN(127, nearest_int(..))`, a wrapping conversion.
            *s = nearest_int(iscale * scale).min(127) as i8;
        }
        for j in 0..16 {
            let dj = d.to_f32() * f32::from(sc[j]);
            if dj == 0.0 {
                continue;
            }
            for (ii, code) in l_codes[16 * j..16 * j + 16].iter_mut().enumerate() {
                let l = nearest_int(x[16 * j + ii] / dj).clamp(-32, 31);
                *code = (l + 32) as u8;
            }
        }

        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for h in 0..2 {
            let l_h = &l_codes[128 * h..128 * h + 128];
            for l in 0..32 {
                let (q1, q2, q3, q4) = (l_h[l], l_h[l + 32], l_h[l + 64], l_h[l + 96]);
                ql[64 * h + l] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
                ql[64 * h + l + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
                qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        BlockQ6K {
            ql,
            qh,
            scales: sc,
            d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Dtype;

    #[test]
    fn planes_are_lossless() {
        let data: Vec<u8> = (0..3 * 210).map(|i| (i * 7 % 251) as u8).collect();
        let planes = Q6_K.kernels().unwrap().planes;
        let p = planes(&data, 3, 256);
        assert_eq!(p[0].len(), 3 * BODY);
        assert_eq!(p[1].len(), 6);
        for (b, block) in data.chunks_exact(210).enumerate() {
            assert_eq!(&p[0][b * BODY..(b + 1) * BODY], &block[..BODY]);
            assert_eq!(&p[1][2 * b..2 * b + 2], &block[BODY..]);
        }
    }
}
