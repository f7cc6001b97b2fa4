// The worker side of createWorkerBitNet:
//
//   // model-worker.js, started with new Worker(url, { type: 'module' })
//   import { BitNetWorkerHandler } from 'tritium/worker';
//   new BitNetWorkerHandler();
//
// In a dedicated worker, cached models are read through sync access handles.

import { BitNet } from './index.js';
import { makeError, serializeError } from './errors.js';

export class BitNetWorkerHandler {
  /** @type {BitNet | null} */
  model = null;
  #aborts = new Map();

  /** @param {any} [scope] the worker's global scope (default `self`) */
  constructor(scope = globalThis) {
    this.scope = scope;
    scope.addEventListener('message', (e) => this.onmessage(e.data));
  }

  post(id, kind, payload) {
    this.scope.postMessage({ id, kind, payload });
  }

  async onmessage(msg) {
    if (!msg || typeof msg !== 'object') return;
    const { id, kind, payload = {} } = msg;
    if (kind === 'abort') {
      this.#aborts.get(payload.id)?.abort();
      return;
    }
    const ctl = new AbortController();
    this.#aborts.set(id, ctl);
    try {
      const value = await this.handle(id, kind, payload, ctl.signal);
      this.post(id, 'return', value);
    } catch (e) {
      this.post(id, 'throw', serializeError(e));
    } finally {
      this.#aborts.delete(id);
    }
  }

  need() {
    if (!this.model) throw makeError('InvalidArgument', 'no model is loaded in this worker');
    return this.model;
  }

  async handle(id, kind, p, signal) {
    switch (kind) {
      case 'load': {
        if (this.model) this.model.dispose();
        this.model = null;
        this.model = await BitNet.load(p.source, {
          ...p.opts,
          signal,
          onProgress: (ev) => this.post(id, 'progress', ev),
        });
        return { modelInfo: this.model.modelInfo, deviceInfo: this.model.deviceInfo };
      }
      case 'generate': {
        const m = this.need();
        let done;
        for await (const ev of m.stream(p.input, { ...p.opts, signal })) {
          if (ev.type === 'token') this.post(id, 'token', ev);
          else done = ev;
        }
        return done;
      }
      case 'loadAdapter':
        return this.need().loadAdapter(p.source, { ...p.opts, signal, onProgress: (ev) => this.post(id, 'progress', ev) });
      case 'diagnose': return this.need().diagnose(p.text);
      case 'stats': return this.need().stats();
      case 'tokenize': return this.need().tokenize(p.text, { addSpecial: p.addSpecial });
      case 'detokenize': return this.need().detokenize(p.ids, { skipSpecial: p.skipSpecial });
      case 'streamPieces': return this.need().streamPieces(p.ids);
      case 'applyChatTemplate':
        return this.need().applyChatTemplate(p.messages, { addGenerationPrompt: p.addGenerationPrompt });
      case 'resetChat': return this.need().resetChat();
      case 'dispose': {
        this.model?.dispose();
        this.model = null;
        return true;
      }
      default:
        throw makeError('InvalidArgument', `unknown request kind ${JSON.stringify(kind)}`);
    }
  }
}
