//! RDRR verification (SHA-256 and BLAKE3, shard and group mismatches, missing shards) and
//! reading tensors with their ranges checked. Every fixture is built in memory
//! (`tests/fixtures/rdrr/mod.rs`).

use tritium::formats::rdrr::*;
use tritium::formats::source::MemoryFiles;

#[path = "fixtures/rdrr/mod.rs"]
mod fixtures;

use fixtures::*;

#[test]
fn verify_passes_good_models_with_both_algorithms() {
    for alg in [HashAlgorithm::Sha256, HashAlgorithm::Blake3] {
        let (files, m) = written_model(alg);
        let mut calls = Vec::new();
        let mut progress = |p: &VerifyProgress<'_>| calls.push((p.stage, p.done, p.total));
        let opts = VerifyOptions {
            chunk_size: 1000,
            check_groups: true,
        };
        let r = verify_with(&m, &files, &opts, Some(&mut progress));
        assert!(r.is_ok(), "{:#?}", r.problems());
        assert_eq!(r.shards.len(), 5);
        assert_eq!(r.groups.len(), 3);
        assert!(r
            .groups
            .iter()
            .all(|g| g.status == VerifyStatus::Ok && g.algorithm == alg));
        let last_shard = calls.iter().rfind(|c| c.0 == VerifyStage::Shards).unwrap();
        assert_eq!(last_shard.1, last_shard.2);
        assert!(calls.iter().any(|c| c.0 == VerifyStage::Groups));

        // Group hashes are independent of our verifier: the tensors' bytes, in list order.
        for (id, g) in &m.groups {
            let mut concat = Vec::new();
            for t in &g.tensors {
                concat.extend(read_tensor(&m, &files, t).unwrap());
            }
            let expected = match alg {
                HashAlgorithm::Blake3 => blake3::hash(&concat).to_hex().to_string(),
                HashAlgorithm::Sha256 => hash_hex(HashAlgorithm::Sha256, &concat),
            };
            assert_eq!(g.hash.as_deref(), Some(expected.as_str()), "group {id}");
        }
        let shard0 = &files.files["shard_00000.bin"];
        assert_eq!(
            m.shards[0].hash.as_deref(),
            Some(hash_hex(alg, shard0).as_str())
        );
    }
}

#[test]
fn verify_finds_a_flipped_byte_in_a_named_shard() {
    for alg in [HashAlgorithm::Sha256, HashAlgorithm::Blake3] {
        let (good, m) = written_model(alg);
        let mut files = good.clone();
        // Byte 100 of shard 2: inside output.weight (group "head").
        files.files.get_mut("shard_00002.bin").unwrap()[100] ^= 0x40;
        let r = verify(&m, &files, None);
        assert!(!r.is_ok());
        let bad: Vec<_> = r
            .shards
            .iter()
            .filter(|s| s.status != VerifyStatus::Ok)
            .collect();
        assert_eq!(bad.len(), 1);
        assert_eq!((bad[0].index, bad[0].file.as_str()), (2, "shard_00002.bin"));
        assert_eq!(bad[0].status, VerifyStatus::Mismatch);
        assert_eq!(bad[0].expected, m.shards[2].hash);
        assert_eq!(
            bad[0].actual.as_deref(),
            Some(hash_hex(alg, &files.files["shard_00002.bin"]).as_str())
        );
        let msg = bad[0].message();
        assert!(
            msg.contains("shard 2 (shard_00002.bin)") && msg.contains("mismatch"),
            "{msg}"
        );
        assert_eq!(
            msg.contains("not standard"),
            alg == HashAlgorithm::Blake3,
            "{msg}"
        );
        let groups: Vec<_> = r
            .groups
            .iter()
            .filter(|g| g.status != VerifyStatus::Ok)
            .map(|g| g.id.as_str())
            .collect();
        assert_eq!(groups, ["head"]);
        assert_eq!(r.problems().len(), 2);

        // A flip in alignment padding breaks the shard hash but no group hash.
        let mut files = good.clone();
        files.files.get_mut("shard_00004.bin").unwrap()[4000] ^= 1;
        let r = verify(&m, &files, None);
        assert_eq!(r.shards[4].status, VerifyStatus::Mismatch);
        assert!(r.groups.iter().all(|g| g.status == VerifyStatus::Ok));
    }
}

