// `openInWorker`'s worker as one plain file for both targets, picked at run time: the
// `workerUrl` of apps that serve the package's src/ and pkg/ as plain files (the dashboard,
// www/). `openInWorker` itself starts src/worker-web.js in browsers and src/worker-node.js
// in Node, which a bundler can follow; this one it cannot (it reaches the Node entry).
// The protocol is src/worker-core.js's.
import { serve, loadWeb } from './worker-core.js';

const IS_NODE = typeof process !== 'undefined' && !!process.versions?.node && typeof self === 'undefined';

if (IS_NODE) {
  // Node queues the parent's messages until worker-node.js listens.
  await import('./worker-node.js');
} else {
  // Listening now, before any await, so no message of the page arrives unheard.
  // The builds are imported when picked: only the one that runs is loaded.
  const builds = { web: () => import('./web-engine.js'), threads: () => import('./web-threads.js') };
  serve(
    { post: (m, t) => self.postMessage(m, t), listen: (cb) => self.addEventListener('message', (e) => cb(e.data)) },
    (want, nThreads, fetchWorker) => loadWeb(want, nThreads, fetchWorker, builds),
  );
}
