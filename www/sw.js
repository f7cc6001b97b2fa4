// The demos' service worker: keeps the app shell (pages, CSS, the widget), the package's JS and
// its wasm, so the TL;DR widget and the chat work offline after the first visit. The model is
// not cached here: the package keeps it in OPFS.
//
// Strategy: network first (a rebuilt pkg/ or edited page is used at once), the cache when the
// network fails. On install the entry points are fetched and their static imports,
// `new URL('…', import.meta.url)` references (the wasm) and stylesheets followed, so the whole
// module graph is cached before any page needs it offline. Requests to other origins (the model
// server) and Range requests pass through untouched.
const CACHE = 'tritium-demos-v1';
const ENTRIES = [
  './',
  './index.html',
  './config.json',
  './shared/demo.css',
  './shared/demo.js',
  './tldr/',
  './tldr/index.html',
  './tldr/tldr-widget.js',
  './tldr/worker.js',
  './chat/',
  './chat/index.html',
  './chat/app.js',
  './chat/worker.js',
  './pkg/index.js',
  './pkg/worker.js',
];

const scope = new URL(self.registration.scope);

/** URLs a JS, CSS or HTML file refers to, resolved against it (same origin only). */
function references(url, type, text) {
  const found = new Set();
  const add = (ref) => {
    if (!ref || ref.startsWith('data:') || ref.startsWith('blob:')) return;
    try {
      const u = new URL(ref, url);
      if (u.origin === scope.origin) found.add(u.href.split('#')[0]);
    } catch {
      // Not a URL.
    }
  };
  if (type.includes('javascript')) {
    for (const m of text.matchAll(/(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]/g)) add(m[1]);
    for (const m of text.matchAll(/import\s*['"]([^'"]+)['"]/g)) add(m[1]);
    for (const m of text.matchAll(/import\(\s*['"]([^'"]+)['"]\s*\)/g)) add(m[1]);
    for (const m of text.matchAll(/new URL\(\s*['"]([^'"]+)['"]\s*,\s*import\.meta\.url\s*\)/g)) add(m[1]);
  } else if (type.includes('css')) {
    for (const m of text.matchAll(/url\(\s*['"]?([^'")]+)['"]?\s*\)/g)) add(m[1]);
    for (const m of text.matchAll(/@import\s+['"]([^'"]+)['"]/g)) add(m[1]);
  } else if (type.includes('html')) {
    for (const m of text.matchAll(/<(?:script|link)\b[^>]*?(?:src|href)\s*=\s*["']([^"']+)["']/gi)) add(m[1]);
    for (const m of text.matchAll(/"(?:tritium|tritium\/worker)"\s*:\s*"([^"]+)"/g)) add(m[1]);
  }
  return found;
}

/** Fetch `entries` and everything they refer to into the cache; missing files are skipped. */
async function precache(entries) {
  const cache = await caches.open(CACHE);
  const seen = new Set();
  let queue = entries.map((e) => new URL(e, scope).href);
  while (queue.length) {
    const batch = queue.filter((u) => !seen.has(u));
    batch.forEach((u) => seen.add(u));
    const next = await Promise.all(batch.map(async (url) => {
      try {
        const res = await fetch(url, { cache: 'no-cache' });
        if (!res.ok) return [];
        const type = res.headers.get('content-type') ?? '';
        const refs = /javascript|css|html/.test(type) ? references(url, type, await res.clone().text()) : [];
        await cache.put(url, res);
        return [...refs];
      } catch {
        return [];
      }
    }));
    queue = next.flat();
  }
}

self.addEventListener('install', (event) => {
  event.waitUntil(precache(ENTRIES).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) {
      if (key !== CACHE && key.startsWith('tritium-demos-')) await caches.delete(key);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  const url = new URL(req.url);
  if (req.method !== 'GET' || url.origin !== scope.origin || req.headers.has('range')) return;
  // App files only: a model served from this origin (a .gguf, RDRR shards) goes to OPFS through
  // the package, never into this cache as well.
  const app = ['document', 'script', 'style', 'worker', 'image', 'font', 'manifest'].includes(req.destination)
    || /\.(wasm|js|mjs|css|json|html)$/.test(url.pathname);
  if (!app || /(^|\/)(shard_\d+\.bin|tensors\.json|manifest\.json)$/.test(url.pathname)) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const res = await fetch(req);
      if (res.ok && res.type === 'basic') await cache.put(req, res.clone());
      return res;
    } catch (err) {
      const hit = await cache.match(req, { ignoreSearch: req.mode === 'navigate' })
        ?? await cache.match(req, { ignoreSearch: true });
      if (hit) return hit;
      throw err;
    }
  })());
});
