//! Downloading an RDRR model: manifest and tensors.json, checks, shards in parallel, groups,
//! commit.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use futures_util::future::{join, join3, try_join_all};
use futures_util::stream::{self, StreamExt};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

use super::fetch::{fetch_file, fetch_small, Ctx, Fetched, FileJob, Observer};
use super::groups::{GroupChecks, ShardTap};
use super::hashing::{pool_size, start_workers};
use super::http::HttpClient;
use super::{DownloadError, DownloadEvent, DownloadOptions, DownloadSummary, Tracker};
use crate::formats::rdrr::{
    hash_hex, validate_manifest, ExtraFile, HashAlgorithm, IssueKind, Manifest, RdrrError,
    MANIFEST_FILE, MAX_JSON_BYTES, TOKENIZER_FILE,
};
use crate::store::{ModelKind, ShardStore};

/// Manifest problems that make a download unsafe or unverifiable, or its model unusable:
/// files that would overwrite each other, tensors that claim bytes the shards do not hold
/// (which would also make the group checks hash the same bytes again and again), sizes that
/// contradict shapes. Each is refused before any shard is requested.
const FATAL: &[IssueKind] = &[
    IssueKind::NoShards,
    IssueKind::UnsafeFileName,
    IssueKind::DuplicateShardFile,
    IssueKind::FileNameCollision,
    IssueKind::MissingHash,
    IssueKind::MalformedHash,
    IssueKind::ShardOutOfRange,
    IssueKind::TensorOutOfBounds,
    IssueKind::SpanSize,
    IssueKind::SpanOverlap,
    IssueKind::TensorSize,
    IssueKind::TensorShape,
    IssueKind::UnknownTensor,
    IssueKind::DuplicateGroupTensor,
];

/// The folder URL of a model: `url` without a final `manifest.json`, ending in `/`.
pub fn base_url(url: &str) -> String {
    let url = url.trim();
    let url = url.strip_suffix(MANIFEST_FILE).unwrap_or(url);
    if url.ends_with('/') {
        url.to_string()
    } else {
        format!("{url}/")
    }
}

/// Characters escaped in a file name put into a URL path.
const PATH_SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'/');

/// `base` (a folder URL) joined with a plain file name, escaped.
pub fn join_url(base: &str, file: &str) -> String {
    let sep = if base.ends_with('/') { "" } else { "/" };
    format!("{base}{sep}{}", utf8_percent_encode(file, PATH_SEGMENT))
}

fn manifest_error(url: &str, source: RdrrError) -> DownloadError {
    match source {
        RdrrError::UnsafeFileName { field, name } => DownloadError::InvalidManifest {
            url: url.to_string(),
            problems: vec![format!(
                "{field}: {name:?} is not a plain file name inside the model folder"
            )],
        },
        source => DownloadError::Manifest {
            url: url.to_string(),
            source,
        },
    }
}

