//! IQ1_M: 256 weights in thirty-two 8-weight grid rows of -1, 0, 1, each 16 weights with a
//! 3-bit scale, `x = (d * (2s + 1)) * (grid[q][j] + delta)` with `delta = +-1/8` per row. CPU
//! only, dequantize only.

use bytemuck::{Pod, Zeroable};

use crate::quant::block::{Block, Blocks};
use crate::quant::iquants::{iq1_row, IQ1S_DELTA, IQ1S_GRID};
use crate::quant::kquants::QK_K;
use crate::quant::{f16_bits_to_f32, GgmlType};

/// The registry entry.
pub const IQ1_M: Blocks<BlockIQ1M, QK_K> = Blocks::NEW;

/// Row `k` (weights `8k..8k + 8`): nibble `k % 2` of `qh[k / 2]` holds three high index bits
/// (row `qs[k] | high << 8` of [`IQ1S_GRID`]) and the sign of its `delta` (bit 3: negative).
/// `scales` is four little-endian u16: the 3-bit scale of weights `16t..16t + 16` at bits
/// `3 (t % 4)` of u16 `t / 4`, and the f16 block scale `d` in their top nibbles (u16 `i`'s
/// top nibble is bits `4i..4i + 4` of `d`).
#[derive(Copy, Clone, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ1M {
    pub qs: [u8; QK_K / 8],
    pub qh: [u8; QK_K / 16],
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIQ1M>() == 56);

impl BlockIQ1M {
    /// The four u16 of `scales`.
    fn scale_words(&self) -> [u16; 4] {
        std::array::from_fn(|i| u16::from_le_bytes([self.scales[2 * i], self.scales[2 * i + 1]]))
    }

    /// The f16 block scale, from the top nibbles of the scale words.
    pub fn d(&self) -> f32 {
        let sc = self.scale_words();
        let bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        f16_bits_to_f32(bits)
    }
}

impl Block<QK_K> for BlockIQ1M {
    const DTYPE: GgmlType = GgmlType::IQ1_M;
    /// The byte pair whose high byte holds `d`'s top nibble (bits 12..16 of the last scale
    /// word), so that clearing bit 6 of it clears `d`'s top exponent bit.
    const SCALE_FIELDS: &'static [usize] = &[std::mem::offset_of!(BlockIQ1M, scales) + 6];

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d();
        let sc = self.scale_words();
        for (k, row) in out.chunks_exact_mut(8).enumerate() {
            let t = k / 2;
            let dl = d * f32::from(2 * ((sc[t / 4] >> (3 * (t % 4))) & 7) + 1);
            let h = self.qh[k / 2] >> (4 * (k % 2));
            let index = usize::from(self.qs[k]) | (usize::from(h & 7) << 8);
            let delta = if h & 8 == 0 { IQ1S_DELTA } else { -IQ1S_DELTA };
            iq1_row(dl, IQ1S_GRID[index], delta, row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Dtype;

    /// `d` is spread over four nibbles; taming clears its top exponent bit all the same.
    #[test]
    fn tame_bounds_the_spread_scale() {
        for top in 0..=255u8 {
            let mut bytes = [0xffu8; 56];
            bytes[55] = top;
            IQ1_M.tame(&mut bytes);
            let block: &BlockIQ1M = bytemuck::from_bytes(&bytes);
            assert!(block.d().abs() < 2.0, "{top:#04x}: {}", block.d());
        }
    }
}
