//! The models the server knows and runs. Each loaded model has a thread of its own that owns
//! its [`Session`] and takes requests from a FIFO queue, one at a time, so generation never
//! runs on the async runtime's threads. A request for a model not loaded starts its thread,
//! which loads it (requests queue meanwhile). The queue is bounded: beyond `max_queue`
//! waiting requests a new one gets 503 at once. A model unloads when idle past its keep-alive
//! (set per request, as Ollama does), when deleted, at shutdown, or to make room: loading a
//! model past `max_loaded` models or past the memory budget first unloads the models idle
//! longest (a model's memory: its file's size until it is loaded, then what its backend
//! allocated). When every loaded model is busy, the request gets 503 with Retry-After.
//!
//! Requests are sent to a model's thread only while holding the registry's lock, and a thread
//! leaves the registry only while holding it after finding its queue empty, so no request is
//! sent to a thread that has gone.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::error::ApiError;
use super::generation::{self, Event, GenRequest};
use super::metrics::{Gauges, Metrics};
use crate::backend::Backend as _;
use crate::session::{self, OpenOptions, Session};
use crate::storage::FsStore;

/// How long a model stays loaded after its last request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    For(Duration),
    Forever,
}

/// What a model's thread is asked to do.
enum Msg {
    /// Generate (`Some`) or only load and apply the keep-alive (`None`: Ollama's request
    /// without a prompt).
    Job(Box<Job>),
    /// Look at the keep-alive again (it was changed from outside).
    Wake,
}

struct Job {
    request: Option<GenRequest>,
    keep_alive: Option<KeepAlive>,
    events: UnboundedSender<Event>,
    arrived: Instant,
}

/// A loaded (or loading) model, as `/api/ps` shows it.
#[derive(Clone, Debug)]
pub struct LoadedInfo {
    pub name: String,
    pub path: PathBuf,
    /// Bytes of the model's files.
    pub bytes: u64,
    /// Bytes its backend allocated (the files' size while loading).
    pub memory: u64,
    /// KV cache positions (0 while loading).
    pub context: usize,
    pub loading: bool,
    /// `None`: kept until the server stops.
    pub expires_at: Option<SystemTime>,
    /// Requests waiting or running.
    pub queued: usize,
    pub backend: String,
}

/// The state one model's thread shares with the registry.
struct Slot {
    name: String,
    path: PathBuf,
    bytes: u64,
    /// Requests sent and not yet finished (the one running included).
    pending: AtomicUsize,
    /// Bytes the model takes: its files' size until loaded, then its backend's allocations.
    memory: AtomicU64,
    status: Mutex<SlotStatus>,
}

struct SlotStatus {
    keep_alive: KeepAlive,
    /// When the last request finished (the keep-alive counts from there).
    idle_since: Instant,
    context: usize,
    loading: bool,
    backend: String,
}

impl Slot {
    fn status(&self) -> MutexGuard<'_, SlotStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long the thread may wait for a request before unloading; `None`: forever.
    fn wait_limit(&self) -> Option<Duration> {
        let s = self.status();
        match s.keep_alive {
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(d.saturating_sub(s.idle_since.elapsed())),
        }
    }
}

