// `openInWorker`'s worker for src/web-s3.js: the one-thread build with signed S3
// (src/web-s3-engine.js) answering the page (src/worker-core.js), as src/worker-web.js does
// with src/web-engine.js. No threaded build: it has no S3 (`threads: true` is refused by it,
// "auto" runs one thread).
import { serve, loadWeb } from './worker-core.js';
import * as web from './web-s3-engine.js';

const builds = {
  web: async () => web,
  threads: async () => {
    throw new Error('the web-s3 entry has no threaded build (it has no S3); use threads: false');
  },
};
serve(
  { post: (m, t) => self.postMessage(m, t), listen: (cb) => self.addEventListener('message', (e) => cb(e.data)) },
  (want, nThreads, fetchWorker) => loadWeb(want, nThreads, fetchWorker, builds),
);
