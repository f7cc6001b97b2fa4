//! The model store in the browser: download a model into OPFS (verified, resumable,
//! cancellable, with progress), list, inspect and delete cached models.
//!
//! ```js
//! const ctl = new AbortController();
//! const summary = await opfs_download('http://127.0.0.1:8080/', {
//!   name: 'smollm2', parallel: 4, signal: ctl.signal,
//!   onProgress: (e) => { if (e.type === 'progress') console.log(e.done, e.total, e.eta_s); },
//! });
//! await opfs_list();          // [{ name, kind, bytes, shards, location }]
//! await opfs_delete('smollm2');
//! ```
//!
//! Errors are `Error`s with a `code` (see `errors.rs`): `IntegrityError`, `QuotaExceeded`,
//! `NetworkError`, `NotFound`, `AbortError`, ...

use std::cell::Cell;
use std::time::Duration;

use futures_util::future::{AbortHandle, Abortable};
use js_sys::{Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use web_sys::AbortSignal;

use super::errors::WebError;
use super::fetch::FetchClient;
use super::{install_panic_hook, to_js};
use crate::storage::download::{
    as_pool, download_gguf, download_rdrr, fetches_settled, run_job, DownloadError, DownloadEvent,
    DownloadOptions, DownloadSummary, JobError, JobLink, JobSpec, RetryPolicy,
};
use crate::storage::opfs::OpfsStore;
use crate::storage::{model_name_from_url, ShardStore};

/// Progress events closer together than this are dropped by default (the last one always
/// goes out).
const PROGRESS_EVERY_MS: f64 = 100.0;

/// A plain JS object from name/value pairs.
fn object(fields: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in fields {
        let _ = Reflect::set(&o, &(*k).into(), v);
    }
    o.into()
}

/// The options object of [`opfs_download`].
struct Options {
    name: Option<String>,
    kind: Option<String>,
    sha256: Option<String>,
    signal: Option<AbortSignal>,
    on_progress: Option<Function>,
    progress_every_ms: f64,
    /// Write with writable streams even in a worker.
    streams: bool,
    download: DownloadOptions,
}

fn bad(what: &str) -> WebError {
    WebError::new("BadArgument", format!("opfs_download: option {what}"))
}

fn read_options(value: &JsValue) -> Result<Options, WebError> {
    let mut o = Options {
        name: None,
        kind: None,
        sha256: None,
        signal: None,
        on_progress: None,
        progress_every_ms: PROGRESS_EVERY_MS,
        streams: false,
        download: DownloadOptions::default(),
    };
    if value.is_undefined() || value.is_null() {
        return Ok(o);
    }
    let get = |key: &str| {
        Reflect::get(value, &key.into())
            .ok()
            .filter(|v| !v.is_undefined() && !v.is_null())
    };
    let string = |key: &str| -> Result<Option<String>, WebError> {
        get(key)
            .map(|v| {
                v.as_string()
                    .ok_or_else(|| bad(&format!("{key} must be a string")))
            })
            .transpose()
    };
    let number = |key: &str| -> Result<Option<f64>, WebError> {
        get(key)
            .map(|v| {
                v.as_f64()
                    .filter(|n| n.is_finite() && *n >= 0.0)
                    .ok_or_else(|| bad(&format!("{key} must be a number >= 0")))
            })
            .transpose()
    };
    o.name = string("name")?;
    o.kind = string("kind")?;
    o.sha256 = string("sha256")?;
    if let Some(v) = get("signal") {
        o.signal = Some(
            v.dyn_into()
                .map_err(|_| bad("signal must be an AbortSignal"))?,
        );
    }
    if let Some(v) = get("onProgress") {
        o.on_progress = Some(
            v.dyn_into()
                .map_err(|_| bad("onProgress must be a function"))?,
        );
    }
    match string("writer")?.as_deref() {
        None | Some("auto") => {}
        Some("stream") => o.streams = true,
        Some(other) => {
            return Err(bad(&format!(
                "writer must be 'auto' or 'stream', not {other:?}"
            )))
        }
    }
    if let Some(ms) = number("progressIntervalMs")? {
        o.progress_every_ms = ms;
    }
    if let Some(n) = number("parallel")? {
        o.download.parallel = (n as usize).max(1);
    }
    if let Some(v) = get("fetchOnWorkers") {
        o.download.fetch_on_workers = v
            .as_bool()
            .ok_or_else(|| bad("fetchOnWorkers must be a boolean"))?;
    }
    if let Some(n) = number("groupBuffer")? {
        o.download.group_buffer = n as u64;
    }
    if let Some(v) = get("checkGroups") {
        o.download.check_groups = v
            .as_bool()
            .ok_or_else(|| bad("checkGroups must be a boolean"))?;
    }
    if let Some(v) = get("mirrors") {
        let array: js_sys::Array = v.dyn_into().map_err(|_| bad("mirrors must be an array"))?;
        o.download.mirrors = array
            .iter()
            .map(|m| {
                m.as_string()
                    .ok_or_else(|| bad("mirrors must hold strings"))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(n) = number("retries")? {
        o.download.retry.attempts = n as u32;
    }
    if let Some(v) = get("hashPool") {
        o.download.hash_pool = Some(as_pool(v).ok_or_else(|| {
            bad("hashPool must be a HashPool (js/hash-pool.js): ready, stream, update, drained, finish, release")
        })?);
    }
    if let Some(ms) = number("retryDelayMs")? {
        let initial = Duration::from_millis(ms as u64);
        o.download.retry = RetryPolicy {
            initial_delay: initial,
            max_delay: initial.saturating_mul(64).max(initial),
            ..o.download.retry
        };
    }
    Ok(o)
}

/// Sends download events to the `onProgress` callback as plain objects.
struct Events {
    callback: Option<Function>,
    every_ms: f64,
    last_progress: Cell<f64>,
    /// The shard most recently started (1-based) and the count, for progress events.
    shard: Cell<(usize, usize)>,
    /// Files verified (earlier runs' included) and files in all, for `fileVerified` events.
    files: Cell<(usize, usize)>,
}

impl Events {
    fn send(&self, event: &DownloadEvent) {
        let Some(f) = &self.callback else {
            return;
        };
        let n = |v: u64| JsValue::from(v as f64);
        let value = match event {
            DownloadEvent::Planned {
                files,
                total_bytes,
                verified_files,
                verified_bytes,
            } => {
                self.files.set((*verified_files, *files));
                object(&[
                    ("type", "planned".into()),
                    ("files", (*files).into()),
                    ("total_bytes", n(*total_bytes)),
                    ("verified_files", (*verified_files).into()),
                    ("verified_bytes", n(*verified_bytes)),
                ])
            }
            DownloadEvent::FileStarted {
                file,
                index,
                count,
                from,
            } => {
                self.shard.set((index + 1, *count));
                object(&[
                    ("type", "fileStarted".into()),
                    ("file", file.into()),
                    ("index", (*index).into()),
                    ("count", (*count).into()),
                    ("from", n(*from)),
                ])
            }
            DownloadEvent::Progress(p) => {
                let now = js_sys::Date::now();
                let last = p.total > 0 && p.done >= p.total;
                if !last && now - self.last_progress.get() < self.every_ms {
                    return;
                }
                self.last_progress.set(now);
                let (shard, shards) = self.shard.get();
                object(&[
                    ("type", "progress".into()),
                    ("done", n(p.done)),
                    ("total", n(p.total)),
                    ("files_done", p.files_done.into()),
                    ("files_total", p.files_total.into()),
                    ("shard", shard.into()),
                    ("shards", shards.into()),
                    ("rate", p.rate.into()),
                    (
                        "eta_s",
                        p.eta.map_or(JsValue::NULL, |d| d.as_secs_f64().into()),
                    ),
                ])
            }
            DownloadEvent::Retrying {
                url,
                failures,
                delay,
                reason,
            } => object(&[
                ("type", "retrying".into()),
                ("url", url.into()),
                ("failures", (*failures).into()),
                ("delay_ms", (delay.as_secs_f64() * 1000.0).into()),
                ("reason", reason.into()),
            ]),
            DownloadEvent::Restarting { file, reason } => object(&[
                ("type", "restarting".into()),
                ("file", file.into()),
                ("reason", reason.into()),
            ]),
            DownloadEvent::FileVerified { file, index } => {
                let (done, total) = self.files.get();
                self.files.set((done + 1, total));
                object(&[
                    ("type", "fileVerified".into()),
                    ("file", file.into()),
                    ("index", (*index).into()),
                    ("files_done", (done + 1).into()),
                    ("files_total", total.into()),
                ])
            }
            DownloadEvent::GroupsChecked {
                streamed,
                read_back,
                read_back_bytes,
            } => object(&[
                ("type", "groupsChecked".into()),
                ("streamed", (*streamed).into()),
                ("read_back", (*read_back).into()),
                ("read_back_bytes", n(*read_back_bytes)),
            ]),
        };
        // A throwing callback must not break the download.
        if let Err(e) = f.call1(&JsValue::NULL, &value) {
            web_sys::console::error_2(&"opfs_download: onProgress threw".into(), &e);
        }
    }
}

/// Calls `AbortHandle::abort` when the signal fires; removes its listener when dropped.
struct AbortListener {
    signal: AbortSignal,
    closure: Closure<dyn FnMut()>,
}

impl AbortListener {
    fn new(signal: AbortSignal, handle: AbortHandle) -> AbortListener {
        let closure = Closure::<dyn FnMut()>::new(move || handle.abort());
        let _ = signal.add_event_listener_with_callback("abort", closure.as_ref().unchecked_ref());
        AbortListener { signal, closure }
    }
}

impl Drop for AbortListener {
    fn drop(&mut self) {
        let _ = self
            .signal
            .remove_event_listener_with_callback("abort", self.closure.as_ref().unchecked_ref());
    }
}

fn aborted() -> WebError {
    WebError::new(
        "AbortError",
        "the download was aborted; what was verified is kept, and calling opfs_download again \
         resumes it",
    )
}

#[derive(serde::Serialize)]
struct DownloadReport {
    #[serde(flatten)]
    summary: DownloadSummary,
    /// What `navigator.storage.persist()` answered (`null` in a worker).
    persisted: Option<bool>,
    /// How the model's files were written: `sync` (sync access handles: in a dedicated worker,
    /// or an RDRR model's shards on the hash workers) or `stream` (writable streams).
    writer: &'static str,
}

/// Download the model at `url` into this origin's OPFS: an RDRR model (its folder URL or its
/// `manifest.json`), or one GGUF file (a URL ending in `.gguf`, or `kind: 'gguf'`).
///
/// `options` (all optional): `name` (default: from the URL), `parallel` (shards at once,
/// default 4), `checkGroups` (default true), `groupBuffer` (bytes of a group that arrive
/// before their turn kept in wasm memory to hash in order, default 16 MiB; with hash workers
/// they wait on the workers, up to 256 MiB or this), `mirrors` (base URLs for the shards),
/// `retries`, `retryDelayMs`, `sha256` (a GGUF's expected hash), `kind`, `hashPool` (the
/// package's `HashPool`: hashes run on its workers; the caller closes it), `writer` (`'auto'`:
/// sync access handles where there are some, i.e. in a dedicated worker, else writable
/// streams; `'stream'`: writable streams everywhere), `signal` (an
/// `AbortSignal`: aborting leaves a resumable partial download), `onProgress` (called with
/// `{ type: 'planned' | 'fileStarted' | 'progress' | 'retrying' | 'restarting' |
/// 'fileVerified' | 'groupsChecked', ... }`; `progress` events carry `done`, `total`,
/// `files_done`, `files_total`, `shard`, `shards`, `rate` (bytes/s) and `eta_s`, at most every
/// `progressIntervalMs`, default 100).
///
/// Before anything is written, the room left (`navigator.storage.estimate()`) is compared
/// with what the download needs (`QuotaExceeded` otherwise), and `navigator.storage.persist()`
/// is asked. Resolves to the download summary (`name`, `bytes`, `fetched_bytes`,
/// `fetched_files`, `reused_files`, `seconds` (of which `setup_seconds` before the first shard
/// started and `finish_seconds` after the last was verified), `already_present`, `persisted`,
/// `writer`, `hash_workers`, `warnings`, ...).
#[wasm_bindgen]
pub async fn opfs_download(url: String, options: JsValue) -> Result<JsValue, JsValue> {
    install_panic_hook();
    let o = read_options(&options)?;
    let name = match o.name.clone().or_else(|| model_name_from_url(&url)) {
        Some(n) => n,
        None => {
            return Err(WebError::new(
                "BadArgument",
                format!("no model name can be made from {url:?}: give one with the name option"),
            )
            .into())
        }
    };
    if o.signal.as_ref().is_some_and(AbortSignal::aborted) {
        return Err(aborted().into());
    }
    let mut store = OpfsStore::open().await.map_err(WebError::from)?;
    if o.streams {
        store.use_writable_streams();
    }
    let client = FetchClient::default();
    let events = Events {
        callback: o.on_progress.clone(),
        every_ms: o.progress_every_ms,
        last_progress: Cell::new(f64::NEG_INFINITY),
        shard: Cell::new((0, 0)),
        files: Cell::new((0, 0)),
    };
    let on_event = |e: &DownloadEvent| events.send(e);
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(&url)
        .to_ascii_lowercase();
    let gguf = match o.kind.as_deref() {
        Some("gguf") => true,
        Some("rdrr") => false,
        None => path.ends_with(".gguf"),
        Some(other) => {
            return Err(bad(&format!("kind must be 'rdrr' or 'gguf', not {other:?}")).into())
        }
    };
    if !gguf && o.sha256.is_some() {
        return Err(bad(
            "sha256 (integrity) is the hash of a single GGUF file; an RDRR model's manifest \
             carries a hash for every shard, checked as each one downloads",
        )
        .into());
    }
    let persisted = store.persist().await;
    let download = async {
        if gguf {
            download_gguf(
                &store,
                &client,
                &url,
                &name,
                o.sha256.as_deref(),
                &o.download,
                &on_event,
            )
            .await
        } else {
            download_rdrr(&store, &client, &url, &name, &o.download, &on_event).await
        }
    };
    let (handle, registration) = AbortHandle::new_pair();
    let _listener = o.signal.clone().map(|s| AbortListener::new(s, handle));
    match Abortable::new(download, registration).await {
        Err(_) => {
            // Resolve only once what the cancelled download wrote is in OPFS (its shards'
            // jobs on the hash workers included).
            store.settle().await;
            if let Some(pool) = &o.download.hash_pool {
                fetches_settled(pool).await;
            }
            Err(aborted().into())
        }
        Ok(Err(e)) => Err(WebError::from(e).into()),
        Ok(Ok(summary)) => {
            // An RDRR model's shards were written on the hash workers when they ran.
            let on_workers = !gguf && summary.hash_workers > 0 && o.download.fetch_on_workers;
            to_js(&DownloadReport {
                summary,
                persisted,
                writer: if on_workers || store.writes_with_sync_handles() {
                    "sync"
                } else {
                    "stream"
                },
            })
        }
    }
}

/// The complete models in OPFS: `[{ name, kind, bytes, shards, location }]`, by name.
#[wasm_bindgen]
pub async fn opfs_list() -> Result<JsValue, JsValue> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    to_js(&store.list().await.map_err(WebError::from)?)
}

/// The downloads in progress (never complete models): `[{ name, source, verified, bytes }]`.
#[wasm_bindgen]
pub async fn opfs_list_partial() -> Result<JsValue, JsValue> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    to_js(&store.list_partial().await.map_err(WebError::from)?)
}

/// The complete model `name`, or `null`.
#[wasm_bindgen]
pub async fn opfs_get(name: String) -> Result<JsValue, JsValue> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    match store.get(&name).await.map_err(WebError::from)? {
        Some(m) => to_js(&m),
        None => Ok(JsValue::NULL),
    }
}

/// Delete the model `name`, complete or partial; true when something was removed.
#[wasm_bindgen]
pub async fn opfs_delete(name: String) -> Result<bool, JsValue> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    Ok(store.delete(&name).await.map_err(WebError::from)?)
}

