// <tldr-widget>: summarizes the page it sits on (its main text, or the current selection)
// with a language model running in a Web Worker on WebGPU. Embed with one script tag:
//
//   <script type="module" src="https://YOUR-DEMO-HOST/tldr/tldr-widget.js"></script>
//   <tldr-widget></tldr-widget>
//
// The script must come from the page's own origin (module workers and service workers are
// same-origin only): host www/ and pkg/ with the site, as scripts/demo.sh does.
//
// Attributes (all optional):
//   model            model URL (RDRR folder or GGUF) or cached model id; default: ?model= on the
//                    page, else the demo server's /config.json
//   length           short | medium | long (the initial choice; the user can change it)
//   max-tokens       cap on the summary's tokens (overrides the length choice's budget)
//   max-input-tokens cap on the text given to the model (default 1500 tokens)
//   floating         dock the widget in the bottom-right corner of the window
//   no-offline       do not register the service worker that makes the widget work offline
// Events: `tldr-state` (detail { state }), `tldr-summary` (detail { text, source, done }).
// Property `state`: idle | loading | summarizing | done | error; `offlineReady` (boolean).
//
// Offline: the widget registers ../sw.js (scope: the demo site), which caches the widget, the
// package's JS and wasm; the model itself stays in OPFS after the first download, and the package
// finds a downloaded URL there without any request when the network is gone.
import { extractMainText, selectedText } from './extract.js';
import {
  demoConfig, describeError, formatDuration, formatRate, modelNameFor, phaseLabel,
} from '../shared/demo.js';

const here = import.meta.url;
const pkg = () => import(new URL('../pkg/index.js', here).href);

// Short prompts: every prompt token costs a forward pass's worth of work on slow adapters.
const LENGTHS = {
  short: { label: 'Short', instruction: 'in one or two sentences', maxTokens: 64 },
  medium: { label: 'Medium', instruction: 'in one paragraph', maxTokens: 160 },
  long: { label: 'Bullets', instruction: 'as three to six short bullet points', maxTokens: 256 },
};
const SYSTEM = 'You write faithful, concise summaries.';

