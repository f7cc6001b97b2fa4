//! Shards fetched on the browser's hash workers. One thread that reads every shard from the
//! network, writes it to OPFS and hands it to the hashers is capped well under the hashing
//! speed: in Chromium a worker's stream reader tops out at about half of one core's BLAKE3
//! speed, and OPFS writes run at a few hundred MB/s a thread (so one thread cannot keep up
//! with BLAKE3). So with the pool running, each shard is a job on one of its
//! workers: [`run_job`] there does what [`fetch_file`] does in the download's own thread
//! (resume, retries, mirrors, the one refetch after a mismatch; the shard hashed inline, written
//! through a sync access handle), and [`fetch_file_on_worker`] here drives it: progress and
//! events come back as messages, and, when the download checks group hashes, the shard's bytes
//! too, in 1 MiB pieces acknowledged one by one (the worker waits when 4 MiB are unacknowledged),
//! for the group checks, which hash them on the pool as before; or rather only the bytes of the
//! group streams that straddle shards: a stream whose bytes all lie in the shard (a whole group,
//! a BLAKE3 group's 1 MiB block) the worker hashes itself and sends its digest (`local.rs`).
//!
//! The worker does not touch the download's state file: the download marks a shard verified
//! once its job reports the expected hash, and forgets a stale mark before the job starts.

use std::cell::{Cell, RefCell};

use bytes::Bytes;
use futures_util::StreamExt;
use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::prelude::*;

use super::fetch::{fetch_file, Ctx, Fetched, FileJob, Observer};
use super::hash_kind::HashKind;
use super::hash_pool::HashPool;
use super::http::HttpClient;
use super::link::{JobLink, LinkObserver};
use super::local::{merge, LocalHashes};
use super::observe::StreamObserver;
use super::relay::{Counts, JobDone, JobError, JobEvent, JobSpec};
use super::{DownloadError, DownloadEvent, DownloadOptions, Tracker};
use crate::store::ShardStore;

/// Progress a worker reports at most every this many bytes (and at every other event).
const COUNT_EVERY: u64 = 1 << 20;

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The worker's side: fetch `spec`'s shard into `store` (the same model folder the download
/// began; this store must not write the state file), hashing it here, reporting through `link`.
pub async fn run_job<S: ShardStore, C: HttpClient>(
    store: &S,
    client: &C,
    spec: &JobSpec,
    link: &JobLink,
) -> Result<JobDone, DownloadError> {
    let algorithm = spec.hash_algorithm()?;
    let options = DownloadOptions {
        parallel: 1,
        retry: spec.retry(),
        read_chunk: spec.read_chunk,
        hash_threads: false,
        fetch_on_workers: false,
        check_groups: false,
        ..DownloadOptions::default()
    };
    let sent = Cell::new(Counts::default());
    let send_counts = |c: Counts| {
        sent.set(c);
        link.send(&format!(
            "c{{\"fetched\":{},\"done\":{}}}",
            c.fetched, c.done
        ));
    };
    let latest = Cell::new(Counts::default());
    let on_event = |e: &DownloadEvent| {
        if let DownloadEvent::Progress(p) = e {
            let c = Counts {
                fetched: p.fetched,
                done: p.done,
            };
            latest.set(c);
            let last = sent.get();
            if c.fetched - last.fetched >= COUNT_EVERY || c.done.abs_diff(last.done) >= COUNT_EVERY
            {
                send_counts(c);
            }
        } else if let Some(e) = JobEvent::from_event(e) {
            // The counts first, when they moved, so that progress and events keep their order.
            if latest.get() != sent.get() {
                send_counts(latest.get());
            }
            link.send(&format!("e{}", json(&e)));
        }
    };
    let tracker = Tracker::new(&on_event);
    let ctx = Ctx {
        store,
        client,
        model: &spec.model,
        options: &options,
        tracker: &tracker,
        pool: None,
    };
    let job = FileJob {
        file: &spec.file,
        what: spec.what.clone(),
        index: spec.index,
        count: spec.count,
        urls: spec.urls.clone(),
        size: spec.size,
        algorithm,
        expected: spec.expected.as_deref(),
    };
    let (fetched, local) = if spec.observe {
        let observer = LinkObserver {
            link,
            piece: RefCell::new(Vec::new()),
            start: Cell::new(0),
            local: RefCell::new(
                LocalHashes::new(spec.local.clone()).map_err(DownloadError::Worker)?,
            ),
            wanted: spec.wanted.clone().map(merge),
        };
        let fetched = fetch_file(&ctx, &job, &Observer::Worker(&observer)).await?;
        observer.flush().await;
        (fetched, observer.local.into_inner().finish())
    } else {
        (fetch_file(&ctx, &job, &Observer::None).await?, Vec::new())
    };
    let p = tracker.progress();
    send_counts(Counts {
        fetched: p.fetched,
        done: p.done,
    });
    Ok(JobDone {
        hash: fetched.hash,
        len: fetched.len,
        local,
    })
}

/// Cancels a job whose download stopped waiting for it.
struct CancelOnDrop<'a> {
    pool: &'a HashPool,
    id: u32,
    armed: Cell<bool>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed.get() {
            self.pool.fetch_cancel(self.id);
        }
    }
}

