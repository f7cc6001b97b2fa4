// A hash worker of a HashPool (hash-pool.js): hash streams by id, over the package's wasm
// module, which the pool posts compiled. Messages, in the order the pool sends them:
//   { op: 'init', module }                -> { ready: true } or { failed }
//   { op: 'start', id, kind, offset }      a new stream ('sha256', 'blake3', 'blake3-subtree')
//   { op: 'data', id, bytes }              the stream's next bytes (a transferred Uint8Array)
//   { op: 'data', id, bytes, at }          its bytes from `at` on, held until those before are in
//   { op: 'finish', req, ids }             -> { req, digests, acked }
//   { op: 'drop', ids }                    streams given up
//   { op: 'fetch', job, spec }             fetch a download's shard here (the wasm
//                                          download_fetch_job: written to OPFS through a sync
//                                          access handle, hashed here) -> { fetch: job, t, ... }:
//                                          t 'json' (progress, events), 'bytes' (offset, data:
//                                          the shard's bytes, for group hashes), 'void', and
//                                          last 'end' (ok or err, JSON)
//   { op: 'fetchAck', job, n }             n bytes of the job's pieces were taken
//   { op: 'fetchAbort', job }              stop the job (it ends with err, its file closed)
// While a job runs the worker says { alive: true } twice a second, so that the pool can tell a
// slow network from a dead worker.
// Bytes hashed (or held) are acknowledged ({ acked: n }) every MiB, for the pool's
// backpressure: held bytes wait for bytes the pool has still to send, so they must not hold it
// back (the downloader bounds them). Any
// failure is { failed: message }, after which the pool stops.

import init, { HashStream, download_fetch_job } from './wasm/tritium.js';

const ACK_EVERY = 1 << 20;
/** A fetch job's unacknowledged bytes above which it waits. */
const WINDOW = 4 << 20;
const streams = new Map();
/** Fetch jobs: id -> { ctl, unacked, waits }. */
const jobs = new Map();
let beat = null;

function startFetch(id, spec) {
  const job = { ctl: new AbortController(), unacked: 0, waits: [] };
  jobs.set(id, job);
  beat ??= setInterval(() => postMessage({ alive: true }), 500);
  const link = {
    send: (json) => postMessage({ fetch: id, t: 'json', json }),
    bytes: (offset, view) => {
      const data = view.slice();
      postMessage({ fetch: id, t: 'bytes', offset, data }, [data.buffer]);
      job.unacked += data.length;
      if (job.unacked <= WINDOW) return undefined;
      return new Promise((resolve) => job.waits.push(resolve));
    },
    voided: () => postMessage({ fetch: id, t: 'void' }),
  };
  const end = (r) => {
    jobs.delete(id);
    for (const resolve of job.waits.splice(0)) resolve();
    if (!jobs.size) {
      clearInterval(beat);
      beat = null;
    }
    postMessage({ fetch: id, t: 'end', ...r });
  };
  download_fetch_job(spec, link, job.ctl.signal).then((ok) => end({ ok }), (err) => end({
    err: typeof err === 'string' ? err : JSON.stringify({ Other: { message: String(err?.message ?? err) } }),
  }));
}
let queue = [];
let unacked = 0;

function stream(id) {
  const s = streams.get(id);
  if (!s) throw new Error(`no hash stream ${id}`);
  return s;
}

function handle(m) {
  switch (m.op) {
    case 'start':
      // `next`: bytes hashed so far; `held`: pieces ahead of it, by where they start.
      streams.set(m.id, { hash: new HashStream(m.kind, m.offset), next: 0, held: new Map() });
      break;
    case 'data': {
      const s = stream(m.id);
      if (typeof m.at === 'number' && m.at !== s.next) {
        if (m.at < s.next || s.held.has(m.at)) throw new Error(`stream ${m.id}: bytes at ${m.at} again`);
        s.held.set(m.at, m.bytes);
      } else {
        s.hash.update(m.bytes);
        s.next += m.bytes.length;
        for (let b = s.held.get(s.next); b; b = s.held.get(s.next)) {
          s.held.delete(s.next);
          s.hash.update(b);
          s.next += b.length;
        }
      }
      unacked += m.bytes.length;
      if (unacked >= ACK_EVERY) {
        postMessage({ acked: unacked });
        unacked = 0;
      }
      break;
    }
    case 'finish': {
      // A stream finished with bytes still held (a group the downloader reads back instead)
      // gives a digest nobody uses.
      const digests = m.ids.map((id) => {
        const s = stream(id);
        streams.delete(id);
        return s.hash.finish();
      });
      postMessage({ req: m.req, digests, acked: unacked });
      unacked = 0;
      break;
    }
    case 'fetch':
      startFetch(m.job, m.spec);
      break;
    case 'fetchAck': {
      const job = jobs.get(m.job);
      if (job) {
        job.unacked -= m.n;
        if (job.unacked <= WINDOW) for (const resolve of job.waits.splice(0)) resolve();
      }
      break;
    }
    case 'fetchAbort': {
      const job = jobs.get(m.job);
      job?.ctl.abort();
      if (job) for (const resolve of job.waits.splice(0)) resolve();
      break;
    }
    case 'drop':
      for (const id of m.ids) {
        streams.get(id)?.hash.free();
        streams.delete(id);
      }
      break;
    default:
      throw new Error(`unknown op ${JSON.stringify(m.op)}`);
  }
}

function run(m) {
  try {
    handle(m);
  } catch (e) {
    postMessage({ failed: String(e?.message ?? e) });
  }
}

onmessage = (e) => {
  const m = e.data;
  if (m?.op === 'init') {
    init({ module_or_path: m.module }).then(() => {
      const waiting = queue;
      queue = null;
      waiting.forEach(run);
      postMessage({ ready: true });
    }, (err) => postMessage({ failed: `the wasm module did not start: ${err?.message ?? err}` }));
    return;
  }
  if (queue) queue.push(m);
  else run(m);
};
