//! Fetching models into a [`ShardStore`], verified and resumable: the same logic natively
//! (reqwest on tokio, [`FsStore`](super::FsStore)) and in the browser (`fetch`, OPFS).
//!
//! - [`download_rdrr`]: `manifest.json` and `tensors.json` first (validated: no file name may
//!   leave the model folder, every shard must carry a hash), then the shards, several at once,
//!   each hashed while it streams and checked against the manifest. A shard that does not
//!   match is deleted and fetched once more (from the next mirror when there are mirrors), then
//!   the download fails naming the shard and both hashes. Group hashes are checked too, mostly
//!   while the shards stream (see `groups.rs`). Only then is the model committed.
//! - [`download_gguf`]: one file streamed to the store in chunks, with an optional SHA-256; its
//!   header parsed as it arrives, and no byte past the end of its tensors stored.
//! - An interrupted file continues with `Range: bytes=N-` (after hashing the N bytes already
//!   stored), or starts over when the server answers `200`; verified files are never fetched
//!   again. Network errors and `5xx` are retried with exponential backoff; other statuses
//!   (`404`, ...) fail at once, naming the URL.
//! - Cancelling is dropping the future (`futures_util::future::Abortable` with an
//!   `AbortHandle`, Ctrl-C natively, an `AbortSignal` in the browser): every await point leaves
//!   a state the next call resumes from.

mod fetch;
mod gguf;
mod gguf_header;
mod groups;
mod hash_kind;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
mod hash_pool;
mod hashing;
mod http;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
mod link;
mod local;
#[cfg(all(not(target_arch = "wasm32"), feature = "http"))]
mod native;
mod observe;
mod range;
mod rdrr;
mod relay;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
mod worker_fetch;

use std::cell::Cell;
use std::time::Duration;

use web_time::Instant;

pub use gguf::{download_gguf, GGUF_FILE};
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub use hash_pool::as_pool;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub use hash_pool::fetches_settled;
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub use hash_pool::HashPool;
pub use http::{
    parse_content_range, ContentRange, HttpBody, HttpClient, HttpError, HttpErrorKind,
    HttpResponse, ResponseHeaders,
};
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub use link::JobLink;
#[cfg(all(not(target_arch = "wasm32"), feature = "http"))]
pub use native::{ReqwestBody, ReqwestClient};
pub use range::{parse_range_header, range_response, ByteRangeSpec, RangeResponse};
pub use rdrr::{base_url, download_rdrr, join_url};
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub use relay::{JobError, JobSpec};
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub use worker_fetch::run_job;

use super::store::{check_model_name, ModelKind, ShardStore, StoreError};
use crate::formats::rdrr::{HashAlgorithm, RdrrError};

/// True when the URL names a GGUF file rather than an RDRR folder.
pub fn is_gguf_url(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.to_ascii_lowercase().ends_with(".gguf")
}

/// Download the model at `url` into `store` as `name`: a GGUF file (a URL ending in `.gguf`,
/// or any URL whose SHA-256 is given) or an RDRR folder ([`download_gguf`],
/// [`download_rdrr`]).
pub async fn pull<S: ShardStore, C: HttpClient>(
    store: &S,
    client: &C,
    url: &str,
    name: &str,
    sha256: Option<&str>,
    options: &DownloadOptions,
    events: &dyn Fn(&DownloadEvent),
) -> Result<DownloadSummary, DownloadError> {
    if is_gguf_url(url) || sha256.is_some() {
        download_gguf(store, client, url, name, sha256, options, events).await
    } else {
        download_rdrr(store, client, url, name, options, events).await
    }
}

/// How many times, and how patiently, failed requests are retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Failed attempts in a row (without a byte of progress between them) before giving up.
    pub attempts: u32,
    /// Delay after the first failure; doubled after each further one.
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait after the `failures`-th failure in a row (1-based).
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.saturating_sub(1).min(16);
        self.initial_delay
            .saturating_mul(factor)
            .min(self.max_delay)
    }
}

