//! The real `tritium` binary on RDRR folders that claim more than they hold, its peak memory
//! measured (tests/memory_support): a tensor of 128 GiB made of 131,072 spans that repeat one 1 MiB shard, and a
//! group that lists one tensor a million times. `inspect`, `validate`, `verify`, `convert`,
//! `dump` and `run` each end with a clear error or report (never a signal: an allocation
//! failure aborts), leave no `.part` file, hash only the bytes that exist, and stay within
//! [`memory_bound`] of the same command on a small valid model.
//!
//! The peak is the child's `ru_maxrss` from `wait4` (Linux). The children also run under an
//! address-space limit ([`memory_support::ADDRESS_SPACE_LIMIT`]), so that a regression fails here, cleanly,
//! instead of filling the machine's memory.

#![cfg(target_os = "linux")]

use std::io::Write;
use std::path::Path;

use tritium::formats::rdrr::{hash_hex, HashAlgorithm};
use tritium::formats::source::MemoryFiles;

#[path = "fixtures/rdrr/mod.rs"]
mod fixtures;
mod memory_support;

use memory_support::tritium;

use fixtures::written_model;

/// The most a command on a hostile folder may hold at its peak: what the same command holds on
/// a small valid model (the binary itself), plus the folder's own bytes (a command may read its
/// JSON files whole, and one tensor of at most a shard), plus 64 MiB for the structures the
/// manifest is read into (a `String` per group entry, a few words per span). Never a multiple
/// of what the manifest claims (here 128 GiB, or a million times a tensor).
fn memory_bound(baseline: u64, folder_bytes: u64) -> u64 {
    baseline + folder_bytes + (64 << 20)
}

