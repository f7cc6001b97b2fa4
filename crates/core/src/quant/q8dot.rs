//! The integer-dot reference for decode on int8 activations: what the GPU's `MatvecQ8` kernels
//! compute, on the CPU, with the arithmetic of llama.cpp's `ggml_vec_dot_<type>_q8_<1|K>`.
//!
//! 1. The activation row is quantized once per token in blocks of [`QK8`] values
//!    ([`quantize_q8`]): `iscale = 127 / amax` (one correctly rounded f32 division, as ggml's
//!    `quantize_row_q8_K_ref`), `q = clamp(nearest_even(x * iscale), -127, 127)`, and the
//!    block scale `d = 1 / iscale` kept as f32. Blocks of 32 (Q8_1's size, which llama.cpp's
//!    GPU backends use for every type, K-quants included) rather than Q8_K's 256: one record
//!    serves the legacy and the K-quant kernels, and a smaller block only lowers the error.
//!    A block whose `amax` is below [`Q8_MIN_AMAX`] (or not finite) is stored as zeros.
//! 2. Each weight block is read as exact integer codes in groups that share one f32 scale
//!    and offset (`w = scale * code + offset`: Q4_K `(d*sc) * q - dmin*m` per 32, Q6_K
//!    `(d*sc) * (q - 32)` per 16, Q4_0 `d * (q - 8)`, Q4_1 `d * q + m`, ...), with the f32
//!    products the CPU dequantization forms (so `scale * code + offset` is the dequantized
//!    weight before its final rounding).
//! 3. Per group, the integer sums `sum(code * x_q)` and `sum(x_q)` are exact; the group adds
//!    `d8 * (scale * sum(code x_q) + offset * sum(x_q))`, evaluated here in f64 from the f32
//!    factors (so the reference has no rounding beyond its f32 inputs).
//!
//! [`vec_dot_q8`] returns that sum and the magnitude `sum |d8| (|scale| sum|code x_q| +
//! |offset| sum|x_q|)` that bounds the rounding of any f32 evaluation of the same terms.

use super::{lookup, GgmlType, QuantError};

/// Values per activation block.
pub const QK8: usize = 32;

/// Blocks whose largest magnitude is below this (or not finite) quantize to zeros with
/// `d = 0`: `127 / amax` stays a finite normal f32 above it.
pub const Q8_MIN_AMAX: f32 = 1e-30;

/// One quantized activation row.
#[derive(Debug, Clone, PartialEq)]
pub struct Q8Row {
    /// The int8 values, one per input value.
    pub qs: Vec<i8>,
    /// One scale per block of [`QK8`] values.
    pub d: Vec<f32>,
    /// `127 / amax` per block (0 for a zero block), the factor the values were multiplied by.
    pub iscale: Vec<f32>,
}

/// Quantize `x` (a multiple of [`QK8`] values) to int8 blocks (module docs, step 1).
pub fn quantize_q8(x: &[f32]) -> Result<Q8Row, QuantError> {
    if x.len() % QK8 != 0 {
        return Err(QuantError::Invalid(format!(
            "q8 activations: {} values is not a multiple of {QK8}",
            x.len()
        )));
    }
    let mut row = Q8Row {
        qs: Vec::with_capacity(x.len()),
        d: Vec::with_capacity(x.len() / QK8),
        iscale: Vec::with_capacity(x.len() / QK8),
    };
    for block in x.chunks_exact(QK8) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        if !(amax >= Q8_MIN_AMAX && amax.is_finite()) {
            row.qs.extend([0i8; QK8]);
            row.d.push(0.0);
            row.iscale.push(0.0);
            continue;
        }
        let iscale = 127.0f32 / amax;
        for &v in block {
            row.qs
                .push((v * iscale).round_ties_even().clamp(-127.0, 127.0) as i8);
        }
        row.d.push(1.0 / iscale);
        row.iscale.push(iscale);
    }
    Ok(row)
}

/// The integer form of one weight block: `codes` (one per weight) and consecutive groups
/// `(len, scale, offset)` covering them, `w = scale * code + offset` (each dtype's
/// [`crate::quant::Block::INT_FORM`]).
pub struct IntBlock {
    pub codes: Vec<i32>,
    pub groups: Vec<(usize, f32, f32)>,
}

impl IntBlock {
    /// All codes in one group.
    pub fn one_group(codes: Vec<i32>, scale: f32, offset: f32) -> Self {
        let len = codes.len();
        IntBlock {
            codes,
            groups: vec![(len, scale, offset)],
        }
    }
}