#[derive(serde::Serialize)]
struct Usage {
    /// Bytes of the store's files (complete and partial models).
    bytes_used: u64,
    /// `navigator.storage.estimate()`: the origin's usage and quota.
    origin_usage: u64,
    quota: Option<u64>,
    available: Option<u64>,
}

/// `{ bytes_used, origin_usage, quota, available }`: the store's bytes and the origin's quota.
#[wasm_bindgen]
pub async fn opfs_usage() -> Result<JsValue, JsValue> {
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    let bytes_used = store.bytes_used().await.map_err(WebError::from)?;
    let (origin_usage, quota) = store.estimate().await.map_err(WebError::from)?;
    to_js(&Usage {
        bytes_used,
        origin_usage,
        quota,
        available: quota.map(|q| q.saturating_sub(origin_usage)),
    })
}

/// A hash worker's side of a download's shard (js/hash-worker.js): fetch it into the download's
/// partial folder in OPFS (through a sync access handle), hashed here, reporting to the
/// download through `link`; see `storage::download::worker_fetch`. `spec` is the job as JSON;
/// resolves to `{"hash","len"}` as JSON, rejects with the failure as JSON (so the download
/// reports it as its own), or with `{"Other":{"message":"aborted"}}` once `signal` fires
/// and the shard's file is closed.
#[wasm_bindgen]
pub async fn download_fetch_job(
    spec: String,
    link: JsValue,
    signal: Option<AbortSignal>,
) -> Result<String, JsValue> {
    install_panic_hook();
    let json_err = |e: JobError| JsValue::from(serde_json::to_string(&e).unwrap_or_default());
    let spec: JobSpec = serde_json::from_str(&spec).map_err(|e| {
        json_err(JobError::Other {
            message: format!("a fetch job that cannot be read: {e}"),
        })
    })?;
    let link: JobLink = link.unchecked_into();
    let store = OpfsStore::open()
        .await
        .map_err(|e| json_err(DownloadError::from(e).into()))?
        .without_state_updates();
    let client = FetchClient::default();
    let (handle, registration) = AbortHandle::new_pair();
    let _listener = signal.map(|s| AbortListener::new(s, handle));
    let result = Abortable::new(run_job(&store, &client, &spec, &link), registration).await;
    store.settle().await;
    match result {
        Err(_) => Err(json_err(JobError::Other {
            message: "aborted".to_string(),
        })),
        Ok(Err(e)) => Err(json_err(e.into())),
        Ok(Ok(done)) => Ok(serde_json::to_string(&done).unwrap_or_default()),
    }
}
