//! The 256-weight K-quant "super-block" formats we run: Q4_K, Q5_K and Q6_K.
//!
//! Dequantization repeats gguf-py's f32 operations in the same order (`(d * sc) * q - dmin * m`
//! with each product rounded separately, never fused), so it is bit identical to gguf-py 0.19.
//! Quantization follows ggml's reference quantizers without importance weights
//! (`quantize_row_q4_K_ref` with `make_qkx2_quants`, `quantize_row_q6_K_ref` with
//! `make_qx_quants`; `quantize_row_q5_K_ref` likewise) operation for operation, integer
//! truncations included (`uint8_t ls = nearest_int(..)`, `int8_t` sub-scales), so the bytes are
//! identical to llama.cpp's for any finite input. ggml compiles these in its base library without
//! `-march` flags, so no multiply-add is fused there either; Rust never fuses.

use bytemuck::{Pod, Zeroable};

use super::float::F16Le;

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// `Q4_K`: eight 32-weight sub-blocks, `x = (d * sc[s]) * q - dmin * m[s]` with 6-bit `sc`/`m`
/// packed in `scales` (see [`scale_min_k4`]) and 4-bit `q`: in each 32-byte chunk `c` of `qs`,
/// the low nibbles are sub-block `2c`, the high nibbles sub-block `2c + 1`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// `Q5_K`: as Q4_K plus a fifth bit: bit `s` of `qh[l]` is the high bit of element `l` of
/// sub-block `s`.
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

