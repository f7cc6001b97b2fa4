#!/usr/bin/env node
// Browser benchmarks of the npm package (figures for BENCHMARKS.md; not part of the test suite):
//   1. wasm size, raw and gzip -9, against the 1.5 MB gzip budget (and the package's JS);
//   2. time from createWorkerBitNet()/load() to ready for the default model (SmolLM2-135M
//      Q4_1 converted to RDRR, served by `tritium serve-model` on loopback): cold (a fresh
//      profile, downloaded into OPFS) and warm (the page reloaded, the model read from OPFS);
//   3. browser decode tokens/s against native decode on the SAME adapter: Chromium's WebGPU runs
//      on its bundled SwiftShader Vulkan driver, and the native binary is pointed at that same
//      driver (VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json) for
//      `tritium bench generate MODEL --prompt P --decode N --ctx C`, P being the browser's prompt
//      tokens and C its KV cache length (the same work on both sides).
//      The ratio isolates the browser's overhead (WebGPU validation, Dawn, wasm, the worker).
//      The two sides alternate for --rounds rounds (browser, native, browser, native, ...) so
//      that a machine whose speed drifts (a shared VM, a build on the other core) slows both
//      alike; the figure is the median browser tokens/s over the median native tokens/s, with
//      every round's pair printed beside it.
//
//   npm run build && cargo build && node tests/browser/bench-browser.mjs [--decode N] [--rounds R] [--json]
//
// Environment: CHROMIUM, TRITIUM_PKG_DIR (default pkg/), TRITIUM_BIN (default: the newer of
// target/release/tritium and target/debug/tritium). SwiftShader runs on the CPU (about 7
// tokens/s for SmolLM2 on 2 cores): the default decodes 32 tokens; run on an idle machine.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { launch, serve } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const target = process.env.CARGO_TARGET_DIR ?? join(repo, 'target');
const pkgDir = resolve(process.env.TRITIUM_PKG_DIR ?? join(repo, 'pkg'));
const release = join(target, 'release', 'tritium');
const debug = join(target, 'debug', 'tritium');
// The newer of the release and debug builds (a stale release binary may lack commands).
const bin = process.env.TRITIUM_BIN ?? (existsSync(release) && (!existsSync(debug)
  || statSync(release).mtimeMs > statSync(debug).mtimeMs) ? release : debug);
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const swiftshaderIcd = '/usr/lib/chromium/vk_swiftshader_icd.json';
const gguf = join(repo, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const nDecode = Number(arg('decode', 32));
const rounds = Math.max(1, Number(arg('rounds', 3)));
const prompt = 'The capital of France is';
const asJson = process.argv.includes('--json');

for (const p of [join(pkgDir, 'index.js'), executablePath, bin, gguf, swiftshaderIcd]) {
  if (!existsSync(p)) {
    console.error(`missing ${p} (npm run build, cargo build, scripts/setup.sh)`);
    process.exit(1);
  }
}
const report = { machine: { cpus: cpus().length, cpu: cpus()[0]?.model }, binary: relative(repo, bin) };

// 1. Sizes.
const files = [];
const walk = (d) => {
  for (const f of readdirSync(d, { withFileTypes: true })) {
    const p = join(d, f.name);
    if (f.isDirectory()) walk(p); else files.push(p);
  }
};
walk(pkgDir);
// gzip -9 as a server would send it (GNU gzip; Node's zlib when gzip is missing, ~1.5% larger).
const gzipLength = (p, raw) => {
  try {
    return execFileSync('gzip', ['-9', '-c', p], { maxBuffer: 1 << 30 }).length;
  } catch {
    return gzipSync(raw, { level: 9 }).length;
  }
};
const size = (p) => {
  const raw = readFileSync(p);
  return { raw: raw.length, gzip: gzipLength(p, raw) };
};
const wasmFiles = files.filter((f) => f.endsWith('.wasm'));
const wasm = wasmFiles.map((f) => ({ file: relative(pkgDir, f), ...size(f) }));
const js = files.filter((f) => f.endsWith('.js')).map(size).reduce((a, b) => ({ raw: a.raw + b.raw, gzip: a.gzip + b.gzip }),
  { raw: 0, gzip: 0 });
const budget = 1.5e6;
report.size = { wasm, js, budgetGzip: budget, withinBudget: wasm.every((w) => w.gzip <= budget) };
const mb = (b) => `${(b / 1e6).toFixed(2)} MB`;
for (const w of wasm) {
  console.log(`wasm ${w.file}: ${mb(w.raw)} raw, ${mb(w.gzip)} gzip (budget ${mb(budget)} gzip: ${w.gzip <= budget ? 'within' : 'OVER'})`);
}
console.log(`package JS: ${(js.raw / 1e3).toFixed(1)} kB raw, ${(js.gzip / 1e3).toFixed(1)} kB gzip`);

// 2 and 3 need the model served.
const tmp = mkdtempSync(join(tmpdir(), 'tritium-bench-browser-'));
const model = join(tmp, 'SmolLM2-135M-Instruct-Q4_1');
execFileSync(bin, ['convert', gguf, model], { stdio: ['ignore', 'ignore', 'inherit'] });
const modelBytes = readdirSync(model).reduce((n, f) => n + statSync(join(model, f)).size, 0);
const child = spawn(bin, ['serve-model', model, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
const modelUrl = await new Promise((ok, fail) => {
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
    const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)\//);
    if (m) ok(`http://127.0.0.1:${m[1]}/`);
  });
  child.on('exit', (c) => fail(new Error(`serve-model exited ${c}: ${out}`)));
});
const { server, base } = await serve({ '/pkg/': pkgDir, '/': here }, 'bench-browser.html');
const { context, close } = await launch(executablePath);
try {
  const page = context.pages()[0] ?? await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') console.log(`  [console.error] ${m.text()}`); });
  const open = async () => {
    await page.goto(`${base}/bench-browser.html`);
    await page.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  };
  await open();
  const cold = await page.evaluate((url) => window.bench.load(url), modelUrl);
  const adapter = cold.deviceInfo?.adapter;
  console.log(`load cold (download ${mb(modelBytes)} into OPFS + GPU upload): ${(cold.ms / 1000).toFixed(2)} s; ` +
    `phases began at ${JSON.stringify(Object.fromEntries(Object.entries(cold.phases).map(([k, v]) => [k, Math.round(v)])))} ms`);
  await page.evaluate(() => window.bench.unload());
  await open();
  const warm = await page.evaluate((url) => window.bench.load(url), modelUrl);
  console.log(`load warm (page reloaded, from OPFS): ${(warm.ms / 1000).toFixed(2)} s; ` +
    `phases began at ${JSON.stringify(Object.fromEntries(Object.entries(warm.phases).map(([k, v]) => [k, Math.round(v)])))} ms`);
  report.load = { modelBytes, coldMs: cold.ms, warmMs: warm.ms, coldPhases: cold.phases, warmPhases: warm.phases };

  // One short warm-up generation compiles the pipelines; then the rounds.
  await page.evaluate(({ p }) => window.bench.decode(p, 2), { p: prompt });
  const contextLength = warm.modelInfo?.contextLength;
  const browserDecode = async () => {
    await page.evaluate(() => window.model.resetChat());
    return page.evaluate(({ p, n }) => window.bench.decode(p, n), { p: prompt, n: nDecode });
  };
  // Native on Chromium's SwiftShader, the same prompt length, decode count and cache length.
  const nativeDecode = (promptTokens) => JSON.parse(execFileSync(bin, ['bench', 'generate', model,
    '--prompt', String(promptTokens), '--decode', String(nDecode), '--batch', String(promptTokens),
    ...(contextLength ? ['--ctx', String(contextLength)] : []), '--json'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, VK_ICD_FILENAMES: swiftshaderIcd, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? tmp },
  }));
  const pairs = [];
  for (let r = 1; r <= rounds; r++) {
    const b = await browserDecode();
    const promptTokens = Math.max(1, b.usage?.promptTokens ?? 6);
    const n = nativeDecode(promptTokens);
    const pair = { browser: b.timings?.decodeTokensPerSecond, native: n.decode_tokens_per_s };
    pair.ratio = pair.browser / pair.native;
    pairs.push(pair);
    console.log(`round ${r}/${rounds}: browser (${adapter ?? '?'}) prompt ${b.usage?.promptTokens} tokens, prefill ` +
      `${b.timings?.prefillTokensPerSecond?.toFixed(2)} tok/s, decode ${b.usage?.completionTokens} tokens at ` +
      `${pair.browser?.toFixed(3)} tok/s (ttft ${b.timings?.ttftMs?.toFixed(0)} ms); native (${n.adapter}, ` +
      `context ${n.context}) prefill ${n.prefill_tokens_per_s.toFixed(2)} tok/s, decode ${n.decode_tokens} tokens at ` +
      `${pair.native.toFixed(3)} tok/s; ratio ${pair.ratio.toFixed(2)}`);
    if (r === rounds) {
      report.browser = { adapter, deviceInfo: warm.deviceInfo, ...b };
      report.native = n;
    }
  }
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const browserTps = median(pairs.map((p) => p.browser));
  const nativeTps = median(pairs.map((p) => p.native));
  const ratio = browserTps / nativeTps;
  report.rounds = pairs;
  report.ratio = ratio;
  console.log(`browser / native decode on SwiftShader: median ${browserTps.toFixed(3)} / ${nativeTps.toFixed(3)} tok/s = ` +
    `${ratio.toFixed(2)} (target >= 0.90); per round ${pairs.map((p) => p.ratio.toFixed(2)).join(', ')}`);
  await page.evaluate(() => window.bench.unload());
  await close();
  if (asJson) console.log(JSON.stringify(report, null, 1));
} finally {
  await close();
  server.close();
  child.kill();
  rmSync(tmp, { recursive: true, force: true });
}
