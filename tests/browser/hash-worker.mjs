// A hashing worker for the delivery bench's measure of hashing off the download worker
// (delivery-worker.mjs, op 'proto_download'): streams by id, fed in order.
// Messages in: { op: 'ping' } (answered { ping: true } once the wasm is ready),
// { op: 'start', id, algorithm }, { op: 'data', id, bytes } (a Uint8Array, transferred),
// { op: 'finish', id } (answered { id, digest }).
import init, { BenchHasher } from './pkg/tritium.js';

const ready = init();
const hashers = new Map();
onmessage = async (e) => {
  await ready;
  const m = e.data;
  if (m.op === 'ping') postMessage({ ping: true });
  else if (m.op === 'start') hashers.set(m.id, new BenchHasher(m.algorithm));
  else if (m.op === 'data') hashers.get(m.id).update(m.bytes);
  else if (m.op === 'finish') {
    const h = hashers.get(m.id);
    hashers.delete(m.id);
    postMessage({ id: m.id, digest: h.finish() });
  }
};
