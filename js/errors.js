// Typed errors of the `tritium` package: every error thrown by the package is a TritiumError
// with a stable `code` (and `name`), whether it came from the wasm core, a worker or JS.

/** The stable codes. */
export const ErrorCodes = Object.freeze([
  'WebGPUNotAvailable', 'DeviceLost', 'ContextLengthExceeded', 'IntegrityError',
  'QuotaExceeded', 'AbortError', 'UnsupportedModel', 'NetworkError', 'Busy', 'InvalidArgument',
  'NotFound', 'StorageError',
]);

/** Base class: `code` is one of ErrorCodes. */
export class TritiumError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {Record<string, unknown>} [details] extra fields (url, expected, actual, ...)
   */
  constructor(code, message, details = {}) {
    super(message);
    this.code = code;
    this.name = code.endsWith('Error') ? code : `${code}Error`;
    for (const [k, v] of Object.entries(details)) {
      if (!(k in this)) this[k] = v;
    }
  }
}

export class WebGPUNotAvailableError extends TritiumError {}
export class DeviceLostError extends TritiumError {}
export class ContextLengthExceededError extends TritiumError {}
export class IntegrityError extends TritiumError {}
export class QuotaExceededError extends TritiumError {}
export class AbortError extends TritiumError {}
export class UnsupportedModelError extends TritiumError {}
export class NetworkError extends TritiumError {}
export class BusyError extends TritiumError {}
export class InvalidArgumentError extends TritiumError {}
export class NotFoundError extends TritiumError {}
export class StorageError extends TritiumError {}

const classes = {
  WebGPUNotAvailable: WebGPUNotAvailableError,
  DeviceLost: DeviceLostError,
  ContextLengthExceeded: ContextLengthExceededError,
  IntegrityError,
  QuotaExceeded: QuotaExceededError,
  AbortError,
  UnsupportedModel: UnsupportedModelError,
  NetworkError,
  Busy: BusyError,
  InvalidArgument: InvalidArgumentError,
  NotFound: NotFoundError,
  StorageError,
};

// The wasm core's internal codes, as the package's.
const aliases = {
  NoWebGPU: 'WebGPUNotAvailable',
  no_webgpu: 'WebGPUNotAvailable',
  no_adapter: 'WebGPUNotAvailable',
  BadArgument: 'InvalidArgument',
  BadName: 'InvalidArgument',
  NeedsWorker: 'InvalidArgument',
  HttpError: 'NetworkError',
  InvalidManifest: 'UnsupportedModel',
  ModelError: 'UnsupportedModel',
  GpuError: 'DeviceLost',
  DownloadError: 'NetworkError',
};

/**
 * A TritiumError of the right class for `code`.
 * @param {string} code
 * @param {string} message
 * @param {Record<string, unknown>} [details]
 */
export function makeError(code, message, details) {
  const c = aliases[code] ?? code;
  const Class = classes[c] ?? TritiumError;
  return new Class(classes[c] ? c : 'InvalidArgument', message, details);
}

/**
 * Any thrown value as a TritiumError (a wasm error with a `code`, a DOMException, a plain
 * object from a worker's `throw` message).
 * @param {unknown} e
 * @returns {TritiumError}
 */
export function toTritiumError(e) {
  if (e instanceof TritiumError) return e;
  if (e && typeof e === 'object') {
    const o = /** @type {any} */ (e);
    const details = {};
    for (const k of Object.keys(o)) {
      if (!['code', 'name', 'message', 'stack'].includes(k)) details[k] = o[k];
    }
    if (typeof o.code === 'string') return makeError(o.code, String(o.message ?? o.code), details);
    if (o.name === 'AbortError') return makeError('AbortError', String(o.message ?? 'aborted'));
    if (o.name === 'QuotaExceededError') return makeError('QuotaExceeded', String(o.message));
    if (o.name === 'TypeError' && /fetch/i.test(String(o.message))) {
      return makeError('NetworkError', String(o.message));
    }
    return makeError('InvalidArgument', String(o.message ?? e), details);
  }
  return makeError('InvalidArgument', String(e));
}

/**
 * A worker message's form of an error (structured-cloneable).
 * @param {unknown} e
 */
export function serializeError(e) {
  const err = toTritiumError(e);
  const out = { name: err.name, code: err.code, message: err.message };
  for (const k of Object.keys(err)) {
    const v = /** @type {any} */ (err)[k];
    if (['string', 'number', 'boolean'].includes(typeof v) || v === null) out[k] = v;
  }
  return out;
}