/// A loaded model's entry: its shared state and the sending end of its queue.
struct Entry {
    slot: Arc<Slot>,
    queue: Sender<Msg>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Inner {
    loaded: HashMap<String, Entry>,
    closing: bool,
}

/// Settings of the registry.
pub struct RegistryConfig {
    pub open: OpenOptions,
    /// Requests that may wait behind the running one, per model.
    pub max_queue: usize,
    /// The keep-alive of a model loaded on demand, when the request names none.
    pub default_keep_alive: KeepAlive,
    /// Most models loaded at once (0: no limit).
    pub max_loaded: usize,
    /// Most bytes of models loaded at once (`None`: no limit).
    pub max_memory: Option<u64>,
    /// LoRA adapters (`--lora`): loaded beside each model they fit, applied at these scales
    /// unless a request chooses (its `lora` field, by index into this list).
    pub lora: Vec<(PathBuf, f32)>,
}

/// The server's adapters as one model holds them: each `--lora` adapter's id on the model, or
/// why it does not fit.
type ModelAdapters = Vec<Result<crate::model::AdapterId, String>>;

/// Every model the server can run.
pub struct Registry {
    inner: Mutex<Inner>,
    /// Models named when the server started: name -> path.
    named: BTreeMap<String, PathBuf>,
    pub config: RegistryConfig,
    pub metrics: Arc<Metrics>,
}

/// The name a path is listed under: its file stem (`SmolLM2.Q4_1.gguf` -> `SmolLM2.Q4_1`), or
/// a folder's name.
pub fn name_of_path(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Bytes of a file, or of the files directly in a folder.
fn size_of(path: &Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.len(),
        Ok(_) => std::fs::read_dir(path)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0),
        Err(_) => 0,
    }
}

