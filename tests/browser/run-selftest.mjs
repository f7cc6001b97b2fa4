#!/usr/bin/env node
// Runs the GPU kernel self-test in headless Chromium on WebGPU (SwiftShader: a CPU, so slow)
// and reports like a test runner: one line per check, then `N passed, M failed`. Exits non-zero
// on any failed check, on zero checks, on a page error or crash, on WebGPU errors, when there
// is no WebGPU adapter, and on a timeout; each of those problems outside a check counts as one
// more failure in M.
//
//   scripts/build-wasm-test.sh && node tests/browser/run-selftest.mjs [prefix]
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PKG_DIR (default
// $CARGO_TARGET_DIR/browser-test/pkg or target/browser-test/pkg), SELFTEST_TIMEOUT_S (default
// 900 for the whole suite).
import { statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, serve } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const pkgDir = resolve(process.env.TRITIUM_PKG_DIR ??
  join(process.env.CARGO_TARGET_DIR ?? join(repo, 'target'), 'browser-test', 'pkg'));
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const timeoutS = Number(process.env.SELFTEST_TIMEOUT_S ?? 900);
const prefix = process.argv[2] ?? '';

for (const [what, path] of [['the wasm package', join(pkgDir, 'tritium_bg.wasm')],
  ['Chromium', executablePath]]) {
  try {
    statSync(path);
  } catch {
    console.error(`error: ${what} is missing (${path}); run scripts/setup.sh and ` +
      'scripts/build-wasm-test.sh');
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
}

// /pkg/... from the wasm package, the rest from here.
const { server, base } = await serve({ '/pkg/': pkgDir, '/': here }, 'selftest.html');
const url = `${base}/selftest.html` +
  (prefix ? `?prefix=${encodeURIComponent(prefix)}` : '');

const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(1);
let context;
let closeBrowser = async () => {};
const problems = []; // no adapter, page error, crash, timeout, zero checks: each fails the run
const gpuErrors = []; // WebGPU errors that error scopes caught (the related check fails too)
const streamed = new Map(); // name -> passed, as results arrive

let pendingGpuErrors = []; // caught since the last result: they belong to the next check

// One check's line; a failure's message follows, indented, with the errors an error scope
// caught first (for a shader Tint rejects: its diagnostic) and long cascades cut short.
function line(r, scopeErrors = []) {
  const s = r.stats ?? {};
  const head = `${r.passed ? 'PASS' : 'FAIL'} ${r.name} (${(r.ms / 1000).toFixed(1)} s)`;
  if (r.passed && scopeErrors.length === 0) {
    return `${head}: ${s.elements} elements, worst error ` +
      `${Number(s.worst_ratio).toPrecision(3)} of its bound`;
  }
  const lines = [...scopeErrors.map((e) => `caught by an error scope: ${e}`),
    r.error ?? 'failed without a message'].join('\n').split('\n').filter((l) => l.trim());
  const shown = lines.slice(0, 16);
  if (lines.length > shown.length) shown.push(`... ${lines.length - shown.length} more lines`);
  return `${head}:\n    ${shown.join('\n    ')}`;
}

// The whole suite is bounded: past the deadline the browser is closed, which ends any wait on
// the page (even one stuck in a long synchronous call), and the process is ended if that hangs.
let timedOut = false;
const watchdog = setTimeout(() => {
  timedOut = true;
  setTimeout(() => {
    console.error(`error: timed out after ${timeoutS} s, and closing the browser hung`);
    console.log(`${[...streamed.values()].filter(Boolean).length} passed, ` +
      `${[...streamed.values()].filter((p) => !p).length + 1} failed`);
    process.exit(1);
  }, 30_000).unref();
  context?.close().catch(() => {});
}, timeoutS * 1000);

let report;
let adapterInfo;
try {
  ({ context, close: closeBrowser } = await launch(executablePath));
  const page = context.pages()[0] ?? await context.newPage();
  let broken = false;
  page.on('pageerror', (e) => { problems.push(`page error: ${e.message}`); broken = true; });
  page.on('crash', () => { problems.push('the page crashed'); broken = true; });
  page.on('console', (msg) => {
    const text = msg.text();
    if (text.startsWith('tritium-check ')) {
      const r = JSON.parse(text.slice('tritium-check '.length));
      streamed.set(r.name, r.passed);
      console.log(line(r, pendingGpuErrors));
      pendingGpuErrors = [];
    } else if (text.startsWith('tritium-gpu-error ')) {
      const e = JSON.parse(text.slice('tritium-gpu-error '.length));
      gpuErrors.push(e);
      pendingGpuErrors.push(e);
    } else if (/^\[Invalid |\n - While /.test(text)) {
      // Chromium's echo of an uncaptured WebGPU error: the check's own result carries it.
    } else if (msg.type() === 'error' || msg.type() === 'warning') {
      console.log(`  [console.${msg.type()}] ${text}`);
    }
  });
  console.log(`chromium ${context.browser()?.version() ?? ''} (${executablePath}), ${url}`);
  await page.goto(url);

  // Poll rather than one long wait, so a page error or crash ends the wait at once.
  let state;
  for (;;) {
    state = await page.evaluate(() => ({
      done: window.__done === true, result: window.__result, error: window.__error,
      info: window.__adapterInfo,
    }));
    if (state.done || broken) break;
    await new Promise((ok) => setTimeout(ok, 500));
  }
  if (state.error) {
    problems.push(`the suite did not run (${state.error.code}): ${state.error.message}`);
  }
  report = state.result;
  adapterInfo = state.info;
  if (!report && problems.length === 0) problems.push('the page finished without a result');
} catch (e) {
  problems.push(timedOut
    ? `timed out after ${timeoutS} s with ${streamed.size} checks finished`
    : `the browser run failed: ${e.message}`);
} finally {
  clearTimeout(watchdog);
  await closeBrowser();
  server.close();
}

let passed = [...streamed.values()].filter(Boolean).length;
let failed = streamed.size - passed;
if (report) {
  const a = report.adapter;
  console.log(`adapter: ${JSON.stringify(adapterInfo ?? {})} (wgpu: backend ${a.backend}, ` +
    `type ${a.device_type})`);
  console.log(`features: ${JSON.stringify(a.features)}`);
  console.log(`limits: ${JSON.stringify(a.limits)}`);
  for (const r of report.results) if (!streamed.has(r.name)) console.log(line(r));
  passed = report.results.filter((r) => r.passed).length;
  failed = report.results.length - passed;
  if (report.results.length === 0) {
    problems.push(`zero checks ran${prefix ? ` (no check name starts with "${prefix}")` : ''}`);
  }
}
for (const e of pendingGpuErrors) console.error(`error: caught by an error scope after the last check: ${e}`);
// A WebGPU error with every check passing means a check looked at the wrong thing: fail.
if (gpuErrors.length > 0 && failed === 0) {
  problems.push(`${gpuErrors.length} WebGPU errors although every check passed`);
}
for (const p of problems) console.error(`error: ${p}`);
console.log(`suite time ${seconds()} s`);
// Each problem outside the checks counts as one more failure, so this line never reads clean
// when the suite did not really run.
console.log(`${passed} passed, ${failed + problems.length} failed`);
process.exitCode = failed + problems.length > 0 ? 1 : 0;