/// What a download does besides fetching.
#[derive(Debug, Clone)]
pub struct DownloadOptions {
    /// Files fetched at once (at least 1). Default 4.
    pub parallel: usize,
    /// Base URLs the shards are fetched from, in order of preference (the manifest always
    /// comes from the URL given). Empty: the shards come from where the manifest is.
    pub mirrors: Vec<String>,
    pub retry: RetryPolicy,
    /// Check group hashes (default true).
    pub check_groups: bool,
    /// Bytes per read when hashing what is already stored (resumed files, groups).
    pub read_chunk: usize,
    /// Hash on threads of their own (natively; ignored in wasm): each file being fetched gets
    /// one, the group hashes one per file in flight (up to the cores). Default true.
    pub hash_threads: bool,
    /// The browser's hash workers (js/hash-pool.js): every hash of the download runs on them,
    /// when they start; else inline, with a warning in the summary.
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    pub hash_pool: Option<HashPool>,
    /// With the hash workers running: each shard fetched, written and hashed on one of them
    /// (sync access handles there), so that the network reads and the storage writes, not only
    /// the hashes, spread over threads (default true). Its bytes come back only for group hashes.
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    pub fetch_on_workers: bool,
    /// Bytes of group data that arrived before their turn (a group straddling two shards
    /// fetched at once) kept in memory to hash in order, at most; a group beyond it is read
    /// back from the store after the download. Default 256 MiB natively, 16 MiB in wasm; with
    /// the browser's hash workers the early bytes wait on the workers instead, up to 256 MiB
    /// (or this, if larger).
    pub group_buffer: u64,
}

/// [`DownloadOptions::group_buffer`]'s default.
pub const DEFAULT_GROUP_BUFFER: u64 = if cfg!(target_arch = "wasm32") {
    16 << 20
} else {
    256 << 20
};

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            parallel: 4,
            mirrors: Vec::new(),
            retry: RetryPolicy::default(),
            check_groups: true,
            read_chunk: 4 << 20,
            hash_threads: true,
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            hash_pool: None,
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            fetch_on_workers: true,
            group_buffer: DEFAULT_GROUP_BUFFER,
        }
    }
}

/// Where a download stands; sent after every chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Bytes present and hashed (earlier runs' included), and the model's size (0 while not
    /// known, for a GGUF whose server has not said yet).
    pub done: u64,
    pub total: u64,
    /// Bytes received over the network in this run.
    pub fetched: u64,
    /// Files verified, and how many there are to verify.
    pub files_done: usize,
    pub files_total: usize,
    /// Bytes per second received in this run.
    pub rate: f64,
    /// Time left at that rate, when known.
    pub eta: Option<Duration>,
}

/// What a download reports as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum DownloadEvent {
    /// The manifest was read (RDRR) or the first response arrived (GGUF).
    Planned {
        files: usize,
        total_bytes: u64,
        /// Files verified by an earlier run (never fetched again), and their bytes.
        verified_files: usize,
        verified_bytes: u64,
    },
    /// A file starts: shard `index` of `count`, from byte `from` (more than 0 when resuming).
    FileStarted {
        file: String,
        index: usize,
        count: usize,
        from: u64,
    },
    Progress(Progress),
    /// A request failed and will be tried again after `delay`.
    Retrying {
        url: String,
        failures: u32,
        delay: Duration,
        reason: String,
    },
    /// A file is fetched again from its first byte: `reason` says why.
    Restarting {
        file: String,
        reason: String,
    },
    FileVerified {
        file: String,
        index: usize,
    },
    /// Group hashes were checked: `streamed` while the shards arrived, `read_back` by reading
    /// `read_back_bytes` from the store.
    GroupsChecked {
        streamed: usize,
        read_back: usize,
        read_back_bytes: u64,
    },
}

/// What a finished download did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DownloadSummary {
    pub name: String,
    pub kind: ModelKind,
    /// The model's size in bytes (all its files).
    pub bytes: u64,
    /// Bytes received over the network in this run.
    pub fetched_bytes: u64,
    /// Files fetched in this run, and files an earlier run had verified already.
    pub fetched_files: usize,
    pub reused_files: usize,
    /// Group hashes checked.
    pub groups_checked: usize,
    /// Bytes read back from the store to check groups (0 when all were hashed while streaming).
    pub group_read_back_bytes: u64,
    pub seconds: f64,
    /// Of `seconds`: from the start to the first file's first request (manifest, checks, the
    /// hash workers' start), and from the last file verified to the end (group checks, commit);
    /// the rest is the transfer.
    pub setup_seconds: f64,
    pub finish_seconds: f64,
    /// True when the model was in the store already and nothing was fetched.
    pub already_present: bool,
    /// The SHA-256 of a GGUF file.
    pub sha256: Option<String>,
    /// Manifest problems that did not stop the download, and hash workers that did not start.
    pub warnings: Vec<String>,
    /// The browser's hash workers the download's hashes ran on (0: hashed in its own thread, or
    /// natively on threads).
    pub hash_workers: usize,
}

