// A hash worker of a HashPool (hash-pool.js): hash streams by id, over the package's wasm
// module, which the pool posts compiled. Messages, in the order the pool sends them:
//   { op: 'init', module }                -> { ready: true } or { failed }
//   { op: 'start', id, kind, offset }      a new stream ('sha256', 'blake3', 'blake3-subtree')
//   { op: 'data', id, bytes }              the stream's next bytes (a transferred Uint8Array)
//   { op: 'data', id, bytes, at }          its bytes from `at` on, held until those before are in
//   { op: 'finish', req, ids }             -> { req, digests, acked }
//   { op: 'drop', ids }                    streams given up
// Bytes hashed (or held) are acknowledged ({ acked: n }) every MiB, for the pool's
// backpressure: held bytes wait for bytes the pool has still to send, so they must not hold it
// back (the downloader bounds them). Any
// failure is { failed: message }, after which the pool stops.

import init, { HashStream } from './wasm/tritium.js';

const ACK_EVERY = 1 << 20;
const streams = new Map();
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
