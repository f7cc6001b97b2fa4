#!/usr/bin/env node
// The demos in headless Chromium (WebGPU on SwiftShader), served as scripts/demo.sh serves
// them: www/ + pkg/ by scripts/demo-server.mjs and the default model (SmolLM2 converted to
// RDRR) by a real `tritium serve-model`.
//   (n) without WebGPU (Chromium launched without --enable-unsafe-webgpu) both demos show a
//       readable WebGPUNotAvailable message;
//   (c) chat: the model URL comes from the server's config, loading shows progress (phase,
//       bytes, speed) and ends ready with the model listed as cached with its size; a prompt
//       streams text into the reply, Stop ends it, the reply shows its speed; a screenshot is
//       written to target/demos/chat.png (look at it);
//   (t) TL;DR: the widget summarizes the demo article's main text, with its service worker in
//       control; then the network goes off and both servers stop, the page reloads from the
//       service worker's cache and summarizes again with the model from OPFS.
// SwiftShader takes tens of seconds per token, so the widget is given small budgets here
// (max-input-tokens, max-tokens attributes) and the chat reply is stopped after its first text.
//
//   npm run build && cargo build && node tests/browser/run-demos.mjs
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PKG_DIR (default pkg/),
// TRITIUM_BIN (default target/debug/tritium), DEMOS_TIMEOUT_S (default 1200).
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { launch } from './harness.mjs';
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

// `tritium serve-model DIR --port 0`: resolves to { url, child } once it prints its port.
async function serveModel(dir) {
  const child = spawn(bin, ['serve-model', dir, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`serve-model printed no port: ${out}`)), 30000);
    const look = (d) => {
      out += d;
      const m = out.match(/https?:\/\/(?:127\.0\.0\.1|localhost):(\d+)/);
      if (m) { clearTimeout(timer); ok({ url: `http://127.0.0.1:${m[1]}/`, child }); }
    };
    child.stdout.on('data', look);
    child.stderr.on('data', look);
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`serve-model exited (${code}): ${out}`)); });
  });
}

