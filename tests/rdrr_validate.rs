//! RDRR validation: a good model has zero issues, one broken fixture per check, unsafe file
//! names are never opened, and no mutated manifest panics anything. Every fixture is built in
//! memory (`tests/fixtures/rdrr/mod.rs`).

use std::cell::RefCell;

use serde_json::{json, Value};
use tritium::formats::rdrr::*;
use tritium::formats::source::MemoryFiles;

#[path = "fixtures/rdrr/mod.rs"]
mod fixtures;

use fixtures::*;

// ---------------------------------------------------------------------------------------------
// Validation: one broken fixture per check

fn check(files: &MemoryFiles) -> ValidationReport {
    validate(&load(files), files)
}

#[test]
fn a_good_model_validates_with_zero_issues() {
    for alg in [HashAlgorithm::Sha256, HashAlgorithm::Blake3] {
        let (files, m) = written_model(alg);
        assert_eq!(m, load(&files));
        let report = validate(&m, &files);
        assert!(report.is_valid(), "{:#?}", report.issues);
        assert!(validate_manifest(&m).is_valid());
    }
}

#[test]
fn each_validation_check_has_a_broken_fixture() {
    let (good, _) = written_model(HashAlgorithm::Sha256);
    let m = |f: fn(&mut Value)| patch(&good, "manifest.json", f);
    let t = |f: fn(&mut Value)| patch(&good, "tensors.json", f);
    use IssueKind::*;
    let only: Vec<(IssueKind, MemoryFiles)> = vec![
        (
            Normalization,
            m(|v| v["shards"][0]["filename"] = "x.bin".into()),
        ),
        (
            Normalization,
            t(|v| v["output.weight"]["offset"] = 4096.into()),
        ),
        (ShardIndex, m(|v| v["shards"][1]["index"] = 5.into())),
        (ShardOffset, m(|v| v["shards"][1]["offset"] = 7.into())),
        (
            UnsafeFileName,
            m(|v| v["shards"][0]["fileName"] = "".into()),
        ),
        (
            UnsafeFileName,
            m(|v| v["tokenizer"] = json!({"type": "bpe", "file": "../tokenizer.json"})),
        ),
        (
            MissingHash,
            m(|v| {
                v["shards"][2].as_object_mut().unwrap().remove("hash");
            }),
        ),
        (
            MalformedHash,
            m(|v| v["shards"][2]["hash"] = "abc123".into()),
        ),
        (
            MalformedHash,
            m(|v| v["groups"]["head"]["hash"] = "z".repeat(64).into()),
        ),
        (
            MalformedHash,
            m(|v| v["blake3Full"] = "0".repeat(63).into()),
        ),
        (
            ShardOutOfRange,
            t(|v| v["token_embd.weight"]["shard"] = 99.into()),
        ),
        (
            ShardOutOfRange,
            m(|v| v["groups"]["embed"]["shards"] = json!([0, 99])),
        ),
        (
            TensorOutOfBounds,
            t(|v| v["blk.0.attn_norm.weight"]["offset"] = 8000.into()),
        ),
        (
            SpanSize,
            t(|v| v["output.weight"]["spans"][2]["size"] = 1.into()),
        ),
        (
            UnknownDtype,
            t(|v| v["output_norm.weight"]["dtype"] = "Q9_X".into()),
        ),
        // The bytes are those of 1024 F16 elements, not the 2048 the shape says.
        (
            TensorSize,
            t(|v| v["token_embd.weight"]["shape"] = json!([32, 32])),
        ),
        // Bytes 0..576 of shard 0 are token_embd.weight's too.
        (
            SpanOverlap,
            t(|v| v["blk.0.attn_q.weight"]["offset"] = 0.into()),
        ),
        (
            DuplicateGroupTensor,
            m(|v| {
                v["groups"]["head"]["tensors"] =
                    json!(["output.weight", "output_norm.weight", "output.weight"])
            }),
        ),
        (
            DuplicateGroupTensor,
            m(|v| v["groups"]["embed"]["tensors"] = json!(["token_embd.weight", "output.weight"])),
        ),
        (
            FileNameCollision,
            m(|v| v["extraFiles"] = json!([{"fileName": "shard_00000.bin", "size": 1}])),
        ),
        // Case-insensitive file systems hold one file for both names.
        (
            FileNameCollision,
            m(|v| v["extraFiles"] = json!([{"fileName": "Shard_00003.BIN", "size": 1}])),
        ),
        (
            FileNameCollision,
            m(|v| v["extraFiles"] = json!([{"fileName": "manifest.json", "size": 1}])),
        ),
        // 0 elements, but the other dimensions multiplied in another order pass 2^64.
        (
            TensorShape,
            t(|v| v["output_norm.weight"]["shape"] = json!([0, 1u64 << 40, 1u64 << 40])),
        ),
        (
            TensorShape,
            t(|v| v["output_norm.weight"]["shape"] = json!([0, u64::MAX])),
        ),
        (
            UnknownDtype,
            t(|v| v["output_norm.weight"]["dtype"] = "TL1".into()),
        ),
        (
            TensorShape,
            t(|v| {
                v["output_norm.weight"]["dtype"] = "Q8_0".into();
                v["output_norm.weight"]["shape"] = json!([33]);
            }),
        ),
        (
            TensorShape,
            t(|v| v["output_norm.weight"]["shape"] = json!([u64::MAX, 2])),
        ),
        (
            UnknownGroup,
            t(|v| v["output_norm.weight"]["group"] = "layer.9".into()),
        ),
        (
            UnknownTensor,
            m(|v| v["groups"]["head"]["tensors"] = json!(["output.weight", "ghost"])),
        ),
        (TensorCount, m(|v| v["tensorCount"] = 999.into())),
        (TotalSize, m(|v| v["totalSize"] = 1.into())),
        (
            MoeConfig,
            m(|v| v["moeConfig"]["numExpertsPerToken"] = 5.into()),
        ),
    ];
    for (kind, files) in &only {
        assert_only(&check(files), *kind);
    }

    // Shard files: missing, wrong length, duplicated.
    let mut missing = good.clone();
    missing.files.remove("shard_00002.bin");
    assert_only(&check(&missing), ShardMissing);
    let mut longer = good.clone();
    longer.files.get_mut("shard_00001.bin").unwrap().push(0);
    assert_only(&check(&longer), ShardSize);
    // A shorter file: its size is wrong and the tensor ending there lies past the real end.
    let mut shorter = good.clone();
    shorter.files.get_mut("shard_00004.bin").unwrap().pop();
    let r = check(&shorter);
    assert!(
        r.has(ShardSize) && r.has(TensorOutOfBounds),
        "{:#?}",
        r.issues
    );
    assert!(r
        .issues
        .iter()
        .any(|i| i.message.contains("past the end of the file")));
    let dup = m(|v| v["shards"][2]["fileName"] = "shard_00001.bin".into());
    assert!(check(&dup).has(DuplicateShardFile));
    let dup = m(|v| v["shards"][2]["fileName"] = "SHARD_00001.bin".into());
    assert!(check(&dup).has(DuplicateShardFile));
    // A shard named like the tensors file, or the tokenizer the loader falls back on: in one
    // folder, one of the two files would be written over by the other.
    for name in [
        "tensors.json",
        "tokenizer.json",
        "gguf_metadata.json",
        "manifest.json",
    ] {
        let r = check(&patch(&good, "manifest.json", |v| {
            v["shards"][0]["fileName"] = name.into()
        }));
        let hit = r
            .issues
            .iter()
            .find(|i| i.kind == FileNameCollision)
            .unwrap_or_else(|| panic!("{name}: {:#?}", r.issues));
        assert!(
            hit.subject == format!("shard 0 ({name})") && hit.message.contains(name),
            "{hit}"
        );
    }
    // The tokenizer listed in extraFiles (as `tritium convert` lists it) is one file, named
    // twice on purpose.
    let listed = m(|v| {
        v["tokenizer"] = json!({"type": "bpe", "file": "tokenizer.json"});
        v["extraFiles"] = json!([{"fileName": "tokenizer.json", "size": 2, "role": "tokenizer"}]);
    });
    assert!(!check(&listed).has(FileNameCollision));

    // Whole-manifest problems.
    let r = check(&m(|v| v["shards"] = json!([])));
    assert!(r.has(NoShards) && r.has(ShardOutOfRange), "{:#?}", r.issues);
    let empty = patch(&good, "tensors.json", |v| *v = json!({}));
    assert!(check(&empty).has(NoTensors));

    // Every issue names what it is about.
    let r = check(&t(|v| v["output_norm.weight"]["dtype"] = "Q9_X".into()));
    assert_eq!(
        r.issues[0].to_string(),
        r#"tensor "output_norm.weight": has unknown dtype "Q9_X""#
    );
    let r = check(&m(|v| v["shards"][1]["index"] = 5.into()));
    assert!(r.issues[0].subject.contains("shard 1 (shard_00001.bin)"));

    // All problems are collected, not just the first.
    let many = patch(&m(|v| v["totalSize"] = 1.into()), "tensors.json", |v| {
        v["output_norm.weight"]["dtype"] = "Q9_X".into();
        v["token_embd.weight"]["shard"] = 99.into();
    });
    let r = check(&many);
    assert!(
        r.has(TotalSize) && r.has(UnknownDtype) && r.has(ShardOutOfRange),
        "{:#?}",
        r.issues
    );
}

