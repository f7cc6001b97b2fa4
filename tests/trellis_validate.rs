//! Trellis validation: the valid fixtures pass, one broken fixture per check (each exactly
//! one error naming its file and tensor), unsafe shard names refused before any open, warnings,
//! v2 checks, and corrupted files that never panic.

use std::cell::RefCell;

use half::f16;
use serde_json::json;
use tritium::formats::safetensors::Dtype;
use tritium::formats::source::MemoryFiles;
use tritium::formats::trellis::{dequantize_tensor, describe, validate, TrellisError};

#[path = "fixtures/trellis/common.rs"]
mod common;

use common::*;

#[path = "fixtures/recording.rs"]
mod recording;

use recording::Recording;

// ---------------------------------------------------------------- validation

#[test]
fn the_valid_fixtures_pass() {
    for (files, format) in [(v3(), "Trellis v3"), (v2(), "Trellis v2")] {
        let report = validate(&files);
        assert_eq!(report.format.as_deref(), Some(format));
        assert!(report.issues.is_empty(), "{format}: {:?}", report.issues);
        assert_eq!(report.quantized_weights, 7);
        assert_eq!(report.plain_tensors, 2);
    }
}

/// Validate a mutated copy of the v3 fixture: exactly one error, containing every `needle`.
fn expect_one_error(what: &str, files: &MemoryFiles, needles: &[&str]) {
    let report = validate(files);
    let errors: Vec<&str> = report.errors().map(|i| i.message.as_str()).collect();
    assert_eq!(
        errors.len(),
        1,
        "{what}: expected one error, got {errors:#?}"
    );
    for n in needles {
        assert!(
            errors[0].contains(n),
            "{what}: {:?} does not mention {n:?}",
            errors[0]
        );
    }
}

fn mutated(f: impl FnOnce(&mut MemoryFiles)) -> MemoryFiles {
    let mut files = v3();
    f(&mut files);
    files
}

#[test]
fn shard_names_must_be_plain() {
    for bad in [
        "../evil.safetensors",
        "/etc/passwd",
        "sub/x.safetensors",
        "a\\b.safetensors",
        "x\0y",
        "..",
        "",
    ] {
        let files = mutated(|f| {
            edit_json(f, INDEX, |v| {
                v["weight_map"]["model.extra.weight"] = json!(bad)
            });
        });
        expect_one_error(
            bad,
            &files,
            &["model.extra.weight", "not a plain file name"],
        );
        let rec = Recording {
            inner: files,
            opened: RefCell::new(Vec::new()),
        };
        validate(&rec);
        assert!(
            rec.opened.borrow().iter().all(|p| p != bad),
            "{bad:?} was opened"
        );
    }
}