impl DownloadSummary {
    /// Nothing done yet for `name`.
    fn new(name: &str, kind: ModelKind) -> Self {
        DownloadSummary {
            name: name.to_string(),
            kind,
            bytes: 0,
            fetched_bytes: 0,
            fetched_files: 0,
            reused_files: 0,
            groups_checked: 0,
            group_read_back_bytes: 0,
            seconds: 0.0,
            setup_seconds: 0.0,
            finish_seconds: 0.0,
            already_present: false,
            sha256: None,
            warnings: Vec::new(),
            hash_workers: 0,
        }
    }

    /// Check `name` and start its summary; the flag is true (and the summary final) when the
    /// store holds the model complete already, so nothing is fetched.
    async fn if_present<S: ShardStore>(
        store: &S,
        name: &str,
        kind: ModelKind,
    ) -> Result<(Self, bool), DownloadError> {
        check_model_name(name)?;
        let mut summary = DownloadSummary::new(name, kind);
        if let Some(model) = store.get(name).await? {
            summary.bytes = model.bytes;
            summary.already_present = true;
        }
        let present = summary.already_present;
        Ok((summary, present))
    }
}

/// Why a download failed. Each names the URL, file, shard or group.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("GET {url}: {message} (gave up after {failures} failed attempts in a row; run the same command again to resume)")]
    Network {
        url: String,
        message: String,
        failures: u32,
    },
    #[error("GET {url}: HTTP {status}{}", status_hint(*status))]
    Status { url: String, status: u16 },
    #[error("GET {url}: {message}")]
    Protocol { url: String, message: String },
    #[error("{what}: {algorithm} mismatch after {attempts} downloads: expected {expected}, got {actual} (last from {url})")]
    HashMismatch {
        /// `shard 3 (shard_00003.bin)` or the file name.
        what: String,
        algorithm: &'static str,
        expected: String,
        actual: String,
        url: String,
        attempts: u32,
    },
    #[error("group {group:?}: {algorithm} mismatch: expected {expected}, computed {actual} from the verified shards (the manifest's tensor locations do not match the shard bytes)")]
    GroupMismatch {
        group: String,
        algorithm: &'static str,
        expected: String,
        actual: String,
    },
    #[error("{url}: {source}")]
    Manifest {
        url: String,
        #[source]
        source: RdrrError,
    },
    #[error("{url}: the manifest cannot be downloaded safely: {}", problems.join("; "))]
    InvalidManifest { url: String, problems: Vec<String> },
    #[error("GET {url}: more than the {max} bytes allowed for this file")]
    TooLarge { url: String, max: u64 },
    #[error("not enough room in the store: the download needs {needed} more bytes, {available} are available")]
    Quota { needed: u64, available: u64 },
    #[error("{url}: not a GGUF file (it starts with {magic:?})")]
    NotGguf { url: String, magic: String },
    /// A GGUF whose header does not parse, or whose length is not what its header describes.
    #[error("{url}: not a usable GGUF file: {message}")]
    BadGguf { url: String, message: String },
    #[error("hashing: {0}")]
    Hashing(String),
    /// A failure in a browser worker fetching a shard, by its message.
    #[error("fetch worker: {0}")]
    Worker(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn status_hint(status: u16) -> &'static str {
    match status {
        404 => " Not Found (is the URL right, and does the server hold every file of the model?)",
        401 | 403 => " (the server refuses access)",
        410 => " Gone",
        _ => "",
    }
}

impl DownloadError {
    /// The display name of a hash algorithm, for errors.
    pub(crate) fn alg_name(alg: HashAlgorithm) -> &'static str {
        alg.display_name()
    }
}

