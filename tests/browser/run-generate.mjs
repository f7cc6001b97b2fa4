#!/usr/bin/env node
// End to end in headless Chromium (WebGPU on SwiftShader): greedy generation from the real
// SmolLM2 GGUF, and from the tiny Qwen2, Qwen3, Phi-3, Gemma 2 and Gemma 3 models of
// tests/fixtures/arch (their tokens checked against llama.cpp's by tests/arch_reference.rs),
// must give exactly the tokens the native binary gives for the same prompt, both with exact
// arithmetic (f32 products and KV cache: the arithmetic the page and the CPU backend then
// share).
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
const cases = [
  { dir: join(repo, 'models'), url: '/models/', model: 'SmolLM2-135M-Instruct.Q4_1.gguf',
    prompt: 'The capital of France is', n: 6 },
  ...['qwen2', 'qwen3', 'phi3', 'gemma2', 'gemma3'].map((arch) => ({ dir: join(repo, 'tests', 'fixtures', 'arch'),
    url: '/arch/', model: `tiny-${arch}.gguf`, prompt: 'once upon a time', n: 12 })),
];

let failed = 0;
const fail = (m) => { console.error(`FAIL ${m}`); failed += 1; };
for (const p of [join(pkgDir, 'tritium_bg.wasm'), executablePath, bin,
  ...cases.map((c) => join(c.dir, c.model))]) {
  try { statSync(p); } catch { fail(`missing ${p} (run scripts/setup.sh, scripts/build-wasm-test.sh, cargo build)`); }
}
if (failed) { console.log(`0 passed, ${failed} failed`); process.exit(1); }

const { server, base } = await serve({ '/pkg/': pkgDir, '/models/': join(repo, 'models'),
  '/arch/': join(repo, 'tests', 'fixtures', 'arch'), '/': here }, 'generate.html');
const { context, close } = await launch(executablePath);
const watchdog = setTimeout(() => { console.error('timed out'); close(); process.exit(1); },
  timeoutS * 1000);
let passed = 0;
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
try {
  for (const c of cases) {
    // The native reference: the CPU backend (the reference implementation), greedy, exact.
    const native = JSON.parse(execFileSync(bin, ['run', join(c.dir, c.model), '-p', c.prompt,
      '--temperature', '0', '--max-tokens', String(c.n), '--backend', 'cpu', '--exact', '--json'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
    console.log(`${c.model} native: ${JSON.stringify(native.generated_ids)} ${JSON.stringify(native.text)}`);
    const page = await context.newPage();
    let broken = null;
    page.on('pageerror', (e) => { broken = `page error: ${e.message}`; });
    page.on('crash', () => { broken = 'the page crashed'; });
    page.on('console', (m) => { if (m.type() === 'error') console.log(`  [console.error] ${m.text()}`); });
    const started = Date.now();
    await page.goto(`${base}/generate.html?model=${c.url}${c.model}&prompt=` +
      `${encodeURIComponent(c.prompt)}&n=${c.n}&exact=1`);
    let state = {};
    for (;;) {
      state = await page.evaluate(() => ({ done: window.__done === true, result: window.__result,
        error: window.__error }));
      if (state.done || broken) break;
      await new Promise((ok) => setTimeout(ok, 500));
    }
    await page.close();
    if (broken) fail(`${c.model}: ${broken}`);
    console.log(`${c.model}: browser run took ${((Date.now() - started) / 1000).toFixed(1)} s`);
    if (state.error) fail(`${c.model}: generation (${state.error.code}): ${state.error.message}`);
    const r = state.result;
    if (!r) continue;
    console.log(`${c.model} browser (${r.adapter}): ${JSON.stringify(r.generated_ids)} ` +
      `${JSON.stringify(r.text)} (load ${r.load_ms.toFixed(0)} ms, prefill ` +
      `${r.prefill_ms.toFixed(0)} ms, decode ${r.decode_ms.toFixed(0)} ms)`);
    if (same(r.prompt_ids, native.prompt_ids)) passed += 1;
    else fail(`${c.model}: prompt ids differ: ${JSON.stringify(r.prompt_ids)} vs ${JSON.stringify(native.prompt_ids)}`);
    if (same(r.generated_ids, native.generated_ids)) passed += 1;
    else fail(`${c.model}: greedy tokens differ from native`);
    // The tiny models may stop on their end-of-turn token; SmolLM2 must not, within n.
    if (r.generated_ids.length === native.generated_ids.length) passed += 1;
    else fail(`${c.model}: generated ${r.generated_ids.length} tokens, native ${native.generated_ids.length}`);
  }
} finally {
  clearTimeout(watchdog);
  await close();
  server.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
