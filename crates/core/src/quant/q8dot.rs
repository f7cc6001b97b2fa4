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
//!    `(d*sc) * (q - 32)` per 16, Q4_0 `d * (q - 8)`, Q4_1 `d * q + m`, IQ4_NL
//!    `d * KVALUES[q]` with the table's int8 values as the codes (IQ4_XS the same with
//!    `d * (ls - 32)` per 32), ...), with the f32
//!    products the CPU dequantization forms (so `scale * code + offset` is the dequantized
//!    weight before its final rounding).
//! 3. Per group, the integer sums `sum(code * x_q)` and `sum(x_q)` are exact; the group adds
//!    `d8 * (scale * sum(code x_q) + offset * sum(x_q))`, evaluated here in f64 from the f32
//!    factors (so the reference has no rounding beyond its f32 inputs).
//!
//! [`vec_dot_q8`] returns that sum and the magnitude `sum |d8| (|scale| sum|code x_q| +
//! |offset| sum|x_q|)` that bounds the rounding of any f32 evaluation of the same terms. It
//! allocates an [`IntBlock`] per weight block and sums in i64: the reference. The CPU backend
//! computes the same sum, bit for bit, with [`Q8Dot`] (each block decoded into caller storage,
//! i32 integer sums, activations in [`Q8Acts`] quantized once per product).

use super::block::Block;
use super::{dtypes, lookup, GgmlType, QuantError};

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
    check_q8_len(x.len())?;
    let mut row = Q8Row {
        qs: vec![0; x.len()],
        d: Vec::with_capacity(x.len() / QK8),
        iscale: Vec::with_capacity(x.len() / QK8),
    };
    for (block, qs) in x.chunks_exact(QK8).zip(row.qs.chunks_exact_mut(QK8)) {
        let iscale = quantize_block(block, qs);
        row.d.push(if iscale == 0.0 { 0.0 } else { 1.0 / iscale });
        row.iscale.push(iscale);
    }
    Ok(row)
}

fn check_q8_len(len: usize) -> Result<(), QuantError> {
    if len % QK8 != 0 {
        return Err(QuantError::Invalid(format!(
            "q8 activations: {len} values is not a multiple of {QK8}"
        )));
    }
    Ok(())
}

/// One block of [`QK8`] values into `qs`; returns `iscale` (0 for a zero block, whose `qs` are
/// zeros and whose `d` is 0).
fn quantize_block(block: &[f32], qs: &mut [i8]) -> f32 {
    let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
    if !(amax >= Q8_MIN_AMAX && amax.is_finite()) {
        qs.fill(0);
        return 0.0;
    }
    let iscale = 127.0f32 / amax;
    for (q, &v) in qs.iter_mut().zip(block) {
        *q = round_ties_even_small(v * iscale).clamp(-127.0, 127.0) as i8;
    }
    iscale
}

