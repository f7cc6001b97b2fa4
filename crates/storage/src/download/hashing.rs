//! Where the downloader's hashing runs: inline (when asked, or where nothing else can), natively
//! on threads of its own (one per shard being fetched; the group hashes spread over several, as
//! the groups of shards fetched in parallel stream at the same time), and in the browser on the
//! package's hash workers ([`hash_pool`](super::hash_pool)), so hashing and receiving and
//! storing the bytes use separate cores. Chunks are `Bytes` (reference-counted slices of what
//! the network delivered): handing one to a hashing thread copies nothing; a worker gets a copy.

use std::cell::RefCell;

use bytes::Bytes;

use super::hash_kind::HashKind;
use super::DownloadError;
use crate::formats::rdrr::StreamHasher;

/// The browser's hash workers (js/hash-pool.js), where there are any.
#[cfg(all(target_arch = "wasm32", feature = "web"))]
pub(crate) use super::hash_pool::HashPool as WorkerPool;

/// No hash workers outside the browser.
#[cfg(not(all(target_arch = "wasm32", feature = "web")))]
#[derive(Debug, Clone)]
pub(crate) enum WorkerPool {}

/// Start `options`' hash workers, if it has any: the pool to hash on, or `None` (hash in this
/// thread; `warnings` says why the workers did not start).
pub(crate) async fn start_workers(
    options: &super::DownloadOptions,
    warnings: &mut Vec<String>,
) -> Option<WorkerPool> {
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    if let Some(pool) = &options.hash_pool {
        return match super::hash_pool::ready(pool).await {
            Ok(pool) => Some(pool),
            Err(why) => {
                warnings.push(format!(
                    "hashed in the download's own thread: the hash workers did not start ({why})"
                ));
                None
            }
        };
    }
    let _ = (options, warnings);
    None
}

/// Workers in a pool (0 for none).
pub(crate) fn pool_size(pool: Option<&WorkerPool>) -> usize {
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    return pool.map_or(0, super::hash_pool::workers);
    #[cfg(not(all(target_arch = "wasm32", feature = "web")))]
    match pool {
        Some(never) => match *never {},
        None => 0,
    }
}

/// Bytes waiting for one hashing thread above which `update` (and `drained`) wait:
/// backpressure. Handing bytes over (`enqueue`) never waits, so a caller can pass several
/// streams' pieces in one step, in order, without holding anything across a wait.
#[cfg(not(target_arch = "wasm32"))]
const BACKLOG: u64 = 8 << 20;

/// A set of hash streams, each fed in order and finished together.
pub(crate) enum Hashing {
    /// Hashed where fed, each stream's hasher made by its first bytes (a large BLAKE3 model has
    /// a stream per MiB of its groups).
    Inline(Vec<HashKind>, RefCell<Vec<Option<StreamHasher>>>),
    #[cfg(not(target_arch = "wasm32"))]
    Threads(Threads),
    /// On the browser's hash workers.
    #[cfg(all(target_arch = "wasm32", feature = "web"))]
    Workers(super::hash_pool::Workers),
}

/// Streams hashed on threads. A stream goes to the next thread in turn when its first bytes
/// arrive, so the streams that run at the same time (one per shard in flight) land on
/// different threads.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) struct Threads {
    threads: Vec<HashThread>,
    kinds: Vec<HashKind>,
    /// Per stream: (thread, its index on that thread), once it has had bytes.
    route: RefCell<Vec<Option<(usize, usize)>>>,
    /// Streams given to each thread so far.
    given: RefCell<Vec<usize>>,
}

/// One hashing thread: its queue (stream index on the thread, the stream's kind, bytes),
/// the bytes queued and not yet hashed, and its digests, in its streams' order, once the queue
/// closes.
#[cfg(not(target_arch = "wasm32"))]
struct HashThread {
    tx: tokio::sync::mpsc::UnboundedSender<(usize, HashKind, Bytes)>,
    backlog: std::sync::Arc<Backlog>,
    done: futures_channel::oneshot::Receiver<Vec<String>>,
}

/// Bytes queued for a hashing thread, and a wake-up for those waiting for it to fall to
/// [`BACKLOG`].
#[cfg(not(target_arch = "wasm32"))]
#[derive(Default)]
struct Backlog {
    bytes: std::sync::atomic::AtomicU64,
    fell: tokio::sync::Notify,
}

