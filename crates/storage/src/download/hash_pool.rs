//! The browser's hashing workers: the package's `HashPool` (js/hash-pool.js), a few dedicated
//! workers running this same wasm module, each holding hash streams by id. Hashing a download
//! in the thread that fetches and stores it caps the download at well under the hashing speed
//! (that one thread reads, copies, hashes and writes in turn); on workers of their own the
//! hashing overlaps the rest. Bytes are copied out of this module's memory once, into a buffer
//! transferred to the worker.
//!
//! The pool is made by the JS side (which knows where the worker script is) and passed in the
//! download's options; [`ready`] starts its workers and says whether they run, before the first
//! byte is handed over, so a page whose workers cannot start (a strict CSP, a bundler that
//! dropped the script) hashes inline instead of failing.

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::hash_kind::HashKind;
use super::DownloadError;

#[wasm_bindgen]
extern "C" {
    /// js/hash-pool.js's `HashPool`.
    #[derive(Debug, Clone)]
    pub type HashPool;

    /// Start the workers; resolves to true once every one has its wasm ready, false (with
    /// `failure` set) when they cannot start.
    #[wasm_bindgen(method, catch)]
    fn ready(this: &HashPool) -> Result<Promise, JsValue>;

    #[wasm_bindgen(method, getter)]
    fn failure(this: &HashPool) -> Option<String>;

    #[wasm_bindgen(method, getter, js_name = size)]
    fn size(this: &HashPool) -> u32;

    /// A new stream (`sha256`, `blake3`, or `blake3-subtree` at `offset`) on the next worker in
    /// turn; its id.
    #[wasm_bindgen(method, catch)]
    fn stream(this: &HashPool, kind: &str, offset: f64) -> Result<u32, JsValue>;

    /// Copy `bytes` (a view of this module's memory, valid for the call only) to the stream's
    /// worker, as its next bytes or (`at`) as its bytes from `at` on, held until those before
    /// them are in; the worker's index.
    #[wasm_bindgen(method, catch)]
    fn update(this: &HashPool, stream: u32, bytes: &[u8], at: Option<f64>) -> Result<u32, JsValue>;

    /// Undefined while the worker's backlog is within bounds, else a promise that resolves
    /// once it falls back (or the pool fails: the next call then says why).
    #[wasm_bindgen(method)]
    fn drained(this: &HashPool, worker: u32) -> JsValue;

    /// Resolves to the streams' digests (lowercase hex), in the order given.
    #[wasm_bindgen(method, catch)]
    fn finish(this: &HashPool, streams: Vec<u32>) -> Result<Promise, JsValue>;

    /// Forget streams that will not be finished (a shard that starts over, a cancelled
    /// download).
    #[wasm_bindgen(method)]
    fn release(this: &HashPool, streams: Vec<u32>);

    /// Fetch a shard on the least busy worker (`spec`: a JSON
    /// [`JobSpec`](super::relay::JobSpec)); `on_message` gets the job's messages (`{ t: 'json',
    /// json }`, `{ t: 'bytes', offset, data }`, `{ t: 'void' }`, and last `{ t: 'end', ok }` or
    /// `{ t: 'end', err }`, JSON both). The job's id.
    #[wasm_bindgen(method, catch, js_name = fetchJob)]
    pub(crate) fn fetch_job(
        this: &HashPool,
        spec: &str,
        on_message: &js_sys::Function,
    ) -> Result<u32, JsValue>;

    /// `bytes` of job `job`'s pieces were taken.
    #[wasm_bindgen(method, js_name = fetchAck)]
    pub(crate) fn fetch_ack(this: &HashPool, job: u32, bytes: f64);

    /// Stop job `job` (its messages stop at once; the worker ends it, closing its file).
    #[wasm_bindgen(method, js_name = fetchCancel)]
    pub(crate) fn fetch_cancel(this: &HashPool, job: u32);

    /// Resolves once no job runs on the workers (the cancelled ones closed their files).
    #[wasm_bindgen(method, js_name = fetchesSettled)]
    fn fetches_settled(this: &HashPool) -> JsValue;
}

/// Wait until no fetch job runs on `pool` (after a cancelled download: its files are closed).
pub async fn fetches_settled(pool: &HashPool) {
    let wait = pool.fetches_settled();
    if let Some(p) = wait.dyn_ref::<Promise>() {
        let _ = JsFuture::from(p.clone()).await;
    }
}

