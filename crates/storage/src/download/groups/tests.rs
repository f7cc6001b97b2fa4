//! Tests of the group checks: shards in order, last first and interleaved in odd-sized chunks,
//! with and without room for early bytes, repeats, read-backs and wrong bytes, over 0, 1 and 3
//! threads, for SHA-256 groups and BLAKE3 trees; and remote taps against a model of the
//! browser's hash worker.

use std::collections::BTreeMap;

use super::blake3_tree::Tree;
use super::taps::{Fed, GroupTaps, TapState};
use super::*;
use crate::download::hash_kind::HashKind;
use crate::formats::rdrr::{RdrrWriter, WriterOptions};
use crate::formats::source::MemoryFiles;
use crate::{MemoryStore, ShardWriter};

/// A model whose layer groups straddle shard boundaries.
fn model(alg: HashAlgorithm) -> (Manifest, MemoryFiles) {
    let mut files = MemoryFiles::new();
    let mut opts = WriterOptions::new("t");
    opts.hash_algorithm = alg;
    opts.shard_size = 3 * 4096;
    let mut w = RdrrWriter::new(opts).unwrap();
    for layer in 0..4u32 {
        for t in 0..2u32 {
            let data: Vec<u8> = (0..4000u32)
                .map(|i| (i * 31 + layer * 7 + t) as u8)
                .collect();
            w.add_tensor(
                &mut files,
                &format!("blk.{layer}.t{t}.weight"),
                "F32",
                &[1000],
                Some(&format!("layer.{layer}")),
                &data,
            )
            .unwrap();
        }
    }
    w.finish(&mut files).unwrap();
    (Manifest::load(&files).unwrap(), files)
}

async fn store_with(manifest: &Manifest, files: &MemoryFiles) -> MemoryStore {
    let store = MemoryStore::new();
    store.begin("m", "src").await.unwrap();
    for shard in &manifest.shards {
        let mut w = store.append("m", &shard.filename, true).await.unwrap();
        w.write(&files.files[&shard.filename]).await.unwrap();
    }
    store
}

async fn feed(checks: &GroupChecks, shard: usize, offset: u64, bytes: &[u8]) {
    ShardTap { checks, shard }
        .bytes(offset, &Bytes::copy_from_slice(bytes))
        .await
        .unwrap();
}

/// Group checks of `manifest` (BLAKE3 groups of 8000 bytes: trees of four 2 KiB blocks).
fn new_checks(manifest: &Manifest, threads: usize, budget: u64) -> GroupChecks {
    GroupChecks::with_tree_block(manifest, threads, None, budget, 2048).unwrap()
}

/// The browser's hash worker (js/hash-worker.js) for remote taps: each stream hashes the
/// bytes it is sent in turn and holds those sent ahead until the bytes before them are in.
struct AheadWorker {
    streams: Vec<(
        crate::formats::rdrr::StreamHasher,
        u64,
        BTreeMap<u64, Bytes>,
    )>,
}

impl AheadWorker {
    fn new(kinds: &[HashKind]) -> AheadWorker {
        let streams = kinds
            .iter()
            .map(|k| (k.hasher(), 0, BTreeMap::new()))
            .collect();
        AheadWorker { streams }
    }

    fn take(&mut self, fed: Fed) {
        for (stream, bytes) in fed.next {
            self.data(stream, None, bytes);
        }
        for (stream, at, bytes) in fed.ahead {
            self.data(stream, Some(at), bytes);
        }
    }

    fn data(&mut self, stream: usize, at: Option<u64>, bytes: Bytes) {
        let (hasher, next, held) = &mut self.streams[stream];
        match at {
            Some(at) if at != *next => {
                assert!(at > *next && !held.contains_key(&at), "bytes at {at} again");
                held.insert(at, bytes);
            }
            _ => {
                hasher.update(&bytes);
                *next += bytes.len() as u64;
                while let Some(b) = held.remove(next) {
                    hasher.update(&b);
                    *next += b.len() as u64;
                }
            }
        }
    }
}

