// Helpers shared by the demos: where the default model is, number formatting, and readable
// messages for the package's typed errors (TritiumError `code`s).

/** The package's entry, next to www/ as the demo server lays it out (pkg/ at /pkg/). */
export const packageUrl = new URL('../pkg/index.js', import.meta.url).href;

/**
 * The default model: `?model=URL` on the page, else /config.json (written by scripts/demo.sh
 * from the `tritium serve-model` it starts), else null.
 * @returns {Promise<{ modelUrl: string | null, modelName: string | null }>}
 */
export async function demoConfig() {
  const fromQuery = new URL(location.href).searchParams.get('model');
  let config = {};
  try {
    const res = await fetch(new URL('../config.json', import.meta.url), { cache: 'no-cache' });
    if (res.ok) config = await res.json();
  } catch {
    // Offline without a cached copy, or served without the demo server: no default.
  }
  return {
    modelUrl: fromQuery || config.modelUrl || null,
    modelName: config.modelName || null,
  };
}

/** @param {number | null | undefined} n bytes */
export function formatBytes(n) {
  if (n == null || !Number.isFinite(n)) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i += 1; }
  return `${v.toFixed(v >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

/** @param {number | null | undefined} s seconds */
export function formatDuration(s) {
  if (s == null || !Number.isFinite(s)) return '–';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - 60 * m)} s`;
}

/** @param {number | null | undefined} x a rate, shown with one decimal below 10 */
export function formatRate(x) {
  if (x == null || !Number.isFinite(x)) return '–';
  if (x >= 10) return x.toFixed(0);
  return x >= 1 ? x.toFixed(1) : x.toPrecision(2);
}

const phaseNames = {
  resolve: 'Resolving',
  download: 'Downloading',
  verify: 'Verifying',
  parse: 'Reading the model',
  upload: 'Uploading to the GPU',
  warmup: 'Warming up',
  ready: 'Ready',
};

/** A progress phase for people. @param {string} phase */
export function phaseLabel(phase) {
  return phaseNames[phase] ?? phase ?? '';
}

/**
 * A readable title and explanation for an error from the package (or anything thrown).
 * @param {any} err
 * @returns {{ code: string, title: string, detail: string }}
 */
export function describeError(err) {
  // TritiumError codes are strings; a DOMException's numeric code is not one of them.
  const code = typeof err?.code === 'string' ? err.code : (err?.name ?? 'Error');
  const message = String(err?.message ?? err ?? 'unknown error');
  switch (code) {
    case 'WebGPUNotAvailable':
      return {
        code,
        title: 'WebGPU is not available in this browser',
        detail: 'This demo runs the model on your GPU through WebGPU. Use a recent Chrome, Edge or '
          + 'another browser with WebGPU enabled, and open the page over https or from localhost. '
          + `(${message})`,
      };
    case 'QuotaExceeded': {
      // The error names the bytes still needed and those available: say them in units.
      const needed = Number(err?.needed);
      const available = Number(err?.available);
      const sizes = Number.isFinite(needed) && Number.isFinite(available)
        ? `It needs ${formatBytes(needed)} more; ${formatBytes(available)} are available. `
        : '';
      return {
        code,
        title: 'Not enough storage for this model',
        detail: `The browser will not give this site enough space to keep the model. ${sizes}Delete cached `
          + `models you no longer need, or free disk space, then try again. (${message})`,
      };
    }
    case 'AbortError':
      return { code, title: 'Cancelled', detail: message };
    case 'NetworkError':
      return {
        code,
        title: 'The model could not be downloaded',
        detail: `Check the URL and that the model server is running. (${message})`,
      };
    case 'IntegrityError':
      return {
        code,
        title: 'The downloaded model is corrupted',
        detail: `A file did not match its checksum, so it was not used. (${message})`,
      };
    case 'UnsupportedModel':
      return { code, title: 'This model is not supported', detail: message };
    case 'ContextLengthExceeded':
      return {
        code,
        title: 'The conversation is too long for the model',
        detail: `Start a new chat or shorten the text. (${message})`,
      };
    case 'DeviceLost':
      return {
        code,
        title: 'The GPU device was lost',
        detail: `Reload the page to start again. (${message})`,
      };
    case 'Busy':
      return { code, title: 'The model is busy', detail: message };
    default:
      return { code, title: 'Something went wrong', detail: message };
  }
}

/**
 * The name to keep a model URL under in OPFS: the demo server's model name for its default
 * model (the package would name a server root such as http://127.0.0.1:8765/ after its host
 * and port), else undefined when the package can name the URL itself, else the URL's host and
 * port.
 * @param {string} url
 * @param {{ modelUrl: string | null, modelName: string | null }} config
 * @param {(url: string) => Promise<string | null>} cacheIdFor the package's
 */
export async function modelNameFor(url, config, cacheIdFor) {
  let abs;
  try {
    abs = new URL(url, location.href);
  } catch {
    return undefined; // A cached model's id, not a URL.
  }
  if (!/^https?:$/.test(abs.protocol)) return undefined;
  if (config.modelName && config.modelUrl && new URL(config.modelUrl, location.href).href === abs.href) {
    return config.modelName;
  }
  if (await cacheIdFor(abs.href)) return undefined;
  const port = abs.port || (abs.protocol === 'https:' ? '443' : '80');
  return `${abs.hostname}_${port}${abs.pathname}`.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/_+$/, '').slice(0, 128);
}
