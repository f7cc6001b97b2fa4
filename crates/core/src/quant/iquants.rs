//! What the IQ2, IQ3 and IQ1 formats share (each in its own file under `dtypes/`): their grid
//! tables (`iq_grids.rs`, generated from gguf-py) and the decode of one grid row.
//!
//! Dequantization repeats gguf-py's f32 operations in the same order (the block or sub-block
//! scale first, then `(scale * grid) * sign` or `scale * (grid + delta)`), so it is bit
//! identical to gguf-py 0.19, and to ggml's `dequantize_row_iq*`, which does the same.

pub(super) use super::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};

/// IQ1_S and IQ1_M's shift of every grid value (`IQ1S_DELTA`), negated where a flag bit is set.
pub(super) const IQ1S_DELTA: f32 = 0.125;

/// `out[j] = (db * row[j]) * (-1 if bit j of signs else 1)`, with `row[j]` byte `j` of a grid
/// row (unsigned values), for `out.len()` values (at most the row's bytes).
pub(super) fn signed_row(db: f32, row: u64, signs: u8, out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        let v = db * f32::from((row >> (8 * j)) as u8);
        let sign = if (signs >> j) & 1 == 0 { 1.0 } else { -1.0 };
        *o = v * sign;
    }
}

/// IQ2's 8-value rows: [`signed_row`] with the sign bits from [`KSIGNS_IQ2XS`] at `sign_index`
/// (7 bits; the table adds the eighth).
pub(super) fn iq2_row(db: f32, row: u64, sign_index: usize, out: &mut [f32]) {
    signed_row(db, row, KSIGNS_IQ2XS[sign_index & 127], out);
}

/// `out[j] = dl * (row[j] + delta)` for IQ1_S and IQ1_M's 8-value rows of -1, 0, 1 (`i8` bytes),
/// with `delta` [`IQ1S_DELTA`] or its negation.
pub(super) fn iq1_row(dl: f32, row: u64, delta: f32, out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        let g = f32::from((row >> (8 * j)) as u8 as i8);
        *o = dl * (g + delta);
    }
}

/// The IQ2 types' sub-block scale: `(d * (0.5 + s)) * 0.25` for a 4-bit `s`.
pub(super) fn iq2_scale(d: f32, s: u8) -> f32 {
    d * (0.5 + f32::from(s & 0x0f)) * 0.25
}
