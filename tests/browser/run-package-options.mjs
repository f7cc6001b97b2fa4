#!/usr/bin/env node
// The npm package's load and generation options in headless Chromium (run-package.mjs covers
// loading with progress, streaming, chat, abort, the cache and worker mode), against a real
// `tritium serve-model` of SmolLM2 as RDRR and the same model as one GGUF file:
//   - sources: a GGUF URL (downloaded into OPFS, `integrity` checked as it streams), an
//     ArrayBuffer and a File give native's greedy tokens; a wrong `integrity` gives
//     IntegrityError for each (and the GGUF that failed it is not cached); `integrity` on an
//     RDRR model is InvalidArgument;
//   - generation options against native `tritium run` with the same options: a seeded
//     sampled run (temperature, top-k, top-p, min-p, the three penalties, seed) gives native's
//     tokens, and the same seed again the same tokens; top-k 1 is greedy; a stop string ends
//     the text before it (finish 'stop'); ignoreEos runs past the end of turn where native
//     stops; generate() yields stream()'s text; onToken sees every token event, the
//     held-back tail included;
//   - exact arithmetic (`exact: true`, native `--exact`): 64 tokens greedy, seeded with the
//     default sampler and seeded with a repeat penalty give native CPU's tokens (every
//     comparison here runs exact on both sides);
//   - stats() counts; Symbol.asyncDispose; download(), listCached(), deleteCached();
//   - tokenizerUrl: the model's own tokenizer.json from the server gives the same tokens (and
//     was fetched), a missing one NetworkError, a malformed one UnsupportedModel;
//   - device: a model on the page's own GPUDevice (made with the defaults) gives native's
//     tokens; dispose() leaves the device working (a buffer round trip) for a second model;
//     destroying the device mid-generation gives DeviceLost, then again on the next call;
//   - worker mode: dispose() then load() again in the same worker;
//   - LoRA adapters on the tiny Qwen3 (tests/fixtures/lora, checked against llama.cpp by
//     tests/lora_reference.rs): loadAdapter() from a GGUF URL (into OPFS), an RDRR adapter
//     folder's URL and an ArrayBuffer; greedy tokens with no adapter, one, the RDRR one, two
//     at scales 0.5 and 1.5, and none again equal native `run --lora` (exact, CPU); an adapter
//     for another architecture and a bad scale are InvalidArgument; loadAdapter in a worker;
//   - an RDRR folder written as other converters write it (Hugging Face names, no
//     gguf_metadata.json; tests/fixtures/foreign_rdrr) downloaded from its URL gives native's
//     greedy tokens for the GGUF it came from.
//
//   cargo build && npm run build && node tests/browser/run-package-options.mjs
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PACKAGE_DIR (default pkg),
// TRITIUM_BIN (default target/debug/tritium), PACKAGE_TIMEOUT_S (default 900).
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checker, launch, paths, requireFiles, serve, serveModel } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { pkgDir, bin, executablePath, gguf } = paths;
const timeoutS = Number(process.env.PACKAGE_TIMEOUT_S ?? 900);
const modelsDir = dirname(gguf);
const ggufName = basename(gguf);
const prompt = 'The capital of France is';
// A chat turn the model answers in a few tokens and ends (native finish 'stop'), for ignoreEos.
const shortTurn = [{ role: 'user', content: 'Reply with one word: yes or no?' }];

const { check, summary } = checker({ timed: true });
if (!requireFiles(check, [join(pkgDir, 'index.js'), executablePath, bin, gguf])) process.exit(summary());

const tmp = mkdtempSync(join(tmpdir(), 'tritium-package-options-'));
const children = [];
const sameIds = (a, b) => JSON.stringify(a) === JSON.stringify(b);

const rdrr = join(tmp, 'smol');
execFileSync(bin, ['convert', gguf, rdrr], { stdio: ['ignore', 'ignore', 'inherit'] });
const sha256 = createHash('sha256').update(readFileSync(gguf)).digest('hex');
const wrongSha = sha256.replace(/^./, (c) => (c === '0' ? '1' : '0'));

