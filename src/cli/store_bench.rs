//! `tritium bench hash` and `tritium bench fetch`: hashing throughput, and fetch + verify +
//! store throughput from a loopback server as a fraction of the hashing speed measured in the
//! same run (the target is 80% or more: verification must not add a second pass). The model is
//! served from memory, so the server costs as little as a server can.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use super::store::{network_workers, runtime, runtime_with};
use crate::cli::Error;
use crate::formats::rdrr::{HashAlgorithm, RdrrWriter, StreamHasher, WriterOptions};
use crate::formats::source::MemoryFiles;
use crate::storage::download::{download_rdrr, DownloadOptions, ReqwestClient};
use crate::storage::FsStore;

/// Pseudo-random bytes (xorshift64*), fast enough not to matter.
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// MB/s (10^6 bytes) of hashing `data` in 64 KiB updates (as the downloader's chunks arrive),
/// best of `reps`.
fn hash_speed(alg: HashAlgorithm, data: &[u8], reps: usize) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let mut h = StreamHasher::new(alg);
        for chunk in data.chunks(64 << 10) {
            h.update(chunk);
        }
        std::hint::black_box(h.finalize_hex());
        best = best.min(t.elapsed().as_secs_f64());
    }
    data.len() as f64 / best / 1e6
}

fn parse_alg(name: &str) -> Result<HashAlgorithm, Error> {
    HashAlgorithm::parse(name)
        .ok_or_else(|| Error::Usage(format!("--hash {name:?}: expected sha256 or blake3")))
}

#[derive(Serialize)]
struct HashRow {
    algorithm: &'static str,
    mb_per_s: f64,
}

