// `openInWorker`'s worker in Node: a worker_threads Worker that loads the Node entry
// (src/index.js, the `--target nodejs` build) and answers the parent (src/worker-core.js).
// The `node` condition of the package's `insitubatch/worker` export.
import { parentPort } from 'node:worker_threads';
import { serve } from './worker-core.js';

async function loadNode(want) {
  if (want === true) throw new Error('the threaded build runs in browsers only (wasm-bindgen-rayon needs Web Workers); use threads: "auto" or false in Node');
  return { api: await import('./index.js'), build: 'node', threads: 1 };
}

serve({ post: (m, t) => parentPort.postMessage(m, t), listen: (cb) => parentPort.on('message', cb) }, loadNode);
