//! Trellis quantized weights: bit unpacking, decoding to f16, and the reference quantizer.
//!
//! This follows what the reference Trellis runtime computes (`shared/guide/trellis.md`), not the
//! seed document where the two differ:
//!
//! - A weight `W[out, in]` (PyTorch orientation) is stored as four tensors: `indices` (u8, one
//!   header byte holding the bit count `b`, then an LSB-first bitstream), `scales` (f32
//!   `[G, out]`), `su` (f32 `[in]`, +1/-1) and `sv` (f32 `[out]`, +1/-1).
//! - The bitstream is cut into tiles of 16x16 weights, `32*b` bytes each, numbered
//!   `t = tile_out*TI + tile_in`; inside a tile the position is `p = local_out*16 + local_in`.
//!   Edge tiles keep stride 16; their padded positions are ignored (the quantizer writes 0).
//! - `W[o, i] = ((grid_b[idx] * scales[g, o]) * su[i]) * sv[o]` in f32, left to right, then
//!   rounded to f16, with `g = min(i / ceil(in/G), G-1)`.
//! - **No Hadamard transform** is applied at run time, even when a config says
//!   `hadamard_transform: true`: the reference runtime does not apply one, and we match it.
//!
//! Pure: no I/O. Every length is checked before anything is allocated or indexed, so corrupt
//! inputs give an error, never a panic.

use half::f16;

/// The grid step 1.24371088 as an f32 (bits `0x3f9f31eb`).
pub const GRID_STEP: f32 = f32::from_bits(0x3f9f_31eb);

/// Weights per tile side.
pub const TILE: usize = 16;

/// Bound on the reconstruction error of the reference quantizer, in units of the group scale
/// (half a grid step is 0.62185544; f16 rounding of the result comes on top).
pub const MAX_ERROR_PER_SCALE: f32 = 0.622;

/// Errors of Trellis unpacking, decoding and quantizing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrellisQuantError {
    #[error("{bits} bits per weight is not supported (Trellis uses 2..8)")]
    UnsupportedBits { bits: u32 },
    #[error("a [{out}, {in_}] weight is too large to address")]
    TooLarge { out: usize, in_: usize },
    #[error("a [{out}, {in_}] weight has no elements")]
    Empty { out: usize, in_: usize },
    #[error(
        "indices hold {got} bytes; a [{out}, {in_}] weight at {bits} bits needs {expected} \
         (1 header byte + {tiles} tiles of {tile_bytes} bytes) or {} without the header",
        .expected - 1
    )]
    IndicesLength {
        out: usize,
        in_: usize,
        bits: u32,
        tiles: usize,
        tile_bytes: usize,
        expected: usize,
        got: usize,
    },
    #[error("indices header byte is {header}, expected the bit count {bits}")]
    HeaderMismatch { header: u8, bits: u32 },
    #[error("{what} holds {got} values, expected {expected}")]
    PartLength {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error(
        "scales hold {got} values, which is not a whole number of groups of {out} (one per output)"
    )]
    ScalesNotGroups { out: usize, got: usize },
    #[error("index {index} at ({o}, {i}) is outside the {bits}-bit grid")]
    IndexOutOfGrid {
        o: usize,
        i: usize,
        index: u8,
        bits: u32,
    },
}

/// The reconstruction grid for `bits`: `grid_b[j] = (j - (2^b - 1)/2) * 1.24371088` in f32.
pub fn trellis_grid(bits: u32) -> Result<Vec<f32>, TrellisQuantError> {
    check_bits(bits)?;
    let levels = 1u32 << bits;
    let center = (levels - 1) as f32 / 2.0;
    Ok((0..levels)
        .map(|j| (j as f32 - center) * GRID_STEP)
        .collect())
}

fn check_bits(bits: u32) -> Result<(), TrellisQuantError> {
    if (2..=8).contains(&bits) {
        Ok(())
    } else {
        Err(TrellisQuantError::UnsupportedBits { bits })
    }
}