const template = document.createElement('template');
template.innerHTML = `
<style>
  :host {
    --tldr-bg: #ffffff; --tldr-fg: #1b1f24; --tldr-muted: #5b6470; --tldr-border: #d6dbe2;
    --tldr-accent: #3b5bdb; --tldr-accent-fg: #ffffff; --tldr-soft: #eef1f5; --tldr-danger: #c92a2a;
    --tldr-danger-bg: #fff1f1;
    display: block; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
    color: var(--tldr-fg); max-width: 40rem;
  }
  @media (prefers-color-scheme: dark) {
    :host { --tldr-bg: #1a1e24; --tldr-fg: #e6e9ee; --tldr-muted: #9aa4b1; --tldr-border: #343b46;
      --tldr-accent: #748ffc; --tldr-accent-fg: #0b0d10; --tldr-soft: #232831; --tldr-danger: #ff8787;
      --tldr-danger-bg: #2c1a1a; }
  }
  :host([floating]) { position: fixed; right: 1rem; bottom: 1rem; width: min(26rem, calc(100vw - 2rem)); z-index: 2147483000; }
  .card { background: var(--tldr-bg); border: 1px solid var(--tldr-border); border-radius: 12px;
    box-shadow: 0 1px 2px rgb(0 0 0 / 6%), 0 6px 24px rgb(0 0 0 / 8%); padding: 0.9rem 1rem; }
  header { display: flex; align-items: baseline; justify-content: space-between; gap: 0.5rem; }
  h2 { font-size: 1rem; margin: 0; letter-spacing: 0.02em; }
  .badge { font-size: 0.75rem; color: var(--tldr-muted); }
  .badge[data-ready="true"] { color: #2b8a3e; }
  .controls { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: end; margin-top: 0.6rem; }
  label { display: grid; gap: 0.15rem; font-size: 0.8rem; color: var(--tldr-muted); }
  select, button { font: inherit; color: inherit; border: 1px solid var(--tldr-border); border-radius: 8px;
    padding: 0.35em 0.7em; background: var(--tldr-bg); }
  button { cursor: pointer; }
  button:disabled { opacity: 0.5; cursor: not-allowed; }
  button.primary { background: var(--tldr-accent); border-color: var(--tldr-accent); color: var(--tldr-accent-fg); font-weight: 600; }
  :focus-visible { outline: 3px solid color-mix(in srgb, var(--tldr-accent) 60%, transparent); outline-offset: 2px; }
  .progress { margin-top: 0.6rem; font-size: 0.8rem; color: var(--tldr-muted); display: grid; gap: 0.25rem; }
  progress { width: 100%; height: 0.45rem; appearance: none; border: none; border-radius: 999px; overflow: hidden; background: var(--tldr-soft); }
  progress::-webkit-progress-bar { background: var(--tldr-soft); }
  progress::-webkit-progress-value { background: var(--tldr-accent); }
  .summary { margin-top: 0.7rem; white-space: pre-wrap; overflow-wrap: anywhere; min-height: 1.5em; }
  .summary:empty { display: none; }
  .meta { margin-top: 0.4rem; font-size: 0.75rem; color: var(--tldr-muted); font-variant-numeric: tabular-nums; }
  .meta:empty { display: none; }
  .error { margin-top: 0.6rem; padding: 0.5rem 0.7rem; border-radius: 8px; background: var(--tldr-danger-bg);
    color: var(--tldr-danger); font-size: 0.9rem; }
  .error strong { display: block; }
  [hidden] { display: none !important; }
</style>
<section class="card" part="card" aria-labelledby="title">
  <header>
    <h2 id="title">TL;DR</h2>
    <span class="badge" id="badge"></span>
  </header>
  <div class="controls">
    <label>Summarize
      <select id="source">
        <option value="auto">Selection, else the page</option>
        <option value="page">The whole page</option>
        <option value="selection">The selection</option>
      </select>
    </label>
    <label>Length
      <select id="length"></select>
    </label>
    <button class="primary" id="go" type="button">Summarize</button>
    <button id="stop" type="button" hidden>Stop</button>
  </div>
  <div class="progress" id="progress" hidden>
    <span id="phase"></span>
    <progress id="bar" max="1"></progress>
  </div>
  <div class="error" id="error" role="alert" hidden></div>
  <div class="summary" id="summary" aria-live="polite"></div>
  <div class="meta" id="meta"></div>
</section>`;

/** @type {Promise<any> | null} one model per page, shared by every widget on it */
let sharedModel = null;

class TldrWidget extends HTMLElement {
  constructor() {
    super();
    const root = this.attachShadow({ mode: 'open' });
    root.append(template.content.cloneNode(true));
    const $ = (id) => /** @type {any} */ (root.getElementById(id));
    this.ui = {
      badge: $('badge'), source: $('source'), length: $('length'), go: $('go'), stop: $('stop'),
      progress: $('progress'), phase: $('phase'), bar: $('bar'), error: $('error'), summary: $('summary'),
      meta: $('meta'),
    };
    for (const [value, { label }] of Object.entries(LENGTHS)) {
      const o = document.createElement('option');
      o.value = value;
      o.textContent = label;
      this.ui.length.append(o);
    }
    this.state = 'idle';
    this.offlineReady = false;
    this.lastSelection = '';
    this.controller = null;
    this.ui.go.addEventListener('click', () => this.summarize());
    this.ui.stop.addEventListener('click', () => this.controller?.abort());
    // A press on the widget's controls can clear the page's selection before the click
    // arrives: keep the last selection while the widget has focus. One cleared elsewhere on
    // the page (a click on the text) is forgotten, so the page is summarized again.
    this.onSelection = () => {
      const text = selectedText(this);
      if (text || !this.matches(':focus-within')) this.lastSelection = text;
    };
  }

