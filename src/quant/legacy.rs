//! The 32-weight "legacy" block formats: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.
//!
//! Layouts are ggml's (`ggml-common.h`). Dequantization repeats gguf-py's f32 operations in
//! the same order (`d * q`, `d * q + m` as two roundings, never fused), so results are bit
//! identical to gguf-py 0.19. Quantization is ggml's `quantize_row_*_ref`, which gguf-py
//! reproduces exactly; we reproduce it too (round half away from zero for Q8_0, truncation
//! of `x * id + 8.5` etc. for the others).

use bytemuck::{Pod, Zeroable};

use super::float::F16Le;

/// Elements per legacy block.
pub const QK: usize = 32;

/// `Q4_0`: `x = d * (q - 8)`, 4-bit `q`. Element `j` is the low nibble of `qs[j]`, element
/// `16 + j` the high nibble.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: F16Le,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// `Q4_1`: `x = d * q + m`, 4-bit `q`, nibbles as in Q4_0.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// `Q5_0`: `x = d * (q - 16)`, 5-bit `q`: low 4 bits as in Q4_0, bit 4 of element `j` is
/// bit `j` of the little-endian u32 `qh`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// `Q5_1`: `x = d * q + m`, 5-bit `q` packed as in Q5_0.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// `Q8_0`: `x = q * d`, signed 8-bit `q`.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: F16Le,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// The signed value of largest magnitude (the first one on ties), as ggml picks it.
fn signed_absmax(x: &[f32; QK]) -> f32 {
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

fn min_max(x: &[f32; QK]) -> (f32, f32) {
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
fn inverse(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// ggml's `(uint8_t)MIN(top, (int8_t)(v))` for the non-negative `v` these quantizers make.
fn trunc_clamp(v: f32, top: u8) -> u8 {
    (v.trunc() as u8).min(top)
}

impl BlockQ4_0 {
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * (i32::from(q & 0x0f) - 8) as f32;
            out[j + QK / 2] = d * (i32::from(q >> 4) - 8) as f32;
        }
    }

    pub fn quantize(x: &[f32; QK]) -> Self {
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let lo = trunc_clamp(x[j] * id + 8.5, 15);
            let hi = trunc_clamp(x[j + QK / 2] * id + 8.5, 15);
            *q = lo | (hi << 4);
        }
        BlockQ4_0 {
            d: F16Le::from_f32(d),
            qs,
        }
    }
}

impl BlockQ4_1 {
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * f32::from(q & 0x0f) + m;
            out[j + QK / 2] = d * f32::from(q >> 4) + m;
        }
    }

    pub fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let lo = trunc_clamp((x[j] - min) * id + 0.5, 15);
            let hi = trunc_clamp((x[j + QK / 2] - min) * id + 0.5, 15);
            *q = lo | (hi << 4);
        }
        BlockQ4_1 {
            d: F16Le::from_f32(d),
            m: F16Le::from_f32(min),
            qs,
        }
    }
}

/// The 5-bit codes of a Q5 block, element order.
fn unpack_q5(qh: [u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
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
fn pack_q5(q: &[u8; QK]) -> ([u8; 4], [u8; QK / 2]) {
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

impl BlockQ5_0 {
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let q = unpack_q5(self.qh, &self.qs);
        for (o, &q) in out.iter_mut().zip(&q) {
            *o = d * (i32::from(q) - 16) as f32;
        }
    }

    pub fn quantize(x: &[f32; QK]) -> Self {
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clamp(v * id + 16.5, 31);
        }
        let (qh, qs) = pack_q5(&q);
        BlockQ5_0 {
            d: F16Le::from_f32(d),
            qh,
            qs,
        }
    }
}

impl BlockQ5_1 {
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let q = unpack_q5(self.qh, &self.qs);
        for (o, &q) in out.iter_mut().zip(&q) {
            *o = d * f32::from(q) + m;
        }
    }

    pub fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clamp((v - min) * id + 0.5, 31);
        }
        let (qh, qs) = pack_q5(&q);
        BlockQ5_1 {
            d: F16Le::from_f32(d),
            m: F16Le::from_f32(min),
            qh,
            qs,
        }
    }
}

impl BlockQ8_0 {
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = f32::from(q) * d;
        }
    }

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

#[cfg(test)]
mod tests {
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
