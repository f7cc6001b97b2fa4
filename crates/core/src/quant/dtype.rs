//! GGML tensor types: ids as written in GGUF files, block geometry and byte sizes.

use std::fmt;

/// Every GGML tensor type we can name, by its GGUF id.
///
/// Ids 4 and 5 (Q4_2, Q4_3) and 31..=33 (Q4_0_4_4 and friends) were retired upstream and are
/// refused. Id 36 is `I2_S` as written by the BitNet fork of llama.cpp (upstream retired 36);
/// 38 is the fork's `TL1`; 39 is upstream's `MXFP4` (the fork reused 39 for `TL2`, which we refuse).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    /// BitNet's ternary type (id 36 in the BitNet fork): 2 bits per weight, 128-weight blocks,
    /// one f32 scale per tensor after the packed weights.
    I2_S,
    /// The BitNet fork's lookup-table layout for ARM (id 38); its layout is kernel-specific.
    TL1,
    MXFP4,
    /// NVIDIA FP4 (upstream id 40): 64 weights in 36 bytes.
    NVFP4,
    /// 1-bit weights (upstream id 41): 128 weights in 18 bytes.
    Q1_0,
}

/// How a type's elements are packed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BlockGeometry {
    /// Elements per block.
    pub block_elems: u64,
    /// Bytes per block.
    pub block_bytes: u64,
}

impl GgmlType {
    /// All types, in id order.
    pub const ALL: [GgmlType; 36] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_XS,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::IQ1_M,
        GgmlType::BF16,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::I2_S,
        GgmlType::TL1,
        GgmlType::MXFP4,
        GgmlType::NVFP4,
        GgmlType::Q1_0,
    ];

    /// The type with GGUF id `id`, if there is one.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        Self::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            IQ1_M => 29,
            BF16 => 30,
            TQ1_0 => 34,
            TQ2_0 => 35,
            I2_S => 36,
            TL1 => 38,
            MXFP4 => 39,
            NVFP4 => 40,
            Q1_0 => 41,
        }
    }

    /// The name ggml and gguf-py use (`Q4_K`, `BF16`, ...).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            I2_S => "I2_S",
            TL1 => "TL1",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
        }
    }

    /// The type named `name` (case-insensitive), as [`GgmlType::name`] spells it.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Block geometry, or `None` for types whose byte size is not a whole number of blocks
    /// (I2_S, whose size is `n/4 + 32`) or is unknown (TL1).
    pub const fn block(self) -> Option<BlockGeometry> {
        use GgmlType::*;
        let (block_elems, block_bytes) = match self {
            F32 => (1, 4),
            F16 => (1, 2),
            BF16 => (1, 2),
            F64 => (1, 8),
            I8 => (1, 1),
            I16 => (1, 2),
            I32 => (1, 4),
            I64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            IQ4_NL => (32, 18),
            MXFP4 => (32, 17),
            NVFP4 => (64, 36),
            Q1_0 => (128, 18),
            Q2_K => (256, 84),
            Q3_K => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q6_K => (256, 210),
            Q8_K => (256, 292),
            IQ2_XXS => (256, 66),
            IQ2_XS => (256, 74),
            IQ3_XXS => (256, 98),
            IQ1_S => (256, 50),
            IQ3_S => (256, 110),
            IQ2_S => (256, 82),
            IQ4_XS => (256, 136),
            IQ1_M => (256, 56),
            TQ1_0 => (256, 54),
            TQ2_0 => (256, 66),
            I2_S | TL1 => return None,
        };
        Some(BlockGeometry {
            block_elems,
            block_bytes,
        })
    }

    /// The number of elements that must divide a row length (`ne[0]`).
    pub fn row_granularity(self) -> u64 {
        match self {
            // I2_S packs 128 weights per 32-byte block across the whole tensor.
            GgmlType::I2_S => 128,
            GgmlType::TL1 => 1,
            t => t.block().map_or(1, |b| b.block_elems),
        }
    }

    /// Bytes that `n_elements` of this type occupy, or `None` when the count is not a whole
    /// number of blocks, overflows, or the type's size is unknown.
    pub fn tensor_bytes(self, n_elements: u64) -> Option<u64> {
        match self {
            // Packed 2-bit codes, then 32 bytes holding the f32 weight scale (facts.md).
            GgmlType::I2_S => {
                if n_elements % 128 != 0 {
                    return None;
                }
                (n_elements / 4).checked_add(32)
            }
            GgmlType::TL1 => None,
            t => {
                let b = t.block()?;
                if n_elements % b.block_elems != 0 {
                    return None;
                }
                (n_elements / b.block_elems).checked_mul(b.block_bytes)
            }
        }
    }

    /// Bytes one row of `cols` elements occupies, without a per-tensor trailer (I2_S: the
    /// packed codes only), or `None` where the row is not a whole number of blocks.
    pub fn row_bytes(self, cols: u64) -> Option<u64> {
        match self {
            GgmlType::I2_S => (cols % 128 == 0).then_some(cols / 4),
            t => t.tensor_bytes(cols),
        }
    }

    /// Whether [`crate::quant::dequantize`] can turn this type into f32 (whether tritium runs
    /// it: the registry, [`crate::quant::dtypes`]).
    pub fn can_dequantize(self) -> bool {
        super::lookup(self).is_some()
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        for retired in [4, 5, 31, 32, 33, 37] {
            assert_eq!(GgmlType::from_id(retired), None);
        }
    }

    #[test]
    fn i2s_size_is_quarter_plus_scale() {
        assert_eq!(
            GgmlType::I2_S.tensor_bytes(2560 * 2560),
            Some(2560 * 2560 / 4 + 32)
        );
        assert_eq!(GgmlType::I2_S.tensor_bytes(100), None);
    }
}
