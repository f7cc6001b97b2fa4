#!/usr/bin/env node
// End to end in headless Chromium (WebGPU on SwiftShader): greedy generation from the real
// SmolLM2 GGUF must give exactly the tokens the native binary gives for the same prompt, both
// with exact arithmetic (f32 products and KV cache: the arithmetic the page and the CPU
// backend then share).
//
//   scripts/build-wasm-test.sh && node tests/browser/run-generate.mjs
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PKG_DIR, TRITIUM_BIN (the native
// binary, default target/debug/tritium), GENERATE_TIMEOUT_S (default 900).
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, serve } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const target = process.env.CARGO_TARGET_DIR ?? join(repo, 'target');
const pkgDir = resolve(process.env.TRITIUM_PKG_DIR ?? join(target, 'browser-test', 'pkg'));
const bin = process.env.TRITIUM_BIN ?? join(target, 'debug', 'tritium');
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const timeoutS = Number(process.env.GENERATE_TIMEOUT_S ?? 900);
const modelName = 'SmolLM2-135M-Instruct.Q4_1.gguf';
const prompt = 'The capital of France is';
const n = 6;

let failed = 0;
const fail = (m) => { console.error(`FAIL ${m}`); failed += 1; };
for (const p of [join(pkgDir, 'tritium_bg.wasm'), executablePath, bin, join(repo, 'models', modelName)]) {
  try { statSync(p); } catch { fail(`missing ${p} (run scripts/setup.sh, scripts/build-wasm-test.sh, cargo build)`); }
}
if (failed) { console.log(`0 passed, ${failed} failed`); process.exit(1); }

// The native reference: the CPU backend (the reference implementation), greedy, exact.
const native = JSON.parse(execFileSync(bin, ['run', join(repo, 'models', modelName), '-p', prompt,
  '--temperature', '0', '--max-tokens', String(n), '--backend', 'cpu', '--exact', '--json'],
{ encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
console.log(`native: ${JSON.stringify(native.generated_ids)} ${JSON.stringify(native.text)}`);

const { server, base } = await serve({ '/pkg/': pkgDir, '/models/': join(repo, 'models'), '/': here },
  'generate.html');
const { context, close } = await launch(executablePath);
const watchdog = setTimeout(() => { console.error('timed out'); close(); process.exit(1); },
  timeoutS * 1000);
let state = {};
try {
  const page = context.pages()[0] ?? await context.newPage();
  let broken = null;
  page.on('pageerror', (e) => { broken = `page error: ${e.message}`; });
  page.on('crash', () => { broken = 'the page crashed'; });
  page.on('console', (m) => { if (m.type() === 'error') console.log(`  [console.error] ${m.text()}`); });
  const started = Date.now();
  await page.goto(`${base}/generate.html?model=/models/${modelName}&prompt=` +
    `${encodeURIComponent(prompt)}&n=${n}&exact=1`);
  for (;;) {
    state = await page.evaluate(() => ({ done: window.__done === true, result: window.__result,
      error: window.__error }));
    if (state.done || broken) break;
    await new Promise((ok) => setTimeout(ok, 500));
  }
  if (broken) fail(broken);
  console.log(`browser run took ${((Date.now() - started) / 1000).toFixed(1)} s`);
} finally {
  clearTimeout(watchdog);
  await close();
  server.close();
}
let passed = 0;
if (state.error) fail(`generation (${state.error.code}): ${state.error.message}`);
const r = state.result;
if (r) {
  console.log(`browser (${r.adapter}): ${JSON.stringify(r.generated_ids)} ${JSON.stringify(r.text)} ` +
    `(load ${r.load_ms.toFixed(0)} ms, prefill ${r.prefill_ms.toFixed(0)} ms, decode ${r.decode_ms.toFixed(0)} ms)`);
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  if (same(r.prompt_ids, native.prompt_ids)) passed += 1; else fail(`prompt ids differ: ${JSON.stringify(r.prompt_ids)} vs ${JSON.stringify(native.prompt_ids)}`);
  if (same(r.generated_ids, native.generated_ids)) passed += 1; else fail('greedy tokens differ from native');
  if (r.generated_ids.length === n) passed += 1; else fail(`generated ${r.generated_ids.length} of ${n} tokens`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