/// Fetch the RDRR model at `url` (its folder, or its `manifest.json`) into `store` as `name`.
/// Events go to `events` as it runs. A model already complete in the store is not fetched
/// again (`already_present` in the summary). See the [module docs](super).
pub async fn download_rdrr<S: ShardStore, C: HttpClient>(
    store: &S,
    client: &C,
    url: &str,
    name: &str,
    options: &DownloadOptions,
    events: &dyn Fn(&DownloadEvent),
) -> Result<DownloadSummary, DownloadError> {
    let (mut summary, present) = DownloadSummary::if_present(store, name, ModelKind::Rdrr).await?;
    if present {
        return Ok(summary);
    }
    let tracker = Tracker::new(events);
    let base = base_url(url);
    let manifest_url = join_url(&base, MANIFEST_FILE);
    let retry = &options.retry;

    // The manifest, and its file names checked before anything else is requested.
    let manifest_bytes = fetch_small(
        client,
        &tracker,
        retry,
        &manifest_url,
        MAX_JSON_BYTES,
        false,
    )
    .await?
    .unwrap_or_default();
    // Only `tensorsFile` is read here (the rest is skipped, not stored).
    #[derive(serde::Deserialize)]
    struct TensorsFile {
        #[serde(rename = "tensorsFile")]
        tensors_file: Option<serde_json::Value>,
    }
    let raw: TensorsFile =
        serde_json::from_slice(&manifest_bytes).map_err(|e| DownloadError::Manifest {
            url: manifest_url.clone(),
            source: RdrrError::Json {
                file: MANIFEST_FILE.to_string(),
                message: e.to_string(),
            },
        })?;
    let tensors_file = raw
        .tensors_file
        .filter(|v| !v.is_null())
        .map(|v| v.as_str().map(str::to_string).ok_or(v.to_string()));
    let tensors_file = match tensors_file {
        None => None,
        Some(Ok(name)) => Some(name),
        Some(Err(v)) => {
            return Err(DownloadError::InvalidManifest {
                url: manifest_url,
                problems: vec![format!("tensorsFile: {v} is not a file name")],
            })
        }
    };
    // Shard and tokenizer names first, with the tensors left out.
    let early = Manifest::parse(&manifest_bytes, tensors_file.as_ref().map(|_| &b"{}"[..]))
        .map_err(|e| manifest_error(&manifest_url, e))?;
    check_names(&early, &manifest_url)?;

    // Then, all at once, the rest of what the manifest names: tensors.json, the tokenizer
    // files (optional, small, unhashed) and the files `extraFiles` lists with their size and
    // hash (required, checked: the GGUF metadata and tokenizer that `tritium convert` writes);
    // the browser's hash workers start meanwhile.
    let mut tokenizer_names = vec![TOKENIZER_FILE.to_string()];
    if let Some(f) = early.tokenizer.as_ref().and_then(|t| t.file.clone()) {
        if !tokenizer_names.contains(&f) {
            tokenizer_names.push(f);
        }
    }
    // A tokenizer listed as an extra file comes once, checked.
    tokenizer_names.retain(|t| !early.extra_files.iter().any(|e| &e.file_name == t));
    let mut wanted: Vec<Small> = tensors_file.iter().map(Small::Tensors).collect();
    wanted.extend(tokenizer_names.iter().map(Small::Tokenizer));
    wanted.extend(early.extra_files.iter().map(Small::Extra));
    let fetches = try_join_all(
        wanted
            .iter()
            .map(|w| fetch_small_file(client, &tracker, retry, &base, w, early.hash_algorithm)),
    );
    // `join`, not a race: a download that fails here returns only once its workers' start
    // has settled, never leaving workers half made (a worker ended with children still being
    // created could hang Chromium's tooling: d910474).
    let mut pool_warnings = Vec::new();
    let (pool, fetched) = join(start_workers(options, &mut pool_warnings), fetches).await;
    let mut fetched = fetched?.into_iter().flatten();
    let tensors_bytes = match &tensors_file {
        Some(file) => fetched
            .next()
            .map(|(_, bytes)| (file.clone(), join_url(&base, file), bytes)),
        None => None,
    };
    let manifest = Manifest::parse(
        &manifest_bytes,
        tensors_bytes.as_ref().map(|(_, _, b)| b.as_slice()),
    )
    .map_err(|e| {
        let url = match (&e, &tensors_bytes) {
            (RdrrError::Json { file, .. } | RdrrError::Field { file, .. }, Some((f, url, _)))
                if file == f =>
            {
                url.clone()
            }
            _ => manifest_url.clone(),
        };
        manifest_error(&url, e)
    })?;
    let report = validate_manifest(&manifest);
    let (fatal, other): (Vec<_>, Vec<_>) = report
        .issues
        .into_iter()
        .partition(|i| FATAL.contains(&i.kind));
    if !fatal.is_empty() {
        return Err(DownloadError::InvalidManifest {
            url: manifest_url,
            problems: fatal.iter().map(ToString::to_string).collect(),
        });
    }
    summary.warnings = other.iter().map(ToString::to_string).collect();
    summary.warnings.extend(pool_warnings);
    let mut small_files: Vec<(String, Vec<u8>)> = vec![(MANIFEST_FILE.to_string(), manifest_bytes)];
    if let Some((file, _, bytes)) = tensors_bytes {
        small_files.push((file, bytes));
    }
    small_files.extend(fetched);

    // What an earlier run left, and whether the rest fits.
    let partial = store.begin(name, &base).await?;
    let mut wanted: BTreeSet<&str> = small_files.iter().map(|(f, _)| f.as_str()).collect();
    wanted.extend(manifest.shards.iter().map(|s| s.filename.as_str()));
    for file in store.partial_files(name).await? {
        if !wanted.contains(file.as_str()) {
            store.remove_partial_file(name, &file).await?;
        }
    }
    let shard_bytes = manifest.shard_bytes().unwrap_or(u64::MAX);
    let small_bytes: u64 = small_files.iter().map(|(_, b)| b.len() as u64).sum();
    let total = shard_bytes.saturating_add(small_bytes);
    let mut present = 0u64;
    let mut pending = Vec::new();
    // Shards an earlier run verified: their groups are read back.
    let mut reused = Vec::new();
    for shard in &manifest.shards {
        let len = store.partial_len(name, &shard.filename).await?;
        let verified = partial
            .verified
            .get(&shard.filename)
            .zip(shard.hash.as_ref())
            .is_some_and(|(have, want)| have.eq_ignore_ascii_case(want));
        if verified && len == Some(shard.size) {
            present += shard.size;
            summary.reused_files += 1;
            reused.push(shard.index);
        } else {
            present += len.unwrap_or(0).min(shard.size);
            pending.push(shard);
        }
    }
    if let Some(available) = store.available_bytes().await? {
        let needed = total.saturating_sub(present);
        if needed > available {
            return Err(DownloadError::Quota { needed, available });
        }
    }
    // Shards fetched on workers leave the state file to this thread, which marks them verified
    // when their jobs end; a mark left on a shard to fetch (its file of another length or
    // version) goes first, with the file. The model's folder is made here, before any job
    // starts: the workers' stores write into it, and this thread (the page's, perhaps busy)
    // may be far behind them with its small files.
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    if pool.is_some() && options.fetch_on_workers {
        store.prepare(name).await?;
        for shard in &pending {
            if partial.verified.contains_key(&shard.filename) {
                store.remove_partial_file(name, &shard.filename).await?;
            }
        }
    }
    summary.hash_workers = pool_size(pool.as_ref());
    let taps = if options.check_groups {
        Some(
            GroupChecks::new(
                &manifest,
                group_hash_threads(options),
                pool.as_ref(),
                options.group_buffer,
            )
            .map_err(|e| match e {
                DownloadError::InvalidManifest { problems, .. } => DownloadError::InvalidManifest {
                    url: manifest_url.clone(),
                    problems,
                },
                e => e,
            })?,
        )
    } else {
        None
    };

    if let Some(t) = &taps {
        for &shard in &reused {
            t.void_shard(shard);
        }
    }
    tracker.plan(shard_bytes, manifest.shards.len());
    let verified_bytes = shard_bytes.saturating_sub(pending.iter().map(|s| s.size).sum::<u64>());
    tracker.present(verified_bytes);
    for _ in 0..summary.reused_files {
        tracker.file_done();
    }
    tracker.emit(DownloadEvent::Planned {
        files: manifest.shards.len(),
        total_bytes: shard_bytes,
        verified_files: summary.reused_files,
        verified_bytes,
    });

    // The shards, several at once. After a failure no new shard starts; those under way finish
    // (and stay verified).
    let mirrors: Vec<String> = if options.mirrors.is_empty() {
        vec![base.clone()]
    } else {
        options.mirrors.iter().map(|m| base_url(m)).collect()
    };
    let ctx = Ctx {
        store,
        client,
        model: name,
        options,
        tracker: &tracker,
        pool: pool.as_ref(),
    };
    let failed = Cell::new(false);
    let count = manifest.shards.len();
    // Shards stored and verified, this run or an earlier one: a group read back (one that did
    // not stream in order) is read as soon as all of its shards are, while the rest stream.
    let verified_now = RefCell::new(vec![true; count]);
    for shard in &pending {
        if let Some(v) = verified_now.borrow_mut().get_mut(shard.index) {
            *v = false;
        }
    }
    let (tx, mut rx) = futures_channel::mpsc::unbounded::<()>();
    let verified_now = &verified_now;
    let (ctx_ref, failed_ref, taps_ref, mirrors_ref) = (&ctx, &failed, taps.as_ref(), &mirrors);
    let jobs = pending.iter().map(move |shard| {
        let tx = tx.clone();
        let (ctx, failed, taps, mirrors) = (ctx_ref, failed_ref, taps_ref, mirrors_ref);
        async move {
            if failed.get() {
                return None;
            }
            let job = FileJob {
                file: &shard.filename,
                what: format!("shard {} ({})", shard.index, shard.filename),
                index: shard.index,
                count,
                urls: mirrors
                    .iter()
                    .map(|m| join_url(m, &shard.filename))
                    .collect(),
                size: Some(shard.size),
                algorithm: shard.hash_algorithm,
                expected: shard.hash.as_deref(),
            };
            let observer = match taps {
                Some(t) => Observer::Groups(ShardTap {
                    checks: t,
                    shard: shard.index,
                }),
                None => Observer::None,
            };
            let result = fetch_shard(ctx, &job, &observer).await;
            let result = match result {
                Ok(fetched) => ctx
                    .store
                    .mark_verified(ctx.model, &shard.filename, &fetched.hash)
                    .await
                    .map_err(DownloadError::from),
                Err(e) => Err(e),
            };
            match &result {
                Ok(()) => {
                    if let Some(v) = verified_now.borrow_mut().get_mut(shard.index) {
                        *v = true;
                    }
                    let _ = tx.unbounded_send(());
                    ctx.tracker.file_done();
                    ctx.tracker.emit(DownloadEvent::FileVerified {
                        file: shard.filename.clone(),
                        index: shard.index,
                    });
                }
                Err(_) => failed.set(true),
            }
            Some(result)
        }
    });
    let shards = stream::iter(jobs)
        .buffer_unordered(options.parallel.max(1))
        .collect::<Vec<_>>();
    // Ends when the shards have (every sender with them).
    let read_back = async {
        while rx.next().await.is_some() {
            if let (Some(t), false) = (taps.as_ref(), failed.get()) {
                let verified = |s: usize| verified_now.borrow().get(s).copied().unwrap_or(false);
                t.read_back_ready(&manifest, store, name, options.read_chunk, verified)
                    .await?;
            }
        }
        Ok::<(), DownloadError>(())
    };
    // The small files are written while the shards stream (they are needed only to commit).
    let small_writes = async {
        for (file, bytes) in &small_files {
            if let Err(e) = store.write_partial_file(name, file, bytes).await {
                failed.set(true);
                return Err(DownloadError::from(e));
            }
        }
        Ok(())
    };
    let (results, read_back, small_written) = join3(shards, read_back, small_writes).await;
    let mut first_error = None;
    for result in results.into_iter().flatten() {
        match result {
            Ok(()) => summary.fetched_files += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    small_written?;
    read_back?;

    if let Some(taps) = taps {
        let (streamed, read_back, bytes) = taps
            .check(&manifest, store, name, options.read_chunk)
            .await?;
        summary.groups_checked = streamed + read_back;
        summary.group_read_back_bytes = bytes;
        tracker.emit(DownloadEvent::GroupsChecked {
            streamed,
            read_back,
            read_back_bytes: bytes,
        });
    }
    store.commit(name, ModelKind::Rdrr, "").await?;
    summary.bytes = total;
    summary.fetched_bytes = tracker.fetched();
    tracker.time(&mut summary);
    Ok(summary)
}

/// A small file the manifest names.
enum Small<'m> {
    /// tensors.json: required.
    Tensors(&'m String),
    /// A tokenizer file: optional (`None` when the server has none), unhashed.
    Tokenizer(&'m String),
    /// An `extraFiles` entry: required, its size and (when given) hash checked.
    Extra(&'m ExtraFile),
}

/// Fetch a small file whole: its name and bytes.
async fn fetch_small_file<C: HttpClient>(
    client: &C,
    tracker: &Tracker<'_>,
    retry: &super::RetryPolicy,
    base: &str,
    small: &Small<'_>,
    manifest_alg: Option<HashAlgorithm>,
) -> Result<Option<(String, Vec<u8>)>, DownloadError> {
    let (file, max, optional) = match small {
        Small::Tensors(f) => (*f, MAX_JSON_BYTES, false),
        Small::Tokenizer(f) => (*f, MAX_JSON_BYTES, true),
        Small::Extra(e) => (&e.file_name, e.size, false),
    };
    let url = join_url(base, file);
    let Some(bytes) = fetch_small(client, tracker, retry, &url, max, optional).await? else {
        return Ok(None);
    };
    let Small::Extra(extra) = small else {
        return Ok(Some((file.clone(), bytes)));
    };
    if bytes.len() as u64 != extra.size {
        return Err(DownloadError::Protocol {
            url,
            message: format!(
                "{file}: {} bytes, the manifest says {}",
                bytes.len(),
                extra.size
            ),
        });
    }
    if let Some(want) = &extra.hash {
        let alg = extra
            .hash_algorithm
            .as_deref()
            .and_then(HashAlgorithm::parse)
            .or(manifest_alg)
            .unwrap_or(HashAlgorithm::Sha256);
        let got = hash_hex(alg, &bytes);
        if !got.eq_ignore_ascii_case(want) {
            return Err(DownloadError::Protocol {
                url,
                message: format!("{file}: {alg:?} {got}, the manifest says {want}"),
            });
        }
    }
    Ok(Some((file.clone(), bytes)))
}

/// Fetch one shard: on one of the browser's hash workers when they run (and the options do
/// not say otherwise), else in this thread.
async fn fetch_shard<S: ShardStore, C: HttpClient>(
    ctx: &Ctx<'_, S, C>,
    job: &FileJob<'_>,
    observer: &Observer<'_>,
) -> Result<Fetched, DownloadError> {
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    if let (Some(pool), true) = (ctx.pool, ctx.options.fetch_on_workers) {
        return super::worker_fetch::fetch_file_on_worker(ctx, pool, job, observer).await;
    }
    fetch_file(ctx, job, observer).await
}

/// Threads for the group hashes: the groups of the shards in flight stream at the same time
/// (a SHA-256 group one ordered stream, a BLAKE3 group's blocks independent subtrees), so one
/// thread would cap a download at one core's hashing speed. One per shard in flight, up to the
/// cores (0: hash inline, as asked).
fn group_hash_threads(options: &DownloadOptions) -> usize {
    if !options.hash_threads {
        return 0;
    }
    #[cfg(not(target_arch = "wasm32"))]
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    #[cfg(target_arch = "wasm32")]
    let cores = 1;
    options.parallel.clamp(1, cores.max(1))
}

/// Refuse a manifest whose shard, tensors, tokenizer or extra file names could leave the
/// folder, or name one file twice (a shard called `tensors.json`, an extra file called like a
/// shard: one would overwrite the other in the store).
fn check_names(manifest: &Manifest, url: &str) -> Result<(), DownloadError> {
    let unsafe_names = [
        IssueKind::UnsafeFileName,
        IssueKind::DuplicateShardFile,
        IssueKind::FileNameCollision,
    ];
    let problems = validate_manifest(manifest).problems_of(&unsafe_names);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(DownloadError::InvalidManifest {
            url: url.to_string(),
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(base_url("http://h:1/m/manifest.json"), "http://h:1/m/");
        assert_eq!(base_url("http://h:1/m"), "http://h:1/m/");
        assert_eq!(base_url("http://h:1/m/"), "http://h:1/m/");
        assert_eq!(
            join_url("http://h/m/", "shard_00000.bin"),
            "http://h/m/shard_00000.bin"
        );
        assert_eq!(
            join_url("http://h/m", "a b#?.json"),
            "http://h/m/a%20b%23%3F.json"
        );
    }
}