/// Whether `value` looks like a [`HashPool`] (the options' `hashPool`).
pub fn as_pool(value: JsValue) -> Option<HashPool> {
    let has =
        |name: &str| js_sys::Reflect::get(&value, &name.into()).is_ok_and(|f| f.is_function());
    (value.is_object()
        && ["ready", "stream", "update", "drained", "finish", "release"]
            .iter()
            .all(|n| has(n)))
    .then(|| value.unchecked_into())
}

/// The message of a JS exception.
fn message(e: JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

pub(crate) fn failed(what: &str, e: JsValue) -> DownloadError {
    DownloadError::Hashing(format!("hash worker: {what}: {}", message(e)))
}

/// Start `pool`'s workers and wait until they run: the pool when they do, else why not.
pub(crate) async fn ready(pool: &HashPool) -> Result<HashPool, String> {
    let started = match pool.ready() {
        Ok(p) => JsFuture::from(p).await,
        Err(e) => Err(e),
    };
    match started {
        Ok(v) if v.as_bool() == Some(true) => Ok(pool.clone()),
        Ok(_) => Err(pool
            .failure()
            .unwrap_or_else(|| "the hash workers did not start".to_string())),
        Err(e) => Err(message(e)),
    }
}

/// Workers in `pool`.
pub(crate) fn workers(pool: &HashPool) -> usize {
    pool.size() as usize
}

/// Streams of one [`Hashing`](super::hashing::Hashing) on the pool's workers, each started by
/// its first bytes; those not finished are released when this goes.
pub(crate) struct Workers {
    pool: HashPool,
    kinds: Vec<HashKind>,
    /// Per stream: its id in the pool, once it has had bytes.
    ids: std::cell::RefCell<Vec<Option<u32>>>,
}

impl Workers {
    pub(crate) fn new(pool: HashPool, kinds: Vec<HashKind>) -> Workers {
        let ids = std::cell::RefCell::new(vec![None; kinds.len()]);
        Workers { pool, kinds, ids }
    }

    /// Hand `data` to stream `id` (no waiting), as its next bytes or as its bytes from `at` on;
    /// the index of the worker it went to.
    pub(crate) fn enqueue_at(
        &self,
        id: usize,
        at: Option<u64>,
        data: &[u8],
    ) -> Result<Option<usize>, DownloadError> {
        let Some(&kind) = self.kinds.get(id) else {
            return Ok(None);
        };
        let mut ids = self.ids.borrow_mut();
        let stream = match ids[id] {
            Some(s) => s,
            None => {
                let (name, offset) = kind.stream_name();
                let s = self
                    .pool
                    .stream(name, offset as f64)
                    .map_err(|e| failed("cannot start a stream", e))?;
                ids[id] = Some(s);
                s
            }
        };
        let worker = self
            .pool
            .update(stream, data, at.map(|a| a as f64))
            .map_err(|e| failed("cannot hand bytes over", e))?;
        Ok(Some(worker as usize))
    }

    /// Wait until worker `worker`'s backlog is within bounds.
    pub(crate) async fn drained(&self, worker: usize) {
        let wait = self.pool.drained(worker as u32);
        if let Some(p) = wait.dyn_ref::<Promise>() {
            // A failed pool resolves its waits; the next update or finish says why.
            let _ = JsFuture::from(p.clone()).await;
        }
    }

    /// The digests, one per stream (a stream that never had bytes: the hash of nothing).
    pub(crate) async fn finish(self) -> Result<Vec<String>, DownloadError> {
        let ids = self.ids.take();
        let started: Vec<u32> = ids.iter().flatten().copied().collect();
        let count = started.len();
        let digests = match self.pool.finish(started) {
            Ok(p) => JsFuture::from(p).await,
            Err(e) => Err(e),
        }
        .map_err(|e| failed("cannot finish", e))?;
        let digests: Vec<String> = Array::from(&digests)
            .iter()
            .map(|d| d.as_string().unwrap_or_default())
            .collect();
        if digests.len() != count {
            return Err(DownloadError::Hashing(format!(
                "hash worker: {} digests for {count} streams",
                digests.len()
            )));
        }
        let mut got = digests.into_iter();
        Ok(ids
            .into_iter()
            .zip(&self.kinds)
            .map(|(id, kind)| match id {
                Some(_) => got.next().unwrap_or_default(),
                None => kind.empty_digest(),
            })
            .collect())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let left: Vec<u32> = self.ids.get_mut().iter().flatten().copied().collect();
        if !left.is_empty() {
            self.pool.release(left);
        }
    }
}
