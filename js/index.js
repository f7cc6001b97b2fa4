// The npm package `tritium`: quantized LLMs on WebGPU, in the page or in a Web Worker.
//
//   import { BitNet } from 'tritium';
//   const model = await BitNet.load('https://example.com/models/smollm2/', { onProgress });
//   for await (const text of model.generate('Once upon a time', { maxTokens: 64 })) ...

import init, * as wasm from './wasm/tritium.js';
import { makeError, toTritiumError, TritiumError } from './errors.js';
import { ModelBase, PushQueue } from './common.js';
import { createWorkerBitNet } from './worker-client.js';
import { HashPool } from './hash-pool.js';

export * from './errors.js';
export { createWorkerBitNet };

let ready = null;

/**
 * Load the wasm module (once). Called by everything that needs it; call it yourself to give
 * another URL or module for the .wasm file.
 * @param {string | URL | Response | BufferSource | WebAssembly.Module} [wasmSource]
 */
export function initWasm(wasmSource) {
  ready ??= init({ module_or_path: wasmSource ?? new URL('./wasm/tritium_bg.wasm', import.meta.url) });
  return ready;
}

/** A promise's rejection as a TritiumError. */
async function call(f) {
  try {
    return await f();
  } catch (e) {
    throw toTritiumError(e);
  }
}

/**
 * Whether this browser can run models: WebGPU with an adapter.
 * @returns {Promise<boolean>}
 */
export async function isSupported() {
  try {
    const gpu = globalThis.navigator?.gpu;
    if (!gpu) return false;
    return (await gpu.requestAdapter()) != null;
  } catch {
    return false;
  }
}

/**
 * The complete models in OPFS.
 * @returns {Promise<{id: string, kind: string, bytes: number, shards: number}[]>}
 */
export async function listCached() {
  await initWasm();
  const list = await call(() => wasm.opfs_list());
  return list.map((m) => ({ id: m.name, ...m }));
}

/**
 * Delete a cached model (complete or partial); true when something was removed.
 * @param {string} id
 */
export async function deleteCached(id) {
  await initWasm();
  return call(() => wasm.opfs_delete(String(id)));
}

