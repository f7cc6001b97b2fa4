//! CPU dequantization against gguf-py 0.19, in this crate's own tests: every case of the
//! goldens `tests/goldens/gen_quant_goldens.py` wrote (committed under the workspace's
//! `tests/goldens/quant/`). The tolerance is none: each f32 must have gguf-py's bit pattern.
//! (The workspace's `tests/quant_goldens.rs` checks the same files and also the quantizers; this
//! test keeps the dequantizers checked where only `tritium-core` is built.) The IQ types' goldens
//! use every row of their grids, so this also checks `iq_grids.rs` against gguf-py's tables.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use tritium_core::quant::{dequantize, dequantize_rows, GgmlType, QuantError};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/goldens/quant")
}

fn read_f32(name: &str) -> Vec<f32> {
    let b = std::fs::read(golden_dir().join(name)).unwrap();
    assert_eq!(b.len() % 4, 0, "{name}");
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// (dtype, quantized bytes, gguf-py's values) of every golden case.
fn cases() -> Vec<(GgmlType, Vec<u8>, Vec<f32>)> {
    let text = std::fs::read_to_string(golden_dir().join("index.json")).unwrap();
    let index: Value = serde_json::from_str(&text).unwrap();
    index["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let dtype = GgmlType::from_name(c["dtype"].as_str().unwrap()).unwrap();
            assert_eq!(u64::from(dtype.id()), c["type_id"].as_u64().unwrap());
            let q = std::fs::read(golden_dir().join(c["quantized"].as_str().unwrap())).unwrap();
            let y = read_f32(c["dequantized"].as_str().unwrap());
            assert_eq!(y.len() as u64, c["n_elements"].as_u64().unwrap());
            (dtype, q, y)
        })
        .collect()
}

/// Exact: every value has gguf-py's f32 bits (the goldens hold no NaN for these types).
#[test]
fn dequantize_is_bit_identical_to_gguf_py() {
    let mut compared = BTreeMap::new();
    for (dtype, q, want) in cases() {
        let got = dequantize(dtype, &q, want.len()).unwrap();
        let mut rows = vec![0f32; want.len()];
        dequantize_rows(dtype, &q, &mut rows).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{dtype} element {i} (block {}): got {g} ({:#010x}), gguf-py {w} ({:#010x})",
                i / dtype.block().map_or(1, |b| b.block_elems as usize),
                g.to_bits(),
                w.to_bits()
            );
        }
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            rows.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        *compared.entry(dtype).or_insert(0usize) += want.len();
    }
    println!("values compared: {compared:?}");
    // The types added to the CPU reference after the first goldens; each must have a case (and
    // every golden's type must dequantize: the unwrap above).
    for t in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::MXFP4,
    ] {
        assert!(
            compared.get(&t).is_some_and(|&n| n > 0),
            "no golden for {t}"
        );
    }
}

/// Partial blocks and wrong byte lengths are errors.
#[test]
fn malformed_sizes_are_errors() {
    for (dtype, q, want) in cases() {
        let Some(g) = dtype.block() else { continue };
        if g.block_elems == 1 {
            continue;
        }
        let n = want.len();
        assert!(matches!(
            dequantize(dtype, &q[..q.len() - 1], n),
            Err(QuantError::SizeMismatch { .. })
        ));
        assert!(matches!(
            dequantize(dtype, &q, n - 1),
            Err(QuantError::PartialBlock { .. })
        ));
        let mut out = vec![0f32; n + 1];
        assert!(dequantize_rows(dtype, &q, &mut out).is_err(), "{dtype}");
    }
}
