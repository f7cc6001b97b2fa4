//! RDRR verification (SHA-256 and BLAKE3, shard and group mismatches, missing shards) and
//! reading tensors with their ranges checked. Every fixture is built in memory
//! (`tests/fixtures/rdrr/mod.rs`).

use tritium::formats::rdrr::*;

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
