// Hashing a download on workers of its own. The thread that fetches a model and writes it to
// OPFS would otherwise hash every byte too, in turn with the rest, and a download would run at
// well under the hashing speed; with the hashes on these workers the three overlap.
//
// A HashPool is a few dedicated workers (hash-worker.js) running this package's wasm module,
// posted to them compiled, each holding hash streams by id. The wasm download drives it
// (crates/storage/src/download/hash_pool.rs): ready() once, then stream() per hash, update() per
// chunk (a copy of the bytes, transferred), drained() for backpressure, finish() for the
// digests, release() for streams given up. close() ends the workers.
//
// The workers also fetch a download's shards (crates/storage/src/download/worker_fetch.rs): each
// writes its shard to OPFS and hashes it, so that the network reads and the writes spread over
// threads too: fetchJob() per shard, fetchAck() for the bytes the download took (group
// hashes), fetchCancel(), fetchesSettled().

/** Bytes handed to one worker and not yet hashed above which drained() waits. */
const BACKLOG = 8 << 20;

export class HashPool {
  #size;
  #module;
  #workerUrl;
  #timeoutMs;
  #workers = [];
  #started = null;
  /** Between the first ready() and its outcome. */
  #starting = true;
  #closed = false;
  #failure = null;
  /** Per worker: bytes handed over and not yet acknowledged, and the drained() waits. */
  #backlog = [];
  #waits = [];
  /** Stream id -> its worker. */
  #where = new Map();
  #nextStream = 1;
  #turn = 0;
  /** finish() requests waiting for digests: req -> { worker, resolve, reject }. */
  #finishes = new Map();
  #nextReq = 1;
  /** Per worker: when it last answered, or when work began to wait for it. */
  #heard = [];
  #stallMs;
  #watch = null;
  /** Fetch jobs: id -> { worker, onMessage (null once cancelled) }, until they end. */
  #jobs = new Map();
  #nextJob = 1;
  /** Per worker: fetch jobs running on it. */
  #running = [];
  /** fetchesSettled() waits. */
  #settled = [];

  /**
   * @param {number} size workers (at least 1)
   * @param {WebAssembly.Module} module this package's compiled wasm
   * @param {{ workerUrl?: string | URL, timeoutMs?: number, stallMs?: number }} [opts] the
   *   worker script (default: hash-worker.js next to this file), how long ready() waits for the
   *   workers, and how long a worker may stay silent while work waits for it before the pool
   *   fails (a worker that died without an error event; it acknowledges every MiB it hashes)
   */
  constructor(size, module, { workerUrl, timeoutMs = 20000, stallMs = 30000 } = {}) {
    this.#size = Math.max(1, Math.floor(size) || 1);
    this.#module = module;
    this.#workerUrl = workerUrl;
    this.#timeoutMs = timeoutMs;
    this.#stallMs = stallMs;
  }

  get size() {
    return this.#size;
  }

  /** Why the pool stopped (or never started), or null. */
  get failure() {
    return this.#failure;
  }