/// Whether [`vec_dot_q8`] knows `dtype` (it has an integer form).
pub fn has_q8_dot(dtype: GgmlType) -> bool {
    lookup(dtype).is_some_and(|d| d.has_int_form())
}

/// One weight row (`row`: its blocks in the file format) dotted with quantized activations
/// `x` of the same length: `(sum, magnitude)` as in the module docs.
pub fn vec_dot_q8(dtype: GgmlType, row: &[u8], x: &Q8Row) -> Result<(f64, f64), QuantError> {
    let geo = dtype
        .block()
        .filter(|_| has_q8_dot(dtype))
        .ok_or(QuantError::Unsupported(dtype))?;
    let (be, bb) = (geo.block_elems as usize, geo.block_bytes as usize);
    if row.len() % bb != 0 || row.len() / bb * be != x.qs.len() {
        return Err(QuantError::Invalid(format!(
            "q8 dot: {} bytes of {dtype} against {} activations",
            row.len(),
            x.qs.len()
        )));
    }
    let imp = lookup(dtype).ok_or(QuantError::Unsupported(dtype))?;
    let (mut sum, mut mag) = (0f64, 0f64);
    for (bi, block) in row.chunks_exact(bb).enumerate() {
        let ib = imp.int_block(block).ok_or(QuantError::Unsupported(dtype))?;
        let mut e = bi * be;
        let mut k = 0;
        for &(len, scale, offset) in &ib.groups {
            let d8 = f64::from(x.d[e / QK8]);
            let (mut sumi, mut sumx, mut absi, mut absx) = (0i64, 0i64, 0i64, 0i64);
            for (&c, &q) in ib.codes[k..k + len].iter().zip(&x.qs[e..e + len]) {
                let p = i64::from(c) * i64::from(q);
                sumi += p;
                absi += p.abs();
                sumx += i64::from(q);
                absx += i64::from(q).abs();
            }
            let (s, o) = (f64::from(scale), f64::from(offset));
            sum += d8 * (s * sumi as f64 + o * sumx as f64);
            mag += d8.abs() * (s.abs() * absi as f64 + o.abs() * absx as f64);
            e += len;
            k += len;
        }
    }
    Ok((sum, mag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize};

    #[test]
    fn quantization_bounds_and_zero_blocks() {
        let mut x: Vec<f32> = (0..96)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        x[32..64].fill(0.0);
        let q = quantize_q8(&x).unwrap();
        assert_eq!(q.d[1], 0.0);
        assert!(q.qs[32..64].iter().all(|&v| v == 0));
        for (b, block) in x.chunks(32).enumerate() {
            for (i, &v) in block.iter().enumerate() {
                let err = (v - q.d[b] * f32::from(q.qs[32 * b + i])).abs();
                assert!(err <= 0.5001 * q.d[b], "{v} {err}");
            }
            if q.d[b] != 0.0 {
                assert_eq!(
                    q.qs[32 * b..32 * b + 32].iter().map(|v| v.abs()).max(),
                    Some(127)
                );
            }
        }
        assert!(quantize_q8(&x[..33]).is_err());
    }

    /// The integer form is the dequantized weight: with x exactly representable on the q8 grid
    /// (x = d8 * q), the integer dot equals the f64 dot of the dequantized row.
    #[test]
    fn integer_form_matches_dequantization() {
        for dtype in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::TQ1_0,
            GgmlType::TQ2_0,
        ] {
            let w: Vec<f32> = (0..512)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 40.0)
                .collect();
            let data = quantize(dtype, &w).unwrap();
            let deq = dequantize(dtype, &data, 512).unwrap();
            let x: Vec<f32> = (0..512)
                .map(|i| ((i * 29 % 255) as f32 - 127.0) / 64.0)
                .collect();
            let q = quantize_q8(&x).unwrap();
            let xd: Vec<f64> = (0..512)
                .map(|i| f64::from(q.d[i / 32]) * f64::from(q.qs[i]))
                .collect();
            let want: f64 = deq.iter().zip(&xd).map(|(&a, b)| f64::from(a) * b).sum();
            let (got, mag) = vec_dot_q8(dtype, &data, &q).unwrap();
            // The dequantized weights carry one f32 rounding each (of scale * code + offset).
            assert!(
                (got - want).abs() <= 1e-6 * mag.max(1.0),
                "{dtype}: {got} {want}"
            );
        }
    }
}