/// Remote taps (early bytes sent ahead to the stream's worker, as in the browser): shards
/// interleaved in odd-sized chunks, as parallel fetches deliver them. With room for all
/// early bytes every SHA-256 group streams and the workers' digests are the groups'; with
/// room for one chunk some are read back, and the budget holds.
#[test]
fn early_bytes_sent_ahead_to_the_workers_stream_every_group() {
    let (manifest, files) = model(HashAlgorithm::Sha256);
    let total: u64 = manifest.shards.iter().map(|s| s.size).sum();
    for (budget, chunk) in [(total, 777usize), (total, 5000), (777, 777)] {
        let mut taps = GroupTaps::new(&manifest, budget, None).unwrap();
        taps.remote = true;
        let kinds = taps.kinds(HashAlgorithm::Sha256);
        let mut worker = AheadWorker::new(&kinds);
        let mut pos = vec![0usize; manifest.shards.len()];
        let mut sent_ahead = 0;
        loop {
            let mut any = false;
            // Last shard first in each round, so that later bytes run ahead.
            for (i, shard) in manifest.shards.iter().enumerate().rev() {
                let bytes = &files.files[&shard.filename];
                if pos[i] < bytes.len() {
                    let to = (pos[i] + chunk).min(bytes.len());
                    let data = Bytes::copy_from_slice(&bytes[pos[i]..to]);
                    let fed = taps.feed(i, pos[i] as u64, &data);
                    sent_ahead += fed.ahead.len();
                    worker.take(fed);
                    assert!(taps.held <= budget);
                    pos[i] = to;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        assert!(sent_ahead > 0, "budget {budget}: nothing ran ahead");
        let mut streamed = 0;
        for (tap, (hasher, next, held)) in taps.groups.iter().zip(worker.streams) {
            if tap.state == TapState::Done {
                streamed += 1;
                assert!(held.is_empty() && tap.sent.is_empty(), "{}", tap.id);
                assert_eq!(next, tap.segments.iter().map(|s| s.size).sum::<u64>());
                assert_eq!(hasher.finalize_hex(), tap.expected, "{}", tap.id);
            } else {
                assert_eq!(tap.state, TapState::ReadBack);
            }
        }
        if budget == total {
            assert_eq!(
                streamed,
                taps.groups.len(),
                "budget {budget}, chunk {chunk}"
            );
            assert_eq!(taps.held, 0);
        } else {
            assert!(streamed < taps.groups.len());
        }
    }
}

async fn orders(threads: usize, alg: HashAlgorithm) {
    let (manifest, files) = model(alg);
    assert!(manifest.shards.len() >= 3 && manifest.groups.len() >= 4);
    let store = store_with(&manifest, &files).await;
    let n = manifest.groups.len();
    // BLAKE3 groups are trees: no order needed, nothing read back but after a repeat.
    let tree = alg == HashAlgorithm::Blake3;
    let trees = |c: &GroupChecks| {
        c.taps
            .borrow()
            .groups
            .iter()
            .filter(|t| t.tree.is_some())
            .count()
    };

    // In order, in odd-sized chunks: every group hashed while streaming.
    let checks = new_checks(&manifest, threads, 0);
    assert_eq!(trees(&checks), if tree { n } else { 0 });
    for (i, shard) in manifest.shards.iter().enumerate() {
        let bytes = &files.files[&shard.filename];
        for (k, chunk) in bytes.chunks(777).enumerate() {
            feed(&checks, i, k as u64 * 777, chunk).await;
        }
    }
    let got = checks.check(&manifest, &store, "m", 4096).await.unwrap();
    assert_eq!(got, (n, 0, 0));

    // Last shard first, no room for early bytes: groups reaching into it are read back,
    // and still verify (trees: all streamed, no block held at the end).
    let checks = new_checks(&manifest, threads, 0);
    for i in (0..manifest.shards.len()).rev() {
        feed(&checks, i, 0, &files.files[&manifest.shards[i].filename]).await;
    }
    let tree_held: u64 = checks
        .taps
        .borrow()
        .groups
        .iter()
        .filter_map(|t| t.tree.as_ref())
        .map(Tree::held)
        .sum();
    assert_eq!(tree_held, 0);
    let (streamed, read_back, bytes) = checks.check(&manifest, &store, "m", 4096).await.unwrap();
    assert_eq!(streamed + read_back, n);
    if tree {
        assert_eq!((read_back, bytes), (0, 0));
    } else {
        assert!(read_back >= 1 && bytes > 0, "{read_back} {bytes}");
    }

    // Last shard first with room for the early bytes: every group streamed, none read back.
    let total: u64 = manifest.shards.iter().map(|s| s.size).sum();
    let checks = new_checks(&manifest, threads, total);
    for i in (0..manifest.shards.len()).rev() {
        feed(&checks, i, 0, &files.files[&manifest.shards[i].filename]).await;
    }
    assert_eq!(checks.taps.borrow().held, 0);
    let got = checks.check(&manifest, &store, "m", 4096).await.unwrap();
    assert_eq!(got, (n, 0, 0));

    // Shards interleaved in odd-sized chunks, as parallel fetches deliver them: with room
    // for one chunk only, groups are read back; with room for them all, none; all verify.
    for budget in [777u64, total] {
        let checks = new_checks(&manifest, threads, budget);
        let mut pos = vec![0usize; manifest.shards.len()];
        loop {
            let mut any = false;
            for (i, shard) in manifest.shards.iter().enumerate() {
                let bytes = &files.files[&shard.filename];
                if pos[i] < bytes.len() {
                    let to = (pos[i] + 777).min(bytes.len());
                    feed(&checks, i, pos[i] as u64, &bytes[pos[i]..to]).await;
                    pos[i] = to;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        assert!(checks.taps.borrow().held <= budget);
        let (streamed, read_back, _) = checks.check(&manifest, &store, "m", 4096).await.unwrap();
        assert_eq!(streamed + read_back, n);
        if budget == total || tree {
            assert_eq!(read_back, 0, "budget {budget}");
        } else {
            assert!(read_back >= 1, "budget {budget}");
        }
    }

    // Bytes of a group that has moved on, again (a repeat; here layer 1's first tensor, at
    // the end of shard 0): the group is read back, and verifies.
    let checks = new_checks(&manifest, threads, total);
    let shard0 = &files.files[&manifest.shards[0].filename];
    feed(&checks, 0, 0, shard0).await;
    feed(&checks, 0, 8192, &shard0[8192..]).await;
    for i in 1..manifest.shards.len() {
        feed(&checks, i, 0, &files.files[&manifest.shards[i].filename]).await;
    }
    let (streamed, read_back, _) = checks.check(&manifest, &store, "m", 4096).await.unwrap();
    assert_eq!(streamed + read_back, n);
    assert!(read_back >= 1);

    // Every group read back (its shards verified by an earlier run), in turns of 1000
    // bytes over the threads: all verify; with one stored byte of the last group wrong, that
    // group fails and names itself.
    let every = |checks: &GroupChecks| {
        for i in 0..manifest.shards.len() {
            checks.void_shard(i);
        }
    };
    let checks = new_checks(&manifest, threads, total);
    every(&checks);
    let got = checks.check(&manifest, &store, "m", 1000).await.unwrap();
    let taps = GroupTaps::new(&manifest, 0, None).unwrap();
    let all: u64 = taps
        .groups
        .iter()
        .flat_map(|g| &g.segments)
        .map(|s| s.size)
        .sum();
    assert_eq!(got, (0, n, all));
    let last = taps.groups.last().unwrap();
    let span = *last.segments.last().unwrap();
    let mut bad = MemoryFiles::new();
    for shard in &manifest.shards {
        let mut bytes = files.files[&shard.filename].clone();
        if manifest.shards[span.shard].filename == shard.filename {
            bytes[(span.offset + span.size - 1) as usize] ^= 1;
        }
        bad.files.insert(shard.filename.clone(), bytes);
    }
    let bad_store = store_with(&manifest, &bad).await;
    let checks = new_checks(&manifest, threads, total);
    every(&checks);
    match checks.check(&manifest, &bad_store, "m", 1000).await {
        Err(DownloadError::GroupMismatch { group, .. }) => assert_eq!(group, last.id),
        other => panic!("{other:?}"),
    }

    // Wrong bytes streamed for a group are caught (here: shard 0 fed shard 1's bytes).
    let checks = new_checks(&manifest, threads, total);
    feed(&checks, 0, 0, &files.files[&manifest.shards[1].filename]).await;
    let err = checks.check(&manifest, &store, "m", 4096).await;
    assert!(
        matches!(err, Err(DownloadError::GroupMismatch { .. })),
        "{err:?}"
    );
}

#[test]
fn in_order_streams_hash_every_group_and_out_of_order_reads_back() {
    // Inline, one thread, and groups dealt over three threads (digests dealt back in order).
    for alg in [HashAlgorithm::Sha256, HashAlgorithm::Blake3] {
        pollster::block_on(orders(0, alg));
        pollster::block_on(orders(1, alg));
        pollster::block_on(orders(3, alg));
    }
}

/// A browser worker's side of a shard (see `local.rs`): the streams lying in the shard hashed
/// there from the shard's bytes (possibly changed by `alter`), only the wanted bytes sent to
/// the download, in odd-sized chunks; the bytes sent.
async fn as_worker(
    checks: &GroupChecks,
    shard: usize,
    bytes: &[u8],
    alter: impl Fn(&mut Vec<u8>),
) -> (usize, u64) {
    use crate::download::local::{merge, within, LocalHashes};
    let tap = ShardTap { checks, shard };
    let (local, wanted) = tap.take_local().unwrap();
    let count = local.len();
    let mut hashes = LocalHashes::new(local).unwrap();
    let wanted = merge(wanted);
    let mut hashed = bytes.to_vec();
    alter(&mut hashed);
    let mut sent = 0;
    for (k, chunk) in hashed.chunks(777).enumerate() {
        let off = k as u64 * 777;
        hashes.feed(off, chunk);
        for r in within(&wanted, off, chunk.len()) {
            sent += r.len() as u64;
            tap.bytes(off + r.start as u64, &Bytes::copy_from_slice(&chunk[r]))
                .await
                .unwrap();
        }
    }
    tap.local_done(hashes.finish());
    (count, sent)
}

async fn workers(alg: HashAlgorithm, threads: usize) {
    let (manifest, files) = model(alg);
    let store = store_with(&manifest, &files).await;
    let n = manifest.groups.len();
    let total: u64 = manifest.shards.iter().map(|s| s.size).sum();
    let shard_bytes = |i: usize| files.files[&manifest.shards[i].filename].clone();
    let count = manifest.shards.len();
    // In order and last shard first: the streams inside a shard hashed by its worker, the
    // rest sent; every group verifies, none read back, and fewer bytes come back than the
    // shards hold.
    for order in [(0..count).collect::<Vec<_>>(), (0..count).rev().collect()] {
        let checks = new_checks(&manifest, threads, total);
        let (mut local, mut sent) = (0, 0);
        for &i in &order {
            let (l, s) = as_worker(&checks, i, &shard_bytes(i), |_| {}).await;
            local += l;
            sent += s;
        }
        assert!(local >= 2, "{alg:?}: {local} local streams");
        assert!(
            sent < total * 3 / 4,
            "{alg:?}: {sent} of {total} bytes sent"
        );
        let got = checks.check(&manifest, &store, "m", 4096).await.unwrap();
        assert_eq!(got, (n, 0, 0), "{alg:?} {order:?}");
    }

    // A wrong byte hashed by a worker (the first tensor, layer.0's, local in every layout
    // here): that group fails.
    let checks = new_checks(&manifest, threads, total);
    for i in 0..count {
        as_worker(&checks, i, &shard_bytes(i), |b| {
            if i == 0 {
                b[10] ^= 1;
            }
        })
        .await;
    }
    match checks.check(&manifest, &store, "m", 4096).await {
        Err(DownloadError::GroupMismatch { group, .. }) => assert_eq!(group, "layer.0"),
        other => panic!("{alg:?}: {other:?}"),
    }

    // Shard 0 starts over after some bytes (the worker voids what it sent and its local
    // streams): its groups are read back, and everything verifies.
    let checks = new_checks(&manifest, threads, total);
    {
        let tap = ShardTap {
            checks: &checks,
            shard: 0,
        };
        let (local, wanted) = tap.take_local().unwrap();
        assert!(!local.is_empty());
        let wanted = crate::download::local::merge(wanted);
        let b = shard_bytes(0);
        for r in crate::download::local::within(&wanted, 0, 5000) {
            tap.bytes(r.start as u64, &Bytes::copy_from_slice(&b[r]))
                .await
                .unwrap();
        }
        tap.void();
    }
    for i in 1..count {
        as_worker(&checks, i, &shard_bytes(i), |_| {}).await;
    }
    let (streamed, read_back, bytes) = checks.check(&manifest, &store, "m", 4096).await.unwrap();
    assert_eq!(streamed + read_back, n);
    assert!(read_back >= 1 && bytes > 0, "{alg:?}: {read_back} {bytes}");
}

#[test]
fn workers_hash_the_streams_inside_their_shard() {
    for alg in [HashAlgorithm::Sha256, HashAlgorithm::Blake3] {
        pollster::block_on(workers(alg, 0));
        pollster::block_on(workers(alg, 3));
    }
}
