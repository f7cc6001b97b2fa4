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
        (
            TensorSize,
            t(|v| v["token_embd.weight"]["size"] = 4100.into()),
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
