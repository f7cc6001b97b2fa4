//! Fetching one file into the store: resume, retries, hashing while streaming, and the one
//! refetch of a file whose hash does not match.

use bytes::Bytes;

use super::gguf_header::HeaderGuard;
use super::groups::ShardTap;
use super::hash_kind::HashKind;
use super::hashing::{Hashing, WorkerPool};
use super::http::{parse_content_range, HttpBody, HttpClient, HttpErrorKind, HttpResponse};
use super::local::LocalPlan;
use super::observe::StreamObserver;
use super::{DownloadError, DownloadEvent, DownloadOptions, RetryPolicy, Tracker};
use crate::formats::rdrr::HashAlgorithm;
use crate::store::{ShardStore, ShardWriter};

/// What a download shares between its files.
pub(crate) struct Ctx<'a, S, C> {
    pub store: &'a S,
    pub client: &'a C,
    pub model: &'a str,
    pub options: &'a DownloadOptions,
    pub tracker: &'a Tracker<'a>,
    /// The browser's hash workers, when they started.
    pub pool: Option<&'a WorkerPool>,
}

/// What sees a file's bytes as they stream: nothing, the group checks, or (on a browser
/// worker fetching a download's shard) the link back to the download. One type rather than a
/// type parameter, so that the fetch loop is compiled once: each observer type cost the wasm
/// package a copy of it.
pub(crate) enum Observer<'a> {
    None,
    Groups(ShardTap<'a>),
    Gguf(&'a HeaderGuard),
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    Worker(&'a super::link::LinkObserver<'a>),
}

impl StreamObserver for Observer<'_> {
    async fn bytes(&self, offset: u64, data: &Bytes) -> Result<(), DownloadError> {
        match self {
            Observer::None => Ok(()),
            Observer::Groups(t) => t.bytes(offset, data).await,
            Observer::Gguf(g) => g.bytes(offset, data),
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            Observer::Worker(l) => l.bytes(offset, data).await,
        }
    }

    fn void(&self) {
        match self {
            Observer::None => {}
            Observer::Groups(t) => t.void(),
            Observer::Gguf(g) => g.void(),
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            Observer::Worker(l) => l.void(),
        }
    }

    fn admit(&self, end: u64) -> Result<(), DownloadError> {
        match self {
            Observer::Gguf(g) => g.admit(end),
            _ => Ok(()),
        }
    }

    fn take_local(&self) -> Option<LocalPlan> {
        match self {
            Observer::Groups(t) => t.take_local(),
            _ => None,
        }
    }

    fn local_done(&self, digests: Vec<(usize, String)>) {
        if let Observer::Groups(t) = self {
            t.local_done(digests);
        }
    }
}

/// One file to fetch.
pub(crate) struct FileJob<'a> {
    /// Its name in the store.
    pub file: &'a str,
    /// How errors name it: `shard 3 (shard_00003.bin)`.
    pub what: String,
    pub index: usize,
    pub count: usize,
    /// Where it can be fetched, in order of preference.
    pub urls: Vec<String>,
    /// Its size when known in advance.
    pub size: Option<u64>,
    pub algorithm: HashAlgorithm,
    /// The hash it must have, when known.
    pub expected: Option<&'a str>,
}

/// A fetched (and, when a hash was expected, verified) file.
pub(crate) struct Fetched {
    pub hash: String,
    pub len: u64,
}

/// Wait before the next attempt, or give up after too many failures in a row.
pub(crate) async fn back_off<C: HttpClient>(
    client: &C,
    tracker: &Tracker<'_>,
    retry: &RetryPolicy,
    url: &str,
    failures: &mut u32,
    reason: String,
) -> Result<(), DownloadError> {
    *failures += 1;
    if *failures >= retry.attempts.max(1) {
        return Err(DownloadError::Network {
            url: url.to_string(),
            message: reason,
            failures: *failures,
        });
    }
    let delay = retry.delay(*failures);
    tracker.emit(DownloadEvent::Retrying {
        url: url.to_string(),
        failures: *failures,
        delay,
        reason,
    });
    client.sleep(delay).await;
    Ok(())
}

/// Statuses worth retrying: the server is busy or failing for now.
fn retryable(status: u16) -> bool {
    matches!(status, 408 | 425 | 429 | 500..=599)
}