impl Registry {
    pub fn new(
        named: BTreeMap<String, PathBuf>,
        config: RegistryConfig,
        metrics: Arc<Metrics>,
    ) -> Arc<Registry> {
        Arc::new(Registry {
            inner: Mutex::new(Inner {
                loaded: HashMap::new(),
                closing: false,
            }),
            named,
            config,
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store, where on-demand models come from.
    pub fn store(&self) -> Result<FsStore, ApiError> {
        FsStore::open_default(self.config.open.store.as_deref())
            .map_err(|e| ApiError::internal(e.to_string()))
    }

    /// The models named at start, by name.
    pub fn named(&self) -> &BTreeMap<String, PathBuf> {
        &self.named
    }

    /// The canonical name and path of the model a request names: a model named at start
    /// (by the name it is listed under), else a complete model of the store. A `:latest`
    /// tag (Ollama clients add it) is dropped. Paths in requests are not opened: a client
    /// must not make the server probe its file system.
    pub fn resolve(&self, requested: &str) -> Result<(String, PathBuf), ApiError> {
        let name = requested.strip_suffix(":latest").unwrap_or(requested);
        if name.is_empty() {
            return Err(ApiError::invalid_param("model", "`model` is empty"));
        }
        if let Some(path) = self.named.get(name) {
            return Ok((name.to_string(), path.clone()));
        }
        if let Err(e) = crate::storage::check_model_name(name) {
            return Err(ApiError::model_not_found(requested, e));
        }
        let store = self.store()?;
        match store.complete_path(name) {
            Some(path) => Ok((name.to_string(), path)),
            None => Err(ApiError::model_not_found(
                requested,
                format!(
                    "it was not named when the server started and is not in the model store {}",
                    store.root().display()
                ),
            )),
        }
    }

    /// Queue `request` (or, with `None`, only a load and keep-alive change) for the model
    /// `requested`; its events arrive on the returned receiver. Dropping the receiver cancels
    /// the request (while it waits, or within a token once it runs).
    pub fn submit(
        self: &Arc<Self>,
        requested: &str,
        request: Option<GenRequest>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<(String, UnboundedReceiver<Event>), ApiError> {
        let (name, path) = self.resolve(requested)?;
        let (events, receiver) = unbounded_channel();
        let mut job = Job {
            request,
            keep_alive,
            events,
            arrived: Instant::now(),
        };
        let mut inner = self.lock();
        if inner.closing {
            return Err(ApiError::shutting_down());
        }
        if let Some(entry) = inner.loaded.get(&name) {
            let waiting = entry.slot.pending.load(Ordering::SeqCst);
            // One runs; `max_queue` may wait behind it.
            if waiting > self.config.max_queue {
                return Err(ApiError::busy(&name, waiting - 1));
            }
            entry.slot.pending.fetch_add(1, Ordering::SeqCst);
            match entry.queue.send(Msg::Job(Box::new(job))) {
                Ok(()) => return Ok((name, receiver)),
                // The thread died (a panic in a backend): start again below.
                Err(mpsc::SendError(Msg::Job(j))) => job = *j,
                Err(mpsc::SendError(Msg::Wake)) => {
                    return Err(ApiError::internal("the model's queue refused a request"))
                }
            }
            inner.loaded.remove(&name);
        }
        let bytes = size_of(&path);
        let evicted = self.make_room(&mut inner, &name, bytes)?;
        let slot = Arc::new(Slot {
            bytes,
            name: name.clone(),
            path,
            pending: AtomicUsize::new(1),
            memory: AtomicU64::new(bytes),
            status: Mutex::new(SlotStatus {
                keep_alive: keep_alive.unwrap_or(if self.named.contains_key(&name) {
                    KeepAlive::Forever
                } else {
                    self.config.default_keep_alive
                }),
                idle_since: Instant::now(),
                context: 0,
                loading: true,
                backend: String::new(),
            }),
        });
        let (queue, jobs) = mpsc::channel();
        let _ = queue.send(Msg::Job(Box::new(job)));
        let registry = Arc::clone(self);
        let thread_slot = Arc::clone(&slot);
        let thread = std::thread::Builder::new()
            .name(format!("model {name}"))
            .spawn(move || {
                // The models unloaded for this one free their memory before it loads.
                for t in evicted {
                    let _ = t.join();
                }
                registry.model_thread(thread_slot, jobs)
            })
            .map_err(|e| ApiError::internal(format!("cannot start the model's thread: {e}")))?;
        inner.loaded.insert(
            name.clone(),
            Entry {
                slot,
                queue,
                thread: Some(thread),
            },
        );
        Ok((name, receiver))
    }

    /// Unload idle models, longest idle first, until `name` (of about `bytes`) fits the limits
    /// on models and memory; their threads (to join before loading). Err where the models
    /// that would have to go are busy, or where `name` alone is over the memory limit.
    fn make_room(
        &self,
        inner: &mut Inner,
        name: &str,
        bytes: u64,
    ) -> Result<Vec<std::thread::JoinHandle<()>>, ApiError> {
        let max_loaded = self.config.max_loaded;
        if let Some(budget) = self.config.max_memory {
            if bytes > budget {
                return Err(ApiError::over_memory(name, bytes, budget));
            }
        }
        let mut evicted = Vec::new();
        loop {
            let used: u64 = inner
                .loaded
                .values()
                .map(|e| e.slot.memory.load(Ordering::SeqCst))
                .sum();
            let too_many = max_loaded > 0 && inner.loaded.len() >= max_loaded;
            let too_big = self
                .config
                .max_memory
                .is_some_and(|budget| used.saturating_add(bytes) > budget);
            if !too_many && !too_big {
                return Ok(evicted);
            }
            let idle = inner
                .loaded
                .iter()
                .filter(|(_, e)| e.slot.pending.load(Ordering::SeqCst) == 0)
                .filter_map(|(n, e)| {
                    let s = e.slot.status();
                    (!s.loading).then(|| (s.idle_since, n.clone()))
                })
                .min();
            let Some((_, victim)) = idle else {
                let why = if too_many {
                    format!("{} models are loaded (--max-loaded)", inner.loaded.len())
                } else {
                    format!("{used} bytes of models are loaded (--max-memory)")
                };
                return Err(ApiError::models_busy(name, &why));
            };
            eprintln!("serve: unloading {victim} to make room for {name}");
            if let Some(mut e) = inner.loaded.remove(&victim) {
                // Closing the queue ends the idle thread, which drops the model.
                drop(e.queue);
                evicted.extend(e.thread.take());
            }
        }
    }

    /// What is loaded now.
    pub fn loaded(&self) -> Vec<LoadedInfo> {
        let inner = self.lock();
        let mut out: Vec<LoadedInfo> = inner
            .loaded
            .values()
            .map(|e| {
                let s = e.slot.status();
                LoadedInfo {
                    name: e.slot.name.clone(),
                    path: e.slot.path.clone(),
                    bytes: e.slot.bytes,
                    memory: e.slot.memory.load(Ordering::SeqCst),
                    context: s.context,
                    loading: s.loading,
                    expires_at: match s.keep_alive {
                        KeepAlive::Forever => None,
                        KeepAlive::For(d) => {
                            let left = d.saturating_sub(s.idle_since.elapsed());
                            SystemTime::now().checked_add(left)
                        }
                    },
                    queued: e.slot.pending.load(Ordering::SeqCst),
                    backend: s.backend.clone(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The gauges of `/metrics`.
    pub fn gauges(&self) -> Gauges {
        let loaded = self.loaded();
        Gauges {
            queued: loaded.iter().map(|l| (l.name.clone(), l.queued)).collect(),
            loaded: loaded.iter().filter(|l| !l.loading).count(),
        }
    }

    /// Unload `name` once its queued requests are done; whether it was loaded.
    pub fn unload(&self, name: &str) -> bool {
        // Dropping the queue's sender ends the thread after what is queued.
        self.lock().loaded.remove(name).is_some()
    }

    /// Stop taking requests; loaded models finish what is queued and unload.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closing = true;
        inner.loaded.clear();
    }

    /// Requests waiting or running, over every model.
    pub fn busy(&self) -> usize {
        self.lock()
            .loaded
            .values()
            .map(|e| e.slot.pending.load(Ordering::SeqCst))
            .sum()
    }

    /// The thread of one model: load it, then serve its queue until it unloads.
    fn model_thread(self: Arc<Self>, slot: Arc<Slot>, jobs: Receiver<Msg>) {
        let started = Instant::now();
        let opened = session::open(&slot.path, &self.config.open);
        let loaded_at = Instant::now();
        let mut session = match opened {
            Ok(s) => s,
            Err(e) => {
                let error =
                    ApiError::internal(format!("cannot load the model `{}`: {e}", slot.name));
                eprintln!("serve: {}", error.message);
                self.leave(&slot);
                Self::fail_queued(&slot, &jobs, &error);
                return;
            }
        };
        let load_ms = (loaded_at - started).as_secs_f64() * 1e3;
        let trained = session.engine.model.config.context_length.max(1);
        if let Some(e) = &session.template_error {
            eprintln!(
                "serve: {}: the model's chat template does not load ({e}); using ChatML",
                slot.name
            );
        }
        let mut adapters = self.load_adapters(&slot.name, &mut session);
        slot.memory
            .store(session.engine.model.backend.bytes_used(), Ordering::SeqCst);
        {
            let mut s = slot.status();
            s.context = session.engine.model.ctx;
            s.loading = false;
            s.backend = session.engine.model.backend.describe();
            s.idle_since = Instant::now();
        }
        eprintln!(
            "serve: loaded {} ({}, context {}) in {:.1} s",
            slot.name,
            session.engine.model.backend.describe(),
            session.engine.model.ctx,
            load_ms / 1e3
        );
        loop {
            let msg = match slot.wait_limit() {
                None => jobs.recv().ok(),
                Some(limit) => match jobs.recv_timeout(limit) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Disconnected) => None,
                    Err(RecvTimeoutError::Timeout) => match self.retire_if_idle(&slot, &jobs) {
                        Some(msg) => Some(msg),
                        None => break,
                    },
                },
            };
            let Some(msg) = msg else { break };
            let Msg::Job(job) = msg else { continue };
            let wanted = job.request.as_ref().and_then(|r| r.context);
            let (started, loaded_at) = match wanted {
                Some(want) if session.engine.model.ctx != want.min(trained) => {
                    let at = Instant::now();
                    match self.reload(&slot, session, want) {
                        (Some(s), None) => {
                            session = s;
                            adapters = self.load_adapters(&slot.name, &mut session);
                            (at, Instant::now())
                        }
                        (Some(s), Some(error)) => {
                            session = s;
                            adapters = self.load_adapters(&slot.name, &mut session);
                            let _ = job.events.send(Event::Failed(error));
                            slot.pending.fetch_sub(1, Ordering::SeqCst);
                            continue;
                        }
                        (None, error) => {
                            let error = error.unwrap_or_else(|| {
                                ApiError::internal("the model could not be loaded again")
                            });
                            eprintln!("serve: {}", error.message);
                            self.leave(&slot);
                            let _ = job.events.send(Event::Failed(error.clone()));
                            slot.pending.fetch_sub(1, Ordering::SeqCst);
                            Self::fail_queued(&slot, &jobs, &error);
                            return;
                        }
                    }
                }
                _ => (started, loaded_at),
            };
            self.run_job(&mut session, &adapters, &slot, *job, (started, loaded_at));
            let expired = slot.wait_limit() == Some(Duration::ZERO);
            if expired && self.retire_if_idle(&slot, &jobs).is_none() {
                break;
            }
        }
        eprintln!("serve: unloaded {}", slot.name);
    }

    /// Load the model again with a context of `want` positions, the old one dropped first (so
    /// both never hold memory at once). The session to go on with (the old context again where
    /// the new one does not load; `None` where neither loads) and the request's error.
    fn reload(
        &self,
        slot: &Slot,
        session: Session,
        want: usize,
    ) -> (Option<Session>, Option<ApiError>) {
        let before = session.engine.model.ctx;
        drop(session);
        let mut open = self.config.open.clone();
        open.context = Some(want);
        slot.status().loading = true;
        let (session, error) = match session::open(&slot.path, &open) {
            Ok(s) => (Some(s), None),
            Err(e) => {
                let error = ApiError::internal(format!(
                    "cannot load `{}` with a context of {want}: {e}",
                    slot.name
                ));
                open.context = Some(before);
                (session::open(&slot.path, &open).ok(), Some(error))
            }
        };
        let mut s = slot.status();
        s.loading = false;
        if let Some(session) = &session {
            s.context = session.engine.model.ctx;
            slot.memory
                .store(session.engine.model.backend.bytes_used(), Ordering::SeqCst);
            eprintln!(
                "serve: loaded {} again with a context of {}",
                slot.name, session.engine.model.ctx
            );
        }
        (session, error)
    }

    /// Fail every request still queued for a model that cannot run (nothing more can arrive:
    /// its entry is gone).
    fn fail_queued(slot: &Slot, jobs: &Receiver<Msg>, error: &ApiError) {
        while let Ok(msg) = jobs.try_recv() {
            if let Msg::Job(job) = msg {
                let _ = job.events.send(Event::Failed(error.clone()));
                slot.pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Load the server's adapters for a model that just loaded: each one's id, or why it does
    /// not fit (logged; a request that names it gets that reason).
    fn load_adapters(&self, name: &str, session: &mut Session) -> ModelAdapters {
        let open = &self.config.open;
        self.config
            .lora
            .iter()
            .enumerate()
            .map(|(i, (path, _))| {
                session.load_adapter(path, open).map_err(|e| {
                    eprintln!("serve: {name}: adapter {i} does not apply: {e}");
                    e.to_string()
                })
            })
            .collect()
    }

    /// The adapters a request runs with: those it names (`lora`, by index, each at its scale;
    /// the others off) or, when it names none, every adapter that fits at its `--lora` scale.
    fn adapters_for(
        &self,
        adapters: &ModelAdapters,
        request: &GenRequest,
    ) -> Result<Vec<(crate::model::AdapterId, f32)>, ApiError> {
        let Some(chosen) = &request.lora else {
            return Ok(adapters
                .iter()
                .zip(&self.config.lora)
                .filter_map(|(id, (_, scale))| Some((*id.as_ref().ok()?, *scale)))
                .collect());
        };
        let mut active = Vec::with_capacity(chosen.len());
        for &(i, scale) in chosen {
            match adapters.get(i) {
                None => {
                    return Err(ApiError::invalid_param(
                        "lora",
                        format!(
                            "invalid adapter id {i}: the server has {} adapter(s) (GET \
                             /lora-adapters lists them)",
                            adapters.len()
                        ),
                    ))
                }
                Some(Err(why)) => {
                    return Err(ApiError::invalid_param(
                        "lora",
                        format!("adapter {i} does not apply to this model: {why}"),
                    ))
                }
                Some(Ok(id)) => active.push((*id, scale)),
            }
        }
        Ok(active)
    }

    fn run_job(
        &self,
        session: &mut Session,
        adapters: &ModelAdapters,
        slot: &Slot,
        job: Job,
        (started, loaded_at): (Instant, Instant),
    ) {
        // A request that arrived during the load is charged the part of it it waited for.
        let charged = if job.arrived < loaded_at {
            (loaded_at - job.arrived.max(started)).as_secs_f64() * 1e3
        } else {
            0.0
        };
        match &job.request {
            // The client left while it waited.
            Some(_) if job.events.is_closed() => {}
            Some(request) => {
                let active = self.adapters_for(adapters, request).and_then(|a| {
                    session
                        .engine
                        .set_adapters(&a)
                        .map_err(|e| ApiError::invalid_param("lora", e.to_string()))
                });
                match active {
                    Ok(()) => generation::run(
                        session,
                        request,
                        &job.events,
                        job.arrived,
                        charged,
                        &self.metrics,
                    ),
                    Err(e) => {
                        let _ = job.events.send(Event::Failed(e));
                    }
                }
            }
            None => {
                let _ = job.events.send(Event::Done(generation::Outcome {
                    finish: crate::engine::FinishReason::Stop,
                    usage: Default::default(),
                    load_ms: charged,
                    total_ms: job.arrived.elapsed().as_secs_f64() * 1e3,
                    prompt_ids: Vec::new(),
                    ids: Vec::new(),
                }));
            }
        }
        let mut s = slot.status();
        if let Some(k) = job.keep_alive {
            s.keep_alive = k;
        }
        s.idle_since = Instant::now();
        drop(s);
        slot.pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// The keep-alive ran out: leave the registry unless a request arrived meanwhile (then
    /// that request).
    fn retire_if_idle(&self, slot: &Arc<Slot>, jobs: &Receiver<Msg>) -> Option<Msg> {
        let mut inner = self.lock();
        loop {
            match jobs.try_recv() {
                Ok(Msg::Job(job)) => return Some(Msg::Job(job)),
                Ok(Msg::Wake) => continue,
                Err(_) => break,
            }
        }
        if inner
            .loaded
            .get(&slot.name)
            .is_some_and(|e| Arc::ptr_eq(&e.slot, slot))
        {
            inner.loaded.remove(&slot.name);
        }
        None
    }

    /// Take this slot out of the registry (if it is still the one listed).
    fn leave(&self, slot: &Arc<Slot>) {
        let mut inner = self.lock();
        if inner
            .loaded
            .get(&slot.name)
            .is_some_and(|e| Arc::ptr_eq(&e.slot, slot))
        {
            inner.loaded.remove(&slot.name);
        }
    }

    /// Set a loaded model's keep-alive now (Ollama's `keep_alive` on a request without a
    /// prompt goes through the queue instead; this is for `/api/delete`-like immediate
    /// changes).
    pub fn set_keep_alive(&self, name: &str, keep_alive: KeepAlive) -> bool {
        let inner = self.lock();
        match inner.loaded.get(name) {
            Some(e) => {
                e.slot.status().keep_alive = keep_alive;
                let _ = e.queue.send(Msg::Wake);
                true
            }
            None => false,
        }
    }
}