/// Progress bookkeeping shared by the files of one download (one task, so `Cell`s).
pub(crate) struct Tracker<'a> {
    events: &'a dyn Fn(&DownloadEvent),
    start: Instant,
    done: Cell<u64>,
    total: Cell<u64>,
    files_done: Cell<usize>,
    files_total: Cell<usize>,
    fetched: Cell<u64>,
    /// When the first file started and the last one was verified.
    first_started: Cell<Option<Duration>>,
    last_verified: Cell<Option<Duration>>,
}

impl<'a> Tracker<'a> {
    pub(crate) fn new(events: &'a dyn Fn(&DownloadEvent)) -> Tracker<'a> {
        Tracker {
            events,
            start: Instant::now(),
            done: Cell::new(0),
            total: Cell::new(0),
            files_done: Cell::new(0),
            files_total: Cell::new(0),
            fetched: Cell::new(0),
            first_started: Cell::new(None),
            last_verified: Cell::new(None),
        }
    }

    pub(crate) fn emit(&self, event: DownloadEvent) {
        match event {
            DownloadEvent::FileStarted { .. } if self.first_started.get().is_none() => {
                self.first_started.set(Some(self.elapsed()));
            }
            DownloadEvent::FileVerified { .. } => self.last_verified.set(Some(self.elapsed())),
            _ => {}
        }
        (self.events)(&event);
    }

    /// The summary's times: the whole, and its setup and finish (see `DownloadSummary`).
    pub(crate) fn time(&self, summary: &mut DownloadSummary) {
        let whole = self.elapsed();
        summary.seconds = whole.as_secs_f64();
        summary.setup_seconds = self.first_started.get().unwrap_or(whole).as_secs_f64();
        summary.finish_seconds = self
            .last_verified
            .get()
            .map_or(0.0, |t| whole.saturating_sub(t).as_secs_f64());
    }

    pub(crate) fn plan(&self, total: u64, files: usize) {
        self.total.set(total);
        self.files_total.set(files);
    }

    pub(crate) fn set_total(&self, total: u64) {
        self.total.set(total);
    }

    /// Bytes present and hashed without being fetched (resumed prefixes, verified files).
    pub(crate) fn present(&self, n: u64) {
        self.done.set(self.done.get() + n);
    }

    /// Bytes that turned out unusable (a restart or a mismatch).
    pub(crate) fn discard(&self, n: u64) {
        self.done.set(self.done.get().saturating_sub(n));
    }

    pub(crate) fn file_done(&self) {
        self.files_done.set(self.files_done.get() + 1);
    }

    pub(crate) fn fetched(&self) -> u64 {
        self.fetched.get()
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// `n` bytes received.
    pub(crate) fn received(&self, n: u64) {
        self.fetched.set(self.fetched.get() + n);
        self.done.set(self.done.get() + n);
        self.emit(DownloadEvent::Progress(self.progress()));
    }

    /// What a shard's worker did since its last report: `fetched` more bytes received, and
    /// `done` changed by that much (negative when it discarded bytes).
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(crate) fn adjust(&self, fetched: u64, done: i64) {
        if fetched == 0 && done == 0 {
            return;
        }
        self.fetched.set(self.fetched.get() + fetched);
        self.done.set(self.done.get().saturating_add_signed(done));
        self.emit(DownloadEvent::Progress(self.progress()));
    }

    pub(crate) fn progress(&self) -> Progress {
        let secs = self.start.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            self.fetched.get() as f64 / secs
        } else {
            0.0
        };
        let left = self.total.get().saturating_sub(self.done.get());
        let eta = (rate > 0.0 && self.total.get() > 0)
            .then(|| Duration::from_secs_f64(left as f64 / rate));
        Progress {
            done: self.done.get(),
            fetched: self.fetched.get(),
            total: self.total.get(),
            files_done: self.files_done.get(),
            files_total: self.files_total.get(),
            rate,
            eta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_urls() {
        assert!(is_gguf_url("https://h/a/b.Q4_K_M.gguf"));
        assert!(is_gguf_url("https://h/a/b.GGUF?download=true"));
        assert!(!is_gguf_url("https://h/a/model/"));
        assert!(!is_gguf_url("https://h/a/manifest.json"));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            attempts: 10,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(700),
        };
        let ms: Vec<u128> = (1..=6).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 700, 700, 700]);
        assert_eq!(p.delay(u32::MAX).as_millis(), 700);
    }
}
