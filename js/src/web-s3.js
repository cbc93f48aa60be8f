// Browser entry with signed S3 (`insitubatch/web-s3`): src/web.js over the one-thread build
// with S3 (src/web-s3-engine.js, ../pkg/web-s3), and `openInWorker`, whose worker
// (src/worker-web-s3.js) runs that build too (one thread: the threaded build has no S3).
import { makeOpenInWorker, browserWorkerPort } from './worker-client.js';

export * from './web-s3-engine.js';

/** As src/web.js `spawnWorker`, with src/worker-web-s3.js (keep the `new URL` literal for bundlers). */
function spawnWorker(how) {
  const given = typeof how.worker === 'function' ? how.worker() : how.worker;
  if (given) return browserWorkerPort(given, 'how.worker');
  if (how.workerUrl !== undefined) return browserWorkerPort(new Worker(how.workerUrl, { type: 'module', name: 'insitubatch' }), String(how.workerUrl));
  return browserWorkerPort(new Worker(new URL('./worker-web-s3.js', import.meta.url), { type: 'module', name: 'insitubatch' }), 'src/worker-web-s3.js');
}
/** Open the store at `url` in a dedicated Web Worker (src/worker-client.js), one thread, signed S3. */
export const openInWorker = makeOpenInWorker(spawnWorker);
export { WorkerDataset, WorkerPass } from './worker-client.js';
