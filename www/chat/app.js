// The chat demo: the model runs in a Web Worker (createWorkerBitNet), the page keeps the
// conversation, streams replies into it and shows load progress and speed.
//
// State for tests and styling: <body data-state="starting|idle|loading|ready|generating|error">.
import { cacheIdFor, createWorkerBitNet, deleteCached, isSupported, listCached, makeError } from 'tritium';
import {
  demoConfig, describeError, formatBytes, formatDuration, formatRate, modelNameFor, phaseLabel,
} from '../shared/demo.js';

const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
const el = {
  status: $('model-status'),
  form: /** @type {HTMLFormElement} */ ($('load-form')),
  url: /** @type {HTMLInputElement} */ ($('model-url')),
  loadButton: /** @type {HTMLButtonElement} */ ($('load-button')),
  progress: $('progress'),
  phase: $('progress-phase'),
  percent: $('progress-percent'),
  bar: /** @type {HTMLProgressElement} */ ($('progress-bar')),
  detail: $('progress-detail'),
  cancel: /** @type {HTMLButtonElement} */ ($('cancel-button')),
  info: $('model-info'),
  cached: $('cached'),
  refresh: $('refresh-cached'),
  storage: $('storage'),
  notice: $('notice'),
  messages: $('messages'),
  empty: $('empty-hint'),
  composer: /** @type {HTMLFormElement} */ ($('composer')),
  prompt: /** @type {HTMLTextAreaElement} */ ($('prompt')),
  send: /** @type {HTMLButtonElement} */ ($('send-button')),
  stop: /** @type {HTMLButtonElement} */ ($('stop-button')),
  newChat: /** @type {HTMLButtonElement} */ ($('new-chat')),
  maxTokens: /** @type {HTMLInputElement} */ ($('max-tokens')),
  temperature: /** @type {HTMLInputElement} */ ($('temperature')),
  system: /** @type {HTMLTextAreaElement} */ ($('system-prompt')),
};

/** @type {any} the loaded model (worker proxy), or null */
let model = null;
/** @type {Worker | null} */
let worker = null;
/** @type {AbortController | null} aborts the load under way */
let loading = null;
/** @type {AbortController | null} stops the reply under way */
let replying = null;
/** @type {{ modelUrl: string | null, modelName: string | null }} */
let config = { modelUrl: null, modelName: null };
/** @type {{ role: string, content: string }[]} the conversation, without the system prompt */
let history = [];

function setState(state) {
  document.body.dataset.state = state;
  const busy = state === 'loading' || state === 'generating';
  el.loadButton.disabled = state === 'loading';
  el.prompt.disabled = !model || state === 'loading';
  el.send.disabled = !model || busy;
  el.send.hidden = state === 'generating';
  el.stop.hidden = state !== 'generating';
  el.newChat.disabled = !model || busy || history.length === 0;
  for (const b of el.cached.querySelectorAll('button')) /** @type {HTMLButtonElement} */ (b).disabled = busy;
}

/** Show an error (or clear with null) above the conversation. */
function showNotice(err) {
  el.notice.replaceChildren();
  if (!err) return;
  const { code, title, detail } = describeError(err);
  const box = document.createElement('div');
  box.className = `notice${code === 'AbortError' ? '' : ' error'}`;
  box.dataset.code = code;
  const strong = document.createElement('strong');
  strong.textContent = title;
  const p = document.createElement('p');
  p.textContent = detail;
  box.append(strong, p);
  el.notice.append(box);
}

// ---- cached models -------------------------------------------------------------------------

/** @param {any} m an entry of listCached() */
const cachedId = (m) => m.id ?? m.name;
const cachedBytes = (m) => m.bytes ?? m.size ?? m.totalBytes ?? null;

async function refreshCached() {
  let models = [];
  try {
    models = await listCached();
  } catch (err) {
    el.cached.replaceChildren();
    el.storage.textContent = `Cached models unavailable: ${describeError(err).detail}`;
    return;
  }
  const items = models.map((m) => {
    const li = document.createElement('li');
    const id = cachedId(m);
    li.dataset.id = id;
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = m.label ?? id;
    if (m.url ?? m.source) name.title = m.url ?? m.source;
    const size = document.createElement('span');
    size.className = 'size';
    size.textContent = formatBytes(cachedBytes(m));
    name.append(size);
    const load = document.createElement('button');
    load.type = 'button';
    load.textContent = 'Load';
    load.setAttribute('aria-label', `Load ${id}`);
    load.addEventListener('click', () => loadModel(id));
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'danger';
    del.textContent = 'Delete';
    del.setAttribute('aria-label', `Delete ${id} from this browser`);
    del.addEventListener('click', async () => {
      if (!confirm(`Delete ${id} (${formatBytes(cachedBytes(m))}) from this browser?`)) return;
      try {
        await deleteCached(id);
      } catch (err) {
        showNotice(err);
      }
      refreshCached();
    });
    li.append(name, load, del);
    return li;
  });
  if (items.length === 0) {
    const li = document.createElement('li');
    li.className = 'none';
    li.textContent = 'None yet: a model you load is kept here for next time.';
    items.push(li);
  }
  el.cached.replaceChildren(...items);
  try {
    const { usage, quota } = await navigator.storage.estimate();
    el.storage.textContent = `Storage: ${formatBytes(usage)} used of ${formatBytes(quota)} available to this site`;
  } catch {
    el.storage.textContent = '';
  }
  setState(document.body.dataset.state ?? 'idle');
}