/// `y.round_ties_even()` for `|y| < 2^22` (here `|v * iscale|` is at most 127 and a rounding):
/// adding 1.5 * 2^23 lands in [2^23, 2^24), where the f32 spacing is 1, so the addition rounds
/// `y` to an integer, half to even (1.5 * 2^23 is even), and the subtraction is exact. The same
/// value as `round_ties_even` (up to the sign of a zero, which the integer cast drops), without
/// the library call it is on x86-64 before SSE4.1.
#[inline]
fn round_ties_even_small(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (y + MAGIC) - MAGIC
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

/// The records of [`quantize_q8`] for the fast product, in buffers kept from one product to
/// the next: one or more tokens of `cols` values each, the same int8 values (held as i16) and
/// block scales, and what the groups' terms read per group of 16 and of 32 values: the block
/// scale `d8` and the integer sum of the values (which the groups' offsets multiply), both as
/// f64 (exactly), formed once per token instead of once per weight row.
#[derive(Clone, Debug, Default)]
pub struct Q8Acts {
    cols: usize,
    qs: Vec<i16>,
    d: Vec<f32>,
    /// Per group of 16, then of 32: `d8` and `sum(x_q)` of each token's groups.
    d16: Vec<f64>,
    sum16: Vec<f64>,
    d32: Vec<f64>,
    sum32: Vec<f64>,
}

impl Q8Acts {
    /// Quantize `x`, tokens of `cols` values (a multiple of [`QK8`]), as [`quantize_q8`] does
    /// each, reusing the buffers.
    pub fn quantize(&mut self, x: &[f32], cols: usize) -> Result<(), QuantError> {
        check_q8_len(cols)?;
        if cols == 0 || x.len() % cols != 0 {
            return Err(QuantError::Invalid(format!(
                "q8 activations: {} values are not whole rows of {cols}",
                x.len()
            )));
        }
        let blocks = x.len() / QK8;
        self.cols = cols;
        self.qs.resize(x.len(), 0);
        self.d.resize(blocks, 0.0);
        self.d16.resize(2 * blocks, 0.0);
        self.sum16.resize(2 * blocks, 0.0);
        self.d32.resize(blocks, 0.0);
        self.sum32.resize(blocks, 0.0);
        let mut q8 = [0i8; QK8];
        for (b, (block, qs)) in x
            .chunks_exact(QK8)
            .zip(self.qs.chunks_exact_mut(QK8))
            .enumerate()
        {
            let iscale = quantize_block(block, &mut q8);
            let d = if iscale == 0.0 { 0.0 } else { 1.0 / iscale };
            for (w, &q) in qs.iter_mut().zip(&q8) {
                *w = i16::from(q);
            }
            let half = |h: usize| {
                q8[16 * h..16 * h + 16]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum::<i32>()
            };
            let (lo, hi) = (half(0), half(1));
            self.d[b] = d;
            self.d16[2 * b..2 * b + 2].fill(f64::from(d));
            self.sum16[2 * b] = f64::from(lo);
            self.sum16[2 * b + 1] = f64::from(hi);
            self.d32[b] = f64::from(d);
            self.sum32[b] = f64::from(lo + hi);
        }
        Ok(())
    }

    /// Tokens quantized.
    pub fn tokens(&self) -> usize {
        self.qs.len().checked_div(self.cols).unwrap_or(0)
    }

    /// Values per token.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Token `t`'s int8 values (widened to i16).
    pub fn qs(&self, t: usize) -> &[i16] {
        &self.qs[t * self.cols..][..self.cols]
    }

    /// Token `t`'s block scales `d`.
    pub fn d(&self, t: usize) -> &[f32] {
        &self.d[t * self.cols / QK8..][..self.cols / QK8]
    }

    /// Token `t`'s `d8` and `sum(x_q)` per group of `g` (16 or 32) values.
    fn groups(&self, t: usize, g: usize) -> (&[f64], &[f64]) {
        let n = self.cols / g;
        match g {
            16 => (&self.d16[t * n..][..n], &self.sum16[t * n..][..n]),
            _ => (&self.d32[t * n..][..n], &self.sum32[t * n..][..n]),
        }
    }
}

/// A row's integer form (the codes, as i16, and per group the scale and offset of
/// [`IntBlock`]'s groups) and its per-group terms: scratch of the fast product, one per worker,
/// grown to the longest row it has seen. Every integer form's codes fit in i8 (Q8_0's
/// -128..=127, IQ4_NL's table -127..=113, Q6_K's -32..=31, the 5-bit formats' 0..=31 or
/// -16..=15, ternary -1..=2); i16 is
/// what the product multiplies (see [`Q8Dot`]).
#[derive(Clone, Debug, Default)]
pub struct Q8Scratch {
    codes: Vec<i16>,
    scales: Vec<f32>,
    offsets: Vec<f32>,
    terms: Vec<f64>,
}

impl Q8Scratch {
    /// Room for a row of `cols` weights in `groups` groups.
    fn prepare(&mut self, cols: usize, groups: usize) {
        self.codes.resize(cols, 0);
        self.scales.resize(groups, 0.0);
        self.offsets.resize(groups, 0.0);
        self.terms.resize(groups, 0.0);
    }
}

/// A block type's row product for [`Q8Dot`] (`row`'s length checked against `x` by the caller,
/// `out.len() == x.tokens()`).
pub type RowDotQ8 = fn(row: &[u8], x: &Q8Acts, scratch: &mut Q8Scratch, out: &mut [f64]);

/// The fast integer product of one dtype: [`vec_dot_q8`]'s sum with no allocation per row or
/// block. The row is decoded once ([`crate::quant::Block::INT_DECODE`]) into the integer
/// form in scratch, then for each token:
///
/// 1. per group, the integer sum `sum(code * x_q)` in i32, exact: a product is at most
///    128 * 127 in magnitude (Q8_0's code -128 against an activation of at most 127, which
///    also fits the i16 the codes and values are held in), a group holds at most 32, so a sum
///    is at most 32 * 16256 = 520,192 < 2^20, far from 2^31 (and exact in f64). A plain loop
///    of i16 products widened to i32, which the compiler turns into pairwise multiply-adds;
/// 2. per group, the term `d8 * (scale * sumi + offset * sumx)` in f64 from the same f32
///    factors, as the reference forms it (independent per group, so vectorizable);
/// 3. the terms added in row order (blocks, then groups) from 0, as the reference adds them.
///
/// The same operations on the same values in the same order: the sum equals
/// [`vec_dot_q8`]'s bit for bit (tested on every dtype).
#[derive(Clone, Copy)]
pub struct Q8Dot {
    dtype: GgmlType,
    dot: RowDotQ8,
    block_elems: usize,
    block_bytes: usize,
}

impl Q8Dot {
    /// The product for `dtype` (one with an integer form, [`has_q8_dot`]).
    pub fn new(dtype: GgmlType) -> Result<Self, QuantError> {
        let geo = dtype.block().ok_or(QuantError::Unsupported(dtype))?;
        let dot = dtypes::q8_row_dot(dtype).ok_or(QuantError::Unsupported(dtype))?;
        Ok(Q8Dot {
            dtype,
            dot,
            block_elems: geo.block_elems as usize,
            block_bytes: geo.block_bytes as usize,
        })
    }

    /// `out[t]`: the weight row `row` (its blocks in the file format) dotted with token `t` of
    /// `x`, [`vec_dot_q8`]'s sum (equal to it, see [`Q8Dot`]); one `out` per token.
    pub fn row(
        &self,
        row: &[u8],
        x: &Q8Acts,
        scratch: &mut Q8Scratch,
        out: &mut [f64],
    ) -> Result<(), QuantError> {
        let (be, bb) = (self.block_elems, self.block_bytes);
        if row.len() % bb != 0 || row.len() / bb * be != x.cols || out.len() != x.tokens() {
            return Err(QuantError::Invalid(format!(
                "q8 dot: {} bytes of {} against {} activations, {} outputs for {} tokens",
                row.len(),
                self.dtype,
                x.cols,
                out.len(),
                x.tokens()
            )));
        }
        (self.dot)(row, x, scratch, out);
        Ok(())
    }
}

/// [`RowDotQ8`] of block type `B` (see [`Q8Dot`]): only the decode is the type's own.
pub(super) fn row_dot<B: Block<N>, const N: usize>(
    row: &[u8],
    x: &Q8Acts,
    s: &mut Q8Scratch,
    out: &mut [f64],
) {
    let Some(decode) = B::INT_DECODE else {
        return;
    };
    let blocks: &[B] = bytemuck::cast_slice(row);
    let (cols, glen) = (blocks.len() * N, B::INT_GROUP);
    let (per_block, groups) = (N / glen, cols / glen);
    s.prepare(cols, groups);
    let codes = s.codes.chunks_exact_mut(N);
    let scales = s.scales.chunks_exact_mut(per_block);
    let offsets = s.offsets.chunks_exact_mut(per_block);
    for (((block, codes), scales), offsets) in blocks.iter().zip(codes).zip(scales).zip(offsets) {
        if let Ok(codes) = <&mut [i16; N]>::try_from(codes) {
            decode(block, codes, scales, offsets);
        }
    }
    dot_decoded(x, glen, s, out);
}

/// Steps 1 to 3 of [`Q8Dot`] on a row decoded into `s` (groups of `glen`), for every token:
/// shared by every dtype.
fn dot_decoded(x: &Q8Acts, glen: usize, s: &mut Q8Scratch, out: &mut [f64]) {
    for (t, sum) in out.iter_mut().enumerate() {
        let (qs, (d8, sumx)) = (x.qs(t), x.groups(t, glen));
        match glen {
            16 => group_sums::<16>(&s.codes, qs, &mut s.terms),
            _ => group_sums::<32>(&s.codes, qs, &mut s.terms),
        }
        let factors = s.scales.iter().zip(&s.offsets).zip(d8.iter().zip(sumx));
        for (term, ((&scale, &offset), (&d8, &sumx))) in s.terms.iter_mut().zip(factors) {
            *term = d8 * (f64::from(scale) * *term + f64::from(offset) * sumx);
        }
        *sum = s.terms.iter().fold(0.0, |acc, &term| acc + term);
    }
}

/// `out[g] = sum(codes[i] * qs[i])` over group `g` of `G` values, exact (see [`Q8Dot`]), as
/// f64. Not inlined: the loop is what the compiler vectorizes best on its own.
#[inline(never)]
fn group_sums<const G: usize>(codes: &[i16], qs: &[i16], out: &mut [f64]) {
    for ((c, q), o) in codes.chunks_exact(G).zip(qs.chunks_exact(G)).zip(out) {
        let (c, q) = (&c[..G], &q[..G]);
        let mut s = 0i32;
        for i in 0..G {
            s += i32::from(c[i]) * i32::from(q[i]);
        }
        *o = f64::from(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, dtypes, quantize};

    /// splitmix64: test data without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in [-1, 1).
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }

        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    /// Every dtype with an integer form.
    fn int_dtypes() -> Vec<GgmlType> {
        let v: Vec<GgmlType> = dtypes::all()
            .iter()
            .filter(|d| d.has_int_form())
            .map(|d| d.ggml())
            .collect();
        assert!(v.len() >= 10, "{v:?}");
        v
    }

    /// Weight rows of `dtype` with `cols` weights: random bytes made tame, raw random bytes
    /// (any f16 scale: huge, subnormal, negative, infinite, NaN), all zeros, all ones, and
    /// where the type quantizes, rows quantized from values at extreme magnitudes (scales near
    /// f16's largest and in its subnormals, negative minimums).
    fn weight_rows(dtype: GgmlType, cols: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
        let imp = lookup(dtype).unwrap();
        let bytes = dtype.row_bytes(cols as u64).unwrap() as usize;
        let mut rows = Vec::new();
        for _ in 0..4 {
            let mut b = rng.bytes(bytes);
            imp.tame(&mut b);
            rows.push(b);
        }
        rows.push(rng.bytes(bytes));
        rows.push(rng.bytes(bytes));
        rows.push(vec![0; bytes]);
        rows.push(vec![0xff; bytes]);
        if imp.can_quantize() {
            for (mag, bias) in [
                (6.0e4f32, 0.0f32),
                (1.0e-6, 0.0),
                (1.0, -3.0),
                (2.0e3, 3.0e4),
            ] {
                let w: Vec<f32> = (0..cols).map(|_| rng.unit() * mag + bias).collect();
                rows.push(quantize(dtype, &w).unwrap());
            }
        }
        rows
    }

    /// Activation rows: random values at several magnitudes, with a zero block, a block below
    /// [`Q8_MIN_AMAX`], a block at 1e30 and one with a single non-zero value.
    fn activation_rows(cols: usize, rng: &mut Rng) -> Vec<f32> {
        let mut x = Vec::new();
        for (t, mag) in [1.0f32, 1.0e-3, 50.0].into_iter().enumerate() {
            let mut row: Vec<f32> = (0..cols).map(|_| rng.unit() * mag).collect();
            let blocks = cols / QK8;
            row[((t + 1) % blocks) * QK8..][..QK8].fill(0.0);
            row[((t + 2) % blocks) * QK8..][..QK8].fill(1.0e-31);
            row[((t + 3) % blocks) * QK8..][..QK8]
                .iter_mut()
                .for_each(|v| *v *= 1.0e30);
            let lone = ((t + 4) % blocks) * QK8;
            row[lone..lone + QK8].fill(0.0);
            row[lone + 7] = -2.5;
            x.extend(row);
        }
        x
    }

    /// The integer form a row is decoded into (block by block, [`crate::quant::Block::INT_DECODE`])
    /// is the reference's ([`IntBlock`] of each block): the same codes and the same f32 scale
    /// and offset for every weight (compared as bits).
    #[test]
    fn decoded_integer_forms_equal_the_reference() {
        let mut rng = Rng(7);
        let mut acts = Q8Acts::default();
        let mut scratch = Q8Scratch::default();
        acts.quantize(&vec![0.5; 512], 512).unwrap();
        for dtype in int_dtypes() {
            let (imp, dot) = (lookup(dtype).unwrap(), Q8Dot::new(dtype).unwrap());
            let bb = dtype.block().unwrap().block_bytes as usize;
            for row in weight_rows(dtype, 512, &mut rng) {
                dot.row(&row, &acts, &mut scratch, &mut [0.0]).unwrap();
                let (mut codes, mut weights) = (Vec::new(), Vec::new());
                for block in row.chunks_exact(bb) {
                    let ib = imp.int_block(block).unwrap();
                    codes.extend(ib.codes);
                    for (len, scale, offset) in ib.groups {
                        weights.extend(vec![(scale.to_bits(), offset.to_bits()); len]);
                    }
                }
                let got: Vec<i32> = scratch.codes.iter().map(|&c| i32::from(c)).collect();
                assert_eq!(got, codes, "{dtype}");
                let glen = 512 / scratch.scales.len();
                let got: Vec<(u32, u32)> = (0..512)
                    .map(|i| {
                        let g = i / glen;
                        (scratch.scales[g].to_bits(), scratch.offsets[g].to_bits())
                    })
                    .collect();
                assert_eq!(got, weights, "{dtype}");
            }
        }
    }

    /// [`Q8Acts`] holds [`quantize_q8`]'s records, token by token, and per group of 16 and
    /// of 32 values their block scale and integer sum.
    #[test]
    fn reused_activation_buffers_hold_the_records() {
        let mut rng = Rng(11);
        let mut acts = Q8Acts::default();
        for cols in [512, 64, 256] {
            let x = activation_rows(cols, &mut rng);
            acts.quantize(&x, cols).unwrap();
            assert_eq!((acts.tokens(), acts.cols()), (3, cols));
            for (t, row) in x.chunks_exact(cols).enumerate() {
                let r = quantize_q8(row).unwrap();
                let qs: Vec<i16> = r.qs.iter().map(|&q| i16::from(q)).collect();
                assert_eq!(acts.qs(t), &qs[..]);
                assert_eq!(acts.d(t), &r.d[..]);
                for g in [16, 32] {
                    let (d8, sumx) = acts.groups(t, g);
                    for (i, q) in r.qs.chunks_exact(g).enumerate() {
                        let want: i32 = q.iter().map(|&v| i32::from(v)).sum();
                        assert_eq!(sumx[i], f64::from(want));
                        assert_eq!(d8[i], f64::from(r.d[i * g / QK8]));
                    }
                }
            }
        }
        assert!(acts.quantize(&[0.0; 48], 48).is_err());
        assert!(acts.quantize(&[0.0; 96], 64).is_err());
        assert!(acts.quantize(&[], 0).is_err());
    }

    /// The fast product against the reference on random rows of every dtype with an integer
    /// form: zero blocks, extreme and non-finite scales, negative offsets, zero and extreme
    /// activation blocks, several tokens at once.
    ///
    /// Tolerance: none. Both form each group's integer sums exactly (i64 in the reference, i32
    /// here, at most 520,192 in magnitude, see [`Q8Dot`]), convert them exactly to f64, and evaluate
    /// `d8 * (scale * sumi + offset * sumx)` and the running sum with the same f64 operations in
    /// the same order, so the sums are the same f64 bits (NaN where the reference is NaN).
    #[test]
    fn fast_dot_equals_the_reference() {
        let mut rng = Rng(3);
        let mut acts = Q8Acts::default();
        // One scratch for every dtype and row length, as a worker of the CPU backend keeps it.
        let mut scratch = Q8Scratch::default();
        for dtype in int_dtypes() {
            let dot = Q8Dot::new(dtype).unwrap();
            for cols in [256, 768] {
                let x = activation_rows(cols, &mut rng);
                acts.quantize(&x, cols).unwrap();
                let records: Vec<Q8Row> = x
                    .chunks_exact(cols)
                    .map(|r| quantize_q8(r).unwrap())
                    .collect();
                let mut out = vec![0f64; 3];
                for row in weight_rows(dtype, cols, &mut rng) {
                    dot.row(&row, &acts, &mut scratch, &mut out).unwrap();
                    for (t, record) in records.iter().enumerate() {
                        let (want, _) = vec_dot_q8(dtype, &row, record).unwrap();
                        let got = out[t];
                        assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "{dtype} cols {cols} token {t}: {got:e} != {want:e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn fast_dot_refuses_what_it_cannot_do() {
        assert!(Q8Dot::new(GgmlType::F32).is_err());
        assert!(Q8Dot::new(GgmlType::I2_S).is_err());
        let dot = Q8Dot::new(GgmlType::Q4_K).unwrap();
        let mut acts = Q8Acts::default();
        acts.quantize(&[0.5; 512], 256).unwrap();
        let (row, s) = (vec![0u8; 144], &mut Q8Scratch::default());
        assert!(dot.row(&row, &acts, s, &mut [0.0; 2]).is_ok());
        assert!(dot.row(&row, &acts, s, &mut [0.0; 1]).is_err());
        assert!(dot.row(&row[..143], &acts, s, &mut [0.0; 2]).is_err());
        assert!(dot.row(&[0u8; 288], &acts, s, &mut [0.0; 2]).is_err());
    }

    /// The rounding of [`quantize_q8`] is `round_ties_even` on the f32 it meets (between -128
    /// and 128): every 61st bit pattern of either sign, and every tie with its two neighbours.
    #[test]
    fn small_rounding_is_round_ties_even() {
        let same = |v: f32| {
            let (got, want) = (round_ties_even_small(v), v.round_ties_even());
            assert!(got == want, "{v}: {got} {want}");
        };
        for bits in (0..=128f32.to_bits()).step_by(61) {
            same(f32::from_bits(bits));
            same(-f32::from_bits(bits));
        }
        for k in -128..128 {
            let tie = k as f32 + 0.5;
            for v in [
                f32::from_bits(tie.to_bits() - 1),
                tie,
                f32::from_bits(tie.to_bits() + 1),
            ] {
                same(v);
            }
        }
    }

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
            GgmlType::IQ4_NL,
            GgmlType::IQ4_XS,
        ] {
            let w: Vec<f32> = (0..512)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 40.0)
                .collect();
            // IQ4_NL and IQ4_XS have no quantizer: random blocks with tame scales.
            let data = if crate::quant::can_quantize(dtype) {
                quantize(dtype, &w).unwrap()
            } else {
                let mut b = Rng(5).bytes(dtype.row_bytes(512).unwrap() as usize);
                crate::quant::tame(dtype, &mut b);
                b
            };
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
