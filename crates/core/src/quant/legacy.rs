//! What the 32-weight "legacy" block formats share (Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, each in
//! its own file under `dtypes/`).
//!
//! Layouts are ggml's (`ggml-common.h`). Dequantization repeats gguf-py's f32 operations in
//! the same order (`d * q`, `d * q + m` as two roundings, never fused), so results are bit
//! identical to gguf-py 0.19. Quantization is ggml's `quantize_row_*_ref`, which gguf-py
//! reproduces exactly; we reproduce it too (round half away from zero for Q8_0, truncation
//! of `x * id + 8.5` etc. for the others).

/// Elements per legacy block.
pub const QK: usize = 32;

/// The signed value of largest magnitude (the first one on ties), as ggml picks it.
pub(super) fn signed_absmax(x: &[f32; QK]) -> f32 {
    let mut max = x[0];
    let mut amax = max.abs();
    for &v in &x[1..] {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The smallest and the largest value.
pub(super) fn min_max(x: &[f32; QK]) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    for &v in &x[1..] {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `1/d`, or 0 where `d == 0` (gguf-py's `np.where(d == 0, 0, 1 / d)`).
pub(super) fn inverse(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// ggml's `(uint8_t)MIN(top, (int8_t)(v))` for the non-negative `v` these quantizers make.
pub(super) fn trunc_clamp(v: f32, top: u8) -> u8 {
    (v.trunc() as u8).min(top)
}

/// The 5-bit codes of a Q5 block, element order.
pub(super) fn unpack_q5(qh: [u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; QK];
    for (j, &b) in qs.iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + QK / 2)) & 1) as u8;
        q[j] = (b & 0x0f) | (h0 << 4);
        q[j + QK / 2] = (b >> 4) | (h1 << 4);
    }
    q
}

/// Pack 5-bit codes into `(qh, qs)`.
pub(super) fn pack_q5(q: &[u8; QK]) -> ([u8; 4], [u8; QK / 2]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for (j, b) in qs.iter_mut().enumerate() {
        let (lo, hi) = (q[j], q[j + QK / 2]);
        *b = (lo & 0x0f) | (hi << 4);
        qh |= u32::from(lo >> 4) << j;
        qh |= u32::from(hi >> 4) << (j + QK / 2);
    }
    (qh.to_le_bytes(), qs)
}

/// 4-bit codes of a 32-weight block as integers (the integer form): element j the low nibble
/// of `qs[j]`, 16 + j the high.
pub(super) fn nibbles32(qs: &[u8]) -> Vec<i32> {
    let mut c: Vec<i32> = qs.iter().map(|&q| i32::from(q & 0x0f)).collect();
    c.extend(qs.iter().map(|&q| i32::from(q >> 4)));
    c
}

/// [`nibbles32`] into fixed storage, minus `bias`: `codes[j]` from the low nibble of `qs[j]`,
/// `codes[16 + j]` from its high nibble (the codes of Q4_0, Q4_1 and the low bits of Q5_0, Q5_1).
pub(super) fn nibbles32_i16(qs: &[u8; QK / 2], bias: i16, codes: &mut [i16; QK]) {
    let (lo, hi) = codes.split_at_mut(QK / 2);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(qs) {
        *l = i16::from(q & 0x0f) - bias;
        *h = i16::from(q >> 4) - bias;
    }
}

/// [`with_qh`] and a `bias` into fixed storage: the 5-bit codes of Q5_0 / Q5_1 minus `bias`.
pub(super) fn q5_i16(qs: &[u8; QK / 2], qh: &[u8; 4], bias: i16, codes: &mut [i16; QK]) {
    nibbles32_i16(qs, 0, codes);
    for (j, c) in codes.iter_mut().enumerate() {
        *c = (*c | (i16::from((qh[j / 8] >> (j % 8)) & 1) << 4)) - bias;
    }
}

/// The fifth bits of a Q5_0/Q5_1 block (bit j of the little-endian u32 `qh`) on top.
pub(super) fn with_qh(mut c: Vec<i32>, qh: &[u8; 4]) -> Vec<i32> {
    let h = u32::from_le_bytes(*qh);
    for (j, v) in c.iter_mut().enumerate() {
        *v |= (((h >> j) & 1) as i32) << 4;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::block::Block;
    use super::super::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
    use super::*;

    fn ramp() -> [f32; QK] {
        std::array::from_fn(|i| i as f32 * 0.25 - 3.9)
    }

    #[test]
    fn q8_0_rounds_half_away_from_zero() {
        let mut x = [0.0f32; QK];
        x[0] = 127.0; // d = 1, id = 1: the values below are exact ties.
        x[1] = 0.5;
        x[2] = -0.5;
        x[3] = 2.5;
        x[4] = -2.5;
        let b = BlockQ8_0::quantize(&x);
        assert_eq!(&b.qs[..5], &[127, 1, -1, 3, -3]);
        assert_eq!(b.d.to_f32(), 1.0);
    }

    #[test]
    fn legacy_round_trips_are_close() {
        let x = ramp();
        let mut y = [0.0f32; QK];
        let range = 7.75f32;
        BlockQ4_0::quantize(&x).dequantize(&mut y);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= range / 8.0));
        BlockQ4_1::quantize(&x).dequantize(&mut y);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= range / 15.0));
        BlockQ5_0::quantize(&x).dequantize(&mut y);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= range / 16.0));
        BlockQ5_1::quantize(&x).dequantize(&mut y);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= range / 31.0));
        BlockQ8_0::quantize(&x).dequantize(&mut y);
        assert!(x
            .iter()
            .zip(&y)
            .all(|(a, b)| (a - b).abs() <= range / 127.0));
    }

    #[test]
    fn q5_packing_round_trips() {
        let q: [u8; QK] = std::array::from_fn(|i| (i * 7 % 32) as u8);
        let (qh, qs) = pack_q5(&q);
        assert_eq!(unpack_q5(qh, &qs), q);
    }
}
