// Types of `tritium/worker`.
import type { BitNet } from './index.js';

/** Runs a model inside a dedicated module worker for createWorkerBitNet. */
export declare class BitNetWorkerHandler {
  model: BitNet | null;
  constructor(scope?: { addEventListener: Function; postMessage: Function });
  onmessage(msg: { id: number; kind: string; payload?: unknown }): Promise<void>;
}
