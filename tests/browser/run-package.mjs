#!/usr/bin/env node
// The npm package (pkg/, from `npm run build`) in headless Chromium with WebGPU, against a
// real `tritium serve-model` of SmolLM2 converted to RDRR:
//   - BitNet.load(url) downloads into OPFS with progress events, on the main thread (tensors
//     read through File slices); greedy tokens equal the native `tritium run --json` ones;
//   - two concurrent generations: the second rejects with Busy; abort mid-generation stops
//     at once (finish 'abort') and the next request works; chat.completions.create shapes
//     (plain and streamed, with usage); turn 2 of a chat reuses the KV cache
//     (cached_tokens > 0); a prompt longer than the context gives ContextLengthExceeded; a token
//     sequence that splits multi-byte characters streams them whole; dispose() then load
//     again works;
//   - a second page load takes the model from the cache: no request reaches the server;
//   - worker mode (createWorkerBitNet + BitNetWorkerHandler, sync access handles) gives the
//     same tokens, aborts per request, and its errors keep name and code;
//   - download() hashes on the package's hash workers, on the main thread and nested in a
//     worker;
//   - a corrupted shard gives IntegrityError; Chromium without WebGPU gives
//     WebGPUNotAvailable.
//
//   cargo build && npm run build && node tests/browser/run-package.mjs [--diagnose]
//
// Every forward pass costs seconds on SwiftShader, so the checks share one prompt (its KV
// cache prefix is reused), generate one token where one shows the point, and load as few
// times as they need (about 3.5 minutes on a loaded 2-core machine).
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PACKAGE_DIR (default pkg),
// TRITIUM_BIN (default target/debug/tritium), PACKAGE_TIMEOUT_S (default 600).
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, openSync, readdirSync, readSync, rmSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { checker, launch, paths, requireFiles, serve, serveModel as serveModelAt } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { pkgDir, bin, executablePath, gguf } = paths;
const timeoutS = Number(process.env.PACKAGE_TIMEOUT_S ?? 600);
const prompt = 'The capital of France is';
const n = 3;

const { check, summary } = checker({ timed: true });
if (!requireFiles(check, [join(pkgDir, 'index.js'), join(pkgDir, 'wasm', 'tritium_bg.wasm'), executablePath, bin, gguf])) {
  process.exit(summary());
}

const tmp = mkdtempSync(join(tmpdir(), 'tritium-package-'));
const children = [];
const cleanup = () => {
  for (const c of children) c.kill();
  rmSync(tmp, { recursive: true, force: true });
};

const good = join(tmp, 'smol');
execFileSync(bin, ['convert', gguf, good, '--shard-size', '16MB'], { stdio: ['ignore', 'ignore', 'inherit'] });
const shards = readdirSync(good).filter((f) => /^shard_\d+\.bin$/.test(f)).sort();