fn field(m: &JsValue, key: &str) -> JsValue {
    Reflect::get(m, &key.into()).unwrap_or(JsValue::UNDEFINED)
}

fn parse<T: serde::de::DeserializeOwned>(m: &JsValue, key: &str) -> Result<T, DownloadError> {
    let text = field(m, key).as_string().unwrap_or_default();
    serde_json::from_str(&text)
        .map_err(|e| DownloadError::Worker(format!("an unreadable message ({e}): {text}")))
}

/// The download's side: `job` fetched on one of `pool`'s workers, its bytes shown to
/// `observer` (when there is one) as they arrive, its progress and events passed on.
pub(crate) async fn fetch_file_on_worker<S: ShardStore, C: HttpClient>(
    ctx: &Ctx<'_, S, C>,
    pool: &HashPool,
    job: &FileJob<'_>,
    observer: &Observer<'_>,
) -> Result<Fetched, DownloadError> {
    let observes = !matches!(observer, Observer::None);
    let options = ctx.options;
    let (local, wanted) = match observer.take_local() {
        Some((local, wanted)) => (local, Some(wanted)),
        None => (Vec::new(), None),
    };
    let spec = JobSpec {
        model: ctx.model.to_string(),
        file: job.file.to_string(),
        what: job.what.clone(),
        index: job.index,
        count: job.count,
        urls: job.urls.clone(),
        size: job.size,
        algorithm: HashKind::Plain(job.algorithm).stream_name().0.to_string(),
        expected: job.expected.map(str::to_string),
        retry_attempts: options.retry.attempts,
        retry_initial_ms: options.retry.initial_delay.as_millis() as u64,
        retry_max_ms: options.retry.max_delay.as_millis() as u64,
        read_chunk: options.read_chunk,
        observe: observes,
        local,
        wanted,
    };
    let (tx, mut rx) = futures_channel::mpsc::unbounded::<JsValue>();
    let on_message = Closure::<dyn FnMut(JsValue)>::new(move |m: JsValue| {
        let _ = tx.unbounded_send(m);
    });
    let id = pool
        .fetch_job(&json(&spec), on_message.as_ref().unchecked_ref())
        .map_err(|e| super::hash_pool::failed("cannot start a fetch", e))?;
    let cancel = CancelOnDrop {
        pool,
        id,
        armed: Cell::new(true),
    };
    let mut last = Counts::default();
    while let Some(m) = rx.next().await {
        match field(&m, "t").as_string().as_deref() {
            Some("bytes") => {
                let offset = field(&m, "offset").as_f64().unwrap_or(0.0) as u64;
                let data: Uint8Array = field(&m, "data").unchecked_into();
                let bytes = Bytes::from(data.to_vec());
                observer.bytes(offset, &bytes).await?;
                pool.fetch_ack(id, bytes.len() as f64);
            }
            Some("void") => observer.void(),
            Some("json") => {
                // `c` and the progress counts, or `e` and an event, as JSON.
                let text = field(&m, "json").as_string().unwrap_or_default();
                let unreadable = |e: serde_json::Error| {
                    DownloadError::Worker(format!("an unreadable message ({e}): {text}"))
                };
                match text.split_at_checked(1) {
                    Some(("c", body)) => {
                        let c: Counts = serde_json::from_str(body).map_err(unreadable)?;
                        ctx.tracker.adjust(
                            c.fetched.saturating_sub(last.fetched),
                            c.done as i64 - last.done as i64,
                        );
                        last = c;
                    }
                    Some(("e", body)) => {
                        let e: JobEvent = serde_json::from_str(body).map_err(unreadable)?;
                        ctx.tracker.emit(e.into_event());
                    }
                    _ => {}
                }
            }
            Some("end") => {
                cancel.armed.set(false);
                if field(&m, "ok").is_string() {
                    let done: JobDone = parse(&m, "ok")?;
                    observer.local_done(done.local);
                    return Ok(Fetched {
                        hash: done.hash,
                        len: done.len,
                    });
                }
                let e: JobError = parse(&m, "err")?;
                return Err(e.into());
            }
            _ => {}
        }
    }
    Err(DownloadError::Worker(
        "the fetch job ended without an answer".to_string(),
    ))
}