#[cfg(not(target_arch = "wasm32"))]
impl Backlog {
    fn add(&self, n: u64) {
        self.bytes.fetch_add(n, std::sync::atomic::Ordering::AcqRel);
    }

    fn done(&self, n: u64) {
        let before = self.bytes.fetch_sub(n, std::sync::atomic::Ordering::AcqRel);
        if before > BACKLOG && before - n <= BACKLOG {
            self.fell.notify_waiters();
        }
    }

    async fn drained(&self) {
        loop {
            let fell = self.fell.notified();
            let mut fell = std::pin::pin!(fell);
            // Registered before the check: a fall between the check and the wait still wakes.
            fell.as_mut().enable();
            if self.bytes.load(std::sync::atomic::Ordering::Acquire) <= BACKLOG {
                return;
            }
            fell.await;
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn spawn_thread() -> Result<HashThread, DownloadError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, HashKind, Bytes)>();
    let (done_tx, done) = futures_channel::oneshot::channel();
    let backlog = std::sync::Arc::new(Backlog::default());
    let seen = backlog.clone();
    std::thread::Builder::new()
        .name("tritium-hash".to_string())
        .spawn(move || {
            let mut hashers: Vec<StreamHasher> = Vec::new();
            while let Some((id, kind, data)) = rx.blocking_recv() {
                // Streams arrive in the order they were given to this thread, each created by
                // its first bytes.
                while hashers.len() <= id {
                    hashers.push(kind.hasher());
                }
                hashers[id].update(&data);
                seen.done(data.len() as u64);
            }
            let digests = hashers
                .into_iter()
                .map(StreamHasher::finalize_hex)
                .collect();
            // The download may be gone (cancelled): nobody to tell.
            let _ = done_tx.send(digests);
        })
        .map_err(|e| DownloadError::Hashing(format!("cannot start a hashing thread: {e}")))?;
    Ok(HashThread { tx, backlog, done })
}

impl Hashing {
    /// One stream per entry of `kinds`, hashed on `pool`'s workers (the browser), else on
    /// `threads` threads of their own (natively; at most one per stream), or inline where
    /// `threads` is 0 (and in wasm without workers).
    pub(crate) fn new(
        kinds: Vec<HashKind>,
        threads: usize,
        pool: Option<&WorkerPool>,
    ) -> Result<Hashing, DownloadError> {
        #[cfg(all(target_arch = "wasm32", feature = "web"))]
        if let Some(pool) = pool {
            return Ok(Hashing::Workers(super::hash_pool::Workers::new(
                pool.clone(),
                kinds,
            )));
        }
        #[cfg(not(all(target_arch = "wasm32", feature = "web")))]
        if let Some(never) = pool {
            match *never {}
        }
        #[cfg(not(target_arch = "wasm32"))]
        if threads > 0 {
            let n = threads.min(kinds.len()).max(1);
            let threads = (0..n)
                .map(|_| spawn_thread())
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Hashing::Threads(Threads {
                threads,
                route: RefCell::new(vec![None; kinds.len()]),
                given: RefCell::new(vec![0; n]),
                kinds,
            }));
        }
        #[cfg(target_arch = "wasm32")]
        let _ = threads;
        let hashers = RefCell::new(kinds.iter().map(|_| None).collect());
        Ok(Hashing::Inline(kinds, hashers))
    }

    /// Feed `data` to stream `id`, waiting while its thread is far behind.
    pub(crate) async fn update(&self, id: usize, data: Bytes) -> Result<(), DownloadError> {
        if let Some(thread) = self.enqueue(id, data)? {
            self.drained(thread).await;
        }
        Ok(())
    }

