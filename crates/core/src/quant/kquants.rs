//! What the 256-weight K-quant super-block formats share (Q4_K, Q5_K and Q6_K, each in its own
//! file under `dtypes/`): ggml's reference quantizers, the 6-bit scale packing, and the
//! rearrangements of the header bytes for the GPU.
//!
//! Dequantization repeats gguf-py's f32 operations in the same order (`(d * sc) * q - dmin * m`
//! with each product rounded separately, never fused), so it is bit identical to gguf-py 0.19.
//! Quantization follows ggml's reference quantizers without importance weights
//! (`quantize_row_q4_K_ref` with `make_qkx2_quants`, `quantize_row_q6_K_ref` with
//! `make_qx_quants`; `quantize_row_q5_K_ref` likewise) operation for operation, integer
//! truncations included (`uint8_t ls = nearest_int(..)`, `int8_t` sub-scales), so the bytes are
//! identical to llama.cpp's for any finite input. ggml compiles these in its base library without
//! `-march` flags, so no multiply-add is fused there either; Rust never fuses.

use super::float::F16Le;
use super::q8dot::IntBlock;

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zeros.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

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
pub(super) fn pack_scale_min_k4(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
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
pub(super) fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The integer form of a Q4_K / Q5_K block: per 32-weight sub-block `s`, codes `q` (with the
/// fifth bit from `qh` for Q5_K), scale `d * sc` and offset `-(dmin * m)`.
pub(super) fn k4_int_form(
    (d, dmin): (f32, f32),
    scales: &[u8; 12],
    qh: Option<&[u8; QK_K / 8]>,
    qs: &[u8; QK_K / 2],
) -> IntBlock {
    let mut codes = Vec::with_capacity(256);
    let mut groups = Vec::with_capacity(8);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        let (c, shift) = (j / 2, 4 * (j % 2));
        for k in 0..32 {
            let mut q = i32::from((qs[32 * c + k] >> shift) & 0x0f);
            if let Some(qh) = qh {
                q |= i32::from((qh[k] >> j) & 1) << 4;
            }
            codes.push(q);
        }
        groups.push((32, d * f32::from(sc), -(dmin * f32::from(m))));
    }
    IntBlock { codes, groups }
}

/// [`k4_int_form`] into the caller's storage: codes, scales, offsets.
pub(super) fn k4_int_decode(
    (d, dmin): (f32, f32),
    scales: &[u8; 12],
    qh: Option<&[u8; QK_K / 8]>,
    qs: &[u8; QK_K / 2],
    (codes, group_scales, offsets): (&mut [i16; QK_K], &mut [f32], &mut [f32]),
) {
    for j in 0..8 {
        let (c, shift) = (j / 2, 4 * (j % 2));
        let codes = &mut codes[32 * j..32 * j + 32];
        for (o, &q) in codes.iter_mut().zip(&qs[32 * c..32 * c + 32]) {
            *o = i16::from((q >> shift) & 0x0f);
        }
        if let Some(qh) = qh {
            for (o, &h) in codes.iter_mut().zip(qh) {
                *o |= i16::from((h >> j) & 1) << 4;
            }
        }
        let (sc, m) = scale_min_k4(j, scales);
        group_scales[j] = d * f32::from(sc);
        offsets[j] = -(dmin * f32::from(m));
    }
}

/// The shared part of ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`: fit each
/// 32-weight sub-block with [`make_qkx2_quants`] (weights `sqrt(mean(x^2)) + |x|`), quantize the
/// sub-scales and sub-mins to 6 bits against the super-block's `d` / `dmin`, then requantize
/// every code against the rounded scales. Returns `(packed scales, d, dmin, codes 0..=nmax)`.
pub(super) fn quantize_k4(
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
pub(super) fn make_qx_quants<const N: usize>(nmax: i32, x: &[f32; N]) -> (f32, [u8; N]) {
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

/// A Q4_K / Q5_K block's 12 scale bytes (ggml's packing, [`crate::quant::scale_min_k4`])
/// rearranged for `k4_unit_scales` in quant/kquants.wgsl. Sub-blocks 2p and 2p + 1 (a "pair",
/// p = 0..4) have the four 6-bit values (scale 2p, scale 2p + 1, min 2p, min 2p + 1). Pair p < 3
/// is word p (bytes 4p .. 4p + 4), one value in the low 6 bits of each byte; the top two bits of
/// byte f of word p hold bits 2p, 2p + 1 of pair 3's value f. Lossless: 16 values of 6 bits in
/// 96 bits.
pub fn permute_k4_scales(q: &[u8; 12]) -> [u8; 12] {
    let pair = |p: usize| {
        let (s0, m0) = scale_min_k4(2 * p, q);
        let (s1, m1) = scale_min_k4(2 * p + 1, q);
        [s0, s1, m0, m1]
    };
    let last = pair(3);
    let mut out = [0u8; 12];
    for p in 0..3 {
        let values = pair(p);
        for f in 0..4 {
            out[4 * p + f] = values[f] | (((last[f] >> (2 * p)) & 3) << 6);
        }
    }
    out
}

/// A Q5_K block's 32 `qh` bytes rearranged by unit, for `q5k_high` in quant/q5_k.wgsl. In
/// ggml's order bit s of byte l is the fifth bit of element l of sub-block s, so a unit (u = 0..8:
/// elements 16 h .. 16 h + 16, h = u % 2, of sub-blocks 2p and 2p + 1, p = u / 2) needs two bits
/// of 16 bytes, and every unit loaded all 32. Here word u (bytes 4u .. 4u + 4) holds exactly
/// those 32 bits: byte f, bits 2m and 2m + 1, are the bits of element 16 h + 4m + f of sub-block
/// 2p and 2p + 1, so `(word >> 2m) & 0x01010101` puts the fifth bits of the unit's code word m
/// (elements 4m .. 4m + 4 of its 16) one per byte, in the byte order of the codes. Lossless: a
/// permutation of the 256 bits.
pub fn permute_q5k_qh(qh: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for u in 0..8 {
        let (p, h) = (u / 2, u % 2);
        let mut word = 0u32;
        for f in 0..4 {
            for m in 0..4 {
                let byte = u32::from(qh[16 * h + 4 * m + f]);
                let a = (byte >> (2 * p)) & 1;
                let b = (byte >> (2 * p + 1)) & 1;
                word |= (a | (b << 1)) << (8 * f + 2 * m);
            }
        }
        out[4 * u..4 * u + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// The planes of Q4_K and Q5_K: one, the blocks of `size` bytes as stored but for what
/// `permute` rearranges in each ([`permute_k4_scales`], [`permute_q5k_qh`]).
pub(super) fn permuted_blocks(data: &[u8], size: usize, permute: fn(&mut [u8])) -> Vec<Vec<u8>> {
    let mut out = data.to_vec();
    for block in out.chunks_exact_mut(size) {
        permute(block);
    }
    vec![out]
}

/// Apply [`permute_k4_scales`] to the 12 bytes at `at` of `block`.
pub(super) fn permute_k4_scales_at(block: &mut [u8], at: usize) {
    let scales = &mut block[at..at + 12];
    let packed: [u8; 12] = (&*scales).try_into().expect("12 scale bytes");
    scales.copy_from_slice(&permute_k4_scales(&packed));
}

#[cfg(test)]
mod tests {
    use super::super::block::Block;
    use super::super::{BlockQ4K, BlockQ6K};
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

    /// The WGSL decode of a permuted header (`k4_unit_scales` in quant/kquants.wgsl, word by
    /// word) gives ggml's 6-bit values for every sub-block, and the permutation loses nothing,
    /// over random scale bytes (every bit pattern of the 12 bytes is a valid packing).
    #[test]
    fn permuted_k4_scales_decode_to_ggml_values() {
        use crate::quant::scale_min_k4;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let mut q = [0u8; 12];
            for b in &mut q {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                *b = (state >> 56) as u8;
            }
            let permuted = permute_k4_scales(&q);
            let w = |i: usize| u32::from_le_bytes(permuted[4 * i..4 * i + 4].try_into().unwrap());
            let (h1, h2, h3) = (w(0), w(1), w(2));
            let hi3 =
                ((h1 >> 6) & 0x0303_0303) | ((h2 >> 4) & 0x0c0c_0c0c) | ((h3 >> 2) & 0x3030_3030);
            for p in 0..4 {
                let v = [h1 & 0x3f3f_3f3f, h2 & 0x3f3f_3f3f, h3 & 0x3f3f_3f3f, hi3][p];
                let byte = |f: u32| ((v >> (8 * f)) & 0xff) as u8;
                assert_eq!((byte(0), byte(2)), scale_min_k4(2 * p, &q));
                assert_eq!((byte(1), byte(3)), scale_min_k4(2 * p + 1, &q));
            }
            seen.insert(permuted);
        }
        // Distinct inputs stay distinct (no two of 10,000 random headers collide).
        assert_eq!(seen.len(), 10_000);
    }

    /// Every fifth bit lands where quant/q5_k.wgsl's `q5k_high` reads it: for unit u, code word
    /// m, byte f, `(word u >> 2m) & 1` and `>> 2m + 1` of byte f are bits 2p and 2p + 1 of ggml's
    /// byte 16 h + 4m + f (all 256 output bits checked, so the permutation loses nothing).
    #[test]
    fn permuted_q5k_qh_puts_each_bit_where_the_shader_reads_it() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2_000 {
            let mut qh = [0u8; 32];
            for b in &mut qh {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = (state >> 24) as u8;
            }
            let out = permute_q5k_qh(&qh);
            for u in 0..8 {
                let (p, h) = (u / 2, u % 2);
                let word = u32::from_le_bytes(out[4 * u..4 * u + 4].try_into().unwrap());
                for m in 0..4 {
                    let a = (word >> (2 * m)) & 0x0101_0101;
                    let b = (word >> (2 * m + 1)) & 0x0101_0101;
                    for f in 0..4 {
                        let src = qh[16 * h + 4 * m + f];
                        assert_eq!((a >> (8 * f)) & 1, u32::from((src >> (2 * p)) & 1));
                        assert_eq!((b >> (8 * f)) & 1, u32::from((src >> (2 * p + 1)) & 1));
                    }
                }
            }
        }
    }
}