/// `GET url` with retries, for small files read whole (manifest, tensors.json, tokenizer):
/// `None` for a 404 when `optional`. Refuses bodies over `max` bytes.
pub(crate) async fn fetch_small<C: HttpClient>(
    client: &C,
    tracker: &Tracker<'_>,
    retry: &RetryPolicy,
    url: &str,
    max: u64,
    optional: bool,
) -> Result<Option<Vec<u8>>, DownloadError> {
    let mut failures = 0;
    loop {
        let reason = match client.get(url, None).await {
            Err(e) if e.kind == HttpErrorKind::InvalidUrl => {
                return Err(DownloadError::Protocol {
                    url: url.to_string(),
                    message: e.message,
                })
            }
            Err(e) => e.message,
            Ok(r) if r.status == 404 && optional => return Ok(None),
            Ok(r) if retryable(r.status) => format!("HTTP {}", r.status),
            Ok(r) if r.status != 200 => {
                return Err(DownloadError::Status {
                    url: url.to_string(),
                    status: r.status,
                })
            }
            Ok(r) => {
                if r.headers.content_length.is_some_and(|n| n > max) {
                    return Err(DownloadError::TooLarge {
                        url: url.to_string(),
                        max,
                    });
                }
                match read_body(r, url, max).await? {
                    Ok(bytes) => return Ok(Some(bytes)),
                    Err(reason) => reason,
                }
            }
        };
        back_off(client, tracker, retry, url, &mut failures, reason).await?;
    }
}

