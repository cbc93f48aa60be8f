// `openInWorker`'s worker in browsers: a dedicated module Web Worker that loads the threaded
// build (src/web-threads.js) or the one-thread one (src/web-engine.js) and answers the page
// (src/worker-core.js). src/web.js starts it as `new Worker(new URL('./worker-web.js',
// import.meta.url), { type: 'module' })`, the form Vite and webpack 5 follow: a bundled app
// gets it, and the wasm it loads, with nothing to configure. Also the package's
// `insitubatch/worker` export (its `browser` condition), for an app that starts the worker
// itself and hands it to `openInWorker` as `how.worker`.
//
// The one-thread build is imported statically: a worker that Vite bundles in its default
// format (iife) may not import a module of the bundle dynamically. The threaded build is
// imported from the package's own files only, by a URL no bundler follows: its decode
// threads start from those files (wasm-bindgen-rayon), which a bundle does not have, so in
// a bundle it is not found and `threads: "auto"` runs one thread (its 3 MB .wasm is not
// emitted either). Apps that serve src/ and pkg/ as plain files get it, as before.
import { serve, loadWeb } from './worker-core.js';
import * as web from './web-engine.js';

const THREADS = './web-threads.js';
const HERE = import.meta.url;

async function threaded() {
  const at = new URL(THREADS, HERE).href;
  try {
    return await import(/* @vite-ignore */ /* webpackIgnore: true */ at);
  } catch (e) {
    throw new Error(
      `it is not at ${at}, where the package keeps it (a bundler moved the package); for threads in a bundled app serve the package's src/ and pkg/ as plain files and pass openInWorker's workerUrl (src/worker.js)`,
      { cause: e },
    );
  }
}

const builds = { web: async () => web, threads: threaded };
serve(
  { post: (m, t) => self.postMessage(m, t), listen: (cb) => self.addEventListener('message', (e) => cb(e.data)) },
  (want, nThreads, fetchWorker) => loadWeb(want, nThreads, fetchWorker, builds),
);
