// The TL;DR widget's worker: the package's worker handler answers createWorkerBitNet's messages.
// It loads the model from OPFS through sync access handles, which only a dedicated worker has.
import { BitNetWorkerHandler } from '../pkg/worker.js';

new BitNetWorkerHandler(self);
