// Runs the kernel self-test (crates/gpu/src/selftest via src/web) and leaves the outcome in the page:
//   window.__result = { adapter, results } when the suite ran,
//   window.__error  = { code, message }     when it could not (no WebGPU, wasm failed to load),
//   window.__gpuErrors: WebGPU errors that error scopes caught and nobody read (see below),
//   window.__adapterInfo: the browser's GPUAdapterInfo,
//   window.__done = true in both cases.
// Each result is also printed to the console as `tritium-check {json}` as soon as it is known.
import init, { gpu_selftest } from './pkg/tritium.js';

const status = document.getElementById('status');
const log = document.getElementById('log');
const prefix = new URLSearchParams(location.search).get('prefix') ?? '';

// In the browser the pipeline cache drops its error scope without reading it (reading is
// async there), so a shader Tint rejects would vanish; record what such scopes caught.
window.__gpuErrors = [];
if (globalThis.GPUDevice) {
  const popErrorScope = GPUDevice.prototype.popErrorScope;
  GPUDevice.prototype.popErrorScope = function () {
    const popped = popErrorScope.call(this);
    popped.then((error) => {
      if (error) {
        window.__gpuErrors.push(error.message);
        console.error(`tritium-gpu-error ${JSON.stringify(error.message)}`);
      }
    }, () => {});
    return popped;
  };
}

function show(line, failed) {
  const span = document.createElement('span');
  span.textContent = line + '\n';
  if (failed) span.className = 'fail';
  log.append(span);
}

try {
  // What the browser says about its adapter (wgpu passes on only the description, which
  // Chromium leaves empty).
  const adapter = await navigator.gpu?.requestAdapter();
  if (adapter?.info) {
    const { vendor, architecture, device, description } = adapter.info;
    window.__adapterInfo = { vendor, architecture, device, description,
      isFallbackAdapter: adapter.info.isFallbackAdapter ?? adapter.isFallbackAdapter };
  }
  await init();
  status.textContent = `running${prefix ? ` checks starting with ${prefix}` : ''}…`;
  const started = performance.now();
  const report = await gpu_selftest(prefix, (r) => {
    console.log(`tritium-check ${JSON.stringify(r)}`);
    show(`${r.passed ? 'PASS' : 'FAIL'} ${r.name} (${(r.ms / 1000).toFixed(1)} s)` +
      (r.error ? `\n  ${r.error}` : ''), !r.passed);
  });
  const failed = report.results.filter((r) => !r.passed).length;
  status.textContent = `${report.adapter.name} (${report.adapter.backend}): ` +
    `${report.results.length - failed} passed, ${failed} failed in ` +
    `${((performance.now() - started) / 1000).toFixed(1)} s`;
  window.__result = report;
} catch (e) {
  window.__error = { code: e?.code ?? 'page', message: String(e?.message ?? e) };
  status.textContent = `error (${window.__error.code}): ${window.__error.message}`;
  status.className = 'fail';
} finally {
  window.__done = true;
}