/// The tiling of one `[out, in]` weight at `bits` bits per weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrellisGeometry {
    pub out: usize,
    pub in_: usize,
    pub bits: u32,
    /// `TO = ceil(out / 16)`
    pub tiles_out: usize,
    /// `TI = ceil(in / 16)`
    pub tiles_in: usize,
}

impl TrellisGeometry {
    /// Check the bit count and that every size below fits in memory arithmetic.
    pub fn new(out: usize, in_: usize, bits: u32) -> Result<Self, TrellisQuantError> {
        check_bits(bits)?;
        if out == 0 || in_ == 0 {
            return Err(TrellisQuantError::Empty { out, in_ });
        }
        let g = Self {
            out,
            in_,
            bits,
            tiles_out: out.div_ceil(TILE),
            tiles_in: in_.div_ceil(TILE),
        };
        // Everything derived below must be computable without overflow.
        g.tiles_out
            .checked_mul(g.tiles_in)
            .and_then(|t| t.checked_mul(32 * bits as usize))
            .and_then(|n| n.checked_add(1))
            .and_then(|_| out.checked_mul(in_))
            .ok_or(TrellisQuantError::TooLarge { out, in_ })?;
        Ok(g)
    }

    /// Number of weights, `out * in`.
    pub fn elements(&self) -> usize {
        self.out * self.in_
    }

    /// Number of tiles, `TO * TI`.
    pub fn tiles(&self) -> usize {
        self.tiles_out * self.tiles_in
    }

    /// Bytes per tile: `32 * b`.
    pub fn tile_bytes(&self) -> usize {
        32 * self.bits as usize
    }

    /// Length of the bitstream without the header: `TO * TI * 32 * b`.
    pub fn stream_len(&self) -> usize {
        self.tiles() * self.tile_bytes()
    }

    /// Length of the indices tensor as stored: `1 + TO * TI * 32 * b`.
    pub fn packed_len(&self) -> usize {
        self.stream_len() + 1
    }

    /// Where the index of weight `(o, i)` lives in the packed tensor (header included).
    pub fn locate(&self, o: usize, i: usize) -> IndexLocation {
        let tile = (o / TILE) * self.tiles_in + i / TILE;
        let position = (o % TILE) * TILE + i % TILE;
        let bit_in_tile = position * self.bits as usize;
        IndexLocation {
            tile,
            position,
            bit_in_tile,
            byte: 1 + tile * self.tile_bytes() + bit_in_tile / 8,
            shift: (bit_in_tile % 8) as u32,
        }
    }

    /// Split a stored indices tensor into its bitstream, accepting the one-byte header form
    /// (`1 + TO*TI*32*b` bytes; the header must equal `bits`) and the headerless form already
    /// shaped `[TO, TI, 32*b]` (`TO*TI*32*b` bytes). The two lengths never coincide.
    pub fn stream<'a>(&self, indices: &'a [u8]) -> Result<&'a [u8], TrellisQuantError> {
        if indices.len() == self.stream_len() {
            return Ok(indices);
        }
        match indices.split_first() {
            Some((&header, rest)) if rest.len() == self.stream_len() => {
                if u32::from(header) == self.bits {
                    Ok(rest)
                } else {
                    Err(TrellisQuantError::HeaderMismatch {
                        header,
                        bits: self.bits,
                    })
                }
            }
            _ => Err(self.length_error(indices.len())),
        }
    }

    fn length_error(&self, got: usize) -> TrellisQuantError {
        TrellisQuantError::IndicesLength {
            out: self.out,
            in_: self.in_,
            bits: self.bits,
            tiles: self.tiles(),
            tile_bytes: self.tile_bytes(),
            expected: self.packed_len(),
            got,
        }
    }
}

/// Where one index sits in a packed indices tensor (see [`TrellisGeometry::locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLocation {
    /// Tile number `t = tile_out * TI + tile_in`.
    pub tile: usize,
    /// Position in the tile, `p = local_out * 16 + local_in`.
    pub position: usize,
    /// Bit offset inside the tile's bitstream, `p * b`.
    pub bit_in_tile: usize,
    /// Byte offset in the stored tensor, header byte included.
    pub byte: usize,
    /// Bit shift inside that byte (LSB first).
    pub shift: u32,
}

