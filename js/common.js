// What the in-page model (BitNet) and the worker proxy share: generate() and
// chat.completions.create() built on stream(), and the OpenAI request mapping.

import { makeError } from './errors.js';

let counter = 0;
const completionId = () =>
  `chatcmpl-${Date.now().toString(36)}${(counter++).toString(36)}${Math.random().toString(36).slice(2, 8)}`;

/**
 * OpenAI request fields as generate options.
 * @param {any} req
 */
export function optionsFromOpenAI(req) {
  if (req.n !== undefined && req.n !== 1) {
    throw makeError('InvalidArgument', 'only n = 1 is supported');
  }
  const o = {
    maxTokens: req.max_completion_tokens ?? req.max_tokens ?? undefined,
    temperature: req.temperature ?? undefined,
    topP: req.top_p ?? undefined,
    topK: req.top_k ?? undefined,
    minP: req.min_p ?? undefined,
    repeatPenalty: req.repetition_penalty ?? req.repeat_penalty ?? undefined,
    frequencyPenalty: req.frequency_penalty ?? undefined,
    presencePenalty: req.presence_penalty ?? undefined,
    seed: req.seed ?? undefined,
    stop: req.stop ?? undefined,
    ignoreEos: req.ignore_eos ?? undefined,
    signal: req.signal ?? undefined,
  };
  for (const k of Object.keys(o)) if (o[k] === undefined || o[k] === null) delete o[k];
  return o;
}

/** Methods built on `this.stream(input, opts)`. */
export class ModelBase {
  constructor() {
    /** OpenAI-style chat completions. */
    this.chat = { completions: { create: (req) => this.#create(req) } };
  }

  /**
   * Text pieces of a generation.
   * @param {string | {role: string, content: string}[]} input
   * @param {object} [opts]
   * @returns {AsyncGenerator<string, void>}
   */
  async *generate(input, opts = {}) {
    for await (const ev of this.stream(input, opts)) {
      if (ev.type === 'token' && ev.text) yield ev.text;
    }
  }

  /**
   * The whole generation: `{ text, finishReason, usage, timings }`.
   * @param {string | {role: string, content: string}[]} input
   * @param {object} [opts]
   */
  async complete(input, opts = {}) {
    let text = '';
    for await (const ev of this.stream(input, opts)) {
      if (ev.type === 'token') text += ev.text;
      else return { text, finishReason: ev.finishReason, usage: ev.usage, timings: ev.timings };
    }
    throw makeError('InvalidArgument', 'the generation ended without a result');
  }

  #create(req) {
    if (!req || !Array.isArray(req.messages)) {
      return Promise.reject(makeError('InvalidArgument', 'messages must be an array'));
    }
    const messages = req.messages.map((m) => ({
      role: String(m.role),
      content: Array.isArray(m.content)
        ? m.content.map((p) => (typeof p === 'string' ? p : p.text ?? '')).join('')
        : String(m.content ?? ''),
    }));
    let opts;
    try {
      opts = optionsFromOpenAI(req);
    } catch (e) {
      return Promise.reject(e);
    }
    const id = completionId();
    const created = Math.floor(Date.now() / 1000);
    const model = req.model ?? this.modelInfo?.name ?? 'tritium';
    const usageOf = (u) => ({
      prompt_tokens: u.promptTokens,
      completion_tokens: u.completionTokens,
      total_tokens: u.promptTokens + u.completionTokens,
      prompt_tokens_details: { cached_tokens: u.cachedTokens },
    });
    if (!req.stream) {
      return this.complete(messages, opts).then((r) => ({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: r.text },
            finish_reason: r.finishReason,
            logprobs: null,
          },
        ],
        usage: { ...usageOf(r.usage), extra: { timings: r.timings } },
      }));
    }
    const includeUsage = !!req.stream_options?.include_usage;
    const self = this;
    const chunk = (delta, finish, usage) => ({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
      ...(usage ? { usage } : {}),
    });
    async function* chunks() {
      yield chunk({ role: 'assistant', content: '' }, null);
      for await (const ev of self.stream(messages, opts)) {
        if (ev.type === 'token') {
          if (ev.text) yield chunk({ content: ev.text }, null);
        } else {
          yield chunk({}, ev.finishReason);
          if (includeUsage) {
            yield { id, object: 'chat.completion.chunk', created, model, choices: [], usage: usageOf(ev.usage) };
          }
        }
      }
    }
    return Promise.resolve(chunks());
  }
}

/**
 * Events pushed by a producer, consumed as an async iterator.
 */
export class PushQueue {
  constructor() {
    this.items = [];
    this.done = false;
    this.error = undefined;
    this.wake = null;
  }

  push(item) {
    this.items.push(item);
    this.#notify();
  }

  end(error) {
    this.done = true;
    this.error = error;
    this.#notify();
  }

  #notify() {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  /** The next item, or `undefined` at the end (throws the producer's error). */
  async next() {
    for (;;) {
      if (this.items.length) return this.items.shift();
      if (this.done) {
        if (this.error) throw this.error;
        return undefined;
      }
      await new Promise((r) => (this.wake = r));
    }
  }
}