#[test]
fn unsafe_file_names_are_never_opened() {
    let (good, _) = written_model(HashAlgorithm::Sha256);
    for bad in [
        "../evil.bin",
        "/etc/passwd",
        "sub/shard.bin",
        "a\\b.bin",
        "C:evil.bin",
        "a\0b",
        "..",
        ".",
    ] {
        let files = patch(&good, "manifest.json", |v| {
            v["shards"][1]["fileName"] = bad.into()
        });
        let rec = Recording {
            inner: files,
            opened: RefCell::new(Vec::new()),
        };
        let m = Manifest::load(&rec).unwrap();
        assert_only(&validate(&m, &rec), IssueKind::UnsafeFileName);
        let v = verify(&m, &rec, None);
        assert!(
            matches!(v.shards[1].status, VerifyStatus::Error(_)),
            "{bad:?}"
        );
        assert!(matches!(
            read_tensor(&m, &rec, "blk.0.attn_norm.weight"),
            Err(RdrrError::UnsafeFileName { .. })
        ));
        assert!(
            rec.opened.borrow().iter().all(|p| p != bad),
            "{bad:?} was opened"
        );
    }
    for bad in ["../tensors.json", "/tmp/t.json", "x/tensors.json"] {
        let files = patch(&good, "manifest.json", |v| v["tensorsFile"] = bad.into());
        let rec = Recording {
            inner: files,
            opened: RefCell::new(Vec::new()),
        };
        let err = Manifest::load(&rec).unwrap_err();
        assert!(
            matches!(err, RdrrError::UnsafeFileName { ref field, .. } if field == "tensorsFile"),
            "{err}"
        );
        assert_eq!(*rec.opened.borrow(), ["manifest.json"]);
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile input

/// A tensor that claims 128 GiB made of one 1 MiB shard repeated 131,072 times: validation
/// names the overlap, and reading, checking the layout or converting it to GGUF is refused
/// before anything the size of the claim is allocated or written (were it allocated, this test
/// would abort).
#[test]
fn spans_that_repeat_a_shard_are_refused_before_allocating() {
    let files = hostile_model(1 << 20, 131_072, 1);
    let m = load(&files);
    assert_eq!(m.tensors["big.weight"].size, 128 << 30);
    let r = validate(&m, &files);
    assert_only(&r, IssueKind::SpanOverlap);
    // One issue for the tensor, not one per span.
    assert_eq!(r.issues.len(), 1, "{:#?}", r.issues);
    assert!(
        r.issues[0].subject.contains("big.weight") && r.issues[0].message.contains("span 0"),
        "{}",
        r.issues[0]
    );
    let err = read_tensor(&m, &files, "big.weight").unwrap_err();
    assert!(
        matches!(&err, RdrrError::BadTensor { name, message }
            if name == "big.weight" && message.contains("share bytes")),
        "{err}"
    );
    let err = check_layout(&m, &files).unwrap_err();
    assert!(
        err.to_string().contains("big.weight") && err.to_string().contains("1 problem"),
        "{err}"
    );
    let mut out = Vec::new();
    assert!(matches!(
        write_gguf(&m, &files, &mut out),
        Err(RdrrError::Layout { .. })
    ));
    assert!(out.is_empty());

    // Two spans that overlap by one byte are refused just the same.
    let files = patch(&hostile_model(4096, 2, 1), "tensors.json", |v| {
        v["big.weight"]["spans"] = json!([
            {"shardIndex": 0, "offset": 0, "size": 4096},
            {"shardIndex": 0, "offset": 4095, "size": 1},
        ]);
        v["big.weight"]["size"] = 4097.into();
        v["big.weight"]["shape"] = json!([4097]);
        v["big.weight"]["dtype"] = "I8".into();
    });
    let m = load(&files);
    assert_only(&validate(&m, &files), IssueKind::SpanOverlap);
    assert!(matches!(
        read_tensor(&m, &files, "big.weight"),
        Err(RdrrError::BadTensor { .. })
    ));
}

/// A tensor whose size agrees with its spans but not with its shape and dtype, and a shape
/// whose element count overflows: named by validation and refused by the reader.
#[test]
fn sizes_come_from_shapes_and_dtypes_with_checked_arithmetic() {
    let (good, _) = written_model(HashAlgorithm::Sha256);
    // output.weight: 20000 bytes in 3 spans, the shape says 10000 F32s (40000 bytes).
    let files = patch(&good, "tensors.json", |v| {
        v["output.weight"]["shape"] = json!([10000])
    });
    let m = load(&files);
    let r = validate(&m, &files);
    assert_only(&r, IssueKind::TensorSize);
    assert!(r.issues[0].message.contains("40000"), "{}", r.issues[0]);
    let err = read_tensor(&m, &files, "output.weight").unwrap_err();
    assert!(err.to_string().contains("40000"), "{err}");
    assert!(check_layout(&m, &files).is_err());
    for shape in [json!([u64::MAX, 2]), json!([0, 1u64 << 40, 1u64 << 40])] {
        let files = patch(&good, "tensors.json", |v| {
            v["output.weight"]["shape"] = shape.clone()
        });
        let m = load(&files);
        assert_only(&validate(&m, &files), IssueKind::TensorShape);
        assert!(matches!(
            read_tensor(&m, &files, "output.weight"),
            Err(RdrrError::BadTensor { .. })
        ));
    }
    // The good model passes the layout check.
    let m = load(&good);
    assert!(check_layout(&m, &good).is_ok());
}

/// A group that lists one tensor a million times: one issue, found without hashing.
#[test]
fn a_tensor_listed_a_million_times_is_one_issue() {
    let files = hostile_model(4096, 1, 1_000_000);
    let m = load(&files);
    let r = validate(&m, &files);
    assert_only(&r, IssueKind::DuplicateGroupTensor);
    assert_eq!(r.issues.len(), 1, "{:#?}", r.issues);
    assert_eq!(
        r.issues[0].to_string(),
        r#"group "embed": lists tensor "big.weight" more than once"#
    );
}

/// A small deterministic mutation fuzzer: no input may panic the parser, validator, reader
/// or verifier.
#[test]
fn mutated_manifests_never_panic() {
    let (good, _) = written_model(HashAlgorithm::Blake3);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let interesting: [&[u8]; 8] = [
        b"0",
        b"-1",
        b"18446744073709551615",
        b"1e400",
        b"null",
        b"\"../x\"",
        b"[]",
        b"{}",
    ];
    let mut parsed = 0;
    for round in 0..1500 {
        let mut files = good.clone();
        let target = if round % 2 == 0 {
            "manifest.json"
        } else {
            "tensors.json"
        };
        let data = files.files.get_mut(target).unwrap();
        for _ in 0..1 + next() % 4 {
            let at = (next() % data.len() as u64) as usize;
            match next() % 3 {
                0 => data[at] = next() as u8,
                1 => {
                    let word = interesting[(next() % 8) as usize];
                    let end = (at + word.len()).min(data.len());
                    data.splice(at..end, word.iter().copied());
                }
                _ => {
                    // Replace a digit run with a big or odd number.
                    if data[at].is_ascii_digit() {
                        data.splice(at..at + 1, b"4294967296".iter().copied());
                    }
                }
            }
        }
        if let Ok(m) = Manifest::load(&files) {
            parsed += 1;
            let _ = validate(&m, &files);
            let _ = describe(&m);
            for name in m.tensors.keys().take(3) {
                let _ = read_tensor(&m, &files, name);
            }
            let _ = verify(&m, &files, None);
        }
    }
    // Enough mutants parse for the validator, reader and verifier to see odd values.
    assert!(parsed > 150, "only {parsed} mutants parsed");
}
