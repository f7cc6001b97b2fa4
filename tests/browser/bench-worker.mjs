// The model worker of bench-browser.mjs (and any page that wants one): the package's handler.
import { BitNetWorkerHandler } from '/pkg/worker.js';

new BitNetWorkerHandler();
