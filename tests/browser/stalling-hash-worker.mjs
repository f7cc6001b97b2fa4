// A hash worker that stops answering: the package's own (js/hash-worker.js) until it has
// ended two fetch jobs (two shards fetched, written and hashed here), then silent, as a worker
// that died without an error event would be: nothing more goes out (no heartbeats either) and
// nothing that comes in is handled.
// run-delivery.mjs (i) checks that the download fails with a clear error, keeps the shards
// verified before, and resumes.
import '/js/hash-worker.js';

const real = self.onmessage;
const post = self.postMessage.bind(self);
let ends = 0;
let silent = false;
self.postMessage = (m, transfer) => {
  if (silent) return;
  post(m, transfer);
  if (m?.t === 'end' && ++ends >= 2) silent = true;
};
self.onmessage = (e) => {
  if (!silent) real(e);
};