/// `Q6_K`: sixteen 16-weight sub-blocks, `x = (d * scales[e / 16]) * (q - 32)` with 6-bit `q`.
/// For element `e = 128h + r`: low 4 bits are nibble `r / 64` of `ql[64h + r % 64]`, high 2
/// bits are bits `2 (r / 32)` of `qh[32h + r % 32]`. `d` comes last.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// ggml's `get_scale_min_k4`: the 6-bit (scale, min) of sub-block `j` (0..8; taken mod 8).
///
/// ```text
///  0..4   SSssssss  scales 0..3 low 6 bits; top 2 bits: high bits of scales 4..7
///  4..8   MMmmmmmm  mins 0..3 low 6 bits;   top 2 bits: high bits of mins 4..7
///  8..12  mmmmssss  low 4 bits of scale / min 4..7
/// ```
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    let j = j & 7;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The inverse of [`scale_min_k4`]: pack eight 6-bit (scale, min) pairs (each `< 64`) the way
/// ggml's `quantize_row_q4_K_ref` does.
fn pack_scale_min_k4(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for (j, (&ls, &lm)) in scales.iter().zip(mins).enumerate() {
        debug_assert!(ls < 64 && lm < 64, "6-bit scale/min out of range");
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    packed
}

/// ggml's `nearest_int`, bit for bit: add 1.5 * 2^23 so the f32 addition rounds to an integer
/// (half to even), then read the integer out of the mantissa. Exact below 2^22 in magnitude,
/// where it equals `round_ties_even`; beyond that it returns what ggml's release build returns
/// (its range check is an `assert`, compiled out).
fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

impl BlockQ4K {
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
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

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
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

impl BlockQ6K {
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (e, o) in out.iter_mut().enumerate() {
            let (h, r) = (e / 128, e % 128);
            let ql = (self.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
            let qh = (self.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            let q = i32::from(ql | (qh << 4)) - 32;
            *o = (d * f32::from(self.scales[e / 16])) * q as f32;
        }
    }

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

/// The shared part of ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`: fit each
/// 32-weight sub-block with [`make_qkx2_quants`] (weights `sqrt(mean(x^2)) + |x|`), quantize the
/// sub-scales and sub-mins to 6 bits against the super-block's `d` / `dmin`, then requantize
/// every code against the rounded scales. Returns `(packed scales, d, dmin, codes 0..=nmax)`.
fn quantize_k4(
    x: &[f32; QK_K],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> ([u8; 12], F16Le, F16Le, [u8; QK_K]) {
    let mut l_codes = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..8 {
        let xs: [f32; 32] = std::array::from_fn(|l| x[32 * j + l]);
        let mut sum_x2 = 0f32;
        for &v in &xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
        let (scale, min, codes) = make_qkx2_quants::<32>(nmax, &xs, &weights, rmin, 0.1, nstep);
        l_codes[32 * j..32 * j + 32].copy_from_slice(&codes);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // ggml: `uint8_t ls = nearest_int(..); ls = MIN(63, ls);` (a wrapping conversion first).
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = F16Le::from_f32(max_scale / 63.0);
    let dmin = F16Le::from_f32(max_min / 63.0);

    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let dj = d.to_f32() * f32::from(sc);
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for (ii, code) in l_codes[32 * j..32 * j + 32].iter_mut().enumerate() {
            let l = nearest_int((x[32 * j + ii] + dm) / dj);
            *code = l.clamp(0, nmax) as u8;
        }
    }
    (packed, d, dmin, l_codes)
}

/// ggml's `make_qkx2_quants` (with `use_mad = false`): fit `x ≈ scale * L + min` with
/// `L` in `0..=nmax` and `min <= 0`, minimising the weighted squared error over a grid of
/// `nstep + 1` trial scales. Returns `(scale, -min, L)`.
fn make_qkx2_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32, [u8; N]) {
    let mut l_out = [0u8; N];
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        return (0.0, -min, l_out);
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..N {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut l_aux = [0u8; N];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..N {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            l_aux[i] = l as u8;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..N {
                let diff = this_scale * f32::from(l_aux[i]) + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l_out = l_aux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min, l_out)
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights: fit
/// `x ≈ scale * l` with `l` in `-nmax..nmax`, weights `x^2`, trying 19 scales around
/// `nmax / max`. Returns `(scale, l + nmax)`.
fn make_qx_quants<const N: usize>(nmax: i32, x: &[f32; N]) -> (f32, [u8; N]) {
    let mut codes = [0u8; N];
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return (0.0, codes);
    }
    let nmax_f = nmax as f32;
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let iscale = -nmax_f / max;
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = (quant(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nmax_f + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (c, &v) in codes.iter_mut().zip(x) {
                *c = (quant(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    (scale, codes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_unpacks_every_bit() {
        // Sub-block j gets scale 2j+1 (+32 on odd j, to set bit 5) and min 63-2j.
        let scales: [u8; 8] = std::array::from_fn(|j| 2 * j as u8 + 1 + 32 * (j as u8 % 2));
        let mins: [u8; 8] = std::array::from_fn(|j| 63 - 2 * j as u8);
        let packed = pack_scale_min_k4(&scales, &mins);
        // ggml's layout, written out by hand: bytes 0..4 hold scales 0..3 with the high bits
        // of scales 4..7 on top, bytes 4..8 likewise for the mins, bytes 8..12 the low nibbles
        // of scale | min << 4 for 4..7.
        assert_eq!(
            packed,
            [0x01, 0xA3, 0x05, 0xA7, 0xFF, 0xFD, 0xFB, 0xF9, 0x79, 0x5B, 0x3D, 0x1F]
        );
        for j in 0..8 {
            let want = (2 * j as u8 + 1 + 32 * (j as u8 % 2), 63 - 2 * j as u8);
            assert_eq!(scale_min_k4(j, &packed), want, "sub-block {j}");
        }
    }

    #[test]
    fn zero_super_blocks_stay_zero() {
        let x = [0f32; QK_K];
        let mut y = [1f32; QK_K];
        BlockQ4K::quantize(&x).dequantize(&mut y);
        assert!(y.iter().all(|&v| v == 0.0));
        BlockQ6K::quantize(&x).dequantize(&mut y);
        assert!(y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn k_quant_round_trip_on_a_ramp() {
        let x: [f32; QK_K] = std::array::from_fn(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0);
        let mut y = [0f32; QK_K];
        BlockQ4K::quantize(&x).dequantize(&mut y);
        let max4 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max4 < 2.0 / 15.0, "Q4_K max error {max4}");
        BlockQ6K::quantize(&x).dequantize(&mut y);
        let max6 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max6 < 1.0 / 31.0, "Q6_K max error {max6}");
    }
}