// Native references, on the same weights, on the CPU backend with exact arithmetic (f32
// activations and KV cache), which the page asks for too (`exact: true`): the token
// comparisons below then hold on any adapter, not only where the default arithmetic happens
// to agree with the CPU's.
const nativeRun = (args) => JSON.parse(execFileSync(bin, ['run', rdrr, '--json', '--exact', '--backend', 'cpu', ...args],
  { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
const greedy = nativeRun(['-p', prompt, '--max-tokens', '8', '--temperature', '0']);
const sampling = { temperature: 0.9, topK: 40, topP: 0.9, minP: 0.05, repeatPenalty: 1.2, repeatLastN: 16,
  frequencyPenalty: 0.3, presencePenalty: 0.2, seed: 7, maxTokens: 6 };
const sampled = nativeRun(['-p', prompt, '--max-tokens', '6', '--temperature', '0.9', '--top-k', '40', '--top-p', '0.9',
  '--min-p', '0.05', '--repeat-penalty', '1.2', '--repeat-last-n', '16', '--frequency-penalty', '0.3',
  '--presence-penalty', '0.2', '--seed', '7']);
const turn = nativeRun(['--chat', '-p', shortTurn[0].content, '--max-tokens', '24', '--temperature', '0']);
console.log(`native greedy ${JSON.stringify(greedy.generated_ids)} ${JSON.stringify(greedy.text)}; sampled ` +
  `${JSON.stringify(sampled.generated_ids)}; short turn ${turn.generated_ids.length} tokens, ${turn.finish_reason}`);
// 64 tokens in exact arithmetic for a prompt picked for nothing, in three sampling modes.
const longPrompt = 'robot learns to paint';
const exactModes = [
  { name: 'greedy', page: { temperature: 0 }, cli: ['--temperature', '0'] },
  { name: 'seed 7', page: { seed: 7 }, cli: ['--seed', '7'] },
  { name: 'seed 7, repeat penalty 1.1', page: { seed: 7, repeatPenalty: 1.1 }, cli: ['--seed', '7', '--repeat-penalty', '1.1'] },
];
const exactNative = exactModes.map((m) => nativeRun(['-p', longPrompt, '--max-tokens', '64', ...m.cli]));
// A stop string from the middle of the greedy text: the text must end just before it.
const mid = Math.floor(greedy.text.length / 2);
const stop = greedy.text.slice(mid, mid + 3);
const beforeStop = greedy.text.slice(0, greedy.text.indexOf(stop));

// LoRA: the tiny Qwen3 and its adapters, natively (exact, CPU) with each choice of adapters.
const fixtures = join(here, '..', 'fixtures');
const tinyQwen3 = join(fixtures, 'arch', 'tiny-qwen3.gguf');
const loraPrompt = 'once upon a time';
const loraFile = (f) => join(fixtures, 'lora', f);
const loraNative = (lora) => JSON.parse(execFileSync(bin, ['run', tinyQwen3, '--json', '--exact', '--backend', 'cpu',
  '-p', loraPrompt, '--max-tokens', '8', '--temperature', '0', '--ctx', '256', ...lora.flatMap((l) => ['--lora', l])],
{ encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })).generated_ids;
const foreignWant = JSON.parse(execFileSync(bin, ['run', join(fixtures, 'foreign_rdrr', 'tiny-llama.gguf'), '--json',
  '--exact', '--backend', 'cpu', '-p', loraPrompt, '--max-tokens', '8', '--temperature', '0', '--ctx', '256'],
{ encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })).generated_ids;
const loraWant = {
  base: loraNative([]),
  one: loraNative([loraFile('tiny-qwen3-all.gguf')]),
  two: loraNative([`${loraFile('tiny-qwen3-all.gguf')}:0.5`, `${loraFile('tiny-qwen3-qv.gguf')}:1.5`]),
};

const { server: pageServer, base } = await serve({ '/pkg/': pkgDir, '/models/': modelsDir, '/fixtures/': fixtures, '/': here },
  'package.html');
const { context, close } = await launch(executablePath);
const cleanup = async () => {
  await close();
  pageServer.close();
  for (const c of children) c.kill();
  rmSync(tmp, { recursive: true, force: true });
};
const watchdog = setTimeout(async () => { console.error(`timed out after ${timeoutS} s`); await cleanup(); process.exit(1); },
  timeoutS * 1000);
const requests = [];
context.on('request', (r) => requests.push(r.url()));

try {
  const served = await serveModel(bin, rdrr);
  children.push(served.child);
  const url = served.url;
  const page = context.pages()[0] ?? await context.newPage();
  page.on('pageerror', (e) => check(false, 'page error', e.message));
  page.on('console', (m) => { if (m.type() === 'error') console.log(`  [console.error] ${m.text()}`); });
  await page.goto(`${base}/package.html`);
  await page.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  // In the page: the greedy ids of `n` tokens from a model (then disposed unless `keep`).
  await page.evaluate(() => {
    window.greedyIds = async (m, prompt, n) => {
      const ids = [];
      for await (const ev of m.stream(prompt, { temperature: 0, maxTokens: n })) {
        if (ev.type === 'token' && ev.tokenId !== null) ids.push(ev.tokenId);
      }
      return ids;
    };
    window.errorOf = async (f) => {
      try { await f(); return null; } catch (e) { return { name: e.name, code: e.code, message: e.message }; }
    };
  });
  const opts = { warmup: false, contextLength: 256, exact: true };

  // Sources: a GGUF URL with its integrity (downloaded into OPFS), an ArrayBuffer, a File.
  const ggufUrl = `${base}/models/${ggufName}`;
  const sources = await page.evaluate(async ({ ggufUrl, sha256, wrongSha, prompt, opts }) => {
    const { BitNet, listCached, deleteCached } = window.tritium;
    const out = {};
    out.badUrl = await window.errorOf(() => BitNet.load(ggufUrl, { ...opts, name: 'smol-gguf-bad', integrity: wrongSha }));
    out.badUrlCached = (await listCached()).some((m) => m.id === 'smol-gguf-bad');
    let m = await BitNet.load(ggufUrl, { ...opts, name: 'smol-gguf', integrity: sha256 });
    out.url = { ids: await window.greedyIds(m, prompt, 3), kind: (await listCached()).find((c) => c.id === 'smol-gguf')?.kind };
    m.dispose();
    // Again by URL: now from the cache, its integrity checked by hashing the stored file.
    out.cachedBad = await window.errorOf(() => BitNet.load(ggufUrl, { ...opts, name: 'smol-gguf', integrity: wrongSha }));
    out.deleted = await deleteCached('smol-gguf');
    out.deletedAgain = await deleteCached('smol-gguf');
    const bytes = await (await fetch(ggufUrl)).arrayBuffer();
    m = await BitNet.load(bytes, { ...opts, integrity: sha256 });
    out.buffer = { ids: await window.greedyIds(m, prompt, 3), path: m.modelInfo.loadPath };
    m.dispose();
    out.bufferBad = await window.errorOf(() => BitNet.load(bytes, { ...opts, integrity: wrongSha }));
    const file = new File([bytes], 'smol.gguf');
    m = await BitNet.load(file, opts);
    out.file = { ids: await window.greedyIds(m, prompt, 3), name: m.modelInfo.name };
    m.dispose();
    return out;
  }, { ggufUrl, sha256, wrongSha, prompt, opts });
  const want3 = greedy.generated_ids.slice(0, 3);
  check(sources.badUrl?.code === 'IntegrityError' && !sources.badUrlCached,
    `GGUF URL with a wrong integrity: IntegrityError, not cached (${sources.badUrl?.message})`);
  check(sameIds(sources.url.ids, want3) && sources.url.kind === 'gguf', `GGUF URL with its integrity: native's tokens (${sources.url.kind} in OPFS)`,
    JSON.stringify(sources.url));
  check(sources.cachedBad?.code === 'IntegrityError', `cached GGUF, wrong integrity: IntegrityError (${sources.cachedBad?.message})`);
  check(sources.deleted === true && sources.deletedAgain === false, 'deleteCached: true, then false');
  check(sameIds(sources.buffer.ids, want3) && sources.buffer.path === 'blob', 'ArrayBuffer with its integrity: native\'s tokens',
    JSON.stringify(sources.buffer));
  check(sources.bufferBad?.code === 'IntegrityError', `ArrayBuffer, wrong integrity: IntegrityError (${sources.bufferBad?.message})`);
  check(sameIds(sources.file.ids, want3) && sources.file.name === 'smol.gguf', 'File: native\'s tokens, named after the file',
    JSON.stringify(sources.file));

  // The RDRR model: download() directly, then generation options on it.
  const gen = await page.evaluate(async ({ url, prompt, opts, sampling, stop, shortTurn, turnLen }) => {
    const { BitNet, download, listCached } = window.tritium;
    const out = {};
    const d = await download(url, { name: 'smol' });
    out.download = { id: d.id, bytes: d.bytes, listed: (await listCached()).some((m) => m.id === 'smol') };
    out.rdrrIntegrity = await window.errorOf(() => BitNet.load('smol', { ...opts, integrity: 'ab'.repeat(32) }));
    const m = await BitNet.load('smol', opts);
    const run = async (input, o) => {
      const ids = [];
      const seen = [];
      let done;
      for await (const ev of m.stream(input, { ...o, onToken: (e) => seen.push(e.text) })) {
        if (ev.type === 'token') { if (ev.tokenId !== null) ids.push(ev.tokenId); } else done = ev;
      }
      completion += done.usage.completionTokens;
      return { ids, seen, text: done.text, finishReason: done.finishReason };
    };
    let completion = 0;
    out.sampled = await run(prompt, sampling);
    out.sampledAgain = await run(prompt, sampling);
    out.topK1 = await run(prompt, { temperature: 1.5, topK: 1, seed: 3, maxTokens: 3 });
    out.stop = await run(prompt, { temperature: 0, maxTokens: 8, stop: [stop] });
    const pieces = [];
    for await (const t of m.generate(prompt, { temperature: 0, maxTokens: 8 })) pieces.push(t);
    out.generated = pieces.join('');
    completion += 8;
    out.ignoreEos = await run(shortTurn, { temperature: 0, maxTokens: turnLen + 3, ignoreEos: true });
    out.stats = m.stats();
    out.completion = completion;
    await m[Symbol.asyncDispose]();
    out.afterDispose = { disposed: m.stats().disposed, next: await window.errorOf(() => m.complete(prompt, { maxTokens: 1 })) };
    return out;
  }, { url, prompt, opts, sampling, stop, shortTurn, turnLen: turn.generated_ids.length });
  check(gen.download.id === 'smol' && gen.download.bytes > 0 && gen.download.listed, `download(): ${JSON.stringify(gen.download)}`);
  check(gen.rdrrIntegrity?.code === 'InvalidArgument', `integrity on an RDRR model: InvalidArgument (${gen.rdrrIntegrity?.message})`);
  check(sameIds(gen.sampled.ids, sampled.generated_ids), 'seeded sampling with top-k/top-p/min-p and penalties: native\'s tokens',
    `${JSON.stringify(gen.sampled.ids)} vs ${JSON.stringify(sampled.generated_ids)}`);
  check(sameIds(gen.sampledAgain.ids, gen.sampled.ids), 'the same seed again: the same tokens');
  check(sameIds(gen.topK1.ids, want3), 'topK 1 at temperature 1.5 is greedy', JSON.stringify(gen.topK1.ids));
  check(gen.stop.finishReason === 'stop' && gen.stop.text === beforeStop,
    `stop ${JSON.stringify(stop)}: the text ends before it, finish 'stop' (${JSON.stringify(gen.stop.text)})`);
  check(gen.stop.seen.join('') === gen.stop.text, 'onToken sees every token event, the held-back tail included',
    `${JSON.stringify(gen.stop.seen)} vs ${JSON.stringify(gen.stop.text)}`);
  check(gen.generated === greedy.text, `generate() yields the greedy text (${JSON.stringify(gen.generated)})`);
  check(turn.finish_reason === 'stop' && gen.ignoreEos.ids.length === turn.generated_ids.length + 3 &&
    gen.ignoreEos.finishReason === 'length' && sameIds(gen.ignoreEos.ids.slice(0, turn.generated_ids.length),
    turn.generated_ids),
  `ignoreEos: past the end of turn where native stops after ${turn.generated_ids.length} (${gen.ignoreEos.ids.length} tokens, ${gen.ignoreEos.finishReason})`);
  const s = gen.stats;
  check(s.generations === 6 && s.completionTokens === gen.completion && s.promptTokens > 0 && s.cachedTokens > 0 && s.loadMs > 0 &&
    s.kvTokens > 0 && s.last?.decodeTokensPerSecond > 0 && s.busy === false && s.disposed === false,
  `stats(): ${JSON.stringify(s)}`);
  check(gen.afterDispose.disposed === true && gen.afterDispose.next?.code === 'InvalidArgument',
    'Symbol.asyncDispose frees the model');

  // Exact arithmetic: 64 tokens, greedy, seeded with the default sampler, and seeded with a
  // repeat penalty, against native's CPU backend (tests/same_tokens.rs does the same natively).
  const long = await page.evaluate(async ({ modes, opts, prompt }) => {
    const { BitNet } = window.tritium;
    const m = await BitNet.load('smol', opts);
    const out = [];
    for (const o of modes) {
      const ids = [];
      for await (const ev of m.stream(prompt, { ...o, maxTokens: 64 })) {
        if (ev.type === 'token' && ev.tokenId !== null) ids.push(ev.tokenId);
      }
      out.push(ids);
    }
    m.dispose();
    return out;
  }, { modes: exactModes.map((m) => m.page), opts, prompt: longPrompt });
  exactModes.forEach((m, i) => {
    const want = exactNative[i].generated_ids;
    const at = want.findIndex((id, j) => long[i][j] !== id);
    check(sameIds(long[i], want), `exact, ${want.length} tokens ${m.name}: native CPU's tokens`,
      `first difference at ${at}: ${JSON.stringify(long[i])} vs ${JSON.stringify(want)}`);
  });

  // tokenizerUrl: the model's own tokenizer.json (served beside its shards), a missing one, a malformed one.
  requests.length = 0;
  const tok = await page.evaluate(async ({ url, prompt, opts }) => {
    const { BitNet } = window.tritium;
    const out = {};
    const m = await BitNet.load('smol', { ...opts, tokenizerUrl: `${url}tokenizer.json` });
    out.ids = await window.greedyIds(m, prompt, 3);
    m.dispose();
    out.missing = await window.errorOf(() => BitNet.load('smol', { ...opts, tokenizerUrl: `${url}no-such-tokenizer.json` }));
    out.malformed = await window.errorOf(() => BitNet.load('smol', { ...opts, tokenizerUrl: 'data:application/json,{"model":1}' }));
    return out;
  }, { url, prompt, opts });
  check(sameIds(tok.ids, want3) && requests.some((r) => r === `${url}tokenizer.json`),
    'tokenizerUrl: the tokenizer.json is fetched and gives native\'s tokens', JSON.stringify(tok.ids));
  check(tok.missing?.code === 'NetworkError', `tokenizerUrl 404: NetworkError (${tok.missing?.message})`);
  check(tok.malformed?.code === 'UnsupportedModel', `tokenizerUrl malformed: UnsupportedModel (${tok.malformed?.message})`);

  // device: the page's own GPUDevice, made with the defaults.
  const dev = await page.evaluate(async ({ prompt, opts }) => {
    const { BitNet } = window.tritium;
    const out = {};
    const adapter = await navigator.gpu.requestAdapter();
    const device = await adapter.requestDevice();
    let lost = false;
    device.lost.then(() => { lost = true; });
    let m = await BitNet.load('smol', { ...opts, device });
    out.ids = await window.greedyIds(m, prompt, 3);
    m.dispose();
    // The device still works for its owner: a buffer round trip.
    device.pushErrorScope('validation');
    const src = device.createBuffer({ size: 16, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    const dst = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(src, 0, new Uint32Array([7, 8, 9, 10]));
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(src, 0, dst, 0, 16);
    device.queue.submit([enc.finish()]);
    await dst.mapAsync(GPUMapMode.READ);
    out.roundTrip = Array.from(new Uint32Array(dst.getMappedRange()));
    out.scopeError = (await device.popErrorScope())?.message ?? null;
    out.lostAfterDispose = lost;
    // A second model on the same device; the device destroyed under its generation.
    m = await BitNet.load('smol', { ...opts, device });
    out.again = await window.greedyIds(m, prompt, 1);
    let tokens = 0;
    out.midway = await window.errorOf(async () => {
      for await (const ev of m.stream(prompt, { temperature: 0, maxTokens: 40 })) {
        if (ev.type === 'token' && ++tokens === 1) device.destroy();
      }
    });
    out.tokens = tokens;
    out.next = await window.errorOf(() => m.complete(prompt, { maxTokens: 1 }));
    m.dispose();
    return out;
  }, { prompt, opts });
  check(sameIds(dev.ids, want3), 'device: a model on the page\'s own GPUDevice gives native\'s tokens', JSON.stringify(dev.ids));
  check(sameIds(dev.roundTrip, [7, 8, 9, 10]) && dev.scopeError === null && !dev.lostAfterDispose,
    `device: dispose() leaves the device working (${JSON.stringify(dev.roundTrip)}, error ${dev.scopeError})`);
  check(sameIds(dev.again, want3.slice(0, 1)), 'device: a second model loads on it after dispose()');
  check(dev.midway?.code === 'DeviceLost' && dev.tokens < 40 && dev.next?.code === 'DeviceLost',
    `device destroyed mid-generation: DeviceLost after ${dev.tokens} token(s), and on the next call (${dev.midway?.message})`);

  // Worker mode: dispose() then load() again in the same worker.
  const worker = await page.evaluate(async ({ prompt, opts }) => {
    const { createWorkerBitNet } = window.tritium;
    const m = await createWorkerBitNet(new Worker('/package-worker.mjs', { type: 'module' }), 'smol', opts);
    const first = await window.greedyIds(m, prompt, 1);
    await m.dispose();
    const disposedErr = await window.errorOf(() => m.complete(prompt, { maxTokens: 1 }));
    await m.load('smol', opts);
    const again = await window.greedyIds(m, prompt, 3);
    const device = await window.errorOf(() => createWorkerBitNet(new Worker('/package-worker.mjs', { type: 'module' }), 'smol',
      { ...opts, device: {} }));
    await m.dispose();
    m.terminate();
    return { first, disposedErr, again, device };
  }, { prompt, opts });
  check(sameIds(worker.first, want3.slice(0, 1)) && worker.disposedErr?.code === 'InvalidArgument' && sameIds(worker.again, want3),
    'worker: dispose() then load() again in the same worker gives native\'s tokens', JSON.stringify(worker));
  check(worker.device?.code === 'InvalidArgument', `worker: a device option is refused clearly (${worker.device?.message})`);

  // LoRA adapters.
  const lora = await page.evaluate(async ({ loraPrompt, opts }) => {
    const { BitNet, createWorkerBitNet } = window.tritium;
    const m = await BitNet.load('/fixtures/arch/tiny-qwen3.gguf', { ...opts, name: 'tiny-qwen3' });
    const ids = async (model, adapters) => {
      const out = [];
      for await (const ev of model.stream(loraPrompt, { temperature: 0, maxTokens: 8, adapters })) {
        if (ev.type === 'token' && ev.tokenId !== null) out.push(ev.tokenId);
      }
      return out;
    };
    const all = await m.loadAdapter('/fixtures/lora/tiny-qwen3-all.gguf', { name: 'qwen3-all' });
    const rdrr = await m.loadAdapter('/fixtures/lora/tiny-qwen3-all.rdrr/', { name: 'qwen3-all-rdrr' });
    const qv = await m.loadAdapter(await (await fetch('/fixtures/lora/tiny-qwen3-qv.gguf')).arrayBuffer(), { name: 'qv' });
    const out = {
      base: await ids(m, []),
      one: await ids(m, [all]),
      rdrr: await ids(m, [rdrr]),
      two: await ids(m, [{ adapter: all, scale: 0.5 }, { adapter: qv, scale: 1.5 }]),
      baseAgain: await ids(m),
      cached: (await window.tritium.listCached()).filter((c) => c.id.startsWith('qwen3-all')).map((c) => c.kind).sort(),
    };
    out.wrongArch = await window.errorOf(() => m.loadAdapter('/fixtures/lora/tiny-phi3-all.gguf', { name: 'phi3-all' }));
    out.badScale = await window.errorOf(() => ids(m, [{ adapter: all, scale: 'x' }]));
    out.notHandle = await window.errorOf(() => ids(m, [3]));
    m.dispose();
    const w = await createWorkerBitNet(new Worker('/package-worker.mjs', { type: 'module' }), '/fixtures/arch/tiny-qwen3.gguf',
      { ...opts, name: 'tiny-qwen3' });
    const wa = await w.loadAdapter('/fixtures/lora/tiny-qwen3-all.gguf', { name: 'qwen3-all' });
    out.worker = await ids(w, [wa]);
    await w.dispose();
    w.terminate();
    return out;
  }, { loraPrompt, opts });
  check(sameIds(lora.base, loraWant.base) && sameIds(lora.baseAgain, loraWant.base), 'LoRA: no adapter gives native\'s base tokens',
    JSON.stringify([lora.base, lora.baseAgain, loraWant.base]));
  check(!sameIds(loraWant.one, loraWant.base) && sameIds(lora.one, loraWant.one),
    'LoRA: a GGUF adapter from a URL (into OPFS) gives native run --lora\'s tokens', JSON.stringify([lora.one, loraWant.one]));
  check(sameIds(lora.rdrr, loraWant.one), 'LoRA: the same adapter as an RDRR folder gives the same tokens', JSON.stringify(lora.rdrr));
  check(sameIds(lora.two, loraWant.two), 'LoRA: two adapters at 0.5 and 1.5 (one from an ArrayBuffer) give native\'s tokens',
    JSON.stringify([lora.two, loraWant.two]));
  check(sameIds(lora.cached, ['gguf', 'rdrr']), `LoRA: the URL adapters are in OPFS (${JSON.stringify(lora.cached)})`);
  check(lora.wrongArch?.code === 'InvalidArgument' && /architecture phi3/.test(lora.wrongArch.message),
    `LoRA: an adapter for another architecture is InvalidArgument (${lora.wrongArch?.message})`);
  check(lora.badScale?.code === 'InvalidArgument' && lora.notHandle?.code === 'InvalidArgument',
    `LoRA: a bad scale and a non-handle are InvalidArgument (${lora.badScale?.message}; ${lora.notHandle?.message})`);
  check(sameIds(lora.worker, loraWant.one), 'LoRA: loadAdapter in a worker gives the same tokens', JSON.stringify(lora.worker));

  // An RDRR folder from another converter (Hugging Face names, the architecture block).
  const foreign = await page.evaluate(async ({ loraPrompt, opts }) => {
    const m = await window.tritium.BitNet.load('/fixtures/foreign_rdrr/tiny-llama-rdrr/', { ...opts, name: 'foreign-llama' });
    const ids = await window.greedyIds(m, loraPrompt, 8);
    m.dispose();
    return ids;
  }, { loraPrompt, opts });
  check(sameIds(foreign, foreignWant), 'an RDRR folder from another converter gives native\'s tokens for its GGUF',
    JSON.stringify([foreign, foreignWant]));
} catch (e) {
  check(false, 'run', e.stack ?? String(e));
}
clearTimeout(watchdog);
await cleanup();
process.exit(summary());
