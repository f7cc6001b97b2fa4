// CORS of `tritium serve` from a real page: headless Chromium loads a page from one loopback
// origin and calls the server, listening on another port, with fetch. From the origin given as
// `--cors-origin`, a streamed chat with the key (a preflighted request: `Authorization` and a
// JSON content type) goes through and its text equals `EXPECTED` (the CLI's greedy text), and
// a request without the key gets a 401 the page can read. From another origin the browser
// refuses both a preflighted request and a simple one (TypeError in the page) and the
// preflighted POST never reaches the server (its /metrics count).
//
// Usage: node tests/browser/run-serve-cors.mjs PROMPT MAX_TOKENS EXPECTED
// Environment: TRITIUM_BIN (default target/debug/tritium), CHROMIUM (default /usr/bin/chromium).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checker, launch, paths, serve } from './harness.mjs';

const [prompt, maxTokens, expected] = process.argv.slice(2);
const { check, summary } = checker();
const MODEL = 'SmolLM2-135M-Instruct.Q4_1';
const KEY = 's3cret';

const pageDir = mkdtempSync(join(tmpdir(), 'tritium-cors-page-'));
const store = mkdtempSync(join(tmpdir(), 'tritium-cors-store-'));
writeFileSync(join(pageDir, 'index.html'), '<!doctype html><meta charset="utf-8"><title>cors</title>');
const allowed = await serve({ '/': pageDir }, 'index.html');
const other = await serve({ '/': pageDir }, 'index.html');

// The server, allowing only the first page's origin.
const child = spawn(paths.bin, ['serve', paths.gguf, '--backend', 'cpu', '--port', '0', '--store', store,
  '--api-key', KEY, '--cors-origin', allowed.base], { stdio: ['ignore', 'pipe', 'pipe'] });
let log = '';
const api = await new Promise((ok, fail) => {
  const timer = setTimeout(() => fail(new Error(`tritium serve printed no URL: ${log}`)), 120000);
  const look = (d) => {
    log += d;
    const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)\//);
    if (m) { clearTimeout(timer); ok(m[1]); }
  };
  child.stdout.on('data', look);
  child.stderr.on('data', (d) => { log += d; });
  child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`tritium serve exited (${code}): ${log}`)); });
});

const metric = async (line) => {
  const text = await (await fetch(`${api}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
  const found = text.split('\n').find((l) => l.startsWith(line + ' '));
  return found ? Number(found.slice(line.length + 1)) : 0;
};
const postCount = (status) =>
  metric(`tritium_requests_total{method="POST",route="/v1/chat/completions",status="${status}"}`);
const preflights = () =>
  metric('tritium_requests_total{method="OPTIONS",route="/v1/chat/completions",status="200"}');

// In the page: a streamed chat read chunk by chunk; its text, the SSE events and the status.
async function streamChat({ api, key, body }) {
  const headers = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  try {
    const r = await fetch(`${api}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (!r.ok) return { status: r.status, body: await r.text() };
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let raw = '';
    let reads = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      raw += value;
      reads += 1;
    }
    const events = raw.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
    let text = '';
    let finish = null;
    for (const e of events.slice(0, -1)) {
      const c = JSON.parse(e);
      text += c.choices[0]?.delta?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    return { status: r.status, text, finish, last: events.at(-1), reads };
  } catch (e) {
    return { error: `${e.name}: ${e.message}` };
  }
}

async function simpleGet({ api }) {
  try {
    const r = await fetch(`${api}/health`);
    return { status: r.status };
  } catch (e) {
    return { error: `${e.name}: ${e.message}` };
  }
}

const { context, close } = await launch(paths.executablePath);
let code = 1;
try {
  const body = { model: MODEL, messages: [{ role: 'user', content: prompt }], temperature: 0,
    max_tokens: Number(maxTokens), stream: true };
  const page = await context.newPage();
  await page.goto(`${allowed.base}/`);
  const before = await preflights();
  const r = await page.evaluate(streamChat, { api, key: KEY, body });
  check(r.status === 200, 'allowed origin: the streamed chat is answered', JSON.stringify(r));
  check(r.text === expected, 'allowed origin: its text is the CLI\'s greedy text',
    `${JSON.stringify(r.text)} != ${JSON.stringify(expected)}`);
  check(r.last === '[DONE]' && ['stop', 'length'].includes(r.finish), 'allowed origin: finish_reason and [DONE]',
    JSON.stringify(r));
  check(await preflights() > before, 'allowed origin: the browser sent a preflight first');
  const noKey = await page.evaluate(streamChat, { api, key: null, body });
  check(noKey.status === 401 && JSON.parse(noKey.body).error.message, 'allowed origin, no key: a readable 401',
    JSON.stringify(noKey));

  const health = await page.evaluate(simpleGet, { api });
  check(health.status === 200, 'allowed origin: a simple GET is readable', JSON.stringify(health));

  const posts = await postCount(200);
  const page2 = await context.newPage();
  await page2.goto(`${other.base}/`);
  const refused = await page2.evaluate(streamChat, { api, key: KEY, body });
  check(refused.error?.startsWith('TypeError'), 'other origin: the browser refuses the preflighted request',
    JSON.stringify(refused));
  check(await postCount(200) === posts, 'other origin: the POST never reached the server');
  const simple = await page2.evaluate(simpleGet, { api });
  check(simple.error?.startsWith('TypeError'), 'other origin: the browser refuses a simple GET\'s response',
    JSON.stringify(simple));
  code = summary();
} finally {
  await close();
  child.kill();
  allowed.server.close();
  other.server.close();
  rmSync(pageDir, { recursive: true, force: true });
  rmSync(store, { recursive: true, force: true });
}
process.exit(code);