#[test]
fn one_broken_fixture_per_check() {
    type Mutation = Box<dyn FnOnce(&mut MemoryFiles)>;
    let cases: Vec<(&str, Mutation, Vec<&str>)> = vec![
        (
            "missing shard",
            Box::new(|f| {
                f.files.remove(SHARD2);
            }),
            vec![SHARD2, "does not exist"],
        ),
        (
            "mapped key absent from its shard",
            Box::new(|f| {
                edit_json(f, INDEX, |v| {
                    v["weight_map"]["model.extra.weight"] = json!(SHARD1)
                })
            }),
            vec![SHARD1, "model.extra.weight", "has no tensor"],
        ),
        (
            "orphan",
            Box::new(|f| {
                edit_json(f, INDEX, |v| {
                    v["weight_map"]
                        .as_object_mut()
                        .unwrap()
                        .remove("model.embed_tokens.weight");
                })
            }),
            vec![SHARD1, "model.embed_tokens.weight", "orphan"],
        ),
        (
            "missing part",
            Box::new(|f| {
                edit_shard(f, SHARD1, |ts| ts.retain(|t| t.name != Q_SV));
                edit_json(f, INDEX, |v| {
                    v["weight_map"].as_object_mut().unwrap().remove(Q_SV);
                });
            }),
            vec![Q_PROJ, "no sv tensor"],
        ),
        (
            "int16 indices",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_IDX, |t| {
                    t.dtype = Dtype::I16;
                    t.shape = vec![32 * 128];
                    t.data = vec![0; 32 * 128 * 2];
                })
            }),
            vec![SHARD1, Q_IDX, "int16", "retired Trellis v1"],
        ),
        (
            "other indices dtype",
            Box::new(|f| edit_tensor(f, SHARD1, Q_IDX, |t| t.dtype = Dtype::I8)),
            vec![Q_IDX, "dtype I8", "expected U8"],
        ),
        (
            "indices length",
            Box::new(|f| {
                // (Dropping exactly the header byte would leave a valid headerless tensor.)
                edit_tensor(f, SHARD1, Q_IDX, |t| {
                    t.data.truncate(1000);
                    t.shape = vec![1000];
                })
            }),
            vec![Q_IDX, "holds 1000 bytes", "1 + 2*8*32*2 = 1025"],
        ),
        (
            "header out of range",
            Box::new(|f| edit_tensor(f, SHARD1, Q_IDX, |t| t.data[0] = 9)),
            vec![Q_IDX, "header byte is 9", "2..8"],
        ),
        (
            "header differs from metadata",
            Box::new(|f| edit_tensor(f, SHARD1, Q_IDX, |t| t.data[0] = 3)),
            vec![
                Q_IDX,
                "header byte says 3 bits",
                "quantization_config.json says 2",
            ],
        ),
        (
            "metadata bits out of range",
            Box::new(|f| {
                edit_json(f, QCONF, |v| {
                    v["tensor_metadata"][Q_PROJ]["bits"] = json!(9)
                })
            }),
            vec![QCONF, Q_PROJ, "bits is 9"],
        ),
        (
            "scales dtype",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SCALES, |t| {
                    t.dtype = Dtype::F16;
                    t.data = f32s(&t.data)
                        .iter()
                        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                        .collect();
                })
            }),
            vec![Q_SCALES, "dtype F16", "expected F32"],
        ),
        (
            "scales shape",
            Box::new(|f| edit_tensor(f, SHARD1, Q_SCALES, |t| t.shape = vec![32])),
            vec![Q_SCALES, "shape [32]", "[G, 32]"],
        ),
        (
            "su shape",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SU, |t| {
                    t.data.extend(1f32.to_le_bytes());
                    t.shape = vec![129];
                })
            }),
            vec![Q_SU, "shape [129]", "expected [128]"],
        ),
        (
            "sv dtype",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SV, |t| {
                    t.dtype = Dtype::BF16;
                    t.data.truncate(t.data.len() / 2);
                })
            }),
            vec![Q_SV, "dtype BF16", "expected F32"],
        ),
        (
            "non-finite scale",
            Box::new(|f| {
                edit_tensor(f, SHARD1, Q_SCALES, |t| {
                    t.data[8..12].copy_from_slice(&f32::NAN.to_le_bytes())
                })
            }),
            vec![Q_SCALES, "non-finite scale", "element 2"],
        ),
        (
            "quantization_config.json missing",
            Box::new(|f| {
                f.files.remove(QCONF);
            }),
            vec![QCONF, "not found"],
        ),
        (
            "quantization_config.json unparsable",
            Box::new(|f| f.insert(QCONF, b"{\"tensor_metadata\": [".to_vec())),
            vec![QCONF, "invalid type"],
        ),
        (
            "quantization_config.json does not cover a weight",
            Box::new(|f| {
                edit_json(f, QCONF, |v| {
                    v["tensor_metadata"].as_object_mut().unwrap().remove(Q_PROJ);
                })
            }),
            vec![QCONF, "no entry for quantized weight", Q_PROJ],
        ),
        (
            "config.json missing",
            Box::new(|f| {
                f.files.remove("config.json");
            }),
            vec!["config.json", "not found"],
        ),
        (
            "config.json not an object",
            Box::new(|f| f.insert("config.json", b"[1, 2]".to_vec())),
            vec!["config.json", "not a JSON object"],
        ),
        (
            "config.json without model_type or architectures",
            Box::new(|f| f.insert("config.json", br#"{"hidden_size": 128}"#.to_vec())),
            vec!["config.json", "model_type", "architectures"],
        ),
        (
            "corrupt shard header",
            Box::new(|f| {
                let shard = f.files.get_mut(SHARD2).unwrap();
                let len = shard.len() as u64;
                shard[0..8].copy_from_slice(&len.to_le_bytes());
            }),
            vec![SHARD2, "runs past the end"],
        ),
    ];
    for (what, mutation, needles) in cases {
        let files = mutated(mutation);
        expect_one_error(what, &files, &needles);
    }
}

#[test]
fn odd_signs_are_a_warning_not_an_error() {
    let files = mutated(|f| {
        edit_tensor(f, SHARD1, Q_SU, |t| {
            t.data[4..8].copy_from_slice(&0.5f32.to_le_bytes())
        })
    });
    let report = validate(&files);
    assert!(report.is_valid(), "{:?}", report.issues);
    let warnings: Vec<_> = report.warnings().collect();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].message.contains(Q_SU) && warnings[0].message.contains("other than +1/-1"));
}

#[test]
fn v2_checks() {
    let mut files = v2();
    edit_json(&mut files, "layer_0001/index.json", |v| {
        v["format"] = json!("trellis_v9")
    });
    let report = validate(&files);
    let errors: Vec<_> = report.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.contains("layer_0001/index.json")
            && errors[0].message.contains("trellis_v2")
    );
}

#[test]
fn unrecognised_folders_are_one_error() {
    let mut files = MemoryFiles::new();
    files.insert("README.md", b"hi".to_vec());
    let report = validate(&files);
    assert_eq!(report.errors().count(), 1);
    assert!(matches!(describe(&files), Err(TrellisError::UnknownLayout)));
}

// ---------------------------------------------------------------- robustness

#[test]
fn corrupted_files_never_panic() {
    let base = v3();
    let paths: Vec<String> = base.files.keys().cloned().collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..300 {
        let mut files = base.clone();
        let path = &paths[(next() % paths.len() as u64) as usize];
        let bytes = files.files.get_mut(path).unwrap();
        match round % 3 {
            0 => {
                let cut = (next() % (bytes.len() as u64 + 1)) as usize;
                bytes.truncate(cut);
            }
            _ => {
                for _ in 0..1 + next() % 8 {
                    if bytes.is_empty() {
                        break;
                    }
                    let k = (next() % bytes.len() as u64) as usize;
                    bytes[k] = next() as u8;
                }
            }
        }
        let _ = validate(&files);
        let _ = describe(&files);
        let _ = dequantize_tensor(&files, Q_PROJ);
        let _ = dequantize_tensor(&files, "model.norm.weight");
    }
}