#[test]
fn verify_finds_a_wrong_group_hash_and_missing_shards() {
    let (good, _) = written_model(HashAlgorithm::Sha256);
    let files = patch(&good, "manifest.json", |v| {
        v["groups"]["layer.0"]["hash"] = "ab".repeat(32).into()
    });
    let m = load(&files);
    let r = verify(&m, &files, None);
    assert!(r.shards.iter().all(|s| s.status == VerifyStatus::Ok));
    let bad: Vec<_> = r
        .groups
        .iter()
        .filter(|g| g.status != VerifyStatus::Ok)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(
        (bad[0].id.as_str(), bad[0].status.clone()),
        ("layer.0", VerifyStatus::Mismatch)
    );
    assert!(bad[0]
        .message()
        .contains(r#"group "layer.0": SHA-256 mismatch: expected abab"#));

    let mut missing = good.clone();
    missing.files.remove("shard_00003.bin");
    let m = load(&missing);
    let r = verify(&m, &missing, None);
    assert!(matches!(r.shards[3].status, VerifyStatus::Missing(_)));
    assert!(r
        .shards
        .iter()
        .enumerate()
        .all(|(i, s)| i == 3 || s.status == VerifyStatus::Ok));
    assert!(matches!(
        r.groups.iter().find(|g| g.id == "head").unwrap().status,
        VerifyStatus::Error(_)
    ));
    assert!(!r.is_ok());
    let opts = VerifyOptions {
        check_groups: false,
        ..VerifyOptions::default()
    };
    assert!(verify_with(&m, &missing, &opts, None).groups.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Reading

#[test]
fn read_tensor_checks_ranges() {
    let (good, m) = written_model(HashAlgorithm::Sha256);
    assert!(matches!(
        read_tensor(&m, &good, "nope"),
        Err(RdrrError::NoSuchTensor(_))
    ));
    let mut short = good.clone();
    short.files.get_mut("shard_00004.bin").unwrap().truncate(10);
    let err = read_tensor(&m, &short, "output_norm.weight").unwrap_err();
    assert!(
        matches!(
            err,
            RdrrError::TensorOutOfBounds {
                shard: 4,
                len: 10,
                ..
            }
        ),
        "{err}"
    );
    let huge = patch(&good, "tensors.json", |v| {
        v["output_norm.weight"]["size"] = u64::MAX.into();
        v["output_norm.weight"]["offset"] = 2.into();
    });
    let m = load(&huge);
    // 2^64 - 1 bytes are not what 64 F32 elements take: refused before the ranges are read.
    assert!(matches!(
        read_tensor(&m, &huge, "output_norm.weight"),
        Err(RdrrError::BadTensor { .. })
    ));
    let past = patch(&good, "tensors.json", |v| {
        v["output_norm.weight"]["offset"] = 8000.into();
    });
    let m = load(&past);
    assert!(matches!(
        read_tensor(&m, &past, "output_norm.weight"),
        Err(RdrrError::TensorOutOfBounds { .. })
    ));
    let far = patch(&good, "tensors.json", |v| {
        v["output_norm.weight"]["shard"] = 77.into()
    });
    let err = read_tensor(&load(&far), &far, "output_norm.weight").unwrap_err();
    assert!(
        matches!(
            err,
            RdrrError::NoSuchShard {
                shard: 77,
                count: 5,
                ..
            }
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Hostile input: verify runs every validation check, and hashes only the bytes that exist

/// Folders `validate` rejects are never "verified": a wrong `totalSize`, shard `offset` or
/// `index`, or a shard file of another length. The bytes hashed are the files' real bytes.
#[test]
fn verify_reports_what_validate_finds() {
    let (good, m) = written_model(HashAlgorithm::Sha256);
    let real: u64 = m
        .shards
        .iter()
        .map(|s| good.files[&s.filename].len() as u64)
        .sum();
    let r = verify(&m, &good, None);
    assert!(r.is_ok() && r.validation.is_empty());
    // Shards once, then the group tensors (which hold fewer bytes than the shards).
    let tensors: u64 = m.tensors.values().map(|t| t.size).sum();
    assert_eq!(r.bytes_hashed, real + tensors);

    let cases: Vec<(IssueKind, MemoryFiles)> = vec![
        (
            IssueKind::TotalSize,
            patch(&good, "manifest.json", |v| v["totalSize"] = 1.into()),
        ),
        (
            IssueKind::ShardOffset,
            patch(&good, "manifest.json", |v| {
                v["shards"][1]["offset"] = 7.into()
            }),
        ),
        (
            IssueKind::ShardIndex,
            patch(&good, "manifest.json", |v| {
                v["shards"][1]["index"] = 5.into()
            }),
        ),
        (
            IssueKind::ShardSize,
            patch(&good, "manifest.json", |v| {
                v["shards"][1]["size"] = 9000.into();
                v["totalSize"] = (m.total_size.unwrap() + 808).into();
            }),
        ),
    ];
    for (kind, files) in &cases {
        let m = load(files);
        let r = verify(&m, files, None);
        assert!(!r.is_ok(), "{kind:?} verified");
        assert!(
            r.validation.iter().any(|i| i.kind == *kind),
            "{kind:?}: {:#?}",
            r.validation
        );
        let problems = r.problems();
        assert_eq!(problems[0], r.validation[0].to_string());
        // The shard hashes themselves still match: hashed, and counted at their real length.
        assert!(r.shards.iter().all(|s| s.status == VerifyStatus::Ok));
        assert_eq!(r.bytes_hashed, real + tensors, "{kind:?}");
    }
}

/// Spans that repeat one shard 100,000 times (a 100 GB claim over 1 MiB) and a group listing
/// a tensor a million times: verify hashes the shard once and the groups not at all, so the
/// work is the shard's real bytes, not the manifest's claim.
#[test]
fn verify_hashes_each_byte_a_bounded_number_of_times() {
    for (repeats, group_repeats) in [(100_000, 1), (1, 1_000_000)] {
        let files = hostile_model(1 << 20, repeats, group_repeats);
        let m = load(&files);
        let r = verify(&m, &files, None);
        assert!(!r.is_ok());
        assert_eq!(r.bytes_hashed, 1 << 20);
        assert_eq!(r.shards[0].status, VerifyStatus::Ok);
        let kind = if repeats > 1 {
            IssueKind::SpanOverlap
        } else {
            IssueKind::DuplicateGroupTensor
        };
        assert!(
            r.validation.iter().all(|i| i.kind == kind),
            "{:#?}",
            r.validation
        );
        assert!(
            matches!(&r.groups[0].status, VerifyStatus::Error(why) if why.contains("not hashed")),
            "{:?}",
            r.groups[0].status
        );
    }
    // Two shards naming one file: the file is hashed once.
    let (good, _) = written_model(HashAlgorithm::Sha256);
    let files = patch(&good, "manifest.json", |v| {
        v["shards"][1]["fileName"] = "shard_00000.bin".into()
    });
    let m = load(&files);
    let r = verify(&m, &files, None);
    assert!(r
        .validation
        .iter()
        .any(|i| i.kind == IssueKind::DuplicateShardFile));
    assert!(matches!(&r.shards[1].status, VerifyStatus::Error(why) if why.contains("shard 0")));
}
