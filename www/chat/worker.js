// The chat demo's worker: the package's worker handler answers createWorkerBitNet's messages.
// (Module workers do not see the page's import map, so the package is imported by path.)
import { BitNetWorkerHandler } from '../pkg/worker.js';

new BitNetWorkerHandler(self);
