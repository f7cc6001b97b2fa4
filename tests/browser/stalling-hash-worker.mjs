// A hash worker that stops answering: the package's own (js/hash-worker.js) until it has
// finished two streams, then silent, as a worker that died without an error event would be.
// run-delivery.mjs (i) checks that the download fails with a clear error, keeps the shards
// verified before, and resumes.
import '/js/hash-worker.js';

const real = self.onmessage;
let finishes = 0;
let silent = false;
self.onmessage = (e) => {
  if (!silent && e.data?.op === 'finish' && ++finishes > 2) silent = true;
  if (!silent) real(e);
};