/// Unpack the codebook indices of a `[out, in]` weight into row-major order (`idx[o*in + i]`).
/// `indices` is the stored tensor, with or without its header byte.
pub fn unpack_indices(
    indices: &[u8],
    out: usize,
    in_: usize,
    bits: u32,
) -> Result<Vec<u8>, TrellisQuantError> {
    let geo = TrellisGeometry::new(out, in_, bits)?;
    let stream = geo.stream(indices)?;
    let mask = (1u16 << bits) - 1;
    let b = bits as usize;
    let mut idx = vec![0u8; geo.elements()];
    for (t, tile) in stream.chunks_exact(geo.tile_bytes()).enumerate() {
        let (tile_out, tile_in) = (t / geo.tiles_in, t % geo.tiles_in);
        for p in 0..TILE * TILE {
            let o = tile_out * TILE + p / TILE;
            let i = tile_in * TILE + p % TILE;
            if o >= out || i >= in_ {
                continue;
            }
            let bit = p * b;
            let (off, sh) = (bit / 8, bit % 8);
            // A tile is exactly 256*b bits, so `off + 1` exists whenever `sh + b > 8`.
            let lo = u16::from(tile.get(off).copied().unwrap_or(0));
            let hi = if sh + b > 8 {
                u16::from(tile.get(off + 1).copied().unwrap_or(0)) << 8
            } else {
                0
            };
            idx[o * in_ + i] = (((lo | hi) >> sh) & mask) as u8;
        }
    }
    Ok(idx)
}

/// Pack row-major indices (`idx[o*in + i]`, each `< 2^bits`) into the stored form: the header
/// byte, then the tiled LSB-first bitstream. Padded positions of edge tiles are written as 0.
pub fn pack_indices(
    idx: &[u8],
    out: usize,
    in_: usize,
    bits: u32,
) -> Result<Vec<u8>, TrellisQuantError> {
    let geo = TrellisGeometry::new(out, in_, bits)?;
    if idx.len() != geo.elements() {
        return Err(TrellisQuantError::PartLength {
            what: "indices",
            expected: geo.elements(),
            got: idx.len(),
        });
    }
    let mut packed = vec![0u8; geo.packed_len()];
    packed[0] = bits as u8;
    for o in 0..out {
        for i in 0..in_ {
            let v = idx[o * in_ + i];
            if u32::from(v) >> bits != 0 {
                return Err(TrellisQuantError::IndexOutOfGrid {
                    o,
                    i,
                    index: v,
                    bits,
                });
            }
            let loc = geo.locate(o, i);
            let wide = u16::from(v) << loc.shift;
            packed[loc.byte] |= wide as u8;
            if loc.shift + bits > 8 {
                packed[loc.byte + 1] |= (wide >> 8) as u8;
            }
        }
    }
    Ok(packed)
}

/// Scale groups of a `[out, in]` weight whose scales hold `scales_len` values: `G`, and the
/// group size `gs = ceil(in / G)`.
fn scale_groups(
    scales_len: usize,
    out: usize,
    in_: usize,
) -> Result<(usize, usize), TrellisQuantError> {
    if scales_len == 0 || scales_len % out != 0 {
        return Err(TrellisQuantError::ScalesNotGroups {
            out,
            got: scales_len,
        });
    }
    let groups = scales_len / out;
    Ok((groups, in_.div_ceil(groups)))
}

fn check_len(what: &'static str, got: usize, expected: usize) -> Result<(), TrellisQuantError> {
    if got == expected {
        Ok(())
    } else {
        Err(TrellisQuantError::PartLength {
            what,
            expected,
            got,
        })
    }
}