  /** Start the workers (once): resolves to true when every one is ready, false on failure. */
  ready() {
    this.#started ??= this.#start().finally(() => {
      this.#starting = false;
    });
    return this.#started;
  }

  #spawn() {
    // The literal `new Worker(new URL('./hash-worker.js', import.meta.url), ...)` is what
    // bundlers (Vite, webpack) recognize and bundle as a worker.
    if (this.#workerUrl) return new Worker(this.#workerUrl, { type: 'module' });
    return new Worker(new URL('./hash-worker.js', import.meta.url), { type: 'module' });
  }

  async #start() {
    if (!(this.#module instanceof WebAssembly.Module)) {
      this.#fail('no compiled wasm module to start the workers with');
      return false;
    }
    let timer;
    try {
      const started = [];
      for (let i = 0; i < this.#size; i++) {
        const w = this.#spawn();
        this.#workers.push(w);
        this.#backlog.push(0);
        this.#waits.push([]);
        this.#heard.push(0);
        this.#running.push(0);
        started.push(new Promise((resolve, reject) => {
          w.onmessage = (e) => {
            if (e.data?.ready) {
              w.onmessage = (ev) => this.#onMessage(i, ev.data);
              resolve();
            } else {
              reject(new Error(e.data?.failed ?? 'an unexpected message'));
            }
          };
          w.onerror = (e) => {
            e.preventDefault?.();
            reject(new Error(e.message || 'the worker script failed to load'));
          };
          w.onmessageerror = () => reject(new Error('a message could not be read'));
        }));
        w.postMessage({ op: 'init', module: this.#module });
      }
      const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not ready after ${this.#timeoutMs} ms`)), this.#timeoutMs);
      });
      await Promise.race([Promise.all(started), timeout]);
    } catch (e) {
      this.#fail(String(e?.message ?? e));
      return false;
    } finally {
      clearTimeout(timer);
    }
    for (const [i, w] of this.#workers.entries()) {
      w.onerror = (e) => {
        e.preventDefault?.();
        this.#fail(`worker ${i}: ${e.message || 'failed'}`);
      };
      w.onmessageerror = () => this.#fail(`worker ${i}: a message could not be read`);
    }
    return this.#failure === null;
  }

  #onMessage(i, m) {
    this.#heard[i] = performance.now();
    if (!m || typeof m !== 'object') return;
    if (m.failed) {
      this.#fail(`worker ${i}: ${m.failed}`);
      return;
    }
    if (m.acked) this.#ack(i, m.acked);
    if (m.fetch !== undefined) {
      const job = this.#jobs.get(m.fetch);
      if (!job) return;
      if (m.t === 'end') this.#endJob(m.fetch);
      job.onMessage?.(m);
    }
    if (m.req !== undefined) {
      const f = this.#finishes.get(m.req);
      this.#finishes.delete(m.req);
      f?.resolve(m.digests);
    }
  }

  #ack(i, n) {
    this.#backlog[i] -= n;
    if (this.#backlog[i] <= BACKLOG) {
      for (const resolve of this.#waits[i].splice(0)) resolve();
    }
  }

  #endJob(id) {
    const job = this.#jobs.get(id);
    this.#jobs.delete(id);
    this.#running[job.worker] -= 1;
    if (!this.#jobs.size) for (const resolve of this.#settled.splice(0)) resolve();
  }

  /** Whether work waits for worker `w` (a drained(), a finish() or a fetch job). */
  #waitsFor(w) {
    if (this.#waits[w].length || this.#running[w] > 0) return true;
    for (const f of this.#finishes.values()) if (f.worker === w) return true;
    return false;
  }

  /** Work is about to wait for worker `w`: watch that it answers. */
  #expect(w) {
    if (!this.#waitsFor(w)) this.#heard[w] = performance.now();
    this.#watch ??= setInterval(() => {
      let any = false;
      for (let i = 0; i < this.#workers.length; i++) {
        if (!this.#waitsFor(i)) continue;
        any = true;
        const silent = performance.now() - this.#heard[i];
        if (silent > this.#stallMs) {
          this.#fail(`worker ${i} stopped answering (silent for ${Math.round(silent)} ms with work waiting for it)`);
          return;
        }
      }
      if (!any) {
        clearInterval(this.#watch);
        this.#watch = null;
      }
    }, Math.max(10, Math.min(1000, this.#stallMs / 4)));
  }

  #fail(why) {
    this.#failure ??= why;
    clearInterval(this.#watch);
    this.#watch = null;
    for (const w of this.#workers) w.terminate();
    for (const waits of this.#waits) for (const resolve of waits.splice(0)) resolve();
    for (const f of this.#finishes.values()) f.reject(new Error(this.#failure));
    this.#finishes.clear();
    const err = JSON.stringify({ Other: { message: `hash worker: ${this.#failure}` } });
    for (const [id, job] of [...this.#jobs]) {
      this.#endJob(id);
      job.onMessage?.({ t: 'end', err });
    }
  }

  #check() {
    if (this.#failure !== null) throw new Error(this.#failure);
    if (this.#closed) throw new Error('the hash pool was closed');
    if (!this.#workers.length) throw new Error('ready() was not called');
  }

  /**
   * A new hash stream on the next worker in turn: `kind` is 'sha256', 'blake3' or
   * 'blake3-subtree' (the subtree of a larger BLAKE3 input at byte `offset`). Returns its id.
   */
  stream(kind, offset = 0) {
    this.#check();
    const id = this.#nextStream++;
    const w = this.#turn++ % this.#workers.length;
    this.#where.set(id, w);
    this.#workers[w].postMessage({ op: 'start', id, kind, offset });
    return id;
  }

  /**
   * Hash `bytes` next in stream `id`, or, with `at`, as the stream's bytes from `at` on: the
   * worker holds them until the bytes before them are in (a group's bytes that arrive before
   * their turn). `bytes` may be a view of wasm memory: a copy is transferred. Returns the
   * stream's worker (for drained()).
   * @param {number} id
   * @param {Uint8Array} bytes
   * @param {number} [at]
   */
  update(id, bytes, at) {
    this.#check();
    const w = this.#where.get(id);
    if (w === undefined) throw new Error(`no hash stream ${id}`);
    const copy = bytes.slice();
    const m = { op: 'data', id, bytes: copy };
    if (typeof at === 'number') m.at = at;
    this.#workers[w].postMessage(m, [copy.buffer]);
    this.#backlog[w] += copy.length;
    return w;
  }

  /** Undefined while worker `w` is within its backlog, else a promise that resolves once it is. */
  drained(w) {
    if (this.#failure !== null || !(this.#backlog[w] > BACKLOG)) return undefined;
    this.#expect(w);
    return new Promise((resolve) => this.#waits[w].push(resolve));
  }

  /**
   * The digests (lowercase hex) of streams `ids`, in that order; the streams end.
   * @param {ArrayLike<number>} ids
   * @returns {Promise<string[]>}
   */
  async finish(ids) {
    this.#check();
    const list = Array.from(ids);
    const byWorker = new Map();
    for (const [k, id] of list.entries()) {
      const w = this.#where.get(id);
      if (w === undefined) throw new Error(`no hash stream ${id}`);
      this.#where.delete(id);
      if (!byWorker.has(w)) byWorker.set(w, []);
      byWorker.get(w).push(k);
    }
    const out = new Array(list.length);
    await Promise.all([...byWorker].map(([w, ks]) => {
      const req = this.#nextReq++;
      this.#expect(w);
      const got = new Promise((resolve, reject) => this.#finishes.set(req, { worker: w, resolve, reject }));
      this.#workers[w].postMessage({ op: 'finish', req, ids: ks.map((k) => list[k]) });
      return got.then((digests) => ks.forEach((k, j) => { out[k] = digests[j]; }));
    }));
    return out;
  }

  /**
   * Fetch a download's shard on the worker with the fewest jobs: `spec` is the job (JSON, from
   * the wasm download), `onMessage` gets its messages (see hash-worker.js), the last one
   * `{ t: 'end', ok | err }`. Returns the job's id.
   * @param {string} spec
   * @param {(m: object) => void} onMessage
   */
  fetchJob(spec, onMessage) {
    this.#check();
    let w = this.#turn++ % this.#workers.length;
    for (let i = 0; i < this.#workers.length; i++) if (this.#running[i] < this.#running[w]) w = i;
    const id = this.#nextJob++;
    this.#jobs.set(id, { worker: w, onMessage });
    this.#expect(w);
    this.#running[w] += 1;
    this.#workers[w].postMessage({ op: 'fetch', job: id, spec });
    return id;
  }

  /** The download took `n` bytes of job `id`'s pieces. */
  fetchAck(id, n) {
    const job = this.#jobs.get(id);
    if (job && this.#failure === null) this.#workers[job.worker].postMessage({ op: 'fetchAck', job: id, n });
  }

  /** Stop job `id`: no more of its messages are passed on; the worker ends it. */
  fetchCancel(id) {
    const job = this.#jobs.get(id);
    if (!job) return;
    job.onMessage = null;
    if (this.#failure === null) this.#workers[job.worker].postMessage({ op: 'fetchAbort', job: id });
  }

  /** Undefined when no fetch job runs, else a promise that resolves once none does. */
  fetchesSettled() {
    if (!this.#jobs.size) return undefined;
    return new Promise((resolve) => this.#settled.push(resolve));
  }

  /** Forget streams `ids` (never finished). */
  release(ids) {
    const byWorker = new Map();
    for (const id of Array.from(ids)) {
      const w = this.#where.get(id);
      if (w === undefined) continue;
      this.#where.delete(id);
      if (!byWorker.has(w)) byWorker.set(w, []);
      byWorker.get(w).push(id);
    }
    if (this.#failure !== null) return;
    for (const [w, list] of byWorker) this.#workers[w].postMessage({ op: 'drop', ids: list });
  }

  /**
   * End the workers; the pool cannot be used after. Workers still starting end once their
   * start is settled (ready or timed out): a worker terminated while it is being created can
   * leave its target half made (a DevTools client driving the page then waits on it forever).
   */
  close() {
    const why = 'the hash pool was closed';
    this.#closed = true;
    if (this.#started && this.#starting) this.#started.then(() => this.#fail(why));
    else this.#fail(why);
  }
}
