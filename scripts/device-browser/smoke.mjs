// On the GPU machine: the carried Chromium starts under Playwright (the harness's flags).
import { launch } from '../../tests/browser/harness.mjs';

const { context, close } = await launch(process.env.CHROMIUM);
const page = await context.newPage();
const r = await page.evaluate(() => ({ ua: navigator.userAgent, cores: navigator.hardwareConcurrency }));
console.log(JSON.stringify(r));
await close();
