#!/usr/bin/env node
// The npm package (pkg/) imported by a Vite app, as users of the package write it:
//   import { BitNet } from 'tritium';
// A minimal app is written under target/vite-app/ with a copy of pkg/ as its
// node_modules/tritium (as `npm install` would put it there), then
//   (b) built with `vite build` and its dist/ served statically, and
//   (d) served by Vite's dev server (dependency pre-bundling and all);
// in headless Chromium (WebGPU) each loads SmolLM2 from a real `tritium serve-model` (the
// package finds its .wasm and its hash workers' script through `new URL(..., import.meta.url)`,
// which both must keep working): the download must hash on those workers, and the greedy tokens
// must equal native `tritium run`'s.
//
//   npm run build && cargo build && node tests/browser/run-vite.mjs
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PACKAGE_DIR (default pkg),
// TRITIUM_BIN (default target/debug/tritium), VITE_TIMEOUT_S (default 600).
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build, createServer } from 'vite';
import { checker, launch, paths, requireFiles, serve, serveModel } from './harness.mjs';

const { target, pkgDir, bin, executablePath, gguf } = paths;
const timeoutS = Number(process.env.VITE_TIMEOUT_S ?? 600);
const prompt = 'The capital of France is';
const n = 3;

const { check, summary } = checker({ timed: true });
if (!requireFiles(check, [join(pkgDir, 'index.js'), executablePath, bin, gguf])) process.exit(summary());

// The app: a page and a module that imports the package by its name.
const app = join(target, 'vite-app');
rmSync(app, { recursive: true, force: true });
mkdirSync(join(app, 'node_modules'), { recursive: true });
cpSync(pkgDir, join(app, 'node_modules', 'tritium'), { recursive: true });
writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'tritium-vite-app', private: true, type: 'module' }));
writeFileSync(join(app, 'index.html'), `<!doctype html>
<meta charset="utf-8">
<title>tritium in a Vite app</title>
<link rel="icon" href="data:,">
<script type="module" src="/main.js"></script>
`);
writeFileSync(join(app, 'main.js'), `import { BitNet, download, isSupported } from 'tritium';

// Greedy token ids of \`n\` tokens after \`prompt\`, from the model at \`url\` (downloaded
// first: the summary says whether its hash workers ran, bundled from the package).
window.greedy = async (url, prompt, n) => {
  const { hash_workers: hashWorkers, warnings } = await download(url);
  const model = await BitNet.load(url, { warmup: false, contextLength: 128 });
  const ids = [];
  for await (const ev of model.stream(prompt, { temperature: 0, maxTokens: n })) {
    if (ev.type === 'token' && ev.tokenId !== null) ids.push(ev.tokenId);
  }
  model.dispose();
  return { ids, supported: await isSupported(), hashWorkers, warnings };
};
window.__ready = true;
`);

const tmp = mkdtempSync(join(tmpdir(), 'tritium-vite-'));
const rdrr = join(tmp, 'smol');
execFileSync(bin, ['convert', gguf, rdrr], { stdio: ['ignore', 'ignore', 'inherit'] });
// Exact arithmetic natively: the f32 products and f32 KV cache SwiftShader's default runs.
const native = JSON.parse(execFileSync(bin, ['run', rdrr, '-p', prompt, '--json', '--max-tokens', String(n),
  '--temperature', '0', '--exact'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
console.log(`native: ${JSON.stringify(native.generated_ids)} ${JSON.stringify(native.text)}`);

const { url: modelUrl, child } = await serveModel(bin, rdrr);
const { context, close } = await launch(executablePath);
let devServer = null;
let distServer = null;
const cleanup = async () => {
  await close();
  await devServer?.close();
  distServer?.close();
  child.kill();
  rmSync(tmp, { recursive: true, force: true });
};
const watchdog = setTimeout(async () => { console.error(`timed out after ${timeoutS} s`); await cleanup(); process.exit(1); },
  timeoutS * 1000);

// Open `base` and generate there; the page's errors fail the check.
async function greedyAt(base, what) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(`${base}/`);
  await page.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  const r = await page.evaluate(({ url, prompt, n }) => window.greedy(url, prompt, n), { url: modelUrl, prompt, n });
  await page.close();
  check(JSON.stringify(r.ids) === JSON.stringify(native.generated_ids) && r.supported && errors.length === 0,
    `${what}: import { BitNet } from 'tritium' gives native's greedy tokens`, `${JSON.stringify(r.ids)}; ${errors.join(' | ')}`);
  check(r.hashWorkers >= 1 && r.warnings.length === 0, `${what}: the download hashed on the package's hash workers`,
    `${r.hashWorkers}; ${r.warnings.join(' | ')}`);
}

try {
  // (b) vite build, then the built files served as any static host would.
  await build({ root: app, logLevel: 'warn', build: { outDir: join(app, 'dist'), emptyOutDir: true } });
  const dist = await serve({ '/': join(app, 'dist') }, 'index.html');
  distServer = dist.server;
  await greedyAt(dist.base, 'vite build');

  // (d) the dev server.
  devServer = await createServer({ root: app, logLevel: 'warn', server: { host: '127.0.0.1', port: 0, strictPort: false } });
  await devServer.listen();
  const { port } = devServer.httpServer.address();
  await greedyAt(`http://127.0.0.1:${port}`, 'vite dev server');
} catch (e) {
  check(false, 'run', e.stack ?? String(e));
}
clearTimeout(watchdog);
await cleanup();
process.exit(summary());
