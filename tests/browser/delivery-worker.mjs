// The dedicated worker of delivery.html: here OPFS has sync access handles, so downloads
// write through them and cached models load from them (tensor by tensor, onto WebGPU).
// Messages in: { id, op: 'download', url, options, abortAt } (events come back as { id, event };
// the download aborts itself once `abortAt` bytes are done), { op: 'abort' } (aborts the
// download under way), { id, op: 'generate', name, prompt, n, ctx },
// { id, op: 'bench_hash', algorithm, mib, chunkKib }, { id, op: 'fetch_only', url, parallel },
// { id, op: 'proto_download', url, parallel, hashWorkers }. Out: { id, result } or
// { id, error: { code, message, ... } }.
import init, * as wasm from './pkg/tritium.js';

const ready = init();
let ctl = null;
const plain = (e) => {
  const out = { code: e?.code ?? 'worker', message: String(e?.message ?? e) };
  for (const k of ['needed', 'available', 'file', 'algorithm', 'expected', 'actual', 'url', 'status', 'model', 'value', 'group']) {
    if (e && e[k] !== undefined) out[k] = e[k];
  }
  return out;
};

// The network ceiling: every shard fetched and read through a stream reader, bytes dropped.
async function fetchOnly(url, parallel) {
  const manifest = await (await fetch(new URL('manifest.json', url), { cache: 'no-store' })).json();
  const queue = manifest.shards.map((s) => new URL(s.filename ?? s.fileName, url).href);
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

// A prototype of the download with its hashing on workers of its own (hash-worker.mjs), for
// the bench: every shard fetched (`parallel` at a time), written to OPFS through a sync access
// handle and its chunks handed (transferred) to hash worker `shard % hashWorkers`, or hashed
// here with none, its digest checked against the manifest. No resume, retries or groups: only
// what the bytes go through, to measure what moving the hashing off this thread gains. The
// clock starts once the hash workers have their wasm ready.
async function protoDownload(url, parallel, hashWorkers) {
  const manifest = await (await fetch(new URL('manifest.json', url), { cache: 'no-store' })).json();
  const root = await navigator.storage.getDirectory();
  const dir = await root.getDirectoryHandle('proto-bench', { create: true });
  const workers = Array.from({ length: hashWorkers }, () => new Worker('./hash-worker.mjs', { type: 'module' }));
  const digests = new Map();
  await Promise.all(workers.map((w) => new Promise((resolve) => {
    w.onmessage = (e) => {
      if (e.data.ping) { resolve(); return; }
      digests.get(e.data.id)(e.data.digest);
      digests.delete(e.data.id);
    };
    w.postMessage({ op: 'ping' });
  })));
  const queue = manifest.shards.map((s, i) => ({ ...s, i }));
  let bytes = 0;
  const bad = [];
  const started = performance.now();
  await Promise.all(Array.from({ length: parallel }, async () => {
    for (let s = queue.shift(); s; s = queue.shift()) {
      const algorithm = s.hashAlgorithm ?? manifest.hashAlgorithm;
      const handle = await (await dir.getFileHandle(s.fileName, { create: true })).createSyncAccessHandle();
      handle.truncate(0);
      const w = workers.length ? workers[s.i % workers.length] : null;
      const inline = w ? null : new wasm.BenchHasher(algorithm);
      if (w) w.postMessage({ op: 'start', id: s.i, algorithm });
      const reader = (await fetch(new URL(s.fileName, url), { cache: 'no-store' })).body.getReader();
      let at = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        handle.write(value, { at });
        at += value.length;
        if (w) w.postMessage({ op: 'data', id: s.i, bytes: value }, [value.buffer]);
        else inline.update(value);
      }
      bytes += at;
      const digest = w
        ? await new Promise((resolve) => { digests.set(s.i, resolve); w.postMessage({ op: 'finish', id: s.i }); })
        : inline.finish();
      handle.flush();
      handle.close();
      if (digest !== s.hash) bad.push(s.fileName);
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  for (const w of workers) w.terminate();
  await root.removeEntry('proto-bench', { recursive: true });
  return { bytes, seconds, mb_per_s: bytes / seconds / 1e6, hashWorkers, bad };
}

onmessage = async (e) => {
  const m = e.data;
  if (m.op === 'abort') { ctl?.abort(); return; }
  try {
    await ready;
    let result;
    if (m.op === 'download') {
      ctl = new AbortController();
      const signal = ctl.signal;
      result = await wasm.opfs_download(m.url, {
        ...m.options,
        signal,
        onProgress: (event) => {
          postMessage({ id: m.id, event });
          // Abort here rather than from the page: a round trip through the page arrives late.
          if (m.abortAt && event.type === 'progress' && event.done >= m.abortAt) ctl.abort();
        },
      });
    } else if (m.op === 'generate') {
      result = await wasm.opfs_generate_greedy(m.name, m.prompt, m.n, m.ctx);
    } else if (m.op === 'fetch_only') {
      result = await fetchOnly(m.url, m.parallel);
    } else if (m.op === 'proto_download') {
      result = await protoDownload(m.url, m.parallel, m.hashWorkers);
    } else if (m.op === 'bench_hash') {
      result = wasm.bench_hash(m.algorithm, m.mib, m.chunkKib);
    } else {
      throw new Error(`unknown op ${m.op}`);
    }
    postMessage({ id: m.id, result });
  } catch (err) {
    postMessage({ id: m.id, error: plain(err) });
  }
};
