#!/usr/bin/env node
// Model delivery into OPFS in headless Chromium, against real `tritium serve-model` servers
// serving SmolLM2 converted to RDRR by `tritium convert`:
//   (e) a quota too small: QuotaExceeded naming the bytes, nothing written to OPFS;
//   (a) download into OPFS with progress events;
//   (b) greedy tokens of the cached model (loaded tensor by tensor in a worker) equal the
//       native CPU greedy tokens (`tritium run --backend cpu --json` on the same folder);
//   (c) a second page load uses the cache: no request reaches the model server;
//   (d) a corrupted shard: IntegrityError naming it, the model never listed as complete;
//   (f) a download aborted mid-shard (AbortSignal) resumes with a Range request and never
//       fetches a verified shard again (on the main thread and in a worker);
//   (g) a single GGUF file downloads (SHA-256 checked) and runs from OPFS;
//   (h) hash workers that cannot start: the download hashes in its own thread, with a warning;
//   (i) a hash worker that goes silent: a clear error, verified shards kept, and a resume.
// Downloads hash on the package's hash workers (js/hash-pool.js) unless a check says not.
// With --bench: SHA-256/BLAKE3 hashing throughput in wasm, and fetch+verify+store into OPFS
// from the loopback server as a fraction of it.
//
//   cargo build && scripts/build-wasm-test.sh && node tests/browser/run-delivery.mjs [--bench]
//
// Environment: CHROMIUM (default /usr/bin/chromium), TRITIUM_PKG_DIR, TRITIUM_BIN (default
// target/debug/tritium), DELIVERY_TIMEOUT_S (default 900); for --bench only, BENCH_GGUF (another
// model to convert and download, e.g. one from `tritium synth`), BENCH_SHARD_SIZE (default
// 16MB), BENCH_SHA256_ONLY (no BLAKE3 download runs), BENCH_FETCH_WORKERS (the fetch alone
// also from several workers: "2x2,4x1" is 2 workers of 2 fetches each, then 4 of 1),
// BENCH_BLAKE3_ONLY (no SHA-256 runs), BENCH_DOWNLOADS (the download runs to make, as
// where:hashWorkers, where main, worker or worker-hash-only: "worker:8,main:8"; default all),
// BENCH_PROTO_WORKERS (a prototype of the download spread over workers, configured the same
// way), BENCH_PROTO_VARIANTS (comma-separated variants of the prototype, each '+'-joined flags:
// nohash, nowrite, prealloc, buf<KiB>; see delivery-worker.mjs; empty: as it is) and BENCH_FETCH_ONLY (stop after the hashing, fetch and prototype figures).
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import { createHash } from 'node:crypto';
import { closeSync, cpSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync, writeSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, serve, serveModel as serveModelAt } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const target = process.env.CARGO_TARGET_DIR ?? join(repo, 'target');
const pkgDir = resolve(process.env.TRITIUM_PKG_DIR ?? join(target, 'browser-test', 'pkg'));
const bin = process.env.TRITIUM_BIN ?? join(target, 'debug', 'tritium');
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const timeoutS = Number(process.env.DELIVERY_TIMEOUT_S ?? 900);
const benchMode = process.argv.includes('--bench');
const gguf = resolve(benchMode && process.env.BENCH_GGUF ? process.env.BENCH_GGUF
  : join(repo, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf'));
const shardSize = (benchMode && process.env.BENCH_SHARD_SIZE) || '16MB';
const prompt = 'The capital of France is';
// Prefill and two decode steps: SwiftShader takes ~20 s per decode step of SmolLM2.
const n = 3;

let passed = 0;
let failed = 0;
const check = (ok, what, detail = '') => {
  if (ok) { passed += 1; console.log(`ok   ${what}`); } else { failed += 1; console.error(`FAIL ${what}${detail ? `: ${detail}` : ''}`); }
  return ok;
};
for (const p of [join(pkgDir, 'tritium_bg.wasm'), executablePath, bin, gguf]) {
  try { statSync(p); } catch { check(false, `missing ${p} (run scripts/setup.sh, scripts/build-wasm-test.sh, cargo build)`); }
}
if (failed) { console.log(`0 passed, ${failed} failed`); process.exit(1); }

const tmp = mkdtempSync(join(tmpdir(), 'tritium-delivery-'));
const children = [];
const proxies = [];
const cleanup = () => {
  for (const c of children) c.kill();
  for (const p of proxies) {
    p.closeAllConnections?.();
    p.close();
  }
  rmSync(tmp, { recursive: true, force: true });
};

// `tritium convert` with 16 MiB shards: SmolLM2 Q4_1 (98 MB) gives 6 or 7 shards, enough for
// a download to be interrupted between and inside them.
const convert = (out, extra = []) => execFileSync(bin, ['convert', gguf, out, '--shard-size', shardSize, ...extra],
  { stdio: ['ignore', 'ignore', 'inherit'] });
const good = join(tmp, 'smol');
convert(good);
const files = Object.fromEntries(readdirSync(good).map((f) => [f, statSync(join(good, f)).size]));
const shards = Object.keys(files).filter((f) => /^shard_\d+\.bin$/.test(f)).sort();
const largestTensor = Math.max(...Object.values(JSON.parse(readFileSync(join(good, 'tensors.json'), 'utf8')))
  .map((t) => t.size));

// A proxy on loopback in front of the model server at `target` that, for the first GET of
// `file` without a Range header, passes on the headers and the first `cut` bytes of the body,
// then sends nothing more (the client's abort ends it): a download is then certain to be in
// the middle of that file when it is aborted, however fast its workers run. Resolves to the
// proxy's base URL.
async function stallingProxy(target, file, cut) {
  const to = new URL(target);
  let stalled = false;
  const server = http.createServer((req, res) => {
    const stall = !stalled && req.method === 'GET' && !req.headers.range && req.url.endsWith(`/${file}`);
    if (stall) stalled = true;
    const up = http.request({ host: to.hostname, port: to.port, path: req.url, method: req.method,
      headers: { ...req.headers, host: to.host } }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      if (!stall) {
        r.pipe(res);
        return;
      }
      let sent = 0;
      r.on('data', (c) => {
        const n = Math.min(c.length, cut - sent);
        if (n > 0) res.write(c.subarray(0, n));
        sent += n;
        if (sent >= cut) r.pause();
      });
    });
    up.on('error', () => res.destroy());
    res.on('close', () => up.destroy());
    req.pipe(up);
  });
  proxies.push(server);
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return `http://127.0.0.1:${server.address().port}${to.pathname}`;
}

// `tritium serve-model DIR --port 0`: the URL it serves (the server is killed at the end).
async function serveModel(dir) {
  const { url, child } = await serveModelAt(bin, dir);
  children.push(child);
  return url;
}

// js/ is the package's hand-written JS (its hash workers); js/wasm/ is where the package keeps
// the wasm-bindgen output, here this build's.
const { server: pageServer, base } = await serve({ '/pkg/': pkgDir, '/js/wasm/': pkgDir, '/js/': join(repo, 'js'),
  '/models/': join(repo, 'models'), '/': here }, 'delivery.html');
const { context, close } = await launch(executablePath);
const watchdog = setTimeout(async () => { console.error('timed out'); await close(); cleanup(); process.exit(1); },
  timeoutS * 1000);

// Every request the browser makes, with its Range header.
const requests = [];
context.on('request', (r) => requests.push({ url: r.url(), method: r.method(), range: r.headers().range ?? null }));
// GET requests only (not CORS preflights).
const requestsTo = (origin) => requests.filter((r) => r.url.startsWith(origin) && r.method === 'GET');
const shardOf = (url) => url.split('/').pop();

let page;
async function openPage() {
  page = context.pages()[0] ?? await context.newPage();
  page.on('pageerror', (e) => check(false, 'page error', e.message));
  page.on('console', (m) => { if (m.type() === 'error') console.log(`  [console.error] ${m.text()}`); });
  await page.goto(`${base}/delivery.html`);
  await page.waitForFunction(() => window.__ready === true, null, { timeout: 60000 });
  const err = await page.evaluate(() => window.__error);
  if (err) throw new Error(`page: ${err.message}`);
}
const evaluate = (fn, arg) => page.evaluate(fn, arg);
const tree = () => evaluate(() => window.api.opfsTree());

try {
  await openPage();
  const goodUrl = await serveModel(good);
  const origin = new URL(goodUrl).origin;

  if (benchMode) {
    const b3 = join(tmp, 'smol-b3');
    convert(b3, ['--blake3']);
    const b3Url = await serveModel(b3);
    // CPU time between the page's marks: the whole machine's (/proc/stat), the model servers'
    // and the browser's processes' (/proc/PID/stat), in cores kept busy on average.
    const tick = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })) || 100;
    const servers = new Set(children.map((c) => c.pid));
    const snap = () => {
      const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
      const s = { t: performance.now(), machine: f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] ?? 0), server: 0, browser: 0 };
      for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
        let text;
        try { text = readFileSync(`/proc/${pid}/stat`, 'utf8'); } catch { continue; }
        const comm = text.slice(text.indexOf('(') + 1, text.lastIndexOf(')'));
        const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
        const ticks = Number(rest[11]) + Number(rest[12]);
        if (servers.has(Number(pid))) s.server += ticks;
        else if (/chrom|headless/i.test(comm)) s.browser += ticks;
      }
      return s;
    };
    let last = snap();
    await page.exposeFunction('cpuMark', () => {
      const now = snap();
      const seconds = (now.t - last.t) / 1000;
      const cores = (ticks) => ticks / tick / seconds;
      const d = { seconds, cores: os.cpus().length, machine_busy: cores(now.machine - last.machine),
        server: cores(now.server - last.server), browser: cores(now.browser - last.browser) };
      last = now;
      return d;
    });
    // Workers x fetches (or shards) at once per worker, for BENCH_FETCH_WORKERS and
    // BENCH_PROTO_WORKERS (see the top).
    const configs = (v) => (v ?? '').split(',').filter(Boolean).map((c) => c.split('x').map(Number));
    const fetchWorkers = configs(process.env.BENCH_FETCH_WORKERS);
    const protoWorkers = configs(process.env.BENCH_PROTO_WORKERS);
    const r = await evaluate(([models, opts]) => window.api.bench(models, opts), [[
      ...(process.env.BENCH_BLAKE3_ONLY ? [] : [{ url: goodUrl, algorithm: 'sha256' }]),
      ...(process.env.BENCH_SHA256_ONLY ? [] : [{ url: b3Url, algorithm: 'blake3' }])],
    { fetchOnly: Boolean(process.env.BENCH_FETCH_ONLY), fetchWorkers, protoWorkers,
      protoVariants: (process.env.BENCH_PROTO_VARIANTS ?? '').split(','),
      downloads: process.env.BENCH_DOWNLOADS ? process.env.BENCH_DOWNLOADS.split(',') : null }]);
    console.log(JSON.stringify(r, null, 1));
    if (r.error) check(false, 'bench', r.error.message);
    for (const where of ['main', 'worker']) {
      for (const alg of ['sha256', 'blake3']) {
        if (r.hash) console.log(`hash ${alg} (${where}): ${r.hash[where][alg].mb_per_s.toFixed(0)} MB/s at the start, ` +
          `${r.hash_end[where][alg].mb_per_s.toFixed(0)} at the end`);
      }
    }
    if (r.hashing) console.log(`plain hashing, the fastest of those: SHA-256 ${r.hashing.sha256.toFixed(0)} MB/s, BLAKE3 ${r.hashing.blake3.toFixed(0)} MB/s (100%)`);
    const busy = (c) => (c ? `; CPU ${c.machine_busy.toFixed(2)} of ${c.cores} cores busy (model server ` +
      `${c.server.toFixed(2)}, browser ${c.browser.toFixed(2)})` : '');
    if (r.fetch_only) console.log(`fetch only (worker, JS reader, nothing hashed or stored): ${r.fetch_only.mb_per_s.toFixed(0)} MB/s${busy(r.fetch_only.cpu)}`);
    for (const f of r.fetch_only_workers ?? []) {
      console.log(`fetch only, ${f.workers} workers x ${f.parallel} fetches: ${f.mb_per_s.toFixed(0)} MB/s${busy(f.cpu)}`);
    }
    for (const f of r.proto ?? []) {
      console.log(`prototype ${f.algorithm}${f.variant ? ` [${f.variant}]` : ''}, ${f.workers} workers x ${f.parallel} shards (fetch, write, hash; no groups): ` +
        `${f.mb_per_s.toFixed(0)} MB/s = ${(100 * f.fraction_of_hashing).toFixed(0)}% of plain hashing${busy(f.cpu)}`);
    }
    for (const d of r.download ?? []) {
      const pct = (x) => `${(100 * x).toFixed(0)}%`;
      console.log(`fetch+verify+store ${d.algorithm}${d.checkGroups ? ' + groups' : ''} (${d.where}, ${d.writer}, ` +
        `${d.hashWorkers} hash workers): ` +
        `${d.mb_per_s.toFixed(0)} MB/s end to end = ${pct(d.fraction_of_hashing)} of plain hashing, ` +
        `${pct(d.fraction_of_fetch_only)} of fetch alone; streaming phase ${d.streaming_mb_per_s.toFixed(0)} MB/s = ` +
        `${pct(d.streaming_fraction_of_hashing)} of plain hashing; setup ${(1e3 * d.setup_s).toFixed(0)} ms ` +
        `(hash workers' start ${d.pool_start_ms == null ? '-' : d.pool_start_ms.toFixed(0)} ms), ` +
        `finish ${(1e3 * d.finish_s).toFixed(0)} ms of ${(1e3 * d.seconds).toFixed(0)}${busy(d.cpu)}`);
    }
  } else {
    // Exact arithmetic natively: the f32 products and f32 KV cache SwiftShader's default runs (no
    // integer-dot decode there, a small cache), so the two compute the same thing.
    const native = JSON.parse(execFileSync(bin, ['run', good, '-p', prompt, '--temperature', '0',
      '--max-tokens', String(n), '--backend', 'cpu', '--exact', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
    console.log(`native: ${JSON.stringify(native.generated_ids)} ${JSON.stringify(native.text)}`);

    // (e) Quota: the estimate says 1 MB is left; the model needs ~98 MB.
    const quota = await evaluate((url) => window.api.withQuota(1_000_000, () =>
      window.api.download(url, { name: 'smol' })), goodUrl);
    check(quota.error?.code === 'QuotaExceeded', '(e) a too small quota gives QuotaExceeded', JSON.stringify(quota.error));
    check(quota.error?.needed > 90e6 && quota.error?.available === 1_000_000
      && /\d{8,} more bytes/.test(quota.error.message) && quota.error.message.includes('1000000'),
    '(e) the error names the bytes needed and available', quota.error?.message);
    check((await tree()).length === 0, '(e) nothing was written to OPFS', JSON.stringify(await tree()));
    check(!requestsTo(origin).some((r) => shards.includes(shardOf(r.url))), '(e) no shard was requested');

    // (a) Download with progress events, in a worker (sync access handles), hashed on one of
    // the package's hash workers (js/hash-pool.js).
    const a = await evaluate((url) => window.api.downloadInWorker(url, { name: 'smol', parallel: 3, groupBuffer: 0 }),
      goodUrl);
    check(!a.error, '(a) download into OPFS in a worker', JSON.stringify(a.error));
    check(a.summary?.hash_workers === 1 && a.summary.warnings.length === 0, '(a) hashed on a hash worker',
      JSON.stringify(a.summary));
    // Its SHA-256 groups straddle shards fetched at once: the bytes that arrive before their
    // turn wait on the hash worker (none in wasm memory: groupBuffer 0), so every group is
    // checked as it streams, none read back.
    check(a.summary?.groups_checked > 0 && a.summary.group_read_back_bytes === 0,
      '(a) every group checked as the shards stream (early bytes held on the hash worker), none read back',
      JSON.stringify(a.summary));
    const ev = a.events;
    const progress = ev.filter((e) => e.type === 'progress');
    const planned = ev.find((e) => e.type === 'planned');
    check(planned?.files === shards.length, `(a) planned ${shards.length} shards`, JSON.stringify(planned));
    check(progress.length >= 2 && progress.every((p, i) => i === 0 || p.done >= progress[i - 1].done),
      `(a) ${progress.length} progress events, bytes done never decreasing`);
    const last = progress.at(-1);
    check(last && last.done === last.total && last.total === planned?.total_bytes,
      '(a) the last progress event has every byte', JSON.stringify(last));
    const verified = ev.filter((e) => e.type === 'fileVerified');
    check(verified.length === shards.length && verified.at(-1).files_done === shards.length
      && verified.at(-1).files_total === shards.length, '(a) every shard verified, counted to n of n');
    check(progress.some((p) => p.rate > 0 && p.eta_s !== null && p.shard >= 1 && p.shards === shards.length),
      '(a) progress carries rate, ETA and shard i of n');
    const started = new Set(ev.filter((e) => e.type === 'fileStarted').map((e) => e.index));
    check(started.size === shards.length, '(a) every shard started once');
    const listed = await evaluate(() => window.api.wasm.opfs_list());
    check(listed.length === 1 && listed[0].name === 'smol' && listed[0].shards === shards.length,
      '(a) the model is listed complete', JSON.stringify(listed));
    const stored = Object.fromEntries((await tree()).filter((f) => f.path.startsWith('tritium/models/smol/files/'))
      .map((f) => [f.path.split('/').pop(), f.size]));
    check(Object.entries(stored).every(([f, size]) => files[f] === size) && shards.every((s) => stored[s] === files[s]),
      '(a) every stored file has the size of the served one', JSON.stringify(stored));
    console.log(`  downloaded ${a.summary.bytes} bytes in ${a.summary.seconds.toFixed(2)} s ` +
      `(${(a.summary.fetched_bytes / a.summary.seconds / 1e6).toFixed(0)} MB/s, persisted: ${a.summary.persisted})`);

    // (a) The same model with BLAKE3 hashes, three shards at once, on two hash workers: its
    // groups (all over 1 MiB) are hashed as subtrees while the shards stream (spread over both
    // workers), nothing read back, each against the hash the converter wrote; then it goes
    // again.
    const b3 = join(tmp, 'smol-b3');
    convert(b3, ['--blake3']);
    const b3Url = await serveModel(b3);
    const b3d = await evaluate((url) => window.api.downloadInWorker(url, { name: 'smol-b3', parallel: 3, hashWorkers: 2 }), b3Url);
    check(!b3d.error && b3d.summary?.groups_checked > 0 && b3d.summary?.group_read_back_bytes === 0
      && b3d.summary.hash_workers === 2,
    '(a) a BLAKE3 model downloads in a worker on two hash workers, every group checked as it streams',
    JSON.stringify(b3d.error ?? b3d.summary));
    await evaluate((name) => window.api.wasm.opfs_delete(name), 'smol-b3');

    // (b, c) A second page load: the cache answers, no request reaches the model server.
    await openPage();
    requests.length = 0;
    const again = await evaluate((url) => window.api.download(url, { name: 'smol' }), goodUrl);
    check(again.summary?.already_present === true, '(c) downloading again finds the cached model', JSON.stringify(again.error ?? again.summary));
    const onMain = await evaluate(() => window.api.wasm.opfs_generate_greedy('smol', 'x', 1, 16)
      .then(() => null, (e) => window.api.plain(e)));
    check(onMain?.code === 'NeedsWorker', 'loading from OPFS on the main thread gives NeedsWorker', JSON.stringify(onMain));
    const gen = await evaluate(({ p, k }) => window.api.generateInWorker('smol', p, k), { p: prompt, k: n });
    check(!gen.error, '(b) generation from the cached model in a worker', JSON.stringify(gen.error));
    const r = gen.result;
    if (r) {
      console.log(`  browser (${r.adapter}): ${JSON.stringify(r.generated_ids)} ${JSON.stringify(r.text)} ` +
        `(load ${r.load_ms.toFixed(0)} ms, prefill ${r.prefill_ms.toFixed(0)} ms, decode ${r.decode_ms.toFixed(0)} ms)`);
      const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;
      console.log(`  wasm memory: ${mib(r.wasm_memory_before)} before, ${mib(r.wasm_memory_after_open)} with ` +
        `metadata and tokenizer, ${mib(r.wasm_memory_after_load)} after load, ` +
        `${mib(r.wasm_memory_after_generate)} after generating; model ${mib(r.model_bytes)}`);
      const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);
      check(same(r.prompt_ids, native.prompt_ids), '(b) prompt ids equal native', `${r.prompt_ids} vs ${native.prompt_ids}`);
      check(same(r.generated_ids, native.generated_ids) && r.generated_ids.length === n,
        '(b) greedy tokens equal native CPU greedy tokens', `${r.generated_ids} vs ${native.generated_ids}`);
      // Streaming tensor by tensor: wasm memory (which only grows, so its size is its peak)
      // holds the metadata, the tokenizer and one tensor at a time (uploaded in 4 MiB pieces),
      // never the model. Bounds: loading adds at most the largest tensor plus 12 MiB (pieces
      // and allocator slack); the peak stays under 60% of the model (SmolLM2's embedding alone
      // is 30% of it).
      check(r.wasm_memory_after_load - r.wasm_memory_after_open <= largestTensor + 12 * 2 ** 20,
        '(b) loading adds no more wasm memory than the largest tensor plus 12 MiB',
        `${mib(r.wasm_memory_after_load - r.wasm_memory_after_open)} vs ${mib(largestTensor)}`);
      check(r.wasm_memory_after_generate < 0.6 * r.model_bytes,
        '(b) peak wasm memory stays under 60% of the model size', `${mib(r.wasm_memory_after_generate)} vs ${mib(r.model_bytes)}`);
    }
    check(requestsTo(origin).length === 0, '(c) the second page load made no request to the model server',
      JSON.stringify(requestsTo(origin).map((q) => q.url)));

    // (d) A corrupted shard: one byte flipped in the middle of the third shard.
    const bad = join(tmp, 'smol-bad');
    cpSync(good, bad, { recursive: true });
    const victim = shards[Math.min(2, shards.length - 1)];
    const fd = openSync(join(bad, victim), 'r+');
    const at = Math.floor(files[victim] / 2);
    const byte = Buffer.alloc(1);
    readSync(fd, byte, 0, 1, at);
    byte[0] ^= 0x01;
    writeSync(fd, byte, 0, 1, at);
    closeSync(fd);
    const badUrl = await serveModel(bad);
    requests.length = 0;
    const d = await evaluate((url) => window.api.download(url, { name: 'smol-bad', parallel: 2 }), badUrl);
    check(d.error?.code === 'IntegrityError' && d.error.message.includes(victim) && d.error.expected !== d.error.actual,
      '(d) a corrupted shard gives IntegrityError naming it and both hashes', JSON.stringify(d.error));
    const badFetches = requestsTo(new URL(badUrl).origin).filter((q) => shardOf(q.url) === victim).length;
    check(badFetches === 2, '(d) the corrupted shard was fetched once more before failing', `${badFetches} requests`);
    const afterBad = await evaluate(() => window.api.wasm.opfs_list());
    check(!afterBad.some((m) => m.name === 'smol-bad'), '(d) the model is not listed as complete', JSON.stringify(afterBad));
    const partialBad = await evaluate(() => window.api.wasm.opfs_list_partial());
    const pb = partialBad.find((m) => m.name === 'smol-bad');
    check(pb && !(victim in pb.verified), '(d) it stays a partial download without the bad shard', JSON.stringify(pb));

    // (f) Abort in the middle of the second shard, then resume: on the main thread and in a
    // worker (the shards fetched and written on the hash worker either way). The second shard's
    // first request stalls after half of it (stallingProxy), so the abort, made once a third of
    // it is in, lands inside it.
    for (const where of ['main', 'worker']) {
      const name = `smol-resume-${where}`;
      const fUrl = await stallingProxy(goodUrl, shards[1], Math.floor(files[shards[1]] / 2));
      const fOrigin = new URL(fUrl).origin;
      const run = (abortAt) => evaluate(({ url, name, where, abortAt }) => {
        const options = { name, parallel: 1, progressIntervalMs: 0 };
        return where === 'main'
          ? window.api.download(url, options, abortAt ? (e) => e.type === 'progress' && e.done >= abortAt : null)
          : window.api.downloadInWorker(url, options, abortAt);
      }, { url: fUrl, name, where, abortAt });
      requests.length = 0;
      const f1 = await run(files[shards[0]] + Math.floor(files[shards[1]] / 3));
      check(f1.error?.code === 'AbortError', `(f, ${where}) the download aborted`, JSON.stringify(f1.error));
      const partial = (await evaluate(() => window.api.wasm.opfs_list_partial())).find((m) => m.name === name);
      check(partial && partial.verified[shards[0]] && !partial.verified[shards[1]],
        `(f, ${where}) the first shard stays verified, the second is not`, JSON.stringify(partial));
      const kept = (await tree()).find((f) => f.path === `tritium/models/${name}/files/${shards[1]}`)?.size ?? 0;
      check(kept > 0 && kept < files[shards[1]], `(f, ${where}) the interrupted shard kept part of its bytes`,
        `${kept} of ${files[shards[1]]}`);
      requests.length = 0;
      const f2 = await run(null);
      check(!f2.error, `(f, ${where}) the resumed download completes`, JSON.stringify(f2.error));
      const shardRequests = requestsTo(fOrigin).filter((q) => shards.includes(shardOf(q.url)));
      check(!shardRequests.some((q) => shardOf(q.url) === shards[0]), `(f, ${where}) the verified shard was not fetched again`);
      const resumed = shardRequests.find((q) => shardOf(q.url) === shards[1]);
      check(resumed?.range === `bytes=${kept}-`, `(f, ${where}) the interrupted shard resumed with a Range request`,
        JSON.stringify(resumed));
      const fStart = f2.events?.find((e) => e.type === 'fileStarted' && e.index === 1);
      check(fStart?.from === kept, `(f, ${where}) and continued from the bytes kept`, JSON.stringify(fStart));
      check(f2.summary?.reused_files === 1 && f2.summary.fetched_bytes === planned.total_bytes - files[shards[0]] - kept,
        `(f, ${where}) only the missing bytes were fetched`, JSON.stringify(f2.summary));
    }
    const models = (await evaluate(() => window.api.wasm.opfs_list())).map((m) => m.name);
    check(JSON.stringify(models) === '["smol","smol-resume-main","smol-resume-worker"]', '(f) the resumed models are listed complete',
      JSON.stringify(models));

    // (h) Hash workers that cannot start (their script is missing): the download hashes in its
    // own thread instead, and says so.
    const h = await evaluate(({ url, base }) => window.api.download(url,
      { name: 'smol-h', parallel: 2, hashWorkerUrl: `${base}/no-such-hash-worker.mjs` }), { url: goodUrl, base });
    check(!h.error && h.summary.hash_workers === 0 && h.summary.warnings.some((w) => /hash workers did not start/.test(w)),
      '(h) hash workers that cannot start: hashed in the download\'s thread, with a warning',
      JSON.stringify(h.error ?? h.summary));
    await evaluate((name) => window.api.wasm.opfs_delete(name), 'smol-h');

    // (i) A hash worker that goes silent after finishing two shards (one shard at a time): the
    // download fails naming it, once it has been silent for 3 s with work waiting; the two
    // verified shards stay verified, nothing is listed complete, and the next download resumes
    // without fetching them again.
    requests.length = 0;
    const i1 = await evaluate((url) => window.api.downloadInWorker(url, { name: 'smol-i', parallel: 1,
      hashWorkerUrl: '/stalling-hash-worker.mjs', hashStallMs: 3000 }), goodUrl);
    check(/hash worker.*stopped answering/.test(i1.error?.message ?? ''), '(i) a silent hash worker fails the download, saying so',
      JSON.stringify(i1.error ?? i1.summary));
    const iPartial = (await evaluate(() => window.api.wasm.opfs_list_partial())).find((m) => m.name === 'smol-i');
    const iVerified = Object.keys(iPartial?.verified ?? {}).sort();
    check(JSON.stringify(iVerified) === JSON.stringify(shards.slice(0, 2))
      && !(await evaluate(() => window.api.wasm.opfs_list())).some((m) => m.name === 'smol-i'),
    '(i) the two shards verified before stay verified, the model is not listed complete', JSON.stringify(iPartial));
    requests.length = 0;
    const i2 = await evaluate((url) => window.api.downloadInWorker(url, { name: 'smol-i', parallel: 2 }), goodUrl);
    const iRefetched = requestsTo(origin).filter((q) => shards.slice(0, 2).includes(shardOf(q.url)));
    check(!i2.error && i2.summary.reused_files === 2 && iRefetched.length === 0,
      '(i) the next download completes without fetching the verified shards again', JSON.stringify(i2.error ?? i2.summary));
    await evaluate((name) => window.api.wasm.opfs_delete(name), 'smol-i');

    // (j) A busy page: a download on the main thread while the page keeps that thread busy
    // 45 ms of every 50 (as a page laying out or running its own code may). Its shards are
    // fetched and written on the hash workers, which run at full speed meanwhile: they must
    // find the model's folder in OPFS however far the main thread is behind (it is made before
    // the first shard is handed out), and the download completes.
    const j = await evaluate((url) => {
      const jank = setInterval(() => {
        const until = performance.now() + 45;
        while (performance.now() < until);
      }, 50);
      return window.api.download(url, { name: 'smol-j', parallel: 4, hashWorkers: 2 })
        .finally(() => clearInterval(jank));
    }, goodUrl);
    const jListed = (await evaluate(() => window.api.wasm.opfs_list())).some((m) => m.name === 'smol-j');
    check(!j.error && j.summary.hash_workers === 2 && jListed,
      '(j) a download on a busy main thread, its shards fetched on hash workers, completes', JSON.stringify(j.error ?? j.summary));
    await evaluate((name) => window.api.wasm.opfs_delete(name), 'smol-j');

    // (k) How bodies are read: with a BYOB reader into one buffer where fetch bodies are byte
    // streams (Chromium's are), else with the default reader. Two downloads on the main
    // thread, hashed there (so that every request goes through the page's fetch), with
    // ReadableStream.prototype.getReader watched: one as the browser answers, one through a
    // fetch wrapped to answer with bodies that are not byte streams (as in browsers without
    // BYOB readers for fetch). Both complete.
    const k = await evaluate(async (url) => {
      const realFetch = window.fetch;
      const realGetReader = ReadableStream.prototype.getReader;
      const modes = [];
      ReadableStream.prototype.getReader = function (options) {
        const reader = realGetReader.call(this, options);
        modes.push(options?.mode ?? 'default');
        return reader;
      };
      try {
        const native = await window.api.download(url, { name: 'smol-k', hashWorkers: 0 });
        const nativeModes = modes.splice(0);
        await window.api.wasm.opfs_delete('smol-k');
        let wrapped = 0;
        window.fetch = async (...args) => {
          const r = await realFetch(...args);
          if (!r.body) return r;
          const inner = realGetReader.call(r.body);
          wrapped += 1;
          const body = new ReadableStream({
            async pull(c) {
              const { done, value } = await inner.read();
              if (done) c.close();
              else c.enqueue(value);
            },
            cancel: (why) => inner.cancel(why),
          });
          return new Response(body, { status: r.status, statusText: r.statusText, headers: r.headers });
        };
        const fallback = await window.api.download(url, { name: 'smol-k', hashWorkers: 0 });
        const listed = (await window.api.wasm.opfs_list()).some((m) => m.name === 'smol-k');
        return { native: native.error ?? null, nativeModes, fallback: fallback.error ?? null, wrapped,
          fallbackModes: modes, listed };
      } finally {
        window.fetch = realFetch;
        ReadableStream.prototype.getReader = realGetReader;
      }
    }, goodUrl);
    check(!k.native && k.nativeModes.length >= shards.length && k.nativeModes.every((m) => m === 'byob'),
      '(k) fetch bodies are read with a BYOB reader', JSON.stringify(k));
    check(!k.fallback && k.listed && k.wrapped >= shards.length && k.fallbackModes.includes('default'),
      '(k) bodies that are not byte streams are read with the default reader, and the download completes',
      JSON.stringify(k));
    await evaluate((name) => window.api.wasm.opfs_delete(name), 'smol-k');

    // (g) One GGUF file (from the page's own server, no Range needed), checked against its
    // SHA-256, then loaded from OPFS in a worker: the first greedy token equals native.
    const ggufSha = createHash('sha256').update(readFileSync(gguf)).digest('hex');
    // Hashed in the download's own thread (no hash workers), as a page may ask.
    const g = await evaluate(({ url, sha }) => window.api.downloadInWorker(url, { name: 'smol-gguf', sha256: sha, hashWorkers: 0 }),
      { url: `${base}/models/${basename(gguf)}`, sha: ggufSha });
    check(!g.error && g.summary.kind === 'gguf' && g.summary.sha256 === ggufSha && g.summary.hash_workers === 0,
      '(g) a GGUF file downloads into OPFS, its SHA-256 checked (hashed in the download\'s thread)',
      JSON.stringify(g.error ?? g.summary));
    const gm = (await evaluate(() => window.api.wasm.opfs_list())).find((m) => m.name === 'smol-gguf');
    check(gm?.kind === 'gguf' && gm.bytes === statSync(gguf).size, '(g) it is listed as a GGUF model of its size', JSON.stringify(gm));
    const gg = await evaluate(({ p }) => window.api.generateInWorker('smol-gguf', p, 1, 16), { p: prompt });
    check(gg.result?.generated_ids?.[0] === native.generated_ids[0], '(g) the cached GGUF gives the native first token',
      JSON.stringify(gg.error ?? gg.result?.generated_ids));

    // Deleting leaves nothing behind.
    for (const m of ['smol', 'smol-resume-main', 'smol-resume-worker', 'smol-bad', 'smol-gguf']) {
      await evaluate((name) => window.api.wasm.opfs_delete(name), m);
    }
    const usage = await evaluate(() => window.api.wasm.opfs_usage());
    check(usage.bytes_used === 0 && (await tree()).every((f) => !f.path.startsWith('tritium/models/')),
      'deleting the models empties the store', JSON.stringify(usage));
  }
} catch (e) {
  check(false, 'run', e.stack ?? String(e));
} finally {
  clearTimeout(watchdog);
  await close();
  pageServer.close();
  cleanup();
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
