// createWorkerBitNet: the BitNet API with the model in a Web Worker that runs
// BitNetWorkerHandler (import { BitNetWorkerHandler } from 'tritium/worker').
//
// Messages are { id, kind, payload }. The page sends load | generate | abort | tokenize |
// detokenize | streamPieces | applyChatTemplate | diagnose | stats | resetChat | dispose; the
// worker answers progress | token | return | throw with the request's id. Tokens are pushed
// as they come (no round trip per token); abort { id } cancels that one request.

import { makeError, toTritiumError } from './errors.js';
import { ModelBase, PushQueue } from './common.js';

class WorkerBitNet extends ModelBase {
  #worker;
  #pending = new Map();
  #next = 1;

  constructor(worker) {
    super();
    this.#worker = worker;
    worker.addEventListener('message', (e) => this.#onMessage(e.data));
    worker.addEventListener('error', (e) => {
      const err = makeError('DeviceLost', `the worker failed: ${e.message ?? e}`);
      for (const p of this.#pending.values()) p.fail(err);
      this.#pending.clear();
    });
  }

  #onMessage(msg) {
    if (!msg || typeof msg !== 'object' || !this.#pending.has(msg.id)) return;
    const p = this.#pending.get(msg.id);
    switch (msg.kind) {
      case 'progress':
      case 'token':
        p.event(msg.kind, msg.payload);
        break;
      case 'return':
        this.#pending.delete(msg.id);
        p.done(msg.payload);
        break;
      case 'throw':
        this.#pending.delete(msg.id);
        p.fail(toTritiumError(msg.payload));
        break;
    }
  }

  /** Send a request; `on(kind, payload)` sees its progress/token messages. */
  request(kind, payload, { on, transfer = [] } = {}) {
    const id = this.#next++;
    const promise = new Promise((resolve, reject) => {
      this.#pending.set(id, { event: on ?? (() => {}), done: resolve, fail: reject });
    });
    this.#worker.postMessage({ id, kind, payload }, transfer);
    return { id, promise };
  }

  abort(id) {
    this.#worker.postMessage({ id: this.#next++, kind: 'abort', payload: { id } });
  }

  async init(source, opts) {
    const { onProgress, signal, device, ...rest } = opts;
    if (device) {
      throw makeError('InvalidArgument',
        'the device option cannot cross into a worker (a GPUDevice cannot be sent to one): load on the main thread with it');
    }
    const transfer = source instanceof ArrayBuffer ? [source] : [];
    const { id, promise } = this.request('load', { source: source instanceof URL ? source.href : source, opts: rest }, {
      on: (kind, ev) => kind === 'progress' && onProgress?.(ev),
      transfer,
    });
    const onAbort = () => this.abort(id);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const info = await promise;
      this.modelInfo = info.modelInfo;
      this.deviceInfo = info.deviceInfo;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
    return this;
  }

  async *stream(input, opts = {}) {
    const { signal, onToken, ...rest } = opts;
    if (signal?.aborted) throw makeError('AbortError', 'the request was aborted before it began');
    const q = new PushQueue();
    const { id, promise } = this.request('generate', { input, opts: rest }, {
      on: (kind, ev) => {
        if (kind !== 'token') return;
        try {
          onToken?.(ev);
        } catch (e) {
          console.error('tritium: onToken threw', e);
        }
        q.push(ev);
      },
    });
    promise.then((done) => { q.push(done); q.end(); }, (e) => q.end(e));
    const onAbort = () => this.abort(id);
    signal?.addEventListener('abort', onAbort, { once: true });
    let finished = false;
    try {
      for (;;) {
        const ev = await q.next();
        if (ev === undefined) break;
        if (ev.type === 'done') finished = true;
        yield ev;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      if (!finished && !q.done) {
        this.abort(id);
        await promise.catch(() => {});
      }
    }
  }

  #call(kind, payload) {
    return this.request(kind, payload).promise;
  }

  /** As BitNet.loadAdapter, in the worker: resolves to the handle generations name. */
  loadAdapter(source, opts = {}) {
    const { signal: _s, onProgress: _p, ...rest } = opts;
    return this.#call('loadAdapter', { source: source instanceof URL ? source.href : source, opts: rest });
  }
  diagnose(text) { return this.#call('diagnose', { text }); }
  stats() { return this.#call('stats', {}); }
  tokenize(text, opts = {}) { return this.#call('tokenize', { text, addSpecial: opts.addSpecial ?? true }); }
  detokenize(ids, opts = {}) { return this.#call('detokenize', { ids: Array.from(ids), skipSpecial: opts.skipSpecial ?? true }); }
  streamPieces(ids) { return this.#call('streamPieces', { ids: Array.from(ids) }); }
  applyChatTemplate(messages, opts = {}) {
    return this.#call('applyChatTemplate', { messages, addGenerationPrompt: opts.addGenerationPrompt ?? true });
  }
  resetChat() { return this.#call('resetChat', {}); }
  /** Load a model into this worker again: after dispose(), or in place of the current one. */
  load(source, opts = {}) { return this.init(source, opts); }
  dispose() { return this.#call('dispose', {}); }
  async [Symbol.asyncDispose]() { await this.dispose(); }
  /** End the worker (after dispose). */
  terminate() { this.#worker.terminate(); }
}

/**
 * The BitNet API over a model loaded in `worker` (a module worker running
 * BitNetWorkerHandler). Every method is async.
 * @param {Worker} worker
 * @param {string | URL | Blob | ArrayBuffer} source
 * @param {object} [opts] BitNet.load's options
 */
export async function createWorkerBitNet(worker, source, opts = {}) {
  return new WorkerBitNet(worker).init(source, opts);
}
