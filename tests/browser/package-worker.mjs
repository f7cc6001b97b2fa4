// The worker of run-package.mjs's worker-mode checks: the package's own handler.
import { BitNetWorkerHandler } from '/pkg/worker.js';

new BitNetWorkerHandler();
