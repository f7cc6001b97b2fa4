// A hash worker of a HashPool (hash-pool.js): hash streams by id, over the package's wasm
// module, which the pool posts compiled. Messages, in the order the pool sends them:
//   { op: 'init', module }                -> { ready: true } or { failed }
//   { op: 'start', id, kind, offset }      a new stream ('sha256', 'blake3', 'blake3-subtree')
//   { op: 'data', id, bytes }              the stream's next bytes (a transferred Uint8Array)
//   { op: 'finish', req, ids }             -> { req, digests, acked }
//   { op: 'drop', ids }                    streams given up
// Bytes hashed are acknowledged ({ acked: n }) every MiB, for the pool's backpressure. Any
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
      streams.set(m.id, new HashStream(m.kind, m.offset));
      break;
    case 'data':
      stream(m.id).update(m.bytes);
      unacked += m.bytes.length;
      if (unacked >= ACK_EVERY) {
        postMessage({ acked: unacked });
        unacked = 0;
      }
      break;
    case 'finish': {
      const digests = m.ids.map((id) => {
        const s = stream(id);
        streams.delete(id);
        return s.finish();
      });
      postMessage({ req: m.req, digests, acked: unacked });
      unacked = 0;
      break;
    }
    case 'drop':
      for (const id of m.ids) {
        streams.get(id)?.free();
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
