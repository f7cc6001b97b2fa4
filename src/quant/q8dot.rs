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

use super::{f16_bits_to_f32, scale_min_k4, GgmlType, QuantError};

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
/// `(len, scale, offset)` covering them, `w = scale * code + offset`.
struct IntBlock {
    codes: Vec<i32>,
    groups: Vec<(usize, f32, f32)>,
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// 4-bit codes of a 32-weight legacy block: element j the low nibble of qs[j], 16 + j the high.
fn nibbles32(qs: &[u8]) -> Vec<i32> {
    let mut c: Vec<i32> = qs.iter().map(|&q| i32::from(q & 0x0f)).collect();
    c.extend(qs.iter().map(|&q| i32::from(q >> 4)));
    c
}

/// The fifth bits of a Q5_0/Q5_1 block (bit j of the little-endian u32 at `qh`) on top.
fn with_qh(mut c: Vec<i32>, qh: &[u8]) -> Vec<i32> {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, v) in c.iter_mut().enumerate() {
        *v |= (((h >> j) & 1) as i32) << 4;
    }
    c
}

fn int_block(dtype: GgmlType, b: &[u8]) -> Option<IntBlock> {
    use GgmlType::*;
    let legacy = |codes: Vec<i32>, scale: f32, offset: f32| IntBlock {
        codes,
        groups: vec![(32, scale, offset)],
    };
    Some(match dtype {
        Q4_0 => legacy(
            nibbles32(&b[2..18]).iter().map(|q| q - 8).collect(),
            f16_at(b, 0),
            0.0,
        ),
        Q4_1 => legacy(nibbles32(&b[4..20]), f16_at(b, 0), f16_at(b, 2)),
        Q5_0 => {
            let c = with_qh(nibbles32(&b[6..22]), &b[2..6]);
            legacy(c.iter().map(|q| q - 16).collect(), f16_at(b, 0), 0.0)
        }
        Q5_1 => legacy(
            with_qh(nibbles32(&b[8..24]), &b[4..8]),
            f16_at(b, 0),
            f16_at(b, 2),
        ),
        Q8_0 => legacy(
            b[2..34].iter().map(|&q| i32::from(q as i8)).collect(),
            f16_at(b, 0),
            0.0,
        ),
        Q4_K | Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales: &[u8; 12] = b[4..16].try_into().ok()?;
            let (qh, qs) = if dtype == Q4_K {
                (None, &b[16..144])
            } else {
                (Some(&b[16..48]), &b[48..176])
            };
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
        Q6_K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = f16_at(b, 208);
            let codes = (0..256)
                .map(|e| {
                    let (h, r) = (e / 128, e % 128);
                    let l = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
                    let hb = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
                    i32::from(l | (hb << 4)) - 32
                })
                .collect();
            let groups = sc
                .iter()
                .map(|&s| (16, d * f32::from(s as i8), 0.0))
                .collect();
            IntBlock { codes, groups }
        }
        TQ1_0 | TQ2_0 => {
            let (codes, d) = if dtype == TQ1_0 {
                let b: &super::BlockTQ1_0 = bytemuck::try_from_bytes(b).ok()?;
                (b.codes(), b.d.to_f32())
            } else {
                let b: &super::BlockTQ2_0 = bytemuck::try_from_bytes(b).ok()?;
                (b.codes(), b.d.to_f32())
            };
            // One scale per block, in groups of the activations' 32 (each its own d8).
            IntBlock {
                codes: codes.iter().map(|&c| i32::from(c) - 1).collect(),
                groups: vec![(QK8, d, 0.0); 256 / QK8],
            }
        }
        _ => return None,
    })
}

/// Whether [`vec_dot_q8`] knows `dtype`.
pub fn has_q8_dot(dtype: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        dtype,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q5_K | Q6_K | TQ1_0 | TQ2_0
    )
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
    let (mut sum, mut mag) = (0f64, 0f64);
    for (bi, block) in row.chunks_exact(bb).enumerate() {
        let ib = int_block(dtype, block).ok_or(QuantError::Unsupported(dtype))?;
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