// ---- loading -------------------------------------------------------------------------------

function showProgress(e) {
  el.phase.textContent = e.message && e.phase !== 'download' ? `${phaseLabel(e.phase)}: ${e.message}` : phaseLabel(e.phase);
  const fraction = Number.isFinite(e.fraction) ? e.fraction : (e.total ? e.loaded / e.total : null);
  if (fraction == null) {
    el.bar.removeAttribute('value');
    el.percent.textContent = '';
  } else {
    el.bar.value = Math.min(1, Math.max(0, fraction));
    el.percent.textContent = `${Math.floor(100 * el.bar.value)}%`;
  }
  const parts = [];
  if (e.total) parts.push(`${formatBytes(e.loaded)} of ${formatBytes(e.total)}`);
  else if (e.loaded) parts.push(formatBytes(e.loaded));
  if (e.bytesPerSecond) parts.push(`${formatBytes(e.bytesPerSecond)}/s`);
  if (e.etaSeconds != null && Number.isFinite(e.etaSeconds) && e.phase === 'download') {
    parts.push(`ETA ${formatDuration(e.etaSeconds)}`);
  }
  if (e.shards) parts.push(`shard ${e.shard ?? 0} of ${e.shards}`);
  el.detail.textContent = parts.join(' · ');
  el.progress.dataset.phase = e.phase;
}

async function unload() {
  const old = model;
  const oldWorker = worker;
  model = null;
  worker = null;
  if (old) await old.dispose().catch(() => {});
  oldWorker?.terminate();
}

/** Load a model by URL or cached id into a fresh worker. @param {string} source */
async function loadModel(source) {
  if (loading) return;
  showNotice(null);
  replying?.abort();
  await unload();
  history = [];
  renderEmpty();
  loading = new AbortController();
  setState('loading');
  el.status.textContent = `Loading ${source}`;
  el.info.hidden = true;
  el.progress.hidden = false;
  el.cancel.disabled = false;
  showProgress({ phase: 'resolve', loaded: 0, total: 0 });
  const started = performance.now();
  if (!(await isSupported())) {
    // Say so before downloading a model this browser cannot run.
    showNotice(makeError('WebGPUNotAvailable', 'navigator.gpu.requestAdapter() found no WebGPU adapter'));
    el.progress.hidden = true;
    el.status.textContent = 'No model loaded';
    loading = null;
    setState('error');
    return;
  }
  worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'tritium-chat' });
  try {
    const name = await modelNameFor(source, config, cacheIdFor);
    model = await createWorkerBitNet(worker, source, {
      signal: loading.signal,
      onProgress: showProgress,
      ...(name ? { name } : {}),
    });
    const seconds = (performance.now() - started) / 1000;
    el.status.textContent = `${modelName(model, source)} ready (loaded in ${formatDuration(seconds)})`;
    renderInfo(source, seconds);
    el.progress.hidden = true;
    setState('ready');
    el.prompt.focus();
  } catch (err) {
    worker?.terminate();
    worker = null;
    model = null;
    el.progress.hidden = true;
    el.status.textContent = 'No model loaded';
    showNotice(err);
    setState(err?.code === 'AbortError' || err?.name === 'AbortError' ? 'idle' : 'error');
  } finally {
    loading = null;
    refreshCached();
  }
}

function modelName(m, source) {
  const info = m?.modelInfo ?? {};
  return info.name ?? info.id ?? info.architecture ?? source;
}

function renderInfo(source, seconds) {
  const info = model?.modelInfo ?? {};
  const dev = model?.deviceInfo ?? {};
  const rows = [
    ['Model', info.name ?? source],
    ['Architecture', info.architecture && info.nLayers ? `${info.architecture}, ${info.nLayers} layers` : info.architecture],
    ['Context', info.contextLength ? `${info.contextLength} tokens` : null],
    ['Size', info.fileBytes ? formatBytes(info.fileBytes) : null],
    ['GPU memory', info.gpuBytes ? formatBytes(info.gpuBytes) : null],
    ['GPU', [dev.adapter, dev.backend === 'BrowserWebGpu' ? 'WebGPU' : dev.backend].filter(Boolean).join(' · ') || null],
    ['Load time', formatDuration(seconds)],
  ].filter(([, v]) => v != null && v !== '');
  const dl = document.createElement('dl');
  for (const [k, v] of rows) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = String(v);
    dl.append(dt, dd);
  }
  el.info.replaceChildren(dl);
  el.info.hidden = false;
}

