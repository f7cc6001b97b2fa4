#!/usr/bin/env node
// The static server of the demos: www/ at /, the built package pkg/ at /pkg/, and
// /config.json (the default model URL the demos load) made from the command line. Loopback
// only by default: WebGPU and OPFS need a secure context, which http://127.0.0.1 is.
//
//   node scripts/demo-server.mjs [--port 8080] [--host 127.0.0.1] [--model-url URL] [--model-name NAME]
//
// scripts/demo.sh starts it next to `tritium serve-model`; tests/browser/run-demos.mjs imports
// `startDemoServer` to run the same server in-process.
import { createServer } from 'node:http';
import { readFileSync, statSync } from 'node:fs';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(fileURLToPath(import.meta.url), '..', '..');

const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json; charset=utf-8',
  '.webmanifest': 'application/manifest+json',
  '.map': 'application/json',
  '.ts': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
};

/**
 * Start the demo server.
 * @param {object} options
 * @param {string} [options.www] folder served at / (default: the repository's www/)
 * @param {string} [options.pkg] folder served at /pkg/ (default: the repository's pkg/)
 * @param {number} [options.port] 0 picks a free port
 * @param {string} [options.host]
 * @param {object} [options.config] served as /config.json, e.g. { modelUrl, modelName }
 * @returns {Promise<{ server: import('node:http').Server, base: string, close: () => Promise<void> }>}
 */
export async function startDemoServer({ www = join(repo, 'www'), pkg = join(repo, 'pkg'), port = 0,
  host = '127.0.0.1', config = {} } = {}) {
  const mounts = [['/pkg/', resolve(pkg)], ['/', resolve(www)]];
  const configBody = Buffer.from(JSON.stringify(config, null, 2));
  const server = createServer((req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    let path;
    try {
      path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    } catch {
      res.writeHead(400).end();
      return;
    }
    const send = (status, headers, body) => {
      res.writeHead(status, headers);
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (path === '/config.json') {
      send(200, { 'content-type': types['.json'], 'cache-control': 'no-cache' }, configBody);
      return;
    }
    const [prefix, root] = mounts.find(([p]) => path.startsWith(p)) ?? [];
    if (!root) {
      send(404, { 'content-type': 'text/plain' }, 'not found');
      return;
    }
    let file = resolve(root, path.slice(prefix.length));
    if (file !== root && !file.startsWith(root + sep)) {
      send(403, { 'content-type': 'text/plain' }, 'forbidden');
      return;
    }
    try {
      let st = statSync(file);
      if (st.isDirectory()) {
        if (!path.endsWith('/')) {
          send(301, { location: `${path}/` }, '');
          return;
        }
        file = join(file, 'index.html');
        st = statSync(file);
      }
      const etag = `W/"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
      const headers = {
        'content-type': types[extname(file)] ?? 'application/octet-stream',
        // Revalidate every time (cheap on loopback): a rebuilt pkg/ is picked up at once.
        'cache-control': 'no-cache',
        etag,
      };
      if (req.headers['if-none-match'] === etag) {
        send(304, headers, '');
        return;
      }
      send(200, headers, readFileSync(file));
    } catch {
      send(404, { 'content-type': 'text/plain' }, 'not found');
    }
  });
  await new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, host, ok);
  });
  const shown = host.includes(':') ? `[${host}]` : host;
  const base = `http://${shown}:${server.address().port}`;
  const close = () => new Promise((ok) => {
    server.close(() => ok());
    server.closeAllConnections?.();
  });
  return { server, base, close };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, fallback) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
  };
  if (args.includes('--help') || args.includes('-h')) {
    console.log('usage: node scripts/demo-server.mjs [--port 8080] [--host 127.0.0.1] [--model-url URL] [--model-name NAME]');
    process.exit(0);
  }
  const config = {};
  if (opt('model-url')) config.modelUrl = opt('model-url');
  if (opt('model-name')) config.modelName = opt('model-name');
  const { base } = await startDemoServer({ port: Number(opt('port', 8080)), host: opt('host', '127.0.0.1'),
    www: opt('www', join(repo, 'www')), pkg: opt('pkg', join(repo, 'pkg')), config });
  console.log(`demos: ${base}/`);
  console.log(`  chat:  ${base}/chat/`);
  console.log(`  TL;DR: ${base}/tldr/`);
  if (config.modelUrl) console.log(`  default model: ${config.modelUrl}`);
}
