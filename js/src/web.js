// Browser entry (ESM): the one-thread build's engine (src/web-engine.js, which loads the
// `wasm-bindgen --target web` build from ../pkg/web) and `openInWorker`.
import { makeOpenInWorker, browserWorkerPort } from './worker-client.js';

export * from './web-engine.js';

/**
 * `openInWorker`'s worker in a browser: the app's (`how.worker`), the plain file at
 * `how.workerUrl`, or src/worker-web.js. The last is written as
 * `new Worker(new URL('./worker-web.js', import.meta.url), { type: 'module' })`, the form
 * Vite and webpack 5 bundle as a worker of its own (with the wasm it loads): keep it literal.
 */
function spawnWorker(how) {
  const given = typeof how.worker === 'function' ? how.worker() : how.worker;
  if (given) return browserWorkerPort(given, 'how.worker');
  if (how.workerUrl !== undefined) return browserWorkerPort(new Worker(how.workerUrl, { type: 'module', name: 'insitubatch' }), String(how.workerUrl));
  return browserWorkerPort(new Worker(new URL('./worker-web.js', import.meta.url), { type: 'module', name: 'insitubatch' }), 'src/worker-web.js');
}
/** Open the store at `url` in a dedicated Web Worker (src/worker-client.js). */
export const openInWorker = makeOpenInWorker(spawnWorker);
export { WorkerDataset, WorkerPass } from './worker-client.js';