/// Decode a weight to f32, before the final f16 rounding: row-major `[out, in]`.
/// `scales` is `[G, out]` row-major, `su` is `[in]`, `sv` is `[out]`.
pub fn decode_weight_f32(
    indices: &[u8],
    scales: &[f32],
    su: &[f32],
    sv: &[f32],
    out: usize,
    in_: usize,
    bits: u32,
) -> Result<Vec<f32>, TrellisQuantError> {
    let geo = TrellisGeometry::new(out, in_, bits)?;
    check_len("su", su.len(), in_)?;
    check_len("sv", sv.len(), out)?;
    let (groups, group_size) = scale_groups(scales.len(), out, in_)?;
    // The length check inside unpack_indices bounds the allocation by the input size.
    let idx = unpack_indices(indices, out, in_, bits)?;
    let grid = trellis_grid(bits)?;
    let mut w = Vec::with_capacity(geo.elements());
    for o in 0..out {
        let row = &idx[o * in_..(o + 1) * in_];
        for (i, &q) in row.iter().enumerate() {
            let g = (i / group_size).min(groups - 1);
            let level = grid[usize::from(q)]; // q < 2^bits by the mask
            w.push(((level * scales[g * out + o]) * su[i]) * sv[o]);
        }
    }
    Ok(w)
}

/// Decode a weight exactly as the reference runtime does: f32 left to right, then rounded to
/// f16. Row-major `[out, in]`. No Hadamard transform is applied (see the module docs).
pub fn decode_weight(
    indices: &[u8],
    scales: &[f32],
    su: &[f32],
    sv: &[f32],
    out: usize,
    in_: usize,
    bits: u32,
) -> Result<Vec<f16>, TrellisQuantError> {
    let w = decode_weight_f32(indices, scales, su, sv, out, in_, bits)?;
    Ok(w.into_iter().map(f16::from_f32).collect())
}

/// The four stored parts of one quantized weight.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedWeight {
    /// Header byte + packed bitstream, `1 + TO*TI*32*b` bytes.
    pub indices: Vec<u8>,
    /// `[G, out]` row-major.
    pub scales: Vec<f32>,
    /// `[in]`, +1/-1.
    pub su: Vec<f32>,
    /// `[out]`, +1/-1.
    pub sv: Vec<f32>,
}

