//! Float element types: F32, F16 and BF16, and the half-precision field every block format
//! uses for its scales ([`F16Le`]).
//!
//! Conversions match gguf-py (numpy) bit for bit, NaN payloads included:
//! - f16 -> f32 is exact; a NaN keeps its payload and is not quieted (numpy's
//!   `npy_halfbits_to_floatbits`; the `half` crate would set the quiet bit).
//! - f32 -> f16 rounds to nearest, ties to even; a NaN keeps the top 10 payload bits and
//!   stays a NaN (numpy's `npy_floatbits_to_halfbits`).
//! - f32 -> bf16 is ggml's `ggml_compute_fp32_to_bf16`: NaN forced quiet, otherwise round to
//!   nearest, ties to even (what gguf-py's `BF16.quantize_blocks` does).
//! - bf16 -> f32 is a 16-bit shift.

use bytemuck::{Pod, Zeroable};

/// A little-endian IEEE half inside a block (`ggml_half`). Alignment 1, so blocks holding it
/// can be viewed straight over unaligned file bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
#[repr(transparent)]
pub struct F16Le(pub [u8; 2]);

const _: () = assert!(std::mem::size_of::<F16Le>() == 2);
const _: () = assert!(std::mem::align_of::<F16Le>() == 1);

impl F16Le {
    /// Positive zero.
    pub const ZERO: F16Le = F16Le([0, 0]);

    /// From raw half bits.
    pub fn from_bits(bits: u16) -> Self {
        F16Le(bits.to_le_bytes())
    }

    /// The raw half bits.
    pub fn to_bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }

    /// Widen to f32 (exact).
    pub fn to_f32(self) -> f32 {
        f16_bits_to_f32(self.to_bits())
    }

    /// Round an f32 to the nearest half (ties to even).
    pub fn from_f32(x: f32) -> Self {
        Self::from_bits(f32_to_f16_bits(x))
    }
}

/// Half bits to f32, exactly; NaN payloads are kept as numpy keeps them.
///
/// By the bits rather than through `half` (which dispatches at run time to F16C where the
/// CPU has it, a call per value): every block decode reads its scales through this.
#[inline]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let mag = u32::from(h & 0x7fff);
    if mag >= 0x7c00 {
        // Infinity, or NaN with its payload.
        return f32::from_bits(sign | 0x7f80_0000 | ((mag & 0x03ff) << 13));
    }
    if mag < 0x0400 {
        // Zero or subnormal: mag * 2^-24, exact (mag < 2^10; the result is an f32 normal).
        let v = mag as f32 * (1.0 / 16_777_216.0);
        return f32::from_bits(sign | v.to_bits());
    }
    // Normal: the exponent rebiased from 15 to 127, the mantissa widened.
    f32::from_bits(sign | ((mag << 13) + ((127 - 15) << 23)))
}

/// f32 to half bits, round to nearest even; NaN payloads truncated as numpy does.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    if x.is_nan() {
        let u = x.to_bits();
        let sign = ((u >> 16) & 0x8000) as u16;
        let payload = ((u & 0x007f_ffff) >> 13) as u16;
        return sign | 0x7c00 | payload.max(1);
    }
    half::f16::from_f32(x).to_bits()
}

/// bf16 bits to f32 (exact, payload kept).
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// f32 to bf16 bits as ggml and gguf-py do: NaN forced quiet, else round to nearest even.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    // No overflow: the largest non-NaN pattern 0xff80_0000 plus 0x8000 fits in u32.
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// Little-endian f32s to f32s. `data.len() == 4 * out.len()` (checked by the caller).
pub(super) fn dequantize_f32(data: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(data.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Little-endian halves to f32s. `data.len() == 2 * out.len()`.
pub(super) fn dequantize_f16(data: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// Little-endian bf16s to f32s. `data.len() == 2 * out.len()`.
pub(super) fn dequantize_bf16(data: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(super) fn quantize_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub(super) fn quantize_f16(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| f32_to_f16_bits(v).to_le_bytes())
        .collect()
}

pub(super) fn quantize_bf16(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| f32_to_bf16_bits(v).to_le_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pattern converts as `half` converts it (bits), NaN payloads as numpy keeps them.
    #[test]
    fn f16_to_f32_is_halfs_conversion() {
        for h in 0..=u16::MAX {
            let f = f16_bits_to_f32(h);
            let want = half::f16::from_bits(h).to_f32();
            if want.is_nan() {
                let sign = u32::from(h & 0x8000) << 16;
                let payload = u32::from(h & 0x03ff) << 13;
                assert_eq!(f.to_bits(), sign | 0x7f80_0000 | payload, "{h:#06x}");
            } else {
                assert_eq!(f.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn f16_round_trips_every_non_nan_pattern() {
        for h in 0..=u16::MAX {
            let f = f16_bits_to_f32(h);
            if f.is_nan() {
                // Payload kept, not quieted.
                assert_eq!(f.to_bits() & 0x007f_ffff, u32::from(h & 0x3ff) << 13);
                assert_eq!(f32_to_f16_bits(f), h);
            } else {
                assert_eq!(f32_to_f16_bits(f), h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn f16_rounds_ties_to_even_and_overflows_to_inf() {
        // 1 + 2^-11 is halfway between 1 and the next half: ties to even (1.0).
        assert_eq!(f32_to_f16_bits(1.0 + f32::powi(2.0, -11)), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between odd and even: rounds up to even.
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * f32::powi(2.0, -11)), 0x3c02);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f32_to_f16_bits(-1e10), 0xfc00);
        assert_eq!(f32_to_f16_bits(f32::from_bits(0x7f80_0001)), 0x7c01);
    }

    #[test]
    fn bf16_matches_ggml() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // Ties to even: 0x3f80_8000 rounds down, 0x3f81_8000 rounds up.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        // Signalling NaN is quieted.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(bf16_bits_to_f32(0xbf80), -1.0);
    }
}