const looksLikeUrl = (s) => /^[a-z][a-z0-9+.-]*:\/\//i.test(s) || s.startsWith('/') || s.startsWith('./') ||
  s.startsWith('../') || /\.gguf([?#].*)?$/i.test(s);

/** An id for a URL the store cannot name (a bare origin): its host and path. */
function fallbackId(url) {
  const u = new URL(url);
  return `${u.hostname}-${u.port || 'default'}${u.pathname}`.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+|[-.]+$/g, '');
}

/** The downloader's events as the package's progress events. */
function downloadProgress(onProgress) {
  if (!onProgress) return undefined;
  const t0 = performance.now();
  return (e) => {
    const base = { loaded: 0, total: 0, fraction: 0, bytesPerSecond: 0, etaSeconds: null, shard: 0, shards: 0, message: '' };
    let ev;
    if (e.type === 'planned') {
      ev = { ...base, phase: 'resolve', total: e.total_bytes, loaded: e.verified_bytes, shards: e.files,
        fraction: e.total_bytes ? e.verified_bytes / e.total_bytes : 0,
        message: `${e.files} files, ${e.total_bytes} bytes (${e.verified_files} already verified)` };
    } else if (e.type === 'progress') {
      const elapsed = (performance.now() - t0) / 1000;
      ev = { ...base, phase: 'download', loaded: e.done, total: e.total, fraction: e.total ? e.done / e.total : 0,
        bytesPerSecond: e.rate ?? (elapsed > 0 ? e.done / elapsed : 0), etaSeconds: e.eta_s ?? null,
        shard: e.shard, shards: e.shards, message: `file ${e.shard} of ${e.shards}` };
    } else if (e.type === 'fileVerified') {
      ev = { ...base, phase: 'verify', loaded: e.files_done, total: e.files_total,
        fraction: e.files_total ? e.files_done / e.files_total : 1, shard: e.files_done, shards: e.files_total,
        message: `verified ${e.file}` };
    } else if (e.type === 'retrying' || e.type === 'restarting') {
      ev = { ...base, phase: 'download', message: `${e.type}: ${e.reason}` };
    } else {
      return;
    }
    try {
      onProgress(ev);
    } catch (err) {
      console.error('tritium: onProgress threw', err);
    }
  };
}

/**
 * In a worker, the hash pool kept for the next download rather than closed after each: in
 * Chromium, a worker terminated just after it ended workers of its own can hang, its thread
 * never ending (pages end their model worker right after a cancelled or failed load: the chat
 * demo's Cancel hung like that about one time in ten, tests/browser/run-demos.mjs). Kept, its
 * hash workers end with the worker that made them. On the main thread the pool is closed
 * after each download, as nothing terminates the page.
 */
let keptPool = null;

/**
 * Shards fetched at once: as asked, else one per core less one, from 4 to 8 (each shard is
 * fetched, written and hashed on a hash worker of its own; in Chromium one thread's fetch and
 * OPFS writes run well under one core's BLAKE3 speed).
 */
function concurrency(opts) {
  const cores = globalThis.navigator?.hardwareConcurrency || 2;
  return opts.download?.concurrency ?? opts.concurrency ?? Math.max(4, Math.min(8, cores - 1));
}

/**
 * The hash workers of a download (null: hash in the download's own thread), and whether the
 * download leaves them running (`keep`, in a worker: `keptPool`). Default: one per file
 * fetched at once, leaving a core to the download itself (one on a 2-core machine).
 */
function hashPoolFor(opts) {
  const asked = opts.download?.hashWorkers ?? opts.hashWorkers;
  if (asked !== undefined && !(Number.isInteger(asked) && asked >= 0)) {
    throw makeError('InvalidArgument', `hashWorkers must be a whole number >= 0, not ${JSON.stringify(asked)}`);
  }
  // The compiled module the workers start from.
  const module = wasm.wasm_module();
  if (asked === 0 || typeof Worker === 'undefined' || !(module instanceof WebAssembly.Module)) return null;
  const parallel = concurrency(opts);
  const cores = globalThis.navigator?.hardwareConcurrency || 2;
  const size = asked ?? Math.max(1, Math.min(parallel, cores - 1));
  const inWorker = typeof WorkerGlobalScope !== 'undefined' && globalThis instanceof WorkerGlobalScope;
  if (!inWorker) return { pool: new HashPool(size, module), keep: false };
  if (keptPool?.size !== size || keptPool.failure !== null) {
    keptPool?.close();
    keptPool = new HashPool(size, module);
  }
  return { pool: keptPool, keep: true };
}

/**
 * Download a model into OPFS (verified, resumable); resolves to `{ id, bytes, ... }`.
 * @param {string} source an RDRR base URL (or its manifest.json) or a .gguf URL
 * @param {import('./index.js').DownloadOptions} [opts]
 */
export async function download(source, opts = {}) {
  await initWasm();
  const url = new URL(String(source), globalThis.location?.href).href;
  const hashes = hashPoolFor(opts);
  const hashPool = hashes?.pool ?? null;
  try {
    const summary = await call(() =>
      wasm.opfs_download(url, {
        name: opts.name ?? opts.id,
        sha256: opts.integrity,
        signal: opts.signal,
        onProgress: downloadProgress(opts.onProgress),
        parallel: concurrency(opts),
        retries: opts.download?.retries ?? opts.retries,
        kind: opts.kind,
        hashPool,
      }),
    );
    return { id: summary.name, ...summary };
  } finally {
    if (hashes && !hashes.keep) hashPool.close();
  }
}

/** The model's id for a URL (what download() stores it as). */
export async function cacheIdFor(url) {
  await initWasm();
  return wasm.model_name_for_url(new URL(String(url), globalThis.location?.href).href) ?? null;
}

/**
 * A stand-in for `navigator.gpu` whose one adapter hands out the caller's `device`: the GPU
 * layer (wgpu) makes its device through `navigator.gpu`, which it reads once, when it is set
 * up; the wasm core puts this in its place for that one synchronous call (src/web/device.rs).
 * @param {GPUDevice} device
 */
function gpuFor(device) {
  const info = device.adapterInfo ?? {};
  const adapter = {
    features: device.features,
    limits: device.limits,
    info,
    isFallbackAdapter: Boolean(info.isFallbackAdapter),
    requestAdapterInfo: async () => info,
    requestDevice: async () => device,
  };
  const real = globalThis.navigator?.gpu;
  return {
    requestAdapter: async () => adapter,
    getPreferredCanvasFormat: () => real?.getPreferredCanvasFormat?.() ?? 'bgra8unorm',
    wgslLanguageFeatures: real?.wgslLanguageFeatures ?? new Set(),
  };
}

/** The bytes of a `tokenizer.json` at `url` (the `tokenizerUrl` load option). */
async function fetchTokenizer(url, signal) {
  const href = new URL(String(url), globalThis.location?.href).href;
  let res;
  try {
    res = await fetch(href, { signal });
  } catch (e) {
    if (signal?.aborted) throw makeError('AbortError', 'the load was aborted');
    throw makeError('NetworkError', `tokenizerUrl ${href}: ${e?.message ?? e}`, { url: href });
  }
  if (!res.ok) throw makeError('NetworkError', `tokenizerUrl ${href}: HTTP ${res.status}`, { url: href, status: res.status });
  return new Uint8Array(await res.arrayBuffer());
}

/**
 * The `adapters` option of a generation as the wasm core takes it: `[{ id, scale }]` from
 * handles that `loadAdapter` returned, each alone or as `{ adapter, scale }`.
 */
function adapterChoices(adapters) {
  if (adapters === undefined || adapters === null) return [];
  if (!Array.isArray(adapters)) throw makeError('InvalidArgument', 'adapters must be an array of loadAdapter() handles');
  return adapters.map((a) => {
    const handle = a?.adapter ?? a;
    const scale = a?.adapter !== undefined ? a.scale : undefined;
    if (!Number.isInteger(handle?.id) || handle.id < 0) {
      throw makeError('InvalidArgument', 'each adapter must be a loadAdapter() handle, or { adapter, scale }');
    }
    if (scale !== undefined && !(typeof scale === 'number' && Number.isFinite(scale))) {
      throw makeError('InvalidArgument', `adapter scale must be a finite number, not ${JSON.stringify(scale)}`);
    }
    return scale === undefined ? { id: handle.id } : { id: handle.id, scale };
  });
}

/**
 * A model on this page's WebGPU device.
 */
export class BitNet extends ModelBase {
  #m;

  /** @private Use BitNet.load. */
  constructor(m) {
    super();
    this.#m = m;
    /** Architecture, sizes, context, chat template. */
    this.modelInfo = m.modelInfo();
    /** The WebGPU adapter. */
    this.deviceInfo = m.deviceInfo();
  }

  /**
   * Load a model: a URL (RDRR base URL or .gguf; downloaded into OPFS first, or taken from
   * it), the id of a cached model, or a GGUF File/Blob/ArrayBuffer.
   * @param {string | URL | Blob | ArrayBuffer | ArrayBufferView} source
   * @param {import('./index.js').LoadOptions} [opts]
   * @returns {Promise<BitNet>}
   */
  static async load(source, opts = {}) {
    await initWasm();
    if (!globalThis.navigator?.gpu) {
      throw makeError('WebGPUNotAvailable',
        'WebGPU is not available here (navigator.gpu is missing): use a browser with WebGPU enabled, ' +
        'from a secure context (https, localhost or 127.0.0.1)');
    }
    // No adapter (WebGPU present but blocked or without a usable GPU): fail before downloading.
    if (!opts.device && !(await isSupported())) {
      throw makeError('WebGPUNotAvailable',
        'WebGPU is present but gives no adapter here (GPU blocked or unsupported): nothing was downloaded');
    }
    if (opts.signal?.aborted) throw makeError('AbortError', 'the load was aborted');
    const device = opts.device;
    if (device !== undefined && (device === null || typeof device.createBuffer !== 'function' || !device.queue)) {
      throw makeError('InvalidArgument', 'the device option must be a GPUDevice');
    }
    // Fetched before anything else, so a bad URL fails before a long download.
    const tokenizerJson = opts.tokenizerUrl ? await fetchTokenizer(opts.tokenizerUrl, opts.signal) : undefined;
    const loadOpts = {
      contextLength: opts.contextLength,
      signal: opts.signal,
      device,
      gpu: device ? gpuFor(device) : undefined,
      tokenizerJson,
      // Checked by the load for a File/Blob/ArrayBuffer or a cached GGUF; a download checks
      // it as the file streams (and this is cleared then).
      integrity: opts.integrity,
      name: opts.name,
      readThroughBlobs: opts.readThroughBlobs,
      warmup: opts.warmup,
      exact: opts.exact,
      onProgress: opts.onProgress
        ? (e) => opts.onProgress({ bytesPerSecond: 0, etaSeconds: null, shard: 0, shards: 0, ...e })
        : undefined,
    };
    let target = source;
    if (source instanceof URL) target = source.href;
    if (typeof target === 'string') {
      if (looksLikeUrl(target)) {
        const url = new URL(target, globalThis.location?.href).href;
        const id = opts.name ?? opts.id ?? (await cacheIdFor(url)) ?? fallbackId(url);
        const cached = id ? await call(() => wasm.opfs_get(id)) : null;
        if (!cached) {
          const d = await download(url, { ...opts, name: id ?? undefined });
          target = d.id;
          loadOpts.integrity = undefined;
        } else {
          target = id;
          opts.onProgress?.({ phase: 'resolve', loaded: cached.bytes, total: cached.bytes, fraction: 1,
            bytesPerSecond: 0, etaSeconds: 0, shard: 0, shards: cached.shards ?? 0, message: 'in the cache (OPFS)' });
        }
      } else {
        const cached = await call(() => wasm.opfs_get(target));
        if (!cached) throw makeError('NotFound', `no cached model named ${JSON.stringify(target)}`);
      }
    }
    const m = await call(() => wasm.load_model(target, loadOpts));
    return new BitNet(m);
  }

  /**
   * Load a LoRA adapter for this model: a URL (a llama.cpp GGUF adapter, or an RDRR adapter
   * folder's base URL; downloaded into OPFS and verified as models are, or taken from it), the
   * id of a cached adapter, or a GGUF adapter File/Blob/ArrayBuffer. It is checked against the
   * model (architecture, blocks, shapes) and applies to the generations whose `adapters`
   * option names the returned handle (`[handle]` or `[{ adapter: handle, scale }]`).
   * @param {string | URL | Blob | ArrayBuffer | ArrayBufferView} source
   * @param {{ name?: string, integrity?: string, signal?: AbortSignal, onProgress?: Function }} [opts]
   * @returns {Promise<{ id: number, name: string }>}
   */
  async loadAdapter(source, opts = {}) {
    let target = source instanceof URL ? source.href : source;
    let name = opts.name ?? 'adapter';
    if (typeof target === 'string') {
      if (looksLikeUrl(target)) {
        const url = new URL(target, globalThis.location?.href).href;
        const id = opts.name ?? (await cacheIdFor(url)) ?? fallbackId(url);
        const cached = id ? await call(() => wasm.opfs_get(id)) : null;
        target = cached ? id : (await download(url, { ...opts, name: id ?? undefined })).id;
      } else if (!(await call(() => wasm.opfs_get(target)))) {
        throw makeError('NotFound', `no cached adapter named ${JSON.stringify(target)}`);
      }
      name = opts.name ?? target;
    }
    const id = await call(() => this.#m.loadAdapter(target, name));
    return Object.freeze({ id, name });
  }

  /**
   * Token and done events of a generation.
   * @param {string | {role: string, content: string}[] | {ids: number[]}} input a raw prompt
   *   (no chat template), chat messages (rendered with the model's template), or token ids
   * @param {import('./index.js').GenerateOptions} [opts]
   * @returns {AsyncGenerator<import('./index.js').StreamEvent, void>}
   */
  async *stream(input, opts = {}) {
    const inner = new AbortController();
    const user = opts.signal;
    const forward = () => inner.abort();
    if (user?.aborted) throw makeError('AbortError', 'the request was aborted before it began');
    user?.addEventListener('abort', forward, { once: true });
    const q = new PushQueue();
    let userError;
    const { signal: _s, onToken, adapters, ...rest } = opts;
    const chosen = adapterChoices(adapters);
    const promise = this.#m.generate(input, { ...rest, adapters: chosen, signal: inner.signal }, (text, tokenId) => {
      const ev = { type: 'token', text, tokenId };
      if (onToken) {
        try {
          onToken(ev);
        } catch (e) {
          userError = e;
          inner.abort();
        }
      }
      q.push(ev);
    });
    let result;
    promise.then((r) => { result = r; q.end(); }, (e) => q.end(toTritiumError(e)));
    let finished = false;
    try {
      for (;;) {
        const ev = await q.next();
        if (ev === undefined) break;
        yield ev;
      }
      if (userError) throw userError;
      if (result.tail) {
        // The text held back to the end (a possible stop string, a partial character): a
        // token event like the others, for onToken too (as in worker mode).
        const ev = { type: 'token', text: result.tail, tokenId: null };
        try {
          onToken?.(ev);
        } catch (e) {
          console.error('tritium: onToken threw', e);
        }
        yield ev;
      }
      finished = true;
      yield {
        type: 'done',
        finishReason: result.finishReason,
        text: result.text,
        tokenIds: result.tokenIds,
        usage: result.usage,
        timings: result.timings,
      };
    } finally {
      user?.removeEventListener('abort', forward);
      if (!finished && !q.done) {
        // The consumer stopped early: end the generation so the model is free again.
        inner.abort();
        await promise.catch(() => {});
      }
    }
  }

  /** Per-stage statistics of one forward pass (min/max/mean/rms, NaN/Inf counts). */
  diagnose(text) {
    return call(() => this.#m.diagnose(text ?? undefined));
  }

  /** Counters and the last generation's timings. */
  stats() {
    return { ...this.#m.stats(), busy: this.#m.busy, disposed: this.#m.disposed };
  }

  /**
   * Token ids of `text` (BOS as the tokenizer says unless `addSpecial` is false).
   * @param {string} text
   */
  tokenize(text, { addSpecial = true } = {}) {
    try {
      return Array.from(this.#m.tokenize(String(text), addSpecial));
    } catch (e) {
      throw toTritiumError(e);
    }
  }

  /** Text of token ids, decoded together (multi-byte characters come out whole). */
  detokenize(ids, { skipSpecial = true } = {}) {
    try {
      return this.#m.detokenize(Uint32Array.from(ids), skipSpecial);
    } catch (e) {
      throw toTritiumError(e);
    }
  }

  /** The pieces a token-by-token stream of `ids` produces (the last is the flush). */
  streamPieces(ids) {
    try {
      return this.#m.streamPieces(Uint32Array.from(ids));
    } catch (e) {
      throw toTritiumError(e);
    }
  }

  /** Chat messages rendered with the model's template. */
  applyChatTemplate(messages, { addGenerationPrompt = true } = {}) {
    try {
      return this.#m.applyChatTemplate(messages, addGenerationPrompt);
    } catch (e) {
      throw toTritiumError(e);
    }
  }

  /** Forget the conversation's KV cache. */
  resetChat() {
    try {
      this.#m.resetChat();
    } catch (e) {
      throw toTritiumError(e);
    }
  }

  /** Free every GPU buffer; the model cannot be used afterwards. */
  dispose() {
    this.#m.dispose();
  }

  async [Symbol.asyncDispose]() {
    this.dispose();
  }
}

export { TritiumError };