/// The reference quantizer (what "Making test models" in `trellis.md` reduces to):
/// `scales[g, o] = max|W[o, group g]| / max|grid_b|` (floored at 1e-8);
/// `T[o, i] = W[o, i] * su[i] * sv[o]`; `idx = argmin_j |T / scales[g, o] - grid_b[j]|` (first
/// index on ties, padding 0). `w` is row-major `[out, in]`; `su`/`sv` are the caller's random
/// signs; `groups` is `G` (in practice `ceil(in / 128)`).
pub fn quantize_weight(
    w: &[f32],
    out: usize,
    in_: usize,
    bits: u32,
    groups: usize,
    su: &[f32],
    sv: &[f32],
) -> Result<QuantizedWeight, TrellisQuantError> {
    let geo = TrellisGeometry::new(out, in_, bits)?;
    check_len("weights", w.len(), geo.elements())?;
    check_len("su", su.len(), in_)?;
    check_len("sv", sv.len(), out)?;
    let scales_len = groups
        .checked_mul(out)
        .ok_or(TrellisQuantError::TooLarge { out, in_ })?;
    let (groups, group_size) = scale_groups(scales_len, out, in_)?;
    let grid = trellis_grid(bits)?;
    let max_grid = grid.iter().fold(0f32, |m, g| m.max(g.abs()));
    let group_of = |i: usize| (i / group_size).min(groups - 1);

    let mut max_abs = vec![0f32; scales_len];
    for o in 0..out {
        for i in 0..in_ {
            let m = &mut max_abs[group_of(i) * out + o];
            *m = m.max(w[o * in_ + i].abs());
        }
    }
    let scales: Vec<f32> = max_abs.iter().map(|m| (m / max_grid).max(1e-8)).collect();

    let mut idx = vec![0u8; geo.elements()];
    for o in 0..out {
        for i in 0..in_ {
            let t = (w[o * in_ + i] * su[i]) * sv[o];
            let x = t / scales[group_of(i) * out + o];
            let mut best = (0usize, f32::INFINITY);
            for (j, g) in grid.iter().enumerate() {
                let d = (x - g).abs();
                if d < best.1 {
                    best = (j, d);
                }
            }
            idx[o * in_ + i] = best.0 as u8;
        }
    }
    Ok(QuantizedWeight {
        indices: pack_indices(&idx, out, in_, bits)?,
        scales,
        su: su.to_vec(),
        sv: sv.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_matches_the_guide() {
        assert_eq!(GRID_STEP, 1.243_710_9_f32);
        let g = trellis_grid(3).unwrap();
        let expect = [
            -4.352988,
            -3.1092772,
            -1.8655663,
            -0.62185544,
            0.62185544,
            1.8655663,
            3.1092772,
            4.352988,
        ];
        for (a, b) in g.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert_eq!(trellis_grid(8).unwrap().len(), 256);
        assert!(trellis_grid(1).is_err());
        assert!(trellis_grid(9).is_err());
    }

    #[test]
    fn worked_example_locations() {
        let geo = TrellisGeometry::new(16, 32, 3).unwrap();
        assert_eq!(geo.packed_len(), 193);
        let loc = geo.locate(9, 17);
        assert_eq!(
            (loc.tile, loc.position, loc.bit_in_tile, loc.byte, loc.shift),
            (1, 145, 435, 151, 3)
        );
    }

    #[test]
    fn pack_unpack_round_trip_every_width() {
        for bits in 2..=8u32 {
            for (out, in_) in [(16, 16), (17, 33), (5, 128), (40, 20)] {
                let n = out * in_;
                let idx: Vec<u8> = (0..n)
                    .map(|k| ((k * 7 + k / 3) % (1 << bits)) as u8)
                    .collect();
                let packed = pack_indices(&idx, out, in_, bits).unwrap();
                assert_eq!(packed[0] as u32, bits);
                assert_eq!(unpack_indices(&packed, out, in_, bits).unwrap(), idx);
                // Headerless form.
                assert_eq!(unpack_indices(&packed[1..], out, in_, bits).unwrap(), idx);
            }
        }
    }

    #[test]
    fn corrupt_inputs_are_errors() {
        let packed = pack_indices(&[1u8; 16 * 16], 16, 16, 2).unwrap();
        assert!(unpack_indices(&packed[..10], 16, 16, 2).is_err());
        let mut bad = packed.clone();
        bad[0] = 3;
        assert_eq!(
            unpack_indices(&bad, 16, 16, 2),
            Err(TrellisQuantError::HeaderMismatch { header: 3, bits: 2 })
        );
        assert!(unpack_indices(&packed, 0, 16, 2).is_err());
        assert!(unpack_indices(&packed, usize::MAX, usize::MAX, 2).is_err());
        assert!(decode_weight(&packed, &[1.0; 15], &[1.0; 16], &[1.0; 16], 16, 16, 2).is_err());
        assert!(decode_weight(&packed, &[], &[1.0; 16], &[1.0; 16], 16, 16, 2).is_err());
        assert!(decode_weight(&packed, &[1.0; 16], &[1.0; 15], &[1.0; 16], 16, 16, 2).is_err());
        assert!(pack_indices(&[4u8; 256], 16, 16, 2).is_err());
    }

    #[test]
    fn quantizer_error_is_bounded_for_a_square_weight() {
        let (out, in_) = (48, 256);
        let w: Vec<f32> = (0..out * in_)
            .map(|k| ((k as f32 * 0.37).sin() * 0.05) + if k % 97 == 0 { 0.2 } else { 0.0 })
            .collect();
        let su: Vec<f32> = (0..in_)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        let sv: Vec<f32> = (0..out)
            .map(|o| if o % 5 == 0 { -1.0 } else { 1.0 })
            .collect();
        for bits in 2..=8 {
            let q = quantize_weight(&w, out, in_, bits, 2, &su, &sv).unwrap();
            let d = decode_weight_f32(&q.indices, &q.scales, &su, &sv, out, in_, bits).unwrap();
            for o in 0..out {
                for i in 0..in_ {
                    let s = q.scales[(i / 128) * out + o];
                    let e = (d[o * in_ + i] - w[o * in_ + i]).abs();
                    assert!(
                        e <= MAX_ERROR_PER_SCALE * s,
                        "bits {bits} ({o},{i}): {e} > {s}"
                    );
                }
            }
        }
    }
}
