#!/usr/bin/env node
// The demos in headless Chromium (WebGPU on SwiftShader), served as scripts/demo.sh serves
// them: www/ + pkg/ by scripts/demo-server.mjs and the default model (SmolLM2 converted to
// RDRR) by a real `tritium serve-model`.
//   (n) without WebGPU (Chromium launched without --enable-unsafe-webgpu) both demos show a
//       readable WebGPUNotAvailable message;
//   (c) chat: the model URL comes from the server's config; a model folder whose manifest
//       claims shards far beyond the browser's quota (served here with CORS, no shard files)
//       gives a readable QuotaExceeded message before any shard is requested, and nothing is
//       listed as cached; ten loads cancelled mid-download (the server holds a shard) each end
//       the model worker; Cancel is pressed while a download is in progress (the route holds one
//       shard back until then): idle, a "Cancelled" notice, nothing cached; loading again
//       resumes (the verified shard is not fetched again) with progress (phase, bytes of total,
//       speed, ETA) and ends ready with the model listed as cached with its size, under the
//       name the server's config gives; a prompt streams text into the reply, Stop ends it,
//       the reply shows prefill and decode tokens/s and the time to first token; a second
//       prompt (Max new tokens 1) continues the conversation, both turns shown, reusing the
//       first turn's KV cache; Delete asks first, then removes the model from the list and
//       from OPFS. Screenshots: target/demos/chat.png (after the first reply),
//       chat-multi-turn.png, chat-storage-full.png (look at them);
//   (t) TL;DR: the widget summarizes the demo article's main text, with its service worker in
//       control; scrolled down to a paragraph, the widget is still in view (sticky); the
//       paragraph, selected, is summarized as the selection (tldr-selection.png); once it is
//       cleared by a click on the article the page is summarized again, and the Medium length
//       asks with another instruction than Short (the prompt's token count differs); then the
//       network goes off and both servers stop, the page reloads from the service worker's
//       cache and summarizes again with the model from OPFS.
// SwiftShader takes seconds per token, so the widget is given small budgets here
// (max-input-tokens, max-tokens attributes), the first chat reply is stopped after its first
// text and the second is one token long.
//
//   npm run build && cargo build && node tests/browser/run-demos.mjs
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PKG_DIR (default pkg/),
// TRITIUM_BIN (default target/debug/tritium), DEMOS_TIMEOUT_S (default 1200).
import { execFileSync } from 'node:child_process';
import {
  copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync,
} from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { launch, serveModel as serveModelAt } from './harness.mjs';
import { startDemoServer } from '../../scripts/demo-server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const target = process.env.CARGO_TARGET_DIR ?? join(repo, 'target');
const pkgDir = resolve(process.env.TRITIUM_PKG_DIR ?? join(repo, 'pkg'));
const bin = process.env.TRITIUM_BIN ?? join(target, 'debug', 'tritium');
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const timeoutS = Number(process.env.DEMOS_TIMEOUT_S ?? 1200);
const gguf = join(repo, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf');
const shots = join(target, 'demos');

let passed = 0;
let failed = 0;
const check = (ok, what, detail = '') => {
  if (ok) { passed += 1; console.log(`ok   ${what}`); } else { failed += 1; console.error(`FAIL ${what}${detail ? `: ${detail}` : ''}`); }
  return ok;
};
for (const p of [join(pkgDir, 'index.js'), join(pkgDir, 'worker.js'), executablePath, bin, gguf]) {
  try { statSync(p); } catch { check(false, `missing ${p} (run scripts/setup.sh, npm run build, cargo build)`); }
}
if (failed) { console.log(`0 passed, ${failed} failed`); process.exit(1); }

const tmp = mkdtempSync(join(tmpdir(), 'tritium-demos-'));
mkdirSync(shots, { recursive: true });
const children = [];
const closers = [];
const cleanup = async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const c of children) c.kill();
  rmSync(tmp, { recursive: true, force: true });
};
const watchdog = setTimeout(async () => {
  console.error(`timed out after ${timeoutS} s`);
  await cleanup();
  process.exit(1);
}, timeoutS * 1000);