    /// Hand `data` to stream `id` without waiting: hashed here (inline), or queued for its
    /// thread, whose index comes back (wait for it with [`Hashing::drained`]). Pieces handed
    /// over in one synchronous step reach their streams in that order whatever runs between.
    pub(crate) fn enqueue(&self, id: usize, data: Bytes) -> Result<Option<usize>, DownloadError> {
        match self {
            Hashing::Inline(kinds, hashers) => {
                if let (Some(kind), Some(h)) = (kinds.get(id), hashers.borrow_mut().get_mut(id)) {
                    h.get_or_insert_with(|| kind.hasher()).update(&data);
                }
                Ok(None)
            }
            #[cfg(not(target_arch = "wasm32"))]
            Hashing::Threads(t) => {
                let Some(&kind) = t.kinds.get(id) else {
                    return Ok(None);
                };
                let (thread, local) = {
                    let mut route = t.route.borrow_mut();
                    match route[id] {
                        Some(r) => r,
                        None => {
                            let mut given = t.given.borrow_mut();
                            let started = given.iter().sum::<usize>();
                            let thread = started % t.threads.len();
                            let r = (thread, given[thread]);
                            given[thread] += 1;
                            route[id] = Some(r);
                            r
                        }
                    }
                };
                let th = &t.threads[thread];
                th.backlog.add(data.len() as u64);
                th.tx
                    .send((local, kind, data))
                    .map_err(|_| DownloadError::Hashing("a hashing thread stopped".to_string()))?;
                Ok(Some(thread))
            }
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            Hashing::Workers(w) => w.enqueue_at(id, None, &data),
        }
    }

    /// Whether streams take pieces ahead of their turn ([`Hashing::enqueue_ahead`]): the
    /// browser's hash workers, which keep them until the bytes before them are in.
    pub(crate) fn holds_ahead(&self) -> bool {
        #[cfg(all(target_arch = "wasm32", feature = "web"))]
        if let Hashing::Workers(_) = self {
            return true;
        }
        false
    }

    /// Hand `data`, bytes `at ..` of stream `id`, to its worker ahead of the bytes before it
    /// (only where [`Hashing::holds_ahead`]); as [`Hashing::enqueue`].
    pub(crate) fn enqueue_ahead(
        &self,
        id: usize,
        at: u64,
        data: Bytes,
    ) -> Result<Option<usize>, DownloadError> {
        match self {
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            Hashing::Workers(w) => w.enqueue_at(id, Some(at), &data),
            _ => {
                let _ = (id, at, data);
                Err(DownloadError::Hashing(
                    "internal: bytes ahead of their turn for a stream that cannot hold them"
                        .to_string(),
                ))
            }
        }
    }

    /// Wait until hashing thread (or worker) `thread` has at most [`BACKLOG`] bytes queued
    /// (at once inline).
    pub(crate) async fn drained(&self, thread: usize) {
        match self {
            Hashing::Inline(..) => {
                let _ = thread;
            }
            #[cfg(not(target_arch = "wasm32"))]
            Hashing::Threads(t) => {
                if let Some(th) = t.threads.get(thread) {
                    th.backlog.drained().await;
                }
            }
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            Hashing::Workers(w) => w.drained(thread).await,
        }
    }

    /// The digests (lowercase hex), one per stream.
    pub(crate) async fn finish(self) -> Result<Vec<String>, DownloadError> {
        match self {
            // A stream that never had bytes is the hash of nothing.
            Hashing::Inline(kinds, hashers) => Ok(hashers
                .into_inner()
                .into_iter()
                .zip(kinds)
                .map(|(h, kind)| h.map_or_else(|| kind.empty_digest(), StreamHasher::finalize_hex))
                .collect()),
            #[cfg(not(target_arch = "wasm32"))]
            Hashing::Threads(t) => {
                let mut per_thread = Vec::with_capacity(t.threads.len());
                for HashThread { tx, done, .. } in t.threads {
                    drop(tx);
                    per_thread.push(done.await.map_err(|_| {
                        DownloadError::Hashing("a hashing thread died".to_string())
                    })?);
                }
                // A stream that never had bytes is the hash of nothing.
                t.route
                    .into_inner()
                    .into_iter()
                    .zip(t.kinds)
                    .map(|(route, kind)| match route {
                        Some((thread, local)) => per_thread
                            .get(thread)
                            .and_then(|d| d.get(local))
                            .cloned()
                            .ok_or_else(|| {
                                DownloadError::Hashing("a hashing thread lost a stream".to_string())
                            }),
                        None => Ok(kind.empty_digest()),
                    })
                    .collect()
            }
            #[cfg(all(target_arch = "wasm32", feature = "web"))]
            Hashing::Workers(w) => w.finish().await,
        }
    }
}