// The native greedy tokens of the same folder, with exact arithmetic: the f32 products and f32
// KV cache SwiftShader's default runs (no integer-dot decode there, a small cache).
const native = JSON.parse(execFileSync(bin, ['run', good, '-p', prompt, '--json', '--max-tokens', String(n),
  '--temperature', '0', '--exact'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
console.log(`native (${native.backend}): ${JSON.stringify(native.generated_ids)} ${JSON.stringify(native.text)}`);

// `tritium serve-model DIR --port 0`: the URL it serves (the server is killed at the end).
async function serveModel(dir) {
  const { url, child } = await serveModelAt(bin, dir);
  children.push(child);
  return url;
}

const { server: pageServer, base } = await serve({ '/pkg/': pkgDir, '/': here }, 'package.html');
const { context, close } = await launch(executablePath);
const watchdog = setTimeout(async () => { console.error('timed out'); await close(); cleanup(); process.exit(1); },
  timeoutS * 1000);
const requests = [];
context.on('request', (r) => requests.push({ url: r.url(), method: r.method() }));

let page;
async function openPage(ctx = context) {
  page = ctx.pages()[0] ?? await ctx.newPage();
  page.on('pageerror', (e) => check(false, 'page error', e.message));
  page.on('console', (m) => { if (m.type() === 'error') console.log(`  [console.error] ${m.text()}`); });
  await page.goto(`${base}/package.html`);
  await page.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  const err = await page.evaluate(() => window.__error);
  if (err) throw new Error(`page: ${err.message}`);
  return page;
}
const sameIds = (a, b) => JSON.stringify(a) === JSON.stringify(b);

try {
  const url = await serveModel(good);
  const origin = new URL(url).origin;
  await openPage();

  // Load with progress into OPFS (main thread: tensors read through File slices).
  const load = await page.evaluate(async ({ url }) => {
    const { BitNet, listCached } = window.tritium;
    const events = [];
    const t0 = performance.now();
    window.model = await BitNet.load(url, { name: 'smol', warmup: false, contextLength: 256, onProgress: (e) => events.push(e) });
    return { events, ms: performance.now() - t0, info: window.model.modelInfo, device: window.model.deviceInfo,
      cached: await listCached() };
  }, { url });
  const phases = [...new Set(load.events.map((e) => e.phase))];
  const dl = load.events.filter((e) => e.phase === 'download');
  check(dl.length > 0 && dl.at(-1).fraction === 1 && dl.every((e) => typeof e.bytesPerSecond === 'number' && e.shards === shards.length),
    `load: download progress events (${dl.length}, last ${JSON.stringify(dl.at(-1))})`);
  check(['resolve', 'download', 'verify', 'upload', 'ready'].every((p) => phases.includes(p)), `load: phases ${phases.join(',')}`);
  check(load.info.loadPath === 'blob' && load.info.contextLength === 256, `load on the main thread reads through File slices (${load.info.loadPath})`);
  check(load.cached.some((m) => m.id === load.info.name), `listCached has ${load.info.name}`);
  console.log(`  loaded in ${(load.ms / 1000).toFixed(1)} s on ${load.device.adapter} (${load.device.backend})`);

  // Greedy tokens equal native.
  const greedy = await page.evaluate(async ({ prompt, n }) => {
    const ids = [];
    let done;
    for await (const ev of window.model.stream(prompt, { temperature: 0, maxTokens: n })) {
      if (ev.type === 'token' && ev.tokenId !== null) ids.push(ev.tokenId); else if (ev.type === 'done') done = ev;
    }
    return { ids, done };
  }, { prompt, n });
  check(sameIds(greedy.ids, native.generated_ids), `main thread: greedy tokens equal native`,
    `${JSON.stringify(greedy.ids)} vs ${JSON.stringify(native.generated_ids)}`);
  check(greedy.done.finishReason === 'length' && greedy.done.usage.completionTokens === n && greedy.done.timings.ttftMs > 0,
    `done event: finish, usage, timings (${JSON.stringify(greedy.done.usage)}, ttft ${greedy.done.timings.ttftMs.toFixed(0)} ms)`);

  // Two at once: the second is Busy, the first is unharmed.
  const busy = await page.evaluate(async ({ prompt }) => {
    const m = window.model;
    const first = m.complete(prompt, { temperature: 0, maxTokens: 1 });
    const second = m.complete(prompt, { temperature: 0, maxTokens: 1 }).then(() => null, (e) => ({ name: e.name, code: e.code,
      isTritium: e instanceof window.tritium.TritiumError }));
    return { first: await first, second: await second };
  }, { prompt });
  check(busy.second?.code === 'Busy' && busy.second.isTritium, `concurrent generate: the second gets Busy (${JSON.stringify(busy.second)})`);
  check(busy.first.usage.completionTokens === 1, 'concurrent generate: the first completes');

  // Abort mid-generation, then the next request works.
  const abort = await page.evaluate(async ({ prompt }) => {
    const m = window.model;
    const ctl = new AbortController();
    let tokens = 0;
    let done;
    for await (const ev of m.stream(prompt, { temperature: 0, maxTokens: 40, signal: ctl.signal })) {
      if (ev.type === 'token') { tokens += 1; ctl.abort(); } else done = ev;
    }
    const next = await m.complete(prompt, { temperature: 0, maxTokens: 1 });
    return { tokens, done, next };
  }, { prompt });
  check(abort.done.finishReason === 'abort' && abort.done.usage.completionTokens <= 2,
    `abort stops within ${abort.done.usage.completionTokens} token(s), finish 'abort'`);
  check(abort.next.usage.completionTokens === 1 && abort.next.finishReason === 'length', 'the request after an abort works');

  // chat.completions.create: plain, then streamed with usage; turn 2 reuses the cache.
  const chat = await page.evaluate(async () => {
    const m = window.model;
    m.resetChat();
    const messages = [{ role: 'user', content: 'Say hi.' }];
    const plain = await m.chat.completions.create({ messages, max_tokens: 1, temperature: 0 });
    messages.push(plain.choices[0].message, { role: 'user', content: 'Again.' });
    const chunks = [];
    for await (const c of await m.chat.completions.create({ messages, max_tokens: 1, temperature: 0, stream: true,
      stream_options: { include_usage: true } })) chunks.push(c);
    return { plain, chunks };
  });
  const p0 = chat.plain;
  check(p0.object === 'chat.completion' && /^chatcmpl-/.test(p0.id) && p0.choices[0].message.role === 'assistant' &&
    typeof p0.choices[0].message.content === 'string' && p0.choices[0].finish_reason === 'length' &&
    p0.usage.completion_tokens === 1 && p0.usage.total_tokens === p0.usage.prompt_tokens + 1,
  `chat.completions.create shape (${JSON.stringify(p0.choices[0])})`);
  const ch = chat.chunks;
  const last = ch.at(-1);
  check(ch.every((c) => c.object === 'chat.completion.chunk') && ch[0].choices[0].delta.role === 'assistant' &&
    ch.at(-2).choices[0].finish_reason === 'length' && last.choices.length === 0 && last.usage.completion_tokens === 1,
  `streamed chunks: role, content, finish, usage (${ch.length} chunks)`);
  check(last.usage.prompt_tokens_details.cached_tokens > 0,
    `turn 2 reuses the KV cache: ${last.usage.prompt_tokens_details.cached_tokens} of ${last.usage.prompt_tokens} prompt tokens cached`);

  // Context exceeded, checked before running.
  const ctxErr = await page.evaluate(async () => {
    try { await window.model.complete('word '.repeat(400), { maxTokens: 1 }); return null; } catch (e) { return { name: e.name, code: e.code, message: e.message }; }
  });
  check(ctxErr?.code === 'ContextLengthExceeded', `a prompt longer than the context: ContextLengthExceeded (${ctxErr?.message})`);

  // Multi-byte characters split over tokens arrive whole.
  const utf8 = await page.evaluate(() => {
    const m = window.model;
    const text = 'Hi 😀🎉 naïve — 日本';
    const ids = m.tokenize(text, { addSpecial: false });
    const pieces = m.streamPieces(ids);
    return { text, ids, pieces, joined: pieces.join(''), decoded: m.detokenize(ids) };
  });
  check(utf8.joined === utf8.text && utf8.decoded === utf8.text && !utf8.pieces.some((p) => p.includes('\uFFFD')) &&
    utf8.pieces.includes('') && utf8.ids.length > 0,
  `emoji split over ${utf8.ids.length} tokens streams whole (${JSON.stringify(utf8.pieces)})`);

  // dispose() then load again (from the cache).
  const again = await page.evaluate(async ({ prompt }) => {
    const { BitNet } = window.tritium;
    const id = window.model.modelInfo.name;
    window.model.dispose();
    let after = null;
    try { await window.model.complete(prompt, { maxTokens: 1 }); } catch (e) { after = e.code; }
    window.model = await BitNet.load(id, { warmup: false, contextLength: 256 });
    const r = await window.model.complete(prompt, { temperature: 0, maxTokens: 1 });
    return { after, r, stats: window.model.stats() };
  }, { prompt });
  check(again.after === 'InvalidArgument' && again.r.usage.completionTokens === 1,
    `dispose() frees the model (then: ${again.after}); loading it again works`);

  if (process.argv.includes('--diagnose')) {
    const d = await page.evaluate(() => window.model.diagnose('Hi'));
    check(d.stages.length === load.info.nLayers + 2 && d.nonFiniteStages.length === 0, `diagnose: ${d.stages.length} stages, finite`);
  }

  // A second page load uses the cache: nothing reaches the model server.
  requests.length = 0;
  await page.reload();
  await page.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  const second = await page.evaluate(async ({ url }) => {
    const events = [];
    const m = await window.tritium.BitNet.load(url, { name: 'smol', warmup: false, contextLength: 256, onProgress: (e) => events.push(e.phase) });
    const info = m.modelInfo;
    m.dispose();
    return { info, events };
  }, { url });
  const toServer = requests.filter((r) => r.url.startsWith(origin));
  check(toServer.length === 0 && !second.events.includes('download'),
    `second page load: from the cache, ${toServer.length} requests to the model server`);

  // Worker mode: same tokens, per-request abort, errors with name and code.
  const worker = await page.evaluate(async ({ url, prompt, n }) => {
    const { createWorkerBitNet } = window.tritium;
    const m = await createWorkerBitNet(new Worker('/package-worker.mjs', { type: 'module' }), url,
      { name: 'smol', warmup: false, contextLength: 256 });
    const ids = [];
    for await (const ev of m.stream(prompt, { temperature: 0, maxTokens: n })) if (ev.type === 'token' && ev.tokenId !== null) ids.push(ev.tokenId);
    const ctl = new AbortController();
    let done;
    for await (const ev of m.stream(prompt, { temperature: 0, maxTokens: 40, signal: ctl.signal })) {
      if (ev.type === 'token') ctl.abort(); else done = ev;
    }
    const next = await m.complete(prompt, { temperature: 0, maxTokens: 1 });
    let err = null;
    try { await m.complete('word '.repeat(400), { maxTokens: 1 }); } catch (e) {
      err = { name: e.name, code: e.code, isTritium: e instanceof window.tritium.TritiumError };
    }
    const info = m.modelInfo;
    await m.dispose();
    m.terminate();
    return { ids, done, next, err, info };
  }, { url, prompt, n });
  check(worker.info.loadPath === 'sync-access-handle', `worker reads OPFS through sync access handles (${worker.info.loadPath})`);
  check(sameIds(worker.ids, native.generated_ids), 'worker: greedy tokens equal native', `${JSON.stringify(worker.ids)}`);
  check(worker.done.finishReason === 'abort' && worker.done.usage.completionTokens <= 3 && worker.next.usage.completionTokens === 1,
    `worker: abort stops within ${worker.done.usage.completionTokens} token(s), the next request works`);
  check(worker.err?.code === 'ContextLengthExceeded' && worker.err.name === 'ContextLengthExceededError' && worker.err.isTritium,
    `worker errors keep name and code (${JSON.stringify(worker.err)})`);

  // download() fetches and hashes on the package's hash workers (js/hash-pool.js): on the
  // main thread, and in a dedicated worker, where they start nested in it.
  const hashed = await page.evaluate(async ({ url }) => {
    const { download, deleteCached } = window.tritium;
    const main = await download(url, { name: 'smol-dl-main' });
    await deleteCached('smol-dl-main');
    const w = new Worker('/package-download-worker.mjs', { type: 'module' });
    const inWorker = await new Promise((resolve) => {
      w.onmessage = (e) => resolve(e.data);
      w.onerror = (e) => resolve({ error: { message: e.message } });
      w.postMessage({ url, opts: { name: 'smol-dl-worker' } });
    });
    w.terminate();
    await deleteCached('smol-dl-worker');
    return { main, inWorker, cores: navigator.hardwareConcurrency };
  }, { url });
  // The package's default: shards at once max(4, min(8, cores - 1)), a hash worker each, at
  // most the cores less one.
  const want = Math.max(1, Math.min(8, hashed.cores - 1));
  check(hashed.main.hash_workers === want && hashed.main.warnings.length === 0,
    `download() on the main thread hashes on ${want} hash worker(s)`, JSON.stringify(hashed.main));
  const hw = hashed.inWorker.summary;
  check(hw?.hash_workers === want && hw.warnings.length === 0 && hw.writer === 'sync',
    `download() in a worker hashes on ${want} nested hash worker(s)`, JSON.stringify(hashed.inWorker));

  // A corrupted shard: IntegrityError.
  const bad = join(tmp, 'smol-bad');
  cpSync(good, bad, { recursive: true });
  const fd = openSync(join(bad, shards[0]), 'r+');
  const byte = Buffer.alloc(1);
  readSync(fd, byte, 0, 1, 1000);
  byte[0] ^= 0xff;
  writeSync(fd, byte, 0, 1, 1000);
  closeSync(fd);
  const badUrl = await serveModel(bad);
  const integrity = await page.evaluate(async ({ badUrl }) => {
    try {
      await window.tritium.BitNet.load(badUrl, { name: 'smol-bad', warmup: false, download: { retries: 0 } });
      return null;
    } catch (e) {
      return { name: e.name, code: e.code, message: e.message, isClass: e instanceof window.tritium.IntegrityError };
    }
  }, { badUrl });
  check(integrity?.code === 'IntegrityError' && integrity.isClass, `corrupted shard: IntegrityError (${integrity?.message})`);
  await page.evaluate(() => window.tritium.deleteCached('smol-bad'));
} catch (e) {
  check(false, 'run', e.stack ?? String(e));
} finally {
  await close();
}

// Without WebGPU: launched without --enable-unsafe-webgpu.
try {
  const plain = await chromium.launch({ executablePath, headless: true, args: ['--headless=new', '--no-sandbox'] });
  const p = await plain.newPage();
  await p.goto(`${base}/package.html`);
  await p.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  const r = await p.evaluate(async () => {
    const supported = await window.tritium.isSupported();
    try {
      await window.tritium.BitNet.load(new ArrayBuffer(16));
      return { supported, err: null };
    } catch (e) {
      return { supported, err: { name: e.name, code: e.code, message: e.message } };
    }
  });
  check(!r.supported && r.err?.code === 'WebGPUNotAvailable', `no WebGPU: isSupported() false, WebGPUNotAvailable (${r.err?.message})`);
  await plain.close();
} catch (e) {
  check(false, 'no-WebGPU run', e.stack ?? String(e));
}

clearTimeout(watchdog);
pageServer.close();
cleanup();
process.exit(summary());