// `tritium serve-model DIR --port 0`: { url, child } (the server is killed at the end).
async function serveModel(dir) {
  const served = await serveModelAt(bin, dir);
  children.push(served.child);
  return served;
}

/** Log page errors and console errors of `page` (prefixed with `tag`). */
function watch(page, tag) {
  page.on('pageerror', (e) => console.log(`  [${tag} page error] ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') console.log(`  [${tag} console.${m.type()}] ${m.text()}`); });
  page.on('crash', () => check(false, `${tag}: the page crashed`));
}

// A model folder over HTTP with CORS for any origin (as `tritium serve-model` answers):
// { url, hits (every "METHOD /path" asked for), release, close }. A GET of a path for which
// `hold(path)` is true gets no answer until release() (which drops those connections).
async function serveFolder(dir, { hold = () => false } = {}) {
  const hits = [];
  const held = [];
  const cors = { 'access-control-allow-origin': '*', 'access-control-allow-headers': '*',
    'access-control-expose-headers': '*' };
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    hits.push(`${req.method} ${path}`);
    if (req.method === 'OPTIONS') { res.writeHead(204, cors).end(); return; }
    if (req.method === 'GET' && hold(path)) { held.push(res); return; }
    try {
      const body = readFileSync(join(dir, basename(path)));
      res.writeHead(200, { ...cors, 'content-type': path.endsWith('.json') ? 'application/json' : 'application/octet-stream',
        'cache-control': 'no-store' }).end(body);
    } catch {
      res.writeHead(404, { ...cors, 'content-type': 'text/plain' }).end('not found');
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const release = () => { for (const res of held.splice(0)) res.destroy(); };
  const close = () => new Promise((ok) => { release(); server.close(() => ok()); server.closeAllConnections?.(); });
  return { url: `http://127.0.0.1:${server.address().port}/`, hits, release, close };
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

try {
  const model = join(tmp, 'SmolLM2-135M-Instruct-Q4_1');
  execFileSync(bin, ['convert', gguf, model], { stdio: ['ignore', 'ignore', 'inherit'] });
  const served = await serveModel(model);
  const modelUrl = served.url;
  const modelName = 'SmolLM2-135M-Instruct-Q4_1';
  const demo = await startDemoServer({ pkg: pkgDir, config: { modelUrl, modelName } });
  closers.push(demo.close);
  const base = demo.base;
  console.log(`model ${modelUrl}, demos ${base}/`);

  // (n) No WebGPU: the same Chromium without --enable-unsafe-webgpu.
  {
    const profile = mkdtempSync(join(tmpdir(), 'tritium-chromium-nogpu-'));
    const ctx = await chromium.launchPersistentContext(profile, {
      executablePath,
      headless: true,
      args: ['--headless=new', '--no-sandbox', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    closers.push(async () => { await ctx.close().catch(() => {}); rmSync(profile, { recursive: true, force: true }); });
    const page = ctx.pages()[0] ?? await ctx.newPage();
    watch(page, 'no-webgpu chat');
    await page.goto(`${base}/chat/`);
    const notice = page.locator('#notice [data-code="WebGPUNotAvailable"]');
    await notice.waitFor({ timeout: 60000 }).catch(() => {});
    const text = (await notice.count()) ? await notice.innerText() : await page.locator('#notice').innerText();
    check(/WebGPU is not available/.test(text) && /browser/.test(text),
      '(n) chat: a readable WebGPUNotAvailable message on opening', JSON.stringify(text));
    await page.locator('#load-button').click();
    await page.waitForFunction(() => ['error', 'idle'].includes(document.body.dataset.state)
      && document.querySelector('#notice [data-code]'), null, { timeout: 120000 }).catch(() => {});
    const afterLoad = await page.evaluate(() => document.querySelector('#notice [data-code]')?.dataset.code);
    check(afterLoad === 'WebGPUNotAvailable', '(n) chat: loading a model gives WebGPUNotAvailable', afterLoad);
    await page.screenshot({ path: join(shots, 'chat-no-webgpu.png') });

    await page.goto(`${base}/tldr/`);
    watch(page, 'no-webgpu tldr');
    await page.locator('tldr-widget #go').click();
    await page.waitForFunction(() => document.querySelector('tldr-widget')?.state === 'error', null, { timeout: 120000 })
      .catch(() => {});
    const err = await page.evaluate(() => {
      const box = document.querySelector('tldr-widget').shadowRoot.getElementById('error');
      return { code: box.dataset.code, text: box.innerText, hidden: box.hidden };
    });
    check(err.code === 'WebGPUNotAvailable' && !err.hidden && /WebGPU is not available/.test(err.text),
      '(n) TL;DR: a readable WebGPUNotAvailable message', JSON.stringify(err));
    await ctx.close();
  }

  const { context, close } = await launch(executablePath);
  closers.push(close);
  const page = context.pages()[0] ?? await context.newPage();
  watch(page, 'chat');
  const requests = [];
  context.on('request', (r) => requests.push(r.url()));

  // (c) Chat.
  await page.goto(`${base}/chat/`);
  await page.waitForFunction(() => document.body.dataset.state === 'idle', null, { timeout: 60000 });
  check(await page.inputValue('#model-url') === modelUrl, '(c) the model URL field holds the served default model');
  check(await page.locator('#notice [data-code]').count() === 0, '(c) no error notice with WebGPU');
  // Every state the progress box shows, however briefly (one entry per change).
  await page.evaluate(() => {
    const log = [];
    window.progressLog = log;
    const box = document.getElementById('progress');
    new MutationObserver(() => {
      const s = {
        state: document.body.dataset.state,
        phase: box.dataset.phase,
        label: document.getElementById('progress-phase').textContent,
        detail: document.getElementById('progress-detail').textContent,
        value: document.getElementById('progress-bar').value,
      };
      if (!box.hidden && JSON.stringify(log.at(-1)) !== JSON.stringify(s)) log.push(s);
    }).observe(box, { subtree: true, childList: true, characterData: true, attributes: true });
  });
  const chatState = () => page.evaluate(async () => {
    const { listCached } = await import('/pkg/index.js');
    return {
      state: document.body.dataset.state,
      code: document.querySelector('#notice [data-code]')?.dataset.code,
      notice: document.getElementById('notice').innerText,
      progressHidden: document.getElementById('progress').hidden,
      listed: [...document.querySelectorAll('#cached li[data-id]')].map((li) => li.dataset.id),
      cached: (await listCached()).map((m) => m.id),
    };
  });

  // Storage full, for real: a copy of the model's folder whose manifest says each shard holds
  // 4 TB, the shard files left out (the downloader checks the quota before it asks for one).
  {
    const huge = join(tmp, 'too-big');
    mkdirSync(huge);
    const manifest = JSON.parse(readFileSync(join(model, 'manifest.json'), 'utf8'));
    let offset = 0;
    for (const shard of manifest.shards) {
      shard.size = 4e12;
      shard.offset = offset;
      offset += shard.size;
    }
    manifest.totalSize = offset;
    writeFileSync(join(huge, 'manifest.json'), JSON.stringify(manifest));
    for (const f of readdirSync(model).filter((f) => f.endsWith('.json') && f !== 'manifest.json')) {
      copyFileSync(join(model, f), join(huge, f));
    }
    const tooBig = await serveFolder(huge);
    closers.push(tooBig.close);
    const { quota } = await page.evaluate(() => navigator.storage.estimate());
    await page.fill('#model-url', tooBig.url);
    await page.locator('#load-button').click();
    await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 120000 });
    const s = await chatState();
    console.log(`  ${offset / 1e12} TB claimed, quota ${(quota / 1e9).toFixed(1)} GB: ${JSON.stringify(s)}`);
    check(quota < offset && s.state === 'error' && s.code === 'QuotaExceeded' && /Not enough storage for this model/.test(s.notice)
      && /Delete cached models/.test(s.notice) && /It needs 8\.0 TB more; [\d.]+ GB are available/.test(s.notice) && s.progressHidden,
    '(c) a model larger than the storage quota gives a readable QuotaExceeded message, the sizes in units', JSON.stringify(s));
    check(tooBig.hits.includes('GET /manifest.json') && !tooBig.hits.some((h) => /shard_/.test(h)),
      '(c) the quota is checked before any shard is requested', JSON.stringify(tooBig.hits));
    check(s.listed.length === 0 && s.cached.length === 0, '(c) nothing is listed as cached after it', JSON.stringify(s));
    await page.screenshot({ path: join(shots, 'chat-storage-full.png') });
    await page.fill('#model-url', modelUrl);
  }

  // Cancel, again and again, and the model worker ends each time: in Chromium a worker
  // terminated just after it ended workers of its own could hang for good (its hash workers,
  // closed after the cancelled download; the demo terminates its model worker right then),
  // about one time in ten, which left every later DevTools call to it (routing, offline)
  // waiting. The second shard is held by the server, so each load is cut mid-download; the
  // partial model is deleted after each. (A regression of that kind fails this about six runs
  // in ten.)
  {
    const gate = await serveFolder(model, { hold: (path) => /shard_0*1\.bin$/.test(path) });
    closers.push(gate.close);
    const stuck = [];
    await page.fill('#model-url', gate.url);
    for (let i = 0; i < 10; i++) {
      await page.locator('#load-button').click();
      await page.waitForFunction(() => / of /.test(document.getElementById('progress-detail').textContent)
        || document.body.dataset.state !== 'loading', null, { timeout: 120000 });
      await page.locator('#cancel-button').click();
      await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 120000 });
      gate.release();
      const until = Date.now() + 10000;
      while (page.workers().length && Date.now() < until) await sleep(50);
      if (page.workers().length) stuck.push(i);
      await page.evaluate(async (url) => {
        const { cacheIdFor, deleteCached } = await import('/pkg/index.js');
        await deleteCached(await cacheIdFor(url));
      }, gate.url);
    }
    const left = await chatState();
    check(stuck.length === 0, '(c) Cancel ten times: the model worker ends every time',
      JSON.stringify({ stuck, workers: page.workers().map((w) => w.url()) }));
    check(left.state === 'idle' && left.cached.length === 0, '(c) after them nothing is cached', JSON.stringify(left));
    await page.fill('#model-url', modelUrl);
  }

  // Cancel during the download, then load again (the download resumes). The first shard
  // request goes through, the others are held until Cancel has been pressed, so the load
  // cannot end before it.
  const isShard = (u) => u.href.startsWith(modelUrl) && /\/shard_\d+\.bin$/.test(u.pathname);
  const held = [];
  let shardsLetThrough = 0;
  await context.route(isShard, (route) => {
    if (shardsLetThrough === 0) {
      shardsLetThrough += 1;
      return route.continue();
    }
    held.push(route);
    return undefined;
  });
  await page.evaluate(() => { window.progressLog.length = 0; });
  await page.locator('#load-button').click();
  await page.waitForFunction(() => window.progressLog.some((s) => s.phase === 'verify')
    || document.body.dataset.state !== 'loading', null, { timeout: 120000 });
  const beforeCancel = await page.evaluate(() => ({ state: document.body.dataset.state, log: window.progressLog }));
  check(beforeCancel.state === 'loading' && held.length > 0
    && beforeCancel.log.some((s) => s.phase === 'download' && /\d.* of \d/.test(s.detail)),
  '(c) Cancel is pressed while the download is in progress (one shard verified, one held back)',
  JSON.stringify({ state: beforeCancel.state, held: held.length, log: beforeCancel.log.slice(-3) }));
  const heldUrls = [...new Set(held.map((r) => r.request().url()))];
  await page.locator('#cancel-button').click();
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 120000 });
  const afterCancel = await chatState();
  check(afterCancel.state === 'idle' && afterCancel.code === 'AbortError' && afterCancel.progressHidden,
    '(c) Cancel stops the load: idle, a "Cancelled" notice, the progress bar gone', JSON.stringify(afterCancel));
  check(afterCancel.listed.length === 0 && afterCancel.cached.length === 0, '(c) the cancelled download is not listed as cached',
    JSON.stringify(afterCancel));
  await context.unroute(isShard);
  for (const r of held) await r.abort().catch(() => {});

  const shardRequestsBefore = requests.length;
  await page.evaluate(() => { window.progressLog.length = 0; });
  await page.locator('#load-button').click();
  const loadStarted = Date.now();
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 600000 });
  const loadS = (Date.now() - loadStarted) / 1000;
  const seen = await page.evaluate(() => window.progressLog);
  const final = await chatState();
  check(final.state === 'ready', `(c) the model loads (${loadS.toFixed(1)} s)`, JSON.stringify(final));
  const downloads = seen.filter((s) => s.phase === 'download');
  console.log(`  phases seen: ${[...new Set(seen.map((s) => s.phase).filter(Boolean))].join(', ')}; ` +
    `resolve: ${seen.filter((s) => s.phase === 'resolve').at(-1)?.label}; last download line: ${downloads.at(-1)?.detail}`);
  const refetched = [...new Set(requests.slice(shardRequestsBefore).filter((u) => isShard(new URL(u))))];
  check(seen.some((s) => s.phase === 'resolve' && /\(1 already verified\)/.test(s.label))
    && JSON.stringify(refetched) === JSON.stringify(heldUrls),
  '(c) loading again resumes: the shard verified before Cancel is not fetched again',
  JSON.stringify({ resolve: seen.filter((s) => s.phase === 'resolve').map((s) => s.label), refetched, heldUrls }));
  check(downloads.some((s) => /\d.* of \d/.test(s.detail) && /\/s/.test(s.detail)),
    '(c) the progress bar shows bytes of total and speed while downloading', JSON.stringify(downloads.slice(-3)));
  check(downloads.some((s) => /ETA \d+(\.\d+)? (ms|s|min)/.test(s.detail)), '(c) the progress bar shows an ETA while downloading',
    JSON.stringify(downloads.slice(-3)));
  check(seen.some((s) => s.value > 0 && s.value < 1), '(c) the progress bar moves', JSON.stringify(seen.slice(-3)));
  check(/ready/.test(await page.locator('#model-status').innerText()), '(c) the status line says ready');
  await page.waitForFunction(() => document.querySelectorAll('#cached li[data-id]').length > 0, null, { timeout: 30000 })
    .catch(() => {});
  const cached = await page.locator('#cached li[data-id]').allInnerTexts();
  check(cached.length >= 1 && cached.some((t) => /\d+(\.\d)? MB/.test(t)), '(c) the model is listed as cached with its size',
    JSON.stringify(cached));
  const status = await page.locator('#model-status').innerText();
  check(JSON.stringify(final.cached) === JSON.stringify([modelName]) && status.startsWith(`${modelName} ready`),
    '(c) the default model is kept and shown under the name the demo server\'s config gives', JSON.stringify({ final, status }));

  // A short conversation: SwiftShader needs seconds per prompt token.
  await page.locator('.settings summary').click();
  await page.locator('#system-prompt').fill('Be brief.');
  await page.locator('.settings summary').click();
  await page.locator('#prompt').fill('Hi');
  await page.locator('#prompt').press('Enter');
  await page.waitForFunction(() => document.body.dataset.state === 'generating', null, { timeout: 10000 });
  const genStarted = Date.now();
  const bubble = page.locator('.message.assistant .bubble').last();
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('.message.assistant .bubble')].at(-1);
    return (b && b.textContent.trim().length > 0) || document.body.dataset.state !== 'generating';
  }, null, { timeout: 600000 });
  const streamed = await bubble.innerText();
  const stillGenerating = await page.evaluate(() => document.body.dataset.state === 'generating');
  console.log(`  first text after ${((Date.now() - genStarted) / 1000).toFixed(1)} s: ${JSON.stringify(streamed)}`);
  check(streamed.trim().length > 0 && stillGenerating, '(c) the reply streams in while generating', JSON.stringify(streamed));
  check(await page.locator('#stop-button').isVisible(), '(c) Stop is shown while generating');
  await page.locator('#stop-button').click();
  const stopAt = Date.now();
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300000 });
  const conversation = () => page.evaluate(() => [...document.querySelectorAll('#messages .message')].map((li) => ({
    role: li.classList.contains('user') ? 'user' : 'assistant',
    text: li.querySelector('.bubble').textContent,
    reason: li.dataset.finishReason,
    stats: li.querySelector('.stats')?.textContent,
  })));
  const reply = (await conversation()).at(-1);
  console.log(`  stopped after ${((Date.now() - stopAt) / 1000).toFixed(1)} s: ${JSON.stringify(reply)}`);
  check(reply.reason === 'abort', '(c) Stop ends the reply with finish reason abort', JSON.stringify(reply));
  check(reply.text.startsWith(streamed.trim().slice(0, 3)), '(c) the streamed text stays in the conversation');
  const number = String.raw`\d+(\.\d+)?`;
  check(new RegExp(`prefill ${number} tok/s`).test(reply.stats ?? '') && new RegExp(`decode ${number} tok/s`).test(reply.stats ?? '')
    && new RegExp(`first token ${number} (ms|s|min)`).test(reply.stats ?? ''),
  '(c) the reply shows prefill and decode tokens/s separately and the time to first token', reply.stats);
  check(await page.locator('#send-button').isEnabled(), '(c) Send is enabled again after Stop');
  await page.screenshot({ path: join(shots, 'chat.png') });
  console.log(`  screenshot: ${join(shots, 'chat.png')}`);

  // A second turn, one token long (Max new tokens 1): it continues the conversation.
  await page.locator('.settings summary').click();
  await page.locator('#max-tokens').fill('1');
  await page.locator('.settings summary').click();
  await page.locator('#prompt').fill('Thanks');
  await page.locator('#prompt').press('Enter');
  await page.waitForFunction(() => document.body.dataset.state === 'generating', null, { timeout: 10000 });
  const turn2Started = Date.now();
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 600000 });
  const turns = await conversation();
  const second = turns.at(-1);
  console.log(`  second reply after ${((Date.now() - turn2Started) / 1000).toFixed(1)} s: ${JSON.stringify(second)}`);
  check(JSON.stringify(turns.map((t) => t.role)) === '["user","assistant","user","assistant"]'
    && turns[0].text === 'Hi' && turns[1].text === reply.text && turns[2].text === 'Thanks',
  '(c) a second prompt continues the conversation: both turns are shown in order', JSON.stringify(turns));
  check(second.reason === 'length' && second.text.trim().length > 0 && second.text !== '(no text)'
    && /\b1 token\b/.test(second.stats ?? '') && /hit the token limit/.test(second.stats ?? ''),
  '(c) the second reply arrives, one token long as Max new tokens says', JSON.stringify(second));
  check(new RegExp(`prefill ${number} tok/s`).test(second.stats ?? '') && !/decode/.test(second.stats ?? ''),
    '(c) a one-token reply shows its prefill rate and no decode rate (it had no decode step)', second.stats);
  const reused = Number(/(\d+) prompt tokens reused/.exec(second.stats ?? '')?.[1] ?? 0);
  check(reused > 0, `(c) the second turn reuses the first turn's KV cache (${reused} prompt tokens reused)`, second.stats);
  await page.screenshot({ path: join(shots, 'chat-multi-turn.png') });
  console.log(`  screenshot: ${join(shots, 'chat-multi-turn.png')}`);

  // Delete from the picker: it asks first (dismissed: nothing happens), then removes the model.
  const id = await page.locator('#cached li[data-id]').first().getAttribute('data-id');
  const dialogs = [];
  const answer = (accept) => page.once('dialog', (d) => {
    dialogs.push(d.message());
    return accept ? d.accept() : d.dismiss();
  });
  answer(false);
  await page.locator('#cached li[data-id] button.danger').first().click();
  await sleep(500);
  const kept = await chatState();
  check(dialogs.length === 1 && dialogs[0].includes(id) && /\d MB/.test(dialogs[0]) && kept.listed.includes(id)
    && kept.cached.includes(id),
  '(c) Delete asks first, naming the model and its size; dismissed, the model stays',
  JSON.stringify({ dialogs, id, kept }));
  answer(true);
  await page.locator('#cached li[data-id] button.danger').first().click();
  await page.waitForFunction((gone) => ![...document.querySelectorAll('#cached li[data-id]')].some((li) => li.dataset.id === gone),
    id, { timeout: 30000 }).catch(() => {});
  const afterDelete = await chatState();
  check(dialogs.length === 2 && !afterDelete.listed.includes(id) && !afterDelete.cached.includes(id) && !afterDelete.code,
    '(c) Delete, confirmed, removes the model from the list and from OPFS', JSON.stringify({ id, afterDelete }));

  // (t) TL;DR, online: the service worker takes control, the widget summarizes the article.
  watch(page, 'tldr');
  await page.goto(`${base}/tldr/`);
  await page.waitForFunction(() => document.querySelector('tldr-widget')?.offlineReady === true, null, { timeout: 60000 })
    .catch(() => {});
  check(await page.evaluate(() => document.querySelector('tldr-widget')?.offlineReady === true),
    '(t) the service worker controls the page and has cached the app');
  const extracted = await page.evaluate(async () => {
    const { extractMainText } = await import('/tldr/extract.js');
    return extractMainText(document).text;
  });
  check(extracted.startsWith('How lighthouses kept their lights burning') && extracted.includes('Fresnel lens')
    && !extracted.includes('Embed it on your page') && !extracted.includes('tritium demos'),
  '(t) main-content extraction takes the article and leaves out navigation and the aside', extracted.slice(0, 200));
  const summarize = async (tag) => {
    await page.evaluate(() => {
      const w = document.querySelector('tldr-widget');
      w.setAttribute('max-input-tokens', '8');
      w.setAttribute('max-tokens', '2');
      window.lastSummary = null;
      w.addEventListener('tldr-summary', (e) => {
        const { source, done } = e.detail;
        window.lastSummary = { source, finishReason: done?.finishReason, usage: done?.usage };
      }, { once: true });
    });
    const started = Date.now();
    await page.locator('tldr-widget #go').click();
    await page.waitForFunction(() => ['done', 'error'].includes(document.querySelector('tldr-widget').state), null,
      { timeout: 600000 });
    const r = await page.evaluate(() => {
      const w = document.querySelector('tldr-widget');
      const s = w.shadowRoot;
      return { state: w.state, summary: s.getElementById('summary').textContent, meta: s.getElementById('meta').textContent,
        error: s.getElementById('error').innerText, length: s.getElementById('length').value, event: window.lastSummary };
    });
    console.log(`  ${tag}: ${((Date.now() - started) / 1000).toFixed(1)} s, ${JSON.stringify(r)}`);
    return r;
  };
  const online = await summarize('online');
  check(online.state === 'done' && online.summary.trim().length > 0, '(t) the widget summarizes the page', JSON.stringify(online));
  check(/Summary of this page/.test(online.meta) && online.event?.source === 'page', '(t) it says it summarized the page',
    JSON.stringify(online));
  await page.screenshot({ path: join(shots, 'tldr.png') });

  // (t) The selection: a paragraph selected through the Selection API, then Summarize clicked.
  const selected = await page.evaluate(() => {
    const p = [...document.querySelectorAll('article p')].find((e) => e.textContent.includes('Sailors also needed'));
    p.scrollIntoView({ block: 'center' });
    const range = document.createRange();
    range.selectNodeContents(p);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    return getSelection().toString().trim();
  });
  const inView = await page.evaluate(() => {
    const r = document.querySelector('tldr-widget').shadowRoot.getElementById('go').getBoundingClientRect();
    return { scrollY: Math.round(scrollY), top: Math.round(r.top), bottom: Math.round(r.bottom), height: innerHeight };
  });
  check(inView.scrollY > 0 && inView.top >= 0 && inView.bottom <= inView.height,
    '(t) scrolled down to the paragraph, the widget\'s Summarize button stays in view', JSON.stringify(inView));
  const fromSelection = await summarize('selection');
  check(selected.startsWith('Sailors also needed') && fromSelection.state === 'done' && fromSelection.summary.trim().length > 0
    && fromSelection.event?.source === 'selection' && /Summary of the selection/.test(fromSelection.meta),
  '(t) with a paragraph selected, the widget summarizes the selection and says so', JSON.stringify(fromSelection));
  await page.screenshot({ path: join(shots, 'tldr-selection.png') });

  // (t) A click on the article clears the selection: the page again, now at the Medium length.
  await page.locator('article h1').click();
  const cleared = await page.evaluate(() => getSelection().toString() === '');
  await page.locator('tldr-widget #length').selectOption('medium');
  const medium = await summarize('page, medium');
  check(cleared && medium.state === 'done' && medium.event?.source === 'page' && /Summary of this page/.test(medium.meta),
    '(t) once the selection is cleared, the widget summarizes the page again', JSON.stringify({ cleared, medium }));
  const promptTokens = [online.event?.usage?.promptTokens, medium.event?.usage?.promptTokens];
  check(medium.length === 'medium' && online.event?.source === 'page' && medium.event?.source === 'page'
    && promptTokens.every((n) => n > 0) && promptTokens[0] !== promptTokens[1],
    `(t) the length choice changes the request: Medium asks with another instruction (${promptTokens[1]} prompt tokens, Short ${promptTokens[0]})`,
    JSON.stringify({ online: online.event, medium: medium.event }));

  // (t) Offline: network off, both servers gone, reload.
  await context.setOffline(true);
  await demo.close();
  served.child.kill();
  await new Promise((ok) => (served.child.exitCode !== null ? ok() : served.child.once('exit', ok)));
  requests.length = 0;
  const response = await page.reload();
  check(response?.fromServiceWorker() === true, '(t) offline, the page comes from the service worker');
  await page.waitForFunction(() => customElements.get('tldr-widget') && document.querySelector('tldr-widget')?.ui, null,
    { timeout: 60000 });
  const offline = await summarize('offline');
  check(offline.state === 'done' && offline.summary.trim().length > 0, '(t) offline, the widget summarizes again', JSON.stringify(offline));
  check(offline.summary === online.summary, '(t) offline gives the same greedy summary', `${offline.summary} vs ${online.summary}`);
  const modelRequests = requests.filter((u) => u.startsWith(new URL(modelUrl).origin));
  check(modelRequests.length === 0, '(t) offline, nothing was requested from the model server', JSON.stringify(modelRequests));
} catch (e) {
  check(false, 'run', e.stack ?? String(e));
} finally {
  clearTimeout(watchdog);
  await cleanup();
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
