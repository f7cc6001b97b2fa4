//! Downloads from a real HTTP server on loopback that misbehaves on purpose: dropped
//! connections, corrupt bytes, 404, 5xx, no Range support, escaping file names, a truncated
//! tensors.json, a full store, cancellation, mirrors, GGUF files. In every case: what was
//! verified stays verified (files and state), and an incomplete model is never listed or
//! resolved as complete.

mod delivery_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delivery_support::{model_files, shard_names, FaultServer, Faults};
use futures_util::future::{AbortHandle, Abortable};
use tritium::formats::gguf::{GgufWriter, Value};
use tritium::formats::rdrr::{hash_hex, verify, HashAlgorithm, Manifest};
use tritium::quant::GgmlType;
use tritium::storage::download::{
    download_gguf, download_rdrr, DownloadError, DownloadEvent, DownloadOptions, ReqwestClient,
    RetryPolicy,
};
use tritium::storage::{
    resolve_model, DirFiles, FsStore, MemoryStore, ModelKind, ShardStore, StoredModel,
};

fn options() -> DownloadOptions {
    DownloadOptions {
        parallel: 3,
        retry: RetryPolicy {
            attempts: 4,
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
        ..DownloadOptions::default()
    }
}

fn client() -> ReqwestClient {
    ReqwestClient::with_timeouts(Duration::from_secs(5), Duration::from_secs(5)).unwrap()
}

async fn pull<S: ShardStore>(
    store: &S,
    url: &str,
) -> Result<tritium::storage::download::DownloadSummary, DownloadError> {
    download_rdrr(store, &client(), url, "m", &options(), &|_| {}).await
}

struct Fixture {
    server: FaultServer,
    files: BTreeMap<String, Vec<u8>>,
    shards: Vec<String>,
    dir: tempfile::TempDir,
    store: FsStore,
}

async fn fixture(layers: u32) -> Fixture {
    let files = model_files(layers, 7);
    let shards = shard_names(&files);
    let server = FaultServer::start(files.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::new(dir.path());
    Fixture {
        server,
        files,
        shards,
        dir,
        store,
    }
}

impl Fixture {
    /// The model is complete: listed, resolvable, every file byte-identical, every hash OK.
    async fn assert_complete(&self) {
        let listed = self.store.list().await.unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        let StoredModel {
            name, kind, shards, ..
        } = &listed[0];
        assert_eq!(
            (name.as_str(), *kind, *shards),
            ("m", ModelKind::Rdrr, self.shards.len())
        );
        let path = resolve_model("m", Some(self.dir.path())).unwrap();
        assert_eq!(path, self.dir.path().join("models/m"));
        for (name, bytes) in &self.files {
            let got = std::fs::read(path.join(name)).unwrap();
            assert!(got == *bytes, "{name} differs");
        }
        let extra: Vec<String> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !self.files.contains_key(n))
            .collect();
        assert!(extra.is_empty(), "stray files {extra:?}");
        let dir = DirFiles::new(&path);
        let report = verify(&Manifest::load(&dir).unwrap(), &dir, None);
        assert!(report.is_ok(), "{:?}", report.problems());
        assert!(self.store.list_partial().await.unwrap().is_empty());
    }

    /// Not complete: not listed, not resolvable, but a partial download.
    async fn assert_incomplete(&self) -> BTreeMap<String, String> {
        assert!(self.store.list().await.unwrap().is_empty());
        assert!(self.store.get("m").await.unwrap().is_none());
        assert!(resolve_model("m", Some(self.dir.path())).is_err());
        assert!(!self.dir.path().join("models/m").exists());
        let partial = self.store.list_partial().await.unwrap();
        assert_eq!(partial.len(), 1);
        // Every verified file is there, whole and right.
        for (file, hash) in &partial[0].verified {
            let bytes = std::fs::read(self.dir.path().join("partial/m").join(file)).unwrap();
            assert!(bytes == self.files[file], "{file}");
            assert_eq!(*hash, hash_hex(HashAlgorithm::Sha256, &bytes));
        }
        partial[0].verified.clone()
    }

    fn shard_requests(&self) -> usize {
        self.server
            .log()
            .iter()
            .filter(|r| r.file.starts_with("shard_"))
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_download_is_complete_and_not_fetched_twice() {
    let f = fixture(12).await;
    assert!(f.shards.len() >= 5, "{}", f.shards.len());
    let last = std::sync::Mutex::new(None);
    let s = download_rdrr(
        &f.store,
        &client(),
        &f.server.url(),
        "m",
        &options(),
        &|e| {
            if let DownloadEvent::Progress(p) = e {
                *last.lock().unwrap() = Some(p.clone());
            }
        },
    )
    .await
    .unwrap();
    f.assert_complete().await;
    assert_eq!((s.fetched_files, s.reused_files), (f.shards.len(), 0));
    let shard_bytes: u64 = f.shards.iter().map(|s| f.files[s].len() as u64).sum();
    assert_eq!(s.fetched_bytes, shard_bytes);
    let last = last.into_inner().unwrap().unwrap();
    assert_eq!((last.done, last.total), (shard_bytes, shard_bytes));
    assert!(
        last.rate > 0.0 && last.eta == Some(Duration::ZERO),
        "{last:?}"
    );
    assert_eq!(last.files_total, f.shards.len());
    assert!(s.groups_checked >= 14, "{}", s.groups_checked);
    // Each shard requested once, whole.
    for shard in &f.shards {
        let r = f.server.requests(shard);
        assert_eq!(r.len(), 1, "{shard}: {r:?}");
        assert_eq!(r[0].range, None);
    }
    f.server.clear_log();
    let again = pull(&f.store, &f.server.url()).await.unwrap();
    assert!(again.already_present);
    assert!(f.server.log().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_resumes_with_range() {
    let f = fixture(8).await;
    let target = f.shards[1].clone();
    f.server.faults(|x| {
        x.drop_at.insert(target.clone(), vec![40_000, 50_000]);
    });
    // Hashing inline, as in the browser (the other tests hash on threads).
    let opts = DownloadOptions {
        hash_threads: false,
        ..options()
    };
    download_rdrr(&f.store, &client(), &f.server.url(), "m", &opts, &|_| {})
        .await
        .unwrap();
    f.assert_complete().await;
    let r = f.server.requests(&target);
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(r[0].range, None);
    // The retries asked for the rest only, from where the bytes stopped.
    assert_eq!(r[1].range.as_deref(), Some("bytes=40000-"));
    assert_eq!(r[2].range.as_deref(), Some("bytes=50000-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_bytes_once_are_fetched_again() {
    let f = fixture(8).await;
    let target = f.shards[2].clone();
    f.server.faults(|x| {
        x.corrupt.insert(target.clone(), 1);
    });
    let events = std::sync::Mutex::new(Vec::new());
    download_rdrr(
        &f.store,
        &client(),
        &f.server.url(),
        "m",
        &options(),
        &|e| {
            if let DownloadEvent::Restarting { file, reason } = e {
                events.lock().unwrap().push((file.clone(), reason.clone()));
            }
        },
    )
    .await
    .unwrap();
    f.assert_complete().await;
    assert_eq!(f.server.requests(&target).len(), 2);
    let events = events.into_inner().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].0 == target && events[0].1.contains("SHA-256 mismatch"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_corrupt_bytes_fail_naming_the_shard_and_both_hashes() {
    let f = fixture(8).await;
    let target = f.shards[2].clone();
    f.server.faults(|x| {
        x.corrupt.insert(target.clone(), u32::MAX);
    });
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    let msg = err.to_string();
    let manifest =
        Manifest::parse(&f.files["manifest.json"], Some(&f.files["tensors.json"])).unwrap();
    let expected = manifest.shards[2].hash.clone().unwrap();
    let mut bad = f.files[&target].clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x5a;
    let actual = hash_hex(HashAlgorithm::Sha256, &bad);
    assert!(msg.contains(&format!("shard 2 ({target})")), "{msg}");
    assert!(msg.contains(&expected) && msg.contains(&actual), "{msg}");
    assert_eq!(f.server.requests(&target).len(), 2);
    let verified = f.assert_incomplete().await;
    assert!(!verified.contains_key(&target));
    assert!(!f.dir.path().join("partial/m").join(&target).exists());

    // Fixed on the server: only that shard (and the small files) is fetched again.
    f.server.set_faults(Faults::default());
    f.server.clear_log();
    pull(&f.store, &f.server.url()).await.unwrap();
    f.assert_complete().await;
    for file in verified.keys() {
        assert!(f.server.requests(file).is_empty(), "{file} fetched again");
    }
    assert_eq!(f.server.requests(&target).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_shard_is_a_clear_error_that_is_not_retried() {
    let f = fixture(8).await;
    let target = f.shards[3].clone();
    f.server.faults(|x| {
        x.missing.insert(target.clone());
    });
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, DownloadError::Status { status: 404, .. }),
        "{err:?}"
    );
    assert!(
        msg.contains(&format!("{}{target}", f.server.url())),
        "{msg}"
    );
    assert_eq!(f.server.requests(&target).len(), 1);
    let verified = f.assert_incomplete().await;
    // The shards that were under way when it failed finished and stayed verified.
    assert!(!verified.is_empty());
    f.server.set_faults(Faults::default());
    f.server.clear_log();
    pull(&f.store, &f.server.url()).await.unwrap();
    f.assert_complete().await;
    for file in verified.keys() {
        assert!(f.server.requests(file).is_empty(), "{file} fetched again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_then_succeed() {
    let f = fixture(6).await;
    let target = f.shards[0].clone();
    f.server.faults(|x| {
        x.statuses.insert(target.clone(), vec![503, 500]);
        x.statuses.insert("manifest.json".into(), vec![502]);
    });
    pull(&f.store, &f.server.url()).await.unwrap();
    f.assert_complete().await;
    assert_eq!(f.server.requests(&target).len(), 3);
    assert_eq!(f.server.requests("manifest.json").len(), 2);

    // More failures in a row than the policy allows: a network error naming the URL.
    let f = fixture(6).await;
    f.server.faults(|x| {
        x.statuses.insert(f.shards[1].clone(), vec![503; 10]);
    });
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    assert!(
        matches!(err, DownloadError::Network { failures: 4, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&f.shards[1]));
    f.assert_incomplete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_range_support_restarts_cleanly() {
    let f = fixture(8).await;
    let target = f.shards[1].clone();
    f.server.faults(|x| {
        x.no_range = true;
        x.drop_at.insert(target.clone(), vec![50_000]);
    });
    let restarts = std::sync::Mutex::new(Vec::new());
    download_rdrr(
        &f.store,
        &client(),
        &f.server.url(),
        "m",
        &options(),
        &|e| {
            if let DownloadEvent::Restarting { reason, .. } = e {
                restarts.lock().unwrap().push(reason.clone());
            }
        },
    )
    .await
    .unwrap();
    f.assert_complete().await;
    let r = f.server.requests(&target);
    assert_eq!(r.len(), 2);
    assert!(r[1].range.is_some(), "the client asked for the rest: {r:?}");
    let restarts = restarts.into_inner().unwrap();
    assert_eq!(restarts.len(), 1);
    assert!(restarts[0].contains("Range"), "{restarts:?}");
}

/// Set a shard's file name under whichever spellings the manifest uses.
fn set_shard_name(m: &mut serde_json::Value, shard: usize, name: &str) {
    let entry = m["shards"][shard].as_object_mut().unwrap();
    for key in ["fileName", "filename"] {
        if entry.contains_key(key) {
            entry.insert(key.into(), name.into());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaping_file_names_are_refused_before_any_shard_request() {
    let f = fixture(4).await;
    let manifest: serde_json::Value = serde_json::from_slice(&f.files["manifest.json"]).unwrap();
    let cases: Vec<(&str, serde_json::Value)> = vec![
        ("shard ../", {
            let mut m = manifest.clone();
            set_shard_name(&mut m, 1, "../evil.bin");
            m
        }),
        ("shard absolute", {
            let mut m = manifest.clone();
            set_shard_name(&mut m, 0, "/tmp/evil.bin");
            m
        }),
        ("shard subfolder", {
            let mut m = manifest.clone();
            set_shard_name(&mut m, 0, "a/../../evil.bin");
            m
        }),
        ("tensorsFile", {
            let mut m = manifest.clone();
            m["tensorsFile"] = "../tensors.json".into();
            m
        }),
        ("tokenizer file", {
            let mut m = manifest.clone();
            m["tokenizer"] = serde_json::json!({"type": "bpe", "file": "../../.bashrc"});
            m
        }),
    ];
    for (what, m) in cases {
        f.server.clear_log();
        f.server
            .set_file("manifest.json", serde_json::to_vec(&m).unwrap());
        let err = pull(&f.store, &f.server.url()).await.unwrap_err();
        assert!(
            matches!(err, DownloadError::InvalidManifest { .. }),
            "{what}: {err:?}"
        );
        assert!(
            err.to_string().contains("not a plain file name"),
            "{what}: {err}"
        );
        let log: Vec<String> = f.server.log().into_iter().map(|r| r.file).collect();
        assert_eq!(log, ["manifest.json"], "{what}");
        assert!(f.store.list().await.unwrap().is_empty());
        assert!(!f.dir.path().join("evil.bin").exists());
        assert!(
            !f.dir.path().join("partial").exists(),
            "{what}: wrote something"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_tensors_json_is_a_clear_error() {
    let f = fixture(4).await;
    let t = &f.files["tensors.json"];
    f.server.faults(|x| {
        x.replace
            .insert("tensors.json".into(), t[..t.len() / 2].to_vec());
    });
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("tensors.json") && msg.contains("not valid JSON"),
        "{msg}"
    );
    assert_eq!(f.shard_requests(), 0);
    assert!(f.store.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_writes_nothing() {
    let f = fixture(6).await;
    let store = MemoryStore::with_quota(100_000);
    let err = pull(&store, &f.server.url()).await.unwrap_err();
    let DownloadError::Quota { needed, available } = err else {
        panic!("{err:?}");
    };
    let model: u64 = f.files.values().map(|b| b.len() as u64).sum();
    assert_eq!((needed, available), (model, 100_000));
    assert!(err_text(needed, available).contains("needs"));
    assert_eq!(store.bytes_used().await.unwrap(), 0);
    assert_eq!(f.shard_requests(), 0);
    assert!(store.list().await.unwrap().is_empty());
    // With room, the same store completes.
    let store = MemoryStore::with_quota(model);
    pull(&store, &f.server.url()).await.unwrap();
    assert_eq!(store.model_files("m").unwrap(), f.files);
}

fn err_text(needed: u64, available: u64) -> String {
    DownloadError::Quota { needed, available }.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_download_resumes() {
    let f = fixture(16).await;
    // Two at a time: shards 0 and 1 complete, 2 and 3 stall after 30000 bytes, and the
    // download is cancelled then (as Ctrl-C or an AbortSignal would).
    let size = |i: usize| f.files[&f.shards[i]].len() as u64;
    f.server.faults(|x| {
        x.stall_at.insert(f.shards[2].clone(), vec![30_000]);
        x.stall_at.insert(f.shards[3].clone(), vec![30_000]);
    });
    let (handle, registration) = AbortHandle::new_pair();
    let opts = DownloadOptions {
        parallel: 2,
        ..options()
    };
    let (http, url) = (client(), f.server.url());
    let cancel_at = size(0) + size(1) + 60_000;
    let on_event = |e: &DownloadEvent| {
        if let DownloadEvent::Progress(p) = e {
            if p.done >= cancel_at {
                handle.abort();
            }
        }
    };
    let run = download_rdrr(&f.store, &http, &url, "m", &opts, &on_event);
    let result = tokio::time::timeout(Duration::from_secs(20), Abortable::new(run, registration))
        .await
        .expect("cancelled in time");
    assert!(result.is_err(), "the download was not cancelled");
    let verified = f.assert_incomplete().await;
    assert_eq!(verified.len(), 2, "{verified:?}");
    assert!(verified.contains_key(&f.shards[0]) && verified.contains_key(&f.shards[1]));
    // Shards cut short by the cancellation, and how much of each is stored.
    let mut partial = Vec::new();
    for shard in &f.shards {
        let len = f.store.partial_len("m", shard).await.unwrap().unwrap_or(0);
        if !verified.contains_key(shard) && len > 0 && len < f.files[shard].len() as u64 {
            partial.push((shard.clone(), len));
        }
    }
    assert_eq!(
        partial,
        [(f.shards[2].clone(), 30_000), (f.shards[3].clone(), 30_000)]
    );
    // Resume: verified shards are not fetched again; partial ones continue with Range.
    f.server.clear_log();
    let s = pull(&f.store, &f.server.url()).await.unwrap();
    f.assert_complete().await;
    assert_eq!(s.reused_files, verified.len());
    for file in verified.keys() {
        assert!(f.server.requests(file).is_empty(), "{file} fetched again");
    }
    for (shard, len) in partial {
        let r = f.server.requests(&shard);
        assert_eq!(r[0].range, Some(format!("bytes={len}-")), "{shard}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_corrupt_on_one_mirror_comes_from_the_next() {
    let f = fixture(6).await;
    let bad_mirror = FaultServer::start(f.files.clone()).await;
    let target = f.shards[1].clone();
    bad_mirror.faults(|x| {
        x.corrupt.insert(target.clone(), u32::MAX);
    });
    let opts = DownloadOptions {
        mirrors: vec![bad_mirror.url(), f.server.url()],
        ..options()
    };
    download_rdrr(&f.store, &client(), &f.server.url(), "m", &opts, &|_| {})
        .await
        .unwrap();
    f.assert_complete().await;
    // The manifest from the main URL only; the shards from the first mirror, the bad one
    // once more from the second.
    assert_eq!(bad_mirror.requests("manifest.json").len(), 0);
    assert_eq!(bad_mirror.requests(&target).len(), 1);
    assert_eq!(f.server.requests(&target).len(), 1);
    assert_eq!(f.server.requests(&f.shards[0]).len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensor_locations_that_contradict_group_hashes_fail() {
    let f = fixture(4).await;
    // Swap two tensors' locations: shard hashes still match, group hashes do not.
    let mut t: serde_json::Value = serde_json::from_slice(&f.files["tensors.json"]).unwrap();
    let a = t["blk.0.attn.weight"].clone();
    let b = t["blk.0.ffn.weight"].clone();
    assert_eq!(a["size"], 20000);
    t["blk.0.attn.weight"]["offset"] = b["offset"].clone();
    t["blk.0.attn.weight"]["shard"] = b["shard"].clone();
    t["blk.0.ffn.weight"]["offset"] = a["offset"].clone();
    t["blk.0.ffn.weight"]["shard"] = a["shard"].clone();
    t["blk.0.ffn.weight"]["size"] = 20000.into();
    t["blk.0.ffn.weight"]["shape"] = serde_json::json!([5000]);
    f.server
        .set_file("tensors.json", serde_json::to_vec(&t).unwrap());
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    assert!(
        matches!(&err, DownloadError::GroupMismatch { group, .. } if group == "layer.0"),
        "{err:?}"
    );
    let verified = f.assert_incomplete().await;
    assert_eq!(verified.len(), f.shards.len());
}

/// Groups over shards an earlier run verified are read back from the store (as soon as all
/// of their shards are verified, while others still stream), and verify; with no room for
/// bytes that arrive early, so are those straddling shards fetched at once. Swapped tensor
/// locations still fail their group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_read_back_during_the_download_verify() {
    let opts = DownloadOptions {
        group_buffer: 0,
        read_chunk: 4096,
        ..options()
    };
    let f = fixture(6).await;
    // A first run that fails at the last shard, leaving the others verified.
    let last = f.shards.last().unwrap().clone();
    f.server.faults(|x| {
        x.missing.insert(last.clone());
    });
    download_rdrr(&f.store, &client(), &f.server.url(), "m", &opts, &|_| {})
        .await
        .unwrap_err();
    f.server.faults(|x| x.missing.clear());
    let s = download_rdrr(&f.store, &client(), &f.server.url(), "m", &opts, &|_| {})
        .await
        .unwrap();
    f.assert_complete().await;
    assert!(s.reused_files > 0, "{s:?}");
    assert!(s.groups_checked >= 6, "{}", s.groups_checked);
    assert!(s.group_read_back_bytes > 0, "{s:?}");

    let f = fixture(6).await;
    let mut t: serde_json::Value = serde_json::from_slice(&f.files["tensors.json"]).unwrap();
    let (a, b) = (
        t["blk.5.attn.weight"].clone(),
        t["blk.5.ffn.weight"].clone(),
    );
    for (k, v) in [("offset", &b), ("shard", &b)] {
        t["blk.5.attn.weight"][k] = v[k].clone();
    }
    for (k, v) in [("offset", &a), ("shard", &a)] {
        t["blk.5.ffn.weight"][k] = v[k].clone();
    }
    t["blk.5.ffn.weight"]["size"] = 20000.into();
    t["blk.5.ffn.weight"]["shape"] = serde_json::json!([5000]);
    f.server
        .set_file("tensors.json", serde_json::to_vec(&t).unwrap());
    let err = download_rdrr(&f.store, &client(), &f.server.url(), "m", &opts, &|_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DownloadError::GroupMismatch { group, .. } if group == "layer.5"),
        "{err:?}"
    );
    f.assert_incomplete().await;
}

/// A real GGUF file (a header and one I8 tensor) of about `n` bytes, not padded at its end.
fn gguf_bytes(n: usize) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into()))
        .unwrap();
    let data: Vec<u8> = (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    w.add_tensor("t.weight", GgmlType::I8, &[n as u64], data)
        .unwrap();
    w.to_bytes().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gguf_files_stream_resume_and_check_their_hash() {
    let bytes = gguf_bytes(300_000);
    let sha = hash_hex(HashAlgorithm::Sha256, &bytes);
    let server = FaultServer::start(BTreeMap::from([("x.gguf".to_string(), bytes.clone())])).await;
    server.faults(|x| {
        x.drop_at.insert("x.gguf".into(), vec![100_000]);
    });
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::new(dir.path());
    let url = format!("{}x.gguf", server.url());
    let s = download_gguf(
        &store,
        &client(),
        &url,
        "x",
        Some(&sha),
        &options(),
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(s.sha256.as_deref(), Some(sha.as_str()));
    let path = resolve_model("x", Some(dir.path())).unwrap();
    assert_eq!(path, dir.path().join("models/x.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let r = server.requests("x.gguf");
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].range.as_deref(), Some("bytes=100000-"));

    // A wrong expected hash: fetched twice, then an error with both hashes; nothing listed.
    let wrong = "0".repeat(64);
    let err = download_gguf(
        &store,
        &client(),
        &url,
        "y",
        Some(&wrong),
        &options(),
        &|_| {},
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&wrong) && msg.contains(&sha), "{msg}");
    assert!(store.get("y").await.unwrap().is_none());
    assert!(resolve_model("y", Some(dir.path())).is_err());

    // Not a GGUF file at all.
    server.set_file("x.gguf", b"<html>not found</html>".to_vec());
    let err = download_gguf(&store, &client(), &url, "z", None, &options(), &|_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, DownloadError::NotGguf { .. }), "{err:?}");
    assert_eq!(store.list().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gguf_larger_than_the_room_left_is_refused_before_its_body_is_stored() {
    let bytes = gguf_bytes(200_000);
    let server = FaultServer::start(BTreeMap::from([("x.gguf".to_string(), bytes.clone())])).await;
    let url = format!("{}x.gguf", server.url());
    let store = MemoryStore::with_quota(150_000);
    let err = download_gguf(&store, &client(), &url, "x", None, &options(), &|_| {})
        .await
        .unwrap_err();
    let DownloadError::Quota { needed, available } = err else {
        panic!("{err:?}");
    };
    // The size comes from the response's Content-Length.
    assert_eq!((needed, available), (bytes.len() as u64, 150_000));
    assert_eq!(store.bytes_used().await.unwrap(), 0);
    assert!(store.list().await.unwrap().is_empty());
    // With room, the same store completes.
    let store = MemoryStore::with_quota(bytes.len() as u64);
    download_gguf(&store, &client(), &url, "x", None, &options(), &|_| {})
        .await
        .unwrap();
    assert_eq!(store.bytes_used().await.unwrap(), bytes.len() as u64);
}

/// Files listed in `extraFiles` (the GGUF metadata and tokenizer that `tritium convert` writes)
/// are fetched with tensors.json before any shard, each once, and checked: one whose bytes
/// differ from its listed hash fails the download before any shard is requested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_files_are_fetched_once_and_checked_before_the_shards() {
    let f = fixture(4).await;
    let meta = br#"{"general.architecture":"llama"}"#.to_vec();
    let tokenizer = f.files["tokenizer.json"].clone();
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&f.files["manifest.json"]).unwrap();
    let entry = |name: &str, bytes: &[u8]| {
        serde_json::json!({
            "fileName": name,
            "size": bytes.len(),
            "hash": hash_hex(HashAlgorithm::Sha256, bytes),
            "hashAlgorithm": "sha256",
        })
    };
    manifest["extraFiles"] = serde_json::json!([
        entry("meta.json", &meta),
        entry("tokenizer.json", &tokenizer)
    ]);
    let manifest = serde_json::to_vec(&manifest).unwrap();
    f.server.set_file("manifest.json", manifest.clone());

    // Bytes that differ from the listed hash: a clear error, no shard requested.
    let mut wrong = meta.clone();
    wrong[3] ^= 1;
    f.server.set_file("meta.json", wrong);
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    assert!(
        matches!(&err, DownloadError::Protocol { message, .. }
            if message.contains("meta.json") && message.contains("the manifest says")),
        "{err:?}"
    );
    assert_eq!(f.shard_requests(), 0);
    assert!(f.store.list().await.unwrap().is_empty());

    // Right bytes: complete, with both files, the tokenizer fetched once.
    f.server.set_file("meta.json", meta.clone());
    f.server.clear_log();
    pull(&f.store, &f.server.url()).await.unwrap();
    let tokenizer_requests = f
        .server
        .log()
        .iter()
        .filter(|r| r.file == "tokenizer.json")
        .count();
    assert_eq!(tokenizer_requests, 1);
    let path = resolve_model("m", Some(f.dir.path())).unwrap();
    assert_eq!(std::fs::read(path.join("meta.json")).unwrap(), meta);
    assert_eq!(
        std::fs::read(path.join("tokenizer.json")).unwrap(),
        tokenizer
    );
    assert_eq!(std::fs::read(path.join("manifest.json")).unwrap(), manifest);
}

/// The small files (manifest, tensors.json, the tokenizer) are written while the shards
/// stream: one that cannot be written fails the download, which is not complete, and the
/// shards verified meanwhile stay verified for the next run, which completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_file_that_cannot_be_written_fails_the_download_and_keeps_the_shards() {
    let f = fixture(4).await;
    // A folder where tensors.json goes: writing the file fails.
    let blocker = f.dir.path().join("partial/m/tensors.json");
    std::fs::create_dir_all(blocker.join("x")).unwrap();
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    assert!(err.to_string().contains("tensors.json"), "{err}");
    f.assert_incomplete().await;
    std::fs::remove_dir_all(&blocker).unwrap();
    f.server.clear_log();
    pull(&f.store, &f.server.url()).await.unwrap();
    f.assert_complete().await;
}

/// A GGUF served as a chunked body, with no `Content-Length` and no `--sha256`: a whole file is
/// stored and committed; one followed by 64 MiB of zeros is refused once its header has arrived
/// (the zeros are never stored, nothing is listed, no partial file stays); one that ends before
/// its last tensor, and one whose header is garbage, are refused at their end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gguf_without_content_length_is_stored_only_as_its_header_describes() {
    let bytes = gguf_bytes(300_000);
    let server = FaultServer::start(BTreeMap::from([("x.gguf".to_string(), bytes.clone())])).await;
    server.faults(|f| {
        f.no_length.insert("x.gguf".into());
    });
    let url = format!("{}x.gguf", server.url());
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::new(dir.path());
    download_gguf(&store, &client(), &url, "whole", None, &options(), &|_| {})
        .await
        .unwrap();
    let path = resolve_model("whole", Some(dir.path())).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);

    // Zeros after the last tensor: the download stops at the end the header gives.
    server.faults(|f| {
        f.append_zeros.insert("x.gguf".into(), 64 << 20);
    });
    let most = Arc::new(AtomicU64::new(0));
    let seen = most.clone();
    let err = download_gguf(
        &store,
        &client(),
        &url,
        "zeros",
        None,
        &options(),
        &move |e| {
            if let DownloadEvent::Progress(p) = e {
                seen.fetch_max(p.done, Ordering::Relaxed);
            }
        },
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, DownloadError::BadGguf { .. }) && msg.contains("x.gguf"),
        "{msg}"
    );
    let end = (bytes.len() as u64).next_multiple_of(32);
    assert!(msg.contains(&format!("past byte {end}")), "{msg}");
    // Received and stored: the file, then at most one chunk of the zeros (the guard refuses
    // every chunk that crosses the end before it is written).
    assert!(most.load(Ordering::Relaxed) <= end, "{most:?}");
    assert_eq!(store.list().await.unwrap().len(), 1);
    assert!(resolve_model("zeros", Some(dir.path())).is_err());
    assert!(!dir.path().join("partial/zeros/model.gguf").exists());

    // A file cut before its last tensor ends, and a header that is not one.
    server.faults(|f| f.append_zeros.clear());
    server.set_file("x.gguf", bytes[..bytes.len() - 10].to_vec());
    let err = download_gguf(&store, &client(), &url, "cut", None, &options(), &|_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DownloadError::BadGguf { message, .. } if message.contains("tensors end at byte")),
        "{err}"
    );
    let mut garbage = b"GGUF\x03\x00\x00\x00".to_vec();
    garbage.extend((0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8));
    server.set_file("x.gguf", garbage);
    let err = download_gguf(
        &store,
        &client(),
        &url,
        "garbage",
        None,
        &options(),
        &|_| {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, DownloadError::BadGguf { .. }), "{err}");
    assert_eq!(store.list().await.unwrap().len(), 1);
    assert!(store
        .list_partial()
        .await
        .unwrap()
        .iter()
        .all(|p| p.bytes == 0));
}

/// File names that collide in one folder, refused by pull's manifest planning before anything
/// but the manifest is fetched: a shard named `tensors.json` (whose bytes the tensors file
/// would overwrite), and an `extraFiles` entry named like a shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_names_that_collide_are_refused_before_anything_is_fetched() {
    let f = fixture(2).await;
    let good: serde_json::Value = serde_json::from_slice(&f.files["manifest.json"]).unwrap();
    let mut shard_named_tensors = good.clone();
    set_shard_name(&mut shard_named_tensors, 0, "tensors.json");
    let mut extra_named_shard = good.clone();
    extra_named_shard["extraFiles"] = serde_json::json!([{
        "fileName": f.shards[0], "size": 4,
        "hash": hash_hex(HashAlgorithm::Sha256, b"abcd"),
    }]);
    for manifest in [shard_named_tensors, extra_named_shard] {
        f.server
            .set_file("manifest.json", serde_json::to_vec(&manifest).unwrap());
        f.server.clear_log();
        let err = pull(&f.store, &f.server.url()).await.unwrap_err();
        assert!(
            matches!(&err, DownloadError::InvalidManifest { problems, .. }
                if problems.iter().any(|p| p.contains("is the name of"))),
            "{err}"
        );
        let files: Vec<String> = f.server.log().into_iter().map(|r| r.file).collect();
        assert_eq!(files, ["manifest.json"]);
        assert!(f.store.list().await.unwrap().is_empty());
    }
}

/// Tensor entries that claim more than the shards hold are refused before any shard is
/// fetched: a BLAKE3 manifest with one 30 GiB shard and a tensor of 100,000 spans repeating it
/// (3 PB: the group checks would size their work from it), and a group that lists a tensor
/// 2,000 times (its hash would read the tensor 2,000 times). The store here has no quota, so
/// nothing but validation stands before the group checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensors_that_claim_more_than_the_shards_hold_are_refused_before_any_shard() {
    let shard = 30u64 << 30;
    let manifest = serde_json::json!({
        "version": 1, "modelId": "x", "hashAlgorithm": "blake3", "tensorsFile": "tensors.json",
        "groups": {"embed": {"type": "embed", "shards": [0], "tensors": ["t"], "hash": "0".repeat(64)}},
        "shards": [{"index": 0, "fileName": "shard_00000.bin", "size": shard, "hash": "0".repeat(64)}],
    });
    let span = serde_json::json!({"shardIndex": 0, "offset": 0, "size": shard});
    let size = shard * 100_000;
    let tensors = serde_json::json!({"t": {
        "group": "embed", "shard": 0, "offset": 0, "size": size, "shape": [size / 4],
        "dtype": "F32", "spans": vec![span; 100_000],
    }});
    let files = BTreeMap::from([
        (
            "manifest.json".to_string(),
            serde_json::to_vec(&manifest).unwrap(),
        ),
        (
            "tensors.json".to_string(),
            serde_json::to_vec(&tensors).unwrap(),
        ),
    ]);
    let server = FaultServer::start(files).await;
    let store = MemoryStore::new();
    let err = pull(&store, &server.url()).await.unwrap_err();
    assert!(
        matches!(&err, DownloadError::InvalidManifest { problems, .. }
            if problems.iter().any(|p| p.contains("overlap"))),
        "{err}"
    );
    assert!(server.requests("shard_00000.bin").is_empty());

    let f = fixture(2).await;
    let mut m: serde_json::Value = serde_json::from_slice(&f.files["manifest.json"]).unwrap();
    m["groups"]["layer.0"]["tensors"] = serde_json::json!(vec!["blk.0.attn.weight"; 2000]);
    f.server
        .set_file("manifest.json", serde_json::to_vec(&m).unwrap());
    let err = pull(&f.store, &f.server.url()).await.unwrap_err();
    assert!(
        matches!(&err, DownloadError::InvalidManifest { problems, .. }
            if problems.iter().any(|p| p.contains("more than once"))),
        "{err}"
    );
    assert_eq!(f.shard_requests(), 0);
    assert!(f.store.list().await.unwrap().is_empty());
}

/// A GGUF an earlier run marked verified (as a version that did not check headers did) is
/// checked again before it is committed: garbage is removed and refused, a real file commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gguf_verified_earlier_is_checked_before_it_is_committed() {
    let server = FaultServer::start(BTreeMap::new()).await;
    let url = format!("{}x.gguf", server.url());
    let store = MemoryStore::new();
    let mut garbage = b"GGUF\x03\x00\x00\x00".to_vec();
    garbage.resize(5000, 0xee);
    let good = gguf_bytes(3000);
    for (bytes, ok) in [(garbage, false), (good, true)] {
        store.begin("v", &url).await.unwrap();
        store
            .write_partial_file("v", "model.gguf", &bytes)
            .await
            .unwrap();
        let hash = hash_hex(HashAlgorithm::Sha256, &bytes);
        store.mark_verified("v", "model.gguf", &hash).await.unwrap();
        let r = download_gguf(&store, &client(), &url, "v", None, &options(), &|_| {}).await;
        assert_eq!(r.is_ok(), ok, "{r:?}");
        assert_eq!(store.list().await.unwrap().len(), usize::from(ok));
        if !ok {
            assert_eq!(store.partial_len("v", "model.gguf").await.unwrap(), None);
        }
    }
    // Nothing was fetched: both files were the earlier run's.
    assert!(server.log().is_empty());
}