/// Write the folder of [`fixtures::hostile_model`] into `dir` without holding it in memory
/// (the JSON written as it is made): one shard of 1 MiB of zeros, the tensor `big.weight` made
/// of `repeats` spans that each cover the whole shard, listed `group_repeats` times by its
/// group. Returns the folder's size.
fn write_hostile(dir: &Path, repeats: usize, group_repeats: usize) -> u64 {
    const SHARD: u64 = 1 << 20;
    std::fs::create_dir_all(dir).unwrap();
    let shard_hash = hash_hex(HashAlgorithm::Sha256, &vec![0u8; SHARD as usize]);
    let shard = std::fs::File::create(dir.join("shard_00000.bin")).unwrap();
    shard.set_len(SHARD).unwrap();
    let file = |name: &str| std::io::BufWriter::new(std::fs::File::create(dir.join(name)).unwrap());
    let mut m = file("manifest.json");
    write!(
        m,
        r#"{{"version": 1, "modelId": "hostile", "modelType": "transformer", "hashAlgorithm": "sha256",
"groups": {{"embed": {{"type": "embed", "version": "1.0.0", "shards": [0], "hash": "{}", "tensors": ["#,
        "0".repeat(64)
    )
    .unwrap();
    for i in 0..group_repeats {
        let sep = if i == 0 { "" } else { "," };
        write!(m, r#"{sep}"big.weight""#).unwrap();
    }
    write!(
        m,
        r#"]}}}}, "shards": [{{"index": 0, "fileName": "shard_00000.bin", "size": {SHARD}, "hash": "{shard_hash}"}}],
"tensorsFile": "tensors.json", "tensorCount": 1, "totalSize": {SHARD}}}"#
    )
    .unwrap();
    m.into_inner().unwrap();
    let size = SHARD * repeats as u64;
    let mut t = file("tensors.json");
    write!(
        t,
        r#"{{"big.weight": {{"group": "embed", "shard": 0, "offset": 0, "size": {size}, "shape": [{}], "dtype": "F32", "spans": ["#,
        size / 4
    )
    .unwrap();
    for i in 0..repeats {
        let sep = if i == 0 { "" } else { "," };
        write!(
            t,
            r#"{sep}{{"shardIndex": 0, "offset": 0, "size": {SHARD}}}"#
        )
        .unwrap();
    }
    write!(t, "]}}}}").unwrap();
    t.into_inner().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Write `files` into the folder `dir`; their total size.
fn write_folder(files: &MemoryFiles, dir: &Path) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let mut total = 0;
    for (name, bytes) in &files.files {
        std::fs::write(dir.join(name), bytes).unwrap();
        total += bytes.len() as u64;
    }
    total
}

const COMMANDS: [&str; 6] = ["inspect", "validate", "verify", "convert", "dump", "run"];

/// The arguments of `command` on the folder `dir` (outputs go next to it).
fn args(command: &str, dir: &Path, tensor: &str) -> Vec<String> {
    let d = dir.display().to_string();
    let out = |ext: &str| format!("{d}.{command}.{ext}");
    match command {
        "inspect" => vec!["inspect".into(), d, "--json".into()],
        "validate" | "verify" => vec![command.into(), d],
        "convert" => vec!["convert".into(), d.clone(), out("gguf")],
        "dump" => vec![
            "dump".into(),
            d.clone(),
            tensor.into(),
            "--output".into(),
            out("bin"),
        ],
        _ => vec![
            "run".into(),
            d,
            "--backend".into(),
            "cpu".into(),
            "--prompt".into(),
            "hi".into(),
        ],
    }
}

#[test]
fn hostile_folders_are_refused_within_a_memory_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let run = |command: &str, dir: &Path, tensor: &str| {
        let a = args(command, dir, tensor);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        tritium(&a, &store)
    };

    // The baseline: each command on a small valid model.
    let good = tmp.path().join("good");
    write_folder(&written_model(HashAlgorithm::Sha256).0, &good);
    let baseline: Vec<u64> = COMMANDS
        .iter()
        .map(|c| {
            let o = run(c, &good, "output.weight");
            assert_eq!(o.signal, None, "{c} on the good model: {}", o.text());
            o.peak
        })
        .collect();

    // 131,072 spans of one 1 MiB shard: a 128 GiB tensor. Then 1 MiB listed a million times.
    let folders = [
        ("spans", 131_072, 1, "share bytes"),
        ("group", 1, 1_000_000, "more than once"),
    ];
    for (name, repeats, group_repeats, problem) in folders {
        let dir = tmp.path().join(name);
        let bytes = write_hostile(&dir, repeats, group_repeats);
        for (c, &base) in COMMANDS.iter().zip(&baseline) {
            let o = run(c, &dir, "big.weight");
            let bound = memory_bound(base, bytes);
            eprintln!(
                "{name} {c}: peak {:.1} MiB (baseline {:.1} MiB, folder {:.1} MiB, bound {:.1} MiB)",
                o.peak as f64 / 1048576.0,
                base as f64 / 1048576.0,
                bytes as f64 / 1048576.0,
                bound as f64 / 1048576.0
            );
            assert_eq!(o.signal, None, "{name} {c}: {}", o.text());
            assert!(o.peak <= bound, "{name} {c}: peak {} > {bound}", o.peak);
            match *c {
                "validate" => {
                    assert_eq!(o.code, Some(1), "{}", o.text());
                    assert!(
                        o.stdout.contains("big.weight") && o.stdout.contains(problem),
                        "{}",
                        o.text()
                    );
                }
                "verify" => {
                    // Not verified, the problem named, and only the shard's real bytes hashed.
                    assert_eq!(o.code, Some(1), "{}", o.text());
                    assert!(
                        o.stdout.contains("FAILED")
                            && o.stdout.contains(problem)
                            && o.stdout.contains("1048576 bytes hashed"),
                        "{}",
                        o.text()
                    );
                }
                // The spans refused before anything is allocated or written.
                "convert" | "dump" | "run" if name == "spans" => {
                    assert_eq!(o.code, Some(1), "{}", o.text());
                    assert!(
                        o.stderr.contains("big.weight") && o.stderr.contains("share bytes"),
                        "{c}: {}",
                        o.text()
                    );
                }
                _ => {}
            }
        }
        // Nothing half-written is left next to the folder: no `.part`, no output.
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(name) && n != name)
            .collect();
        left.sort();
        if name == "spans" {
            assert!(left.is_empty(), "{left:?}");
        } else {
            // The tensor itself is fine (1 MiB, one span): dump writes it; convert finds no
            // GGUF metadata to write back.
            assert_eq!(left, ["group.dump.bin"]);
        }
    }
}