  connectedCallback() {
    const length = this.getAttribute('length');
    if (length && LENGTHS[length]) this.ui.length.value = length;
    document.addEventListener('selectionchange', this.onSelection);
    if (!this.hasAttribute('no-offline')) this.registerOffline();
  }

  disconnectedCallback() {
    document.removeEventListener('selectionchange', this.onSelection);
  }

  setState(state) {
    this.state = state;
    const busy = state === 'loading' || state === 'summarizing';
    this.ui.go.disabled = busy;
    this.ui.stop.hidden = !busy;
    this.dataset.state = state;
    this.dispatchEvent(new CustomEvent('tldr-state', { detail: { state } }));
  }

  showError(err) {
    if (!err) {
      this.ui.error.hidden = true;
      this.ui.error.replaceChildren();
      return;
    }
    const { code, title, detail } = describeError(err);
    const strong = document.createElement('strong');
    strong.textContent = title;
    const p = document.createElement('span');
    p.textContent = detail;
    this.ui.error.dataset.code = code;
    this.ui.error.replaceChildren(strong, p);
    this.ui.error.hidden = false;
  }

  async registerOffline() {
    if (!('serviceWorker' in navigator)) {
      this.ui.badge.textContent = 'online only';
      return;
    }
    try {
      const reg = await navigator.serviceWorker.register(new URL('../sw.js', here), { scope: new URL('../', here).pathname });
      await navigator.serviceWorker.ready;
      const settle = () => {
        this.offlineReady = Boolean(navigator.serviceWorker.controller) && !reg.installing;
        this.ui.badge.textContent = this.offlineReady ? 'works offline' : 'caching for offline use…';
        this.ui.badge.dataset.ready = String(this.offlineReady);
      };
      settle();
      navigator.serviceWorker.addEventListener('controllerchange', settle);
      reg.addEventListener('updatefound', () => reg.installing?.addEventListener('statechange', settle));
    } catch (err) {
      this.ui.badge.textContent = 'online only';
      console.warn('tldr-widget: no service worker', err);
    }
  }

  /** The model: loaded once per page, in a worker; from OPFS by id when it is cached. */
  async model() {
    if (!sharedModel) {
      sharedModel = this.loadModel().catch((err) => {
        sharedModel = null;
        throw err;
      });
    }
    return sharedModel;
  }

  async loadModel() {
    const { cacheIdFor, createWorkerBitNet, isSupported, makeError } = await pkg();
    const config = await demoConfig();
    const source = this.getAttribute('model') || config.modelUrl;
    if (!source) {
      throw makeError('InvalidArgument',
        'No model: give the widget a model="URL" attribute or serve it with scripts/demo.sh');
    }
    // Say so at once rather than after downloading a model this browser cannot run.
    if (!(await isSupported())) {
      throw makeError('WebGPUNotAvailable', 'navigator.gpu.requestAdapter() found no WebGPU adapter');
    }
    // A URL already downloaded is loaded from OPFS without any request, so this works offline.
    const name = await modelNameFor(source, config, cacheIdFor);
    this.ui.progress.hidden = false;
    this.ui.phase.textContent = 'Loading the model…';
    this.ui.bar.removeAttribute('value');
    const worker = new Worker(new URL('./worker.js', here), { type: 'module', name: 'tldr-widget' });
    try {
      return await createWorkerBitNet(worker, source, {
        ...(name ? { name } : {}),
        onProgress: (e) => {
          const pct = Number.isFinite(e.fraction) ? ` ${Math.floor(100 * e.fraction)}%` : '';
          this.ui.phase.textContent = `${phaseLabel(e.phase)}${pct}`;
          if (Number.isFinite(e.fraction)) this.ui.bar.value = e.fraction;
        },
      });
    } catch (err) {
      worker.terminate();
      throw err;
    } finally {
      this.ui.progress.hidden = true;
    }
  }