// ---- the conversation ----------------------------------------------------------------------

function renderEmpty() {
  el.messages.replaceChildren(el.empty);
}

/** Append a message bubble; returns its parts. */
function addMessage(role, text) {
  el.empty.remove();
  const li = document.createElement('li');
  li.className = `message ${role}`;
  const who = document.createElement('span');
  who.className = 'role';
  who.textContent = role === 'user' ? 'You' : 'Assistant';
  const bubble = document.createElement('div');
  bubble.className = 'bubble';
  bubble.textContent = text;
  li.append(who, bubble);
  el.messages.append(li);
  li.scrollIntoView({ block: 'end' });
  return { li, bubble };
}

function statsLine(done, wallMs) {
  const t = done?.timings ?? {};
  const u = done?.usage ?? {};
  const parts = [];
  if (t.prefillTokensPerSecond != null) parts.push(`prefill ${formatRate(t.prefillTokensPerSecond)} tok/s`);
  // A one-token reply has no decode step, so no decode rate (the package gives 0 for it).
  if (t.decodeTokensPerSecond > 0) parts.push(`decode ${formatRate(t.decodeTokensPerSecond)} tok/s`);
  if (t.ttftMs != null) parts.push(`first token ${formatDuration(t.ttftMs / 1000)}`);
  if (u.completionTokens != null) parts.push(`${u.completionTokens} token${u.completionTokens === 1 ? '' : 's'}`);
  if (u.cachedTokens) parts.push(`${u.cachedTokens} prompt tokens reused`);
  const reason = { stop: 'finished', length: 'hit the token limit', abort: 'stopped' }[done?.finishReason];
  if (reason) parts.push(reason);
  if (!done) parts.push(`stopped after ${formatDuration(wallMs / 1000)}`);
  return parts.join(' · ');
}

async function send(text) {
  if (!model || replying) return;
  showNotice(null);
  history.push({ role: 'user', content: text });
  addMessage('user', text);
  const { li, bubble } = addMessage('assistant', '');
  bubble.classList.add('cursor');
  li.setAttribute('aria-busy', 'true');
  replying = new AbortController();
  setState('generating');
  const messages = [];
  const system = el.system.value.trim();
  if (system) messages.push({ role: 'system', content: system });
  messages.push(...history);
  const started = performance.now();
  let reply = '';
  let done = null;
  try {
    const maxTokens = Math.max(1, Number(el.maxTokens.value) || 256);
    const temperature = Math.max(0, Number(el.temperature.value) || 0);
    for await (const ev of model.stream(messages, { maxTokens, temperature, signal: replying.signal })) {
      if (ev.type === 'token') {
        reply += ev.text;
        bubble.textContent = reply;
        li.scrollIntoView({ block: 'end' });
      } else if (ev.type === 'done') {
        done = ev;
      }
    }
  } catch (err) {
    if (err?.code !== 'AbortError' && err?.name !== 'AbortError') {
      li.classList.add('error');
      showNotice(err);
    }
  } finally {
    bubble.classList.remove('cursor');
    li.removeAttribute('aria-busy');
    if (!reply) bubble.textContent = done ? '(no text)' : '(stopped)';
    const stats = document.createElement('p');
    stats.className = 'stats';
    stats.textContent = statsLine(done, performance.now() - started);
    li.dataset.finishReason = done?.finishReason ?? 'abort';
    li.append(stats);
    // Keep what was shown, stopped or not, so the next turn continues from it.
    history.push({ role: 'assistant', content: reply });
    replying = null;
    setState(model ? 'ready' : 'error');
    el.prompt.focus();
  }
}

// ---- wiring --------------------------------------------------------------------------------

el.form.addEventListener('submit', (e) => {
  e.preventDefault();
  const url = el.url.value.trim();
  if (url) loadModel(url);
});
el.cancel.addEventListener('click', () => {
  el.cancel.disabled = true;
  loading?.abort();
});
el.refresh.addEventListener('click', refreshCached);
el.composer.addEventListener('submit', (e) => {
  e.preventDefault();
  const text = el.prompt.value.trim();
  if (!text) return;
  el.prompt.value = '';
  send(text);
});
el.prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    el.composer.requestSubmit();
  }
});
el.stop.addEventListener('click', () => replying?.abort());
el.newChat.addEventListener('click', async () => {
  history = [];
  renderEmpty();
  await model?.resetChat?.();
  setState('ready');
});
addEventListener('pagehide', () => { worker?.terminate(); });

config = await demoConfig();
if (config.modelUrl) el.url.value = config.modelUrl;
setState('idle');
refreshCached();
if (!(await isSupported())) {
  showNotice(makeError('WebGPUNotAvailable', 'navigator.gpu.requestAdapter() found no WebGPU adapter'));
}