/// `tritium bench hash`.
pub fn hash(mib: u64, json: bool) -> Result<ExitCode, Error> {
    let mut data = vec![0u8; (mib.max(1) << 20) as usize];
    fill(&mut data, 42);
    let rows: Vec<HashRow> = [HashAlgorithm::Sha256, HashAlgorithm::Blake3]
        .into_iter()
        .map(|alg| HashRow {
            algorithm: alg.display_name(),
            mb_per_s: hash_speed(alg, &data, 3),
        })
        .collect();
    if json {
        let v = serde_json::json!({ "mib": mib, "threads": 1, "results": rows });
        println!("{v}");
    } else {
        println!("hashing {mib} MiB in memory, one thread, 64 KiB updates (best of 3)");
        println!("{:<10} {:>10}", "algorithm", "MB/s");
        for r in &rows {
            println!("{:<10} {:>10.0}", r.algorithm, r.mb_per_s);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `bench fetch` measures.
#[derive(Debug, Clone)]
pub struct FetchBenchArgs {
    pub mib: u64,
    pub shard_mib: u64,
    pub parallel: usize,
    pub hash: String,
    /// Where the store goes (default: the temp folder).
    pub dir: Option<std::path::PathBuf>,
    /// An RDRR folder (`tritium convert`'s output) served instead of the synthetic model; its
    /// manifest's hash algorithm is measured.
    pub model: Option<std::path::PathBuf>,
    /// Downloads of each kind (with and without group checks, alternating).
    pub rounds: usize,
    pub json: bool,
}

/// The files of the RDRR folder `dir` (not its subfolders), read into memory.
fn read_model(dir: &Path) -> Result<(MemoryFiles, HashAlgorithm), Error> {
    let io = |e: std::io::Error| Error::Io {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let mut files = MemoryFiles::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_type().map_err(io)?.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            files.insert(name, std::fs::read(entry.path()).map_err(io)?);
        }
    }
    let parsed = crate::formats::rdrr::Manifest::load(&files)
        .map_err(|e| Error::Usage(format!("{} (an RDRR folder?): {e}", dir.display())))?;
    Ok((
        files,
        parsed.hash_algorithm.unwrap_or(HashAlgorithm::Sha256),
    ))
}

/// A synthetic RDRR model of about `mib` MiB in memory: layers of two 4 MiB F32 tensors, one
/// group each.
fn make_model(args: &FetchBenchArgs, alg: HashAlgorithm) -> Result<MemoryFiles, Error> {
    let mut files = MemoryFiles::new();
    let mut opts = WriterOptions::new("bench");
    opts.hash_algorithm = alg;
    opts.shard_size = args.shard_mib.max(1) << 20;
    let mut w = RdrrWriter::new(opts)?;
    let tensor = 4usize << 20;
    let mut data = vec![0u8; tensor];
    let layers = (args.mib.max(8) << 20) / (2 * tensor as u64);
    for layer in 0..layers {
        for (k, part) in ["attn", "ffn"].iter().enumerate() {
            fill(&mut data, layer * 2 + k as u64 + 1);
            w.add_tensor(
                &mut files,
                &format!("blk.{layer}.{part}.weight"),
                "F32",
                &[(tensor / 4) as u64],
                Some(&format!("layer.{layer}")),
                &data,
            )?;
        }
    }
    w.finish(&mut files)?;
    Ok(files)
}

/// Serve `files` from memory (no copy until the socket), with `Range: bytes=N-`.
async fn serve_file(
    State(files): State<Arc<HashMap<String, Bytes>>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let name = uri.path().trim_start_matches('/');
    let Some(bytes) = files.get(name) else {
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    let total = bytes.len();
    let from = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| {
            r.strip_prefix("bytes=")?
                .strip_suffix('-')?
                .parse::<usize>()
                .ok()
        })
        .filter(|&f| f < total);
    match from {
        Some(f) => (
            StatusCode::PARTIAL_CONTENT,
            [(
                header::CONTENT_RANGE,
                format!("bytes {f}-{}/{total}", total - 1),
            )],
            bytes.slice(f..),
        )
            .into_response(),
        None => bytes.clone().into_response(),
    }
}

#[derive(Serialize)]
struct FetchRow {
    what: String,
    /// The median round, and the best.
    mb_per_s: f64,
    best_mb_per_s: f64,
    fraction_of_hashing: f64,
    group_read_back_mib: f64,
    /// The median round's setup (manifest, checks: until the first shard's request) and
    /// finish (last shard verified to committed), seconds.
    setup_s: f64,
    finish_s: f64,
    seconds: f64,
}

/// One download of `bench fetch`.
struct Run {
    mb_per_s: f64,
    setup: f64,
    finish: f64,
    seconds: f64,
    read_back_mib: f64,
}

/// `tritium bench fetch`.
pub fn fetch(args: &FetchBenchArgs) -> Result<ExitCode, Error> {
    let alg = parse_alg(&args.hash)?;
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = parent.join(format!("tritium-bench-fetch-{}", std::process::id()));
    let result = fetch_in(&tmp, args, alg);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn fetch_in(tmp: &Path, args: &FetchBenchArgs, alg: HashAlgorithm) -> Result<ExitCode, Error> {
    let io = |e: std::io::Error| Error::Io {
        path: tmp.display().to_string(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(tmp).map_err(io)?;
    let (model, alg) = match &args.model {
        Some(dir) => read_model(dir)?,
        None => (make_model(args, alg)?, alg),
    };
    let bytes: u64 = model
        .files
        .iter()
        .filter(|(k, _)| k.starts_with("shard_"))
        .map(|(_, v)| v.len() as u64)
        .sum();

    // Plain hashing of as many bytes (at most 1 GiB), in this run: before the downloads and
    // after them; the faster of the two is the measure.
    let mut data = vec![0u8; bytes.min(1 << 30) as usize];
    fill(&mut data, 7);
    let hash_before = hash_speed(alg, &data, 3);
    let served: Arc<HashMap<String, Bytes>> = Arc::new(
        model
            .files
            .into_iter()
            .map(|(k, v)| (k, Bytes::from(v)))
            .collect(),
    );

    // The server on threads of its own, as `tritium serve-model` or any server would be: it
    // must not take the downloader's workers.
    let server_rt = runtime_with(4)?;
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    let app = axum::Router::new().fallback(serve_file).with_state(served);
    let server = server_rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let rt = runtime()?;
    let client = ReqwestClient::new().map_err(|e| Error::Usage(e.message))?;
    let runs = rt.block_on(async {
        let url = format!("http://{addr}/");
        // Per kind: groups checked, not checked.
        let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..args.rounds.max(1) {
            for (i, check_groups) in [(0, true), (1, false)] {
                let store = FsStore::new(tmp.join(format!("store{i}")));
                let options = DownloadOptions {
                    parallel: args.parallel.max(1),
                    check_groups,
                    ..DownloadOptions::default()
                };
                let t = Instant::now();
                let s = download_rdrr(&store, &client, &url, "bench", &options, &|_| {}).await?;
                let secs = t.elapsed().as_secs_f64();
                runs[i].push(Run {
                    mb_per_s: bytes as f64 / secs / 1e6,
                    setup: s.setup_seconds,
                    finish: s.finish_seconds,
                    seconds: secs,
                    read_back_mib: s.group_read_back_bytes as f64 / (1 << 20) as f64,
                });
                let _ = std::fs::remove_dir_all(store.root());
            }
        }
        server.abort();
        Ok::<_, Error>(runs)
    })?;
    let hash_after = hash_speed(alg, &data, 3);
    drop(data);
    let hash_mbs = hash_before.max(hash_after);
    let rows: Vec<FetchRow> = runs
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.sort_by(|a, b| a.mb_per_s.total_cmp(&b.mb_per_s));
            let median = &r[r.len() / 2];
            FetchRow {
                what: if i == 0 {
                    "fetch+verify+store (shards and groups)".into()
                } else {
                    "fetch+verify+store (shards only)".into()
                },
                mb_per_s: median.mb_per_s,
                best_mb_per_s: r[r.len() - 1].mb_per_s,
                fraction_of_hashing: median.mb_per_s / hash_mbs,
                group_read_back_mib: median.read_back_mib,
                setup_s: median.setup,
                finish_s: median.finish,
                seconds: median.seconds,
            }
        })
        .collect();

    if args.json {
        let v = serde_json::json!({
            "model_mib": bytes as f64 / (1 << 20) as f64,
            "shard_mib": args.shard_mib,
            "parallel": args.parallel,
            "algorithm": alg.display_name(),
            "dir": tmp.display().to_string(),
            "downloader_workers": network_workers(),
            "rounds": args.rounds.max(1),
            "hash_mb_per_s": hash_mbs,
            "hash_mb_per_s_before_after": [hash_before, hash_after],
            "results": rows,
        });
        println!("{v}");
    } else {
        println!(
            "{:.0} MiB RDRR model ({}), {} at once, {} hashes, loopback HTTP (the server on 4 \
             threads of its own, the downloader on {}), into a store in {}; median of {} rounds",
            bytes as f64 / (1 << 20) as f64,
            match &args.model {
                Some(dir) => dir.display().to_string(),
                None => format!("synthetic, {} MiB shards", args.shard_mib),
            },
            args.parallel,
            alg.display_name(),
            network_workers(),
            tmp.display(),
            args.rounds.max(1)
        );
        println!(
            "{:<40} {:>8} {:>10} {:>14} {:>9} {:>9} {:>8}",
            "", "MB/s", "of hashing", "groups re-read", "setup ms", "finish ms", "best"
        );
        println!(
            "{:<40} {:>8.0} {:>10} {:>14}   (before {:.0}, after {:.0})",
            format!("plain {} hashing", alg.display_name()),
            hash_mbs,
            "100%",
            "-",
            hash_before,
            hash_after
        );
        for r in &rows {
            println!(
                "{:<40} {:>8.0} {:>9.0}% {:>10.1} MiB {:>9.1} {:>9.1} {:>8.0}",
                r.what,
                r.mb_per_s,
                r.fraction_of_hashing * 100.0,
                r.group_read_back_mib,
                r.setup_s * 1e3,
                r.finish_s * 1e3,
                r.best_mb_per_s
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
