// The dedicated worker of delivery.html: here OPFS has sync access handles, so downloads
// write through them and cached models load from them (tensor by tensor, onto WebGPU).
// Messages in: { id, op: 'download', url, options, abortAt } (events come back as { id, event };
// the download aborts itself once `abortAt` bytes are done), { op: 'abort' } (aborts the
// download under way), { id, op: 'generate', name, prompt, n, ctx },
// { id, op: 'bench_hash', algorithm, mib, chunkKib }, { id, op: 'fetch_only', url, parallel, part, parts },
// { id, op: 'proto_shards', url, parallel, part, parts, folder, variant }, { id, op: 'ready' } (answers
// once the wasm module is ready).
// A download's options may carry `hashWorkers` (default 1; 0: hashed in this thread),
// `hashWorkerUrl` and `hashStallMs`: the package's HashPool (js/hash-pool.js) it hashes on. Out: { id, result } or
// { id, error: { code, message, ... } }.
import init, * as wasm from './pkg/tritium.js';
import { HashPool } from './js/hash-pool.js';
import { timed } from './timed-pool.mjs';

const ready = init();
let ctl = null;
let hashPool = null;
let kept = null;
const plain = (e) => {
  const out = { code: e?.code ?? 'worker', message: String(e?.message ?? e) };
  for (const k of ['needed', 'available', 'file', 'algorithm', 'expected', 'actual', 'url', 'status', 'model', 'value', 'group']) {
    if (e && e[k] !== undefined) out[k] = e[k];
  }
  return out;
};

// The network ceiling: every shard fetched and read through a stream reader, bytes dropped
// (with `parts` workers: this one takes the shards whose index is `part` modulo `parts`).
async function fetchOnly(url, parallel, part = 0, parts = 1) {
  const manifest = await (await fetch(new URL('manifest.json', url), { cache: 'no-store' })).json();
  const queue = manifest.shards.map((s) => new URL(s.filename ?? s.fileName, url).href)
    .filter((_, i) => i % parts === part);
  let bytes = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: parallel }, async () => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const reader = (await fetch(next, { cache: 'no-store' })).body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        bytes += value.length;
      }
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  return { bytes, seconds, mb_per_s: bytes / seconds / 1e6 };
}

