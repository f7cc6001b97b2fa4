//! Upstream ggml's ternary formats: TQ1_0 (1.6875 bits per weight, base-3 packing) and
//! TQ2_0 (2 bits per weight). Both store one f16 absmax `d` per 256 weights; a weight is
//! `d * t` with `t` in {-1, 0, +1}.
//!
//! Quantization and dequantization follow gguf-py 0.19 (which matches ggml's
//! `quantize_row_tq*_ref`) bit for bit: `d = max|x|`, `t = round(x / d)` computed as
//! `x * (1/d)` and rounded half away from zero.

use bytemuck::{Pod, Zeroable};

use super::float::F16Le;

/// Elements per ternary block.
pub const QK_K: usize = 256;

/// `TQ1_0`: 5 trits per byte for elements 0..240, 4 trits per byte for 240..256.
///
/// A byte holding trits `t0..t4` (most significant first) stores
/// `ceil(256 * (81 t0 + 27 t1 + 9 t2 + 3 t3 + t4) / 243)`; trit `n` is recovered as
/// `((byte * 3^n mod 256) * 3) >> 8`. Element order:
/// - `qs[0..32]`: element `32 n + m` is trit `n` of `qs[m]` (elements 0..160);
/// - `qs[32..48]`: element `160 + 16 n + m` is trit `n` of `qs[32 + m]` (160..240);
/// - `qh[0..4]`: element `240 + 4 n + m` is trit `n` of `qh[m]` (240..256, 4 trits).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTQ1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);

/// `TQ2_0`: 2-bit codes `c = t + 1`. Element `128 h + 32 s + m` is bits `2s..2s+2` of
/// `qs[32 h + m]`. Code 3 (never written) decodes to +2, as in ggml and gguf-py.
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTQ2_0 {
    pub qs: [u8; 64],
    pub d: F16Le,
}
const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// `(d, codes)` with `codes[i] = round(x[i] / d) + 1` in 0..=2 (gguf-py's ternary quantizer).
fn ternarize(x: &[f32; QK_K]) -> (f32, [u8; QK_K]) {
    let d = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let codes = std::array::from_fn(|i| {
        // |x * id| <= 1 up to rounding, so this is -1, 0 or +1; clamp keeps it total.
        let t = (x[i] * id).round().clamp(-1.0, 1.0) as i8;
        (t + 1) as u8
    });
    (d, codes)
}

/// Trit `n` (0 = most significant) of a TQ1_0 byte: `((q * 3^n mod 256) * 3) >> 8`.
fn trit(q: u8, n: usize) -> u8 {
    let shifted = q.wrapping_mul(POW3[n]);
    ((u16::from(shifted) * 3) >> 8) as u8
}

/// Pack trits (0..=2, most significant first) as `ceil(v * 256 / 243)`.
fn pack_trits(trits: &[u8]) -> u8 {
    let v = trits.iter().fold(0u16, |acc, &t| acc * 3 + u16::from(t));
    // Four trits are padded to five with a trailing zero (the `3^n` weights 81..3).
    let v = v * if trits.len() == 4 { 3 } else { 1 };
    (v * 256).div_ceil(243) as u8
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

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (o, c) in out.iter_mut().zip(self.codes()) {
            *o = d * (i32::from(c) - 1) as f32;
        }
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

impl BlockTQ2_0 {
    /// The block's 2-bit codes (weight `d * (code - 1)`), in element order.
    pub fn codes(&self) -> [u8; QK_K] {
        std::array::from_fn(|e| {
            let (h, s, m) = (e / 128, (e / 32) % 4, e % 32);
            (self.qs[32 * h + m] >> (2 * s)) & 3
        })
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (o, c) in out.iter_mut().zip(self.codes()) {
            *o = d * (i32::from(c) - 1) as f32;
        }
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

    #[test]
    fn every_trit_byte_round_trips() {
        for v in 0..243u16 {
            let trits: [u8; 5] = std::array::from_fn(|n| ((v / 3u16.pow(4 - n as u32)) % 3) as u8);
            let q = pack_trits(&trits);
            for (n, &t) in trits.iter().enumerate() {
                assert_eq!(trit(q, n), t, "value {v} trit {n}");
            }
        }
    }

    #[test]
    fn ternary_round_trips_are_exact_on_ternary_input() {
        let x: [f32; QK_K] = std::array::from_fn(|i| [0.5f32, -0.5, 0.0][(i * 7) % 3]);
        let mut y = [0f32; QK_K];
        BlockTQ1_0::quantize(&x).dequantize(&mut y);
        assert_eq!(x, y);
        BlockTQ2_0::quantize(&x).dequantize(&mut y);
        assert_eq!(x, y);
    }
}