/// The whole body, or the network error that cut it (to retry).
async fn read_body<B: HttpBody>(
    mut r: HttpResponse<B>,
    url: &str,
    max: u64,
) -> Result<Result<Vec<u8>, String>, DownloadError> {
    let mut out = Vec::new();
    loop {
        match r.body.next_chunk().await {
            Ok(Some(chunk)) => {
                if out.len() as u64 + chunk.len() as u64 > max {
                    return Err(DownloadError::TooLarge {
                        url: url.to_string(),
                        max,
                    });
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Ok(out)),
            Err(e) => return Ok(Err(e.message)),
        }
    }
}

/// Hash the `len` bytes of `file` already in the store, showing them to `observer` as if they
/// streamed (the file's hash, checked at the end, covers them like the rest).
async fn hash_stored<S: ShardStore>(
    store: &S,
    model: &str,
    file: &str,
    len: u64,
    chunk: usize,
    hasher: &Hashing,
    observer: &Observer<'_>,
) -> Result<(), DownloadError> {
    let chunk = chunk.clamp(4096, 64 << 20) as u64;
    let mut pos = 0u64;
    while pos < len {
        let n = (len - pos).min(chunk) as usize;
        let mut buf = vec![0u8; n];
        store.read_partial(model, file, pos, &mut buf).await?;
        let buf = Bytes::from(buf);
        observer.bytes(pos, &buf).await?;
        hasher.update(0, buf).await?;
        pos += n as u64;
    }
    Ok(())
}

/// Fetch `job` into the store, resuming what an earlier attempt left, and check its hash. A
/// file whose hash does not match is deleted and fetched once more (from the next URL, when
/// there are several); a second mismatch is an error naming both hashes.
pub(crate) async fn fetch_file<S: ShardStore, C: HttpClient>(
    ctx: &Ctx<'_, S, C>,
    job: &FileJob<'_>,
    observer: &Observer<'_>,
) -> Result<Fetched, DownloadError> {
    let mut mirror = 0usize;
    let mut downloads = 0u32;
    loop {
        let fetched = fetch_once(ctx, job, observer, &mut mirror).await?;
        downloads += 1;
        let Some(expected) = job.expected else {
            return Ok(fetched);
        };
        if expected.eq_ignore_ascii_case(&fetched.hash) {
            return Ok(fetched);
        }
        // The bytes are wrong: none of them may stay.
        observer.void();
        ctx.store.remove_partial_file(ctx.model, job.file).await?;
        ctx.tracker.discard(fetched.len);
        let url = job.urls[mirror % job.urls.len()].clone();
        if downloads >= 2 {
            return Err(DownloadError::HashMismatch {
                what: job.what.clone(),
                algorithm: DownloadError::alg_name(job.algorithm),
                expected: expected.to_ascii_lowercase(),
                actual: fetched.hash,
                url,
                attempts: downloads,
            });
        }
        mirror += 1;
        ctx.tracker.emit(DownloadEvent::Restarting {
            file: job.file.to_string(),
            reason: format!(
                "{} mismatch (expected {expected}, got {}); fetching it again from {}",
                job.algorithm.display_name(),
                fetched.hash,
                job.urls[mirror % job.urls.len()]
            ),
        });
    }
}

/// One download of the file to its end (resuming what is stored), retrying network errors.
/// Returns the hash of what is stored, not yet compared.
async fn fetch_once<S: ShardStore, C: HttpClient>(
    ctx: &Ctx<'_, S, C>,
    job: &FileJob<'_>,
    observer: &Observer<'_>,
    mirror: &mut usize,
) -> Result<Fetched, DownloadError> {
    let Ctx {
        store,
        client,
        model,
        tracker,
        options,
        pool,
    } = ctx;
    let file = job.file;
    let mut size = job.size;
    let new_hasher = || {
        Hashing::new(
            vec![HashKind::Plain(job.algorithm)],
            usize::from(options.hash_threads),
            *pool,
        )
    };
    let mut hasher = new_hasher()?;
    let mut have = store.partial_len(model, file).await?.unwrap_or(0);
    let mut truncate = false;
    if size.is_some_and(|s| have > s) {
        have = 0;
        truncate = true;
    }
    if have > 0 {
        // Bytes from an earlier run: hash them first.
        hash_stored(
            *store,
            model,
            file,
            have,
            options.read_chunk,
            &hasher,
            observer,
        )
        .await?;
        tracker.present(have);
    }
    tracker.emit(DownloadEvent::FileStarted {
        file: file.to_string(),
        index: job.index,
        count: job.count,
        from: have,
    });
    let mut writer = Some(store.append(model, file, truncate).await?);
    let mut failures = 0u32;
    let mut restarts = 0u32;
    'request: while size != Some(have) {
        let url = &job.urls[*mirror % job.urls.len()];
        let response = client.get(url, (have > 0).then_some(have)).await;
        let mut response = match response {
            Err(e) if e.kind == HttpErrorKind::InvalidUrl => {
                return Err(DownloadError::Protocol {
                    url: url.clone(),
                    message: e.message,
                })
            }
            Err(e) => {
                back_off(
                    *client,
                    tracker,
                    &options.retry,
                    url,
                    &mut failures,
                    e.message,
                )
                .await?;
                *mirror += 1;
                continue;
            }
            Ok(r) => r,
        };
        // Why to start over from byte 0, if the response does not continue where we are.
        let mut restart = None;
        match response.status {
            206 if have > 0 => {
                let range = response
                    .headers
                    .content_range
                    .as_deref()
                    .and_then(parse_content_range);
                match range {
                    Some(r) if r.start == have && size.is_none_or(|s| r.total == Some(s)) => {
                        if size.is_none() {
                            size = r.total;
                        }
                    }
                    _ => {
                        let got = &response.headers.content_range;
                        restart = Some(format!("bytes {have}- were answered with {got:?}"));
                    }
                }
            }
            200 | 206 => {
                if have > 0 {
                    restart = Some("the server does not support Range requests".to_string());
                }
                if size.is_none() && response.status == 200 {
                    size = response.headers.content_length;
                }
            }
            416 => {
                restart = Some(format!(
                    "the server cannot send bytes {have}- (HTTP 416): the file changed"
                ))
            }
            s if retryable(s) => {
                back_off(
                    *client,
                    tracker,
                    &options.retry,
                    url,
                    &mut failures,
                    format!("HTTP {s}"),
                )
                .await?;
                *mirror += 1;
                continue;
            }
            s => {
                return Err(DownloadError::Status {
                    url: url.clone(),
                    status: s,
                })
            }
        }
        if let Some(reason) = restart {
            restarts += 1;
            if restarts > 3 {
                return Err(DownloadError::Protocol {
                    url: url.clone(),
                    message: format!("{reason}, again after {} restarts", restarts - 1),
                });
            }
            tracker.emit(DownloadEvent::Restarting {
                file: file.to_string(),
                reason: reason.clone(),
            });
            observer.void();
            tracker.discard(have);
            hasher = new_hasher()?;
            // Drop (and flush) the old writer before the file is emptied.
            drop(writer.take());
            writer = Some(store.append(model, file, true).await?);
            have = 0;
            if response.status != 200 {
                // Ask again without a range.
                continue;
            }
            if size.is_none() {
                size = response.headers.content_length;
            }
        }
        if job.size.is_none() {
            if let Some(s) = size {
                tracker.set_total(s);
                // A file of unknown size (a GGUF) meets the quota check here, before its body
                // is stored (an RDRR model is checked as a whole before its first shard).
                if let Some(available) = store.available_bytes().await? {
                    let needed = s.saturating_sub(have);
                    if needed > available {
                        return Err(DownloadError::Quota { needed, available });
                    }
                }
            }
        }
        let Some(w) = writer.as_mut() else {
            return Err(DownloadError::Protocol {
                url: url.clone(),
                message: "internal: no writer".to_string(),
            });
        };
        loop {
            let chunk = match response.body.next_chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    let reason = format!("{} after {have} bytes", e.message);
                    back_off(*client, tracker, &options.retry, url, &mut failures, reason).await?;
                    continue 'request;
                }
            };
            // Never store more than the declared size: extra bytes are the server's error.
            let take = match size {
                Some(s) => chunk
                    .len()
                    .min(usize::try_from(s - have).unwrap_or(usize::MAX)),
                None => chunk.len(),
            };
            let data = chunk.slice(..take);
            observer.admit(have + take as u64)?;
            w.write_shared(&data).await?;
            observer.bytes(have, &data).await?;
            hasher.update(0, data).await?;
            have += take as u64;
            failures = 0;
            tracker.received(take as u64);
            if size == Some(have) {
                break;
            }
        }
        match size {
            None => size = Some(have),
            Some(s) if have < s => {
                let reason = format!("the body ended after {have} of {s} bytes");
                back_off(*client, tracker, &options.retry, url, &mut failures, reason).await?;
            }
            Some(_) => {}
        }
    }
    if let Some(w) = writer.take() {
        w.finish().await?;
    }
    let hash = hasher.finish().await?.pop().unwrap_or_default();
    Ok(Fetched { hash, len: have })
}