/** Log page errors and console errors of `page` (prefixed with `tag`). */
function watch(page, tag) {
  page.on('pageerror', (e) => console.log(`  [${tag} page error] ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') console.log(`  [${tag} console.${m.type()}] ${m.text()}`); });
  page.on('crash', () => check(false, `${tag}: the page crashed`));
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

try {
  const model = join(tmp, 'SmolLM2-135M-Instruct-Q4_1');
  execFileSync(bin, ['convert', gguf, model], { stdio: ['ignore', 'ignore', 'inherit'] });
  const served = await serveModel(model);
  const modelUrl = served.url;
  const demo = await startDemoServer({ pkg: pkgDir, config: { modelUrl, modelName: 'SmolLM2-135M-Instruct-Q4_1' } });
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
  // Cancel during the download, then load again (the download resumes).
  await page.locator('#load-button').click();
  await page.waitForFunction(() => document.getElementById('progress').dataset.phase === 'download'
    || document.body.dataset.state !== 'loading', null, { timeout: 120000 });
  if (await page.evaluate(() => document.body.dataset.state === 'loading')) {
    await page.locator('#cancel-button').click();
    await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 120000 });
    const after = await page.evaluate(() => ({ state: document.body.dataset.state,
      code: document.querySelector('#notice [data-code]')?.dataset.code, hidden: document.getElementById('progress').hidden }));
    check(after.state === 'idle' && after.code === 'AbortError' && after.hidden,
      '(c) Cancel stops the load: idle, a "Cancelled" notice, the progress bar gone', JSON.stringify(after));
  } else {
    console.log('  (Cancel not checked: the load ended before its download was seen)');
  }
  await page.locator('#load-button').click();
  const seen = [];
  const loadStarted = Date.now();
  for (;;) {
    const s = await page.evaluate(() => ({
      state: document.body.dataset.state,
      phase: document.getElementById('progress').dataset.phase,
      label: document.getElementById('progress-phase').textContent,
      detail: document.getElementById('progress-detail').textContent,
      value: document.getElementById('progress-bar').value,
    }));
    if (s.state !== 'loading') { seen.push(s); break; }
    if (s.phase && JSON.stringify(seen.at(-1)) !== JSON.stringify(s)) seen.push(s);
    if (Date.now() - loadStarted > 600000) break;
    await sleep(100);
  }
  const loadS = (Date.now() - loadStarted) / 1000;
  const final = seen.at(-1);
  const notice = await page.locator('#notice').innerText();
  check(final?.state === 'ready', `(c) the model loads (${loadS.toFixed(1)} s)`, `${JSON.stringify(final)} ${notice}`);
  const downloads = seen.filter((s) => s.phase === 'download');
  console.log(`  phases seen: ${[...new Set(seen.map((s) => s.phase).filter(Boolean))].join(', ')}; ` +
    `last download line: ${downloads.at(-1)?.detail}`);
  check(downloads.some((s) => /\d.* of \d/.test(s.detail) && /\/s/.test(s.detail)),
    '(c) the progress bar shows bytes of total and speed while downloading', JSON.stringify(downloads.slice(-3)));
  check(seen.some((s) => s.value > 0 && s.value < 1) || downloads.length > 0, '(c) the progress bar moves');
  check(/ready/.test(await page.locator('#model-status').innerText()), '(c) the status line says ready');
  await page.waitForFunction(() => document.querySelectorAll('#cached li[data-id]').length > 0, null, { timeout: 30000 })
    .catch(() => {});
  const cached = await page.locator('#cached li[data-id]').allInnerTexts();
  check(cached.length >= 1 && cached.some((t) => /\d+(\.\d)? MB/.test(t)), '(c) the model is listed as cached with its size',
    JSON.stringify(cached));

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
  const reply = await page.evaluate(() => {
    const li = [...document.querySelectorAll('.message.assistant')].at(-1);
    return { reason: li.dataset.finishReason, text: li.querySelector('.bubble').textContent, stats: li.querySelector('.stats')?.textContent };
  });
  console.log(`  stopped after ${((Date.now() - stopAt) / 1000).toFixed(1)} s: ${JSON.stringify(reply)}`);
  check(reply.reason === 'abort', '(c) Stop ends the reply with finish reason abort', JSON.stringify(reply));
  check(reply.text.startsWith(streamed.trim().slice(0, 3)), '(c) the streamed text stays in the conversation');
  check(/first token/.test(reply.stats ?? '') && /tok\/s/.test(reply.stats ?? ''),
    '(c) the reply shows first-token time and tokens/s', reply.stats);
  check(await page.locator('#send-button').isEnabled(), '(c) Send is enabled again after Stop');
  await page.screenshot({ path: join(shots, 'chat.png') });
  console.log(`  screenshot: ${join(shots, 'chat.png')}`);

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
    });
    const started = Date.now();
    await page.locator('tldr-widget #go').click();
    await page.waitForFunction(() => ['done', 'error'].includes(document.querySelector('tldr-widget').state), null,
      { timeout: 600000 });
    const r = await page.evaluate(() => {
      const w = document.querySelector('tldr-widget');
      const s = w.shadowRoot;
      return { state: w.state, summary: s.getElementById('summary').textContent, meta: s.getElementById('meta').textContent,
        error: s.getElementById('error').innerText };
    });
    console.log(`  ${tag}: ${((Date.now() - started) / 1000).toFixed(1)} s, ${JSON.stringify(r)}`);
    return r;
  };
  const online = await summarize('online');
  check(online.state === 'done' && online.summary.trim().length > 0, '(t) the widget summarizes the page', JSON.stringify(online));
  check(/Summary of this page/.test(online.meta), '(t) it says it summarized the page', online.meta);
  await page.screenshot({ path: join(shots, 'tldr.png') });

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
