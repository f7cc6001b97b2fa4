// Shared by the browser test runners: a static file server on 127.0.0.1 (WebGPU and OPFS need
// a secure context) and headless Chromium with WebGPU (SwiftShader), recipes from
// environment.md.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { extname, join, resolve, sep } from 'node:path';
import { chromium } from 'playwright-core';

const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
  '.map': 'application/json',
  '.ts': 'text/plain; charset=utf-8',
};

// Serve `mounts` (URL prefix -> folder, longest prefix wins; '/' for the rest); `index` for
// '/'. Resolves to { server, base } with base like http://127.0.0.1:PORT.
export async function serve(mounts, index) {
  const entries = Object.entries(mounts).sort((a, b) => b[0].length - a[0].length);
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const [prefix, root] = entries.find(([p]) => path.startsWith(p)) ?? ['/', null];
    const rel = path.slice(prefix.length);
    let body;
    try {
      if (!root) throw new Error('no such mount');
      const file = resolve(root, rel || index);
      if (!file.startsWith(resolve(root) + sep)) throw new Error('outside the served folders');
      body = readFileSync(file);
      res.writeHead(200, {
        'content-type': types[extname(file)] ?? 'application/octet-stream',
        'cache-control': 'no-store',
      }).end(body);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { server, base: `http://127.0.0.1:${server.address().port}` };
}

// Headless Chromium with WebGPU in a fresh profile; `close()` also removes the profile.
export async function launch(executablePath) {
  const userDataDir = mkdtempSync(join(tmpdir(), 'tritium-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-quic',
      '--no-first-run', '--disable-background-networking', '--disable-component-update',
      '--disable-sync'],
  });
  const close = async () => {
    await context.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  };
  return { context, close };
}

// `tritium serve-model DIR --port 0` (the binary `bin`): resolves to { url, child } once it
// prints its port. The caller kills `child`.
export function serveModel(bin, dir) {
  const child = spawn(bin, ['serve-model', dir, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => { child.kill(); fail(new Error(`serve-model printed no port: ${out}`)); }, 30000);
    const look = (d) => {
      out += d;
      const m = out.match(/https?:\/\/(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)/);
      if (m) { clearTimeout(timer); ok({ url: `http://127.0.0.1:${m[1]}/`, child }); }
    };
    child.stdout.on('data', look);
    child.stderr.on('data', look);
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`serve-model exited (${code}): ${out}`)); });
  });
}

// A test runner's checks: `check(ok, what, detail)` prints `ok` or `FAIL` (with seconds since
// the start when `timed`) and counts; `summary()` prints the totals and returns the exit code.
export function checker({ timed = false } = {}) {
  const t0 = Date.now();
  const counts = { passed: 0, failed: 0 };
  const at = () => (timed ? `[${((Date.now() - t0) / 1000).toFixed(0)} s] ` : '');
  const check = (ok, what, detail = '') => {
    if (ok) {
      counts.passed += 1;
      console.log(`ok   ${at()}${what}`);
    } else {
      counts.failed += 1;
      console.error(`FAIL ${at()}${what}${detail ? `: ${detail}` : ''}`);
    }
    return ok;
  };
  const summary = () => {
    console.log(`${counts.passed} passed, ${counts.failed} failed`);
    return counts.failed ? 1 : 0;
  };
  return { check, counts, summary };
}

// Where the package runners find things: the repository, cargo's target folder, the built
// package (TRITIUM_PACKAGE_DIR, default pkg/), the tritium binary (TRITIUM_BIN, default the
// debug build), Chromium (CHROMIUM) and the default model's GGUF.
const repoDir = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const targetDir = process.env.CARGO_TARGET_DIR ?? join(repoDir, 'target');
export const paths = {
  repo: repoDir,
  target: targetDir,
  pkgDir: resolve(process.env.TRITIUM_PACKAGE_DIR ?? join(repoDir, 'pkg')),
  bin: process.env.TRITIUM_BIN ?? join(targetDir, 'debug', 'tritium'),
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  gguf: join(repoDir, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf'),
};

// Fail `check` for each of `files` that does not exist; true when all do.
export function requireFiles(check, files) {
  let ok = true;
  for (const p of files) {
    if (!existsSync(p)) ok = check(false, `missing ${p} (run scripts/setup.sh, npm run build, cargo build)`) && ok;
  }
  return ok;
}
