// run-package.mjs: the package's download() in a dedicated worker, whose hash workers start
// inside this one (nested workers). In: { url, opts }; out: { summary } or { error }.
import { download } from '/pkg/index.js';

onmessage = async (e) => {
  try {
    postMessage({ summary: await download(e.data.url, e.data.opts) });
  } catch (err) {
    postMessage({ error: { code: err?.code, message: String(err?.message ?? err) } });
  }
};