  /** The text to summarize and where it came from. */
  pickText() {
    const mode = this.ui.source.value;
    const selection = selectedText(this) || this.lastSelection;
    if (mode === 'selection' || (mode === 'auto' && selection)) {
      if (!selection) {
        const err = new Error('Select some text on the page first.');
        err.code = 'InvalidArgument';
        throw err;
      }
      return { text: selection, source: 'selection' };
    }
    return { text: extractMainText(document).text, source: 'page' };
  }

  /** Cut `text` to at most `budget` tokens (by the model's tokenizer when it can count). */
  async fit(model, text, budget) {
    let cut = text.length > budget * 6 ? text.slice(0, budget * 6) : text;
    for (let i = 0; i < 4; i += 1) {
      let n;
      try {
        const ids = await model.tokenize(cut);
        n = ids.length;
      } catch {
        return cut.slice(0, budget * 4);
      }
      if (n <= budget) return cut;
      cut = cut.slice(0, Math.floor((cut.length * budget) / n * 0.95));
    }
    return cut;
  }

  /** Summarize the selection or the page; resolves to the summary text. */
  async summarize() {
    if (this.state === 'loading' || this.state === 'summarizing') return '';
    this.showError(null);
    this.ui.summary.textContent = '';
    this.ui.meta.textContent = '';
    this.controller = new AbortController();
    const signal = this.controller.signal;
    let picked;
    let out = '';
    let done = null;
    try {
      picked = this.pickText();
      if (!picked.text) throw Object.assign(new Error('This page has no text to summarize.'), { code: 'InvalidArgument' });
      this.setState('loading');
      const model = await this.model();
      if (signal.aborted) throw Object.assign(new Error('stopped'), { code: 'AbortError' });
      this.setState('summarizing');
      const length = LENGTHS[this.ui.length.value] ?? LENGTHS.short;
      const budget = Number(this.getAttribute('max-input-tokens')) || 1500;
      const text = await this.fit(model, picked.text, budget);
      const messages = [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: `Summarize ${length.instruction}:\n\n${text}` },
      ];
      const maxTokens = Number(this.getAttribute('max-tokens')) || length.maxTokens;
      // Each summary is its own conversation.
      await model.resetChat?.();
      this.ui.summary.classList.add('streaming');
      for await (const ev of model.stream(messages, { maxTokens, temperature: 0, signal })) {
        if (ev.type === 'token') {
          out += ev.text;
          this.ui.summary.textContent = out.trimStart();
        } else if (ev.type === 'done') {
          done = ev;
        }
      }
      const t = done?.timings ?? {};
      const parts = [picked.source === 'selection' ? 'Summary of the selection' : 'Summary of this page'];
      if (t.ttftMs != null) parts.push(`first token in ${formatDuration(t.ttftMs / 1000)}`);
      if (t.decodeTokensPerSecond > 0) parts.push(`${formatRate(t.decodeTokensPerSecond)} tok/s`);
      if (done?.finishReason === 'length') parts.push('cut at the length limit');
      if (done?.finishReason === 'abort') parts.push('stopped');
      this.ui.meta.textContent = parts.join(' · ');
      this.setState('done');
    } catch (err) {
      if (err?.code === 'AbortError' || err?.name === 'AbortError') {
        this.ui.meta.textContent = 'Stopped.';
        this.setState(out ? 'done' : 'idle');
      } else {
        this.showError(err);
        this.setState('error');
      }
    } finally {
      this.controller = null;
    }
    const summary = out.trim();
    this.dispatchEvent(new CustomEvent('tldr-summary', { detail: { text: summary, source: picked?.source, done } }));
    return summary;
  }
}

if (!customElements.get('tldr-widget')) customElements.define('tldr-widget', TldrWidget);
export { TldrWidget };
