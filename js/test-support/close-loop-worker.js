// A dedicated module worker of the page's own (js/test/browser.test.js, through
// closeLoopInWorker in test-support/browser-cases.js): it imports the web package itself, as
// an app running inference in a worker would, and runs the open/iterate/close loop on that
// engine, posting each cycle's wasm memory and bytes in use to the page as the cycle ends.
import * as web from '../src/web.js';
import { closeLoop } from './browser-cases.js';

self.addEventListener('message', async ({ data }) => {
  try {
    await closeLoop(data, (cycle) => self.postMessage(cycle), web);
    const inWorker = typeof DedicatedWorkerGlobalScope === 'function' && self instanceof DedicatedWorkerGlobalScope;
    self.postMessage({ done: true, inWorker });
  } catch (e) {
    self.postMessage({ error: `${e.name}: ${e.message}` });
  }
});