// What the download could reach with its shards spread over workers (a prototype, for the
// bench only): this worker takes the shards whose index is `part` modulo `parts`, `parallel`
// at a time, and for each streams the body through a sync access handle into a file of OPFS
// folder `folder` and into a HashStream (the package's hasher, in this worker's wasm), checks
// the digest against the manifest's and removes the file. No resume, retries, groups, state
// or progress.
async function protoShards(url, parallel, part, parts, folder, variant = '') {
  // `variant`: '+'-joined flags that take a part away or change it, to find what bounds the
  // whole: `nohash` (no hashing), `nowrite` (nothing stored), `prealloc` (the file sized to the
  // shard before the first write, so the writes ask for no more capacity), `noflush` (no
  // flush() before the handle closes), `buf<KiB>` (the
  // network's chunks gathered into writes and hash updates of that many KiB), `hash2` (every
  // byte hashed a second time here, as a group hash over the same bytes is), `hash2off` (that
  // second hash on a helper worker of this one's, each chunk transferred to it once written and
  // hashed), `byob<KiB>` (the body read with a BYOB reader into one reused buffer of that many
  // KiB, 1024 when not given, instead of a new buffer for each chunk).
  const flags = new Set(variant.split('+').filter(Boolean));
  const helper = flags.has('hash2off') ? sinkWorker() : null;
  const bufKib = Number([...flags].find((f) => f.startsWith('buf'))?.slice(3) ?? 0);
  const byob = [...flags].find((f) => f.startsWith('byob'));
  const byobKib = byob === undefined ? 0 : Number(byob.slice(4) || 1024);
  const manifest = await (await fetch(new URL('manifest.json', url), { cache: 'no-store' })).json();
  const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle(folder, { create: true });
  const queue = manifest.shards.filter((_, i) => i % parts === part);
  let bytes = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: parallel }, async () => {
    const buf = bufKib ? new Uint8Array(bufKib * 1024) : null;
    for (let shard = queue.shift(); shard; shard = queue.shift()) {
      const name = shard.filename ?? shard.fileName;
      const handle = flags.has('nowrite') ? null
        : await (await dir.getFileHandle(name, { create: true })).createSyncAccessHandle();
      const alg = shard.hashAlgorithm ?? manifest.hashAlgorithm ?? 'sha256';
      const hash = flags.has('nohash') ? null : new wasm.HashStream(alg);
      const hash2 = flags.has('hash2') ? new wasm.HashStream(alg) : null;
      const sink = helper?.open(alg);
      try {
        handle?.truncate(flags.has('prealloc') ? shard.size : 0);
        const body = (await fetch(new URL(name, url), { cache: 'no-store' })).body;
        const reader = byobKib ? body.getReader({ mode: 'byob' }) : body.getReader();
        let into = byobKib ? new ArrayBuffer(byobKib * 1024) : null;
        let at = 0;
        let held = 0;
        const put = (bytes) => {
          handle?.write(bytes, { at });
          hash?.update(bytes);
          hash2?.update(bytes);
          at += bytes.length;
        };
        for (;;) {
          const { done, value } = await (into ? reader.read(new Uint8Array(into)) : reader.read());
          if (done) break;
          if (into) into = value.buffer;
          if (!buf) { put(value); sink?.update(value); continue; }
          for (let off = 0; off < value.length;) {
            const n = Math.min(buf.length - held, value.length - off);
            buf.set(value.subarray(off, off + n), held);
            held += n;
            off += n;
            if (held === buf.length) { put(buf); held = 0; }
          }
        }
        if (held) put(buf.subarray(0, held));
        if (!flags.has('noflush')) handle?.flush();
        hash2?.finish();
        await sink?.finish();
        bytes += at;
      } finally {
        handle?.close();
        // The file goes here, after its handle: removing the folders from the page afterwards,
        // with the files of terminated workers in them, hung in Chromium 156.
        if (handle) await dir.removeEntry(name);
      }
      const digest = hash?.finish();
      if (hash && digest !== shard.hash) throw new Error(`${name}: ${digest}, manifest ${shard.hash}`);
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  helper?.terminate();
  return { bytes, seconds, mb_per_s: bytes / seconds / 1e6 };
}

// protoShards' helper for `hash2off`: a nested worker (this script) that hashes what it is sent.
function sinkWorker() {
  const w = new Worker(new URL(import.meta.url), { type: 'module' });
  const waiting = new Map();
  let next = 0;
  w.onmessage = (e) => { waiting.get(e.data.id)?.(e.data.result); waiting.delete(e.data.id); };
  return {
    open(algorithm) {
      const sink = next++;
      w.postMessage({ op: 'sink_open', sink, algorithm });
      return {
        update(chunk) {
          // Transferred whole when the chunk is its buffer (the reader's are), else copied once.
          const own = chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength ? chunk : chunk.slice();
          w.postMessage({ op: 'sink_update', sink, data: own.buffer }, [own.buffer]);
        },
        finish() {
          const id = next++;
          return new Promise((resolve) => { waiting.set(id, resolve); w.postMessage({ op: 'sink_finish', sink, id }); });
        },
      };
    },
    terminate: () => w.terminate(),
  };
}
const sinks = new Map();
let sinkChain = Promise.resolve();
function sinkOp(m) {
  sinkChain = sinkChain.then(async () => {
    await ready;
    if (m.op === 'sink_open') sinks.set(m.sink, new wasm.HashStream(m.algorithm));
    else if (m.op === 'sink_update') sinks.get(m.sink).update(new Uint8Array(m.data));
    else if (m.op === 'sink_finish') {
      postMessage({ id: m.id, result: sinks.get(m.sink).finish() });
      sinks.delete(m.sink);
    }
  });
}

onmessage = async (e) => {
  const m = e.data;
  if (m.op?.startsWith('sink_')) { sinkOp(m); return; }
  if (m.op === 'abort') { ctl?.abort(); return; }
  try {
    await ready;
    let result;
    if (m.op === 'download') {
      ctl = new AbortController();
      const signal = ctl.signal;
      // The package's hash workers, as delivery.html makes them (default 1; 0: none).
      // `keepPool` (the bench): the pool stays for the next download that asks for one of
      // the same size, as the package's worker keeps its pool.
      const { hashWorkers = 1, hashWorkerUrl, hashStallMs, keepPool = false, ...options } = m.options ?? {};
      if (keepPool && kept?.size === hashWorkers && !kept.failure) {
        hashPool = kept;
      } else {
        kept?.close();
        hashPool = hashWorkers
          ? timed(new HashPool(hashWorkers, wasm.wasm_module(), { workerUrl: hashWorkerUrl, stallMs: hashStallMs }))
          : null;
        kept = keepPool ? hashPool : null;
      }
      if (hashPool) hashPool.startMs = kept === hashPool && hashPool.startMs != null ? 0 : null;
      result = await wasm.opfs_download(m.url, {
        ...options,
        hashPool,
        signal,
        onProgress: (event) => {
          postMessage({ id: m.id, event });
          // Abort here rather than from the page: a round trip through the page arrives late.
          if (m.abortAt && event.type === 'progress' && event.done >= m.abortAt) ctl.abort();
        },
      });
      result.pool_start_ms = hashPool?.startMs ?? null;
    } else if (m.op === 'generate') {
      result = await wasm.opfs_generate_greedy(m.name, m.prompt, m.n, m.ctx);
    } else if (m.op === 'fetch_only') {
      result = await fetchOnly(m.url, m.parallel, m.part, m.parts);
    } else if (m.op === 'ready') {
      result = true;
    } else if (m.op === 'proto_shards') {
      result = await protoShards(m.url, m.parallel, m.part, m.parts, m.folder, m.variant);
    } else if (m.op === 'bench_hash') {
      result = wasm.bench_hash(m.algorithm, m.mib, m.chunkKib);
    } else {
      throw new Error(`unknown op ${m.op}`);
    }
    postMessage({ id: m.id, result });
  } catch (err) {
    postMessage({ id: m.id, error: plain(err) });
  } finally {
    if (m.op === 'download' && hashPool !== kept) hashPool?.close();
  }
};
