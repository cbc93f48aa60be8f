// The threaded browser build (`pkg/web-threads`: wasm-bindgen-rayon, shared memory). Only
// usable where SharedArrayBuffer is (a cross-origin-isolated page) and, because decode
// threads share locks with the caller, only from a worker: src/worker-core.js picks it.
import init, * as wasm from '../pkg/web-threads/insitubatch_wasm.js';
import { makeOpen, makeEngineHooks, Dataset, Pass } from './facade.js';
import { Engine, EngineTrapError } from './engine.js';

/**
 * One instance per worker: its decode threads are Web Workers bound to this memory, so after
 * a trap the worker itself is replaced (src/worker-client.js terminates it).
 */
async function loadThreads(generation) {
  if (generation > 0) {
    throw new EngineTrapError('the threaded engine of this worker trapped; it cannot restart here: openInWorker() starts a fresh worker');
  }
  return wasm;
}
const engine = new Engine(loadThreads);

let debugFailFetchWorker = () => {
  throw new Error('no fetch worker is running');
};
/** Tests only: make the fetch worker throw (as a failed worker would); reads then go back to this thread. */
export function __debugFailFetchWorker() {
  debugFailFetchWorker();
}

/** Reads the fetch worker answered (`fetchReport()`): bodies written in place or sent back, errors. */
const served = { reads: 0, bytes: 0, inPlace: 0, bodies: 0, errors: 0, running: false };

/**
 * Start the fetch worker (src/fetch-worker.js) and send this thread's chunk reads to it
 * (wasm/src/storage.rs `off_thread`). Each read's promise settles once, with the worker's
 * reply; if the worker dies, every pending read rejects (the engine retries it, on this
 * thread: the hook is removed) and nothing waits forever.
 */
function startFetchWorker() {
  const worker = new Worker(new URL('./fetch-worker.js', import.meta.url), { type: 'module', name: 'insitubatch-fetch' });
  const pending = new Map(); // id -> { resolve, reject }
  let next = 1;
  // `lost`: the worker may still be writing as it is terminated, so the engine leaks these
  // reads' buffers instead of freeing them (wasm/src/storage.rs `worker_lost`).
  const stop = (why) => {
    wasm.setFetchHook(undefined);
    served.running = false;
    worker.terminate();
    for (const p of pending.values()) p.reject(Object.assign(new Error(why), { lost: true }));
    pending.clear();
  };
  worker.addEventListener('message', ({ data: r }) => {
    const p = pending.get(r.id);
    if (!p) return;
    pending.delete(r.id);
    if (r.error !== undefined) {
      served.errors++;
      return p.reject(new Error(r.error));
    }
    served.reads++;
    if (r.body) served.bodies++;
    else if (r.written !== undefined) served.inPlace++;
    served.bytes += r.written ?? r.body?.byteLength ?? 0;
    p.resolve(r);
  });
  worker.addEventListener('error', (e) => {
    e.preventDefault();
    stop(`the fetch worker failed (${e.message ?? 'script error'}); reads go back to the engine's thread`);
  });
  debugFailFetchWorker = () => worker.postMessage({ debugFail: true });
  worker.postMessage({ memory: wasm.wasmMemory() });
  wasm.setFetchHook((url, range, ptr, len, signal) => {
    const id = next++;
    // Resolved here: the worker's own base URL is not this one.
    const absolute = new URL(url, globalThis.location?.href).href;
    return new Promise((resolve, reject) => {
      const onAbort = () => worker.postMessage({ abort: id });
      const settle = (fn) => (v) => {
        signal?.removeEventListener('abort', onAbort);
        fn(v);
      };
      pending.set(id, { resolve: settle(resolve), reject: settle(reject) });
      signal?.addEventListener('abort', onAbort, { once: true });
      worker.postMessage({ id, url: absolute, range, ptr, len });
    });
  });
  served.running = true;
}

/**
 * The glue relative to this file, resolved below against a variable holding
 * `import.meta.url`: written as `new URL('…', import.meta.url)`, bundlers would emit a copy
 * of the file (or, for a name in a variable, webpack all of pkg/ as a context).
 */
const GLUE = '../pkg/web-threads/insitubatch_wasm.js';
const HERE = import.meta.url;

/**
 * Refuses (rejects) unless the glue is its own module at its place in the package, as the
 * decode threads need: wasm-bindgen-rayon's helper starts each one from its own file and
 * imports the glue there by the glue's URL. Where this module was moved (bundled: the glue
 * inlined into a chunk, or `import.meta.url` fixed at build time; src/worker-web.js keeps
 * bundlers away from it, but a dev server or an app may still move it) that import gets
 * another module or none, and the helper would wait forever for a thread that never starts;
 * so the threaded build is refused here, and `threads: "auto"` falls back to one thread.
 */
async function checkUnbundled() {
  const at = new URL(GLUE, HERE).href;
  const found = await import(/* @vite-ignore */ /* webpackIgnore: true */ at).catch(() => undefined);
  if (found !== wasm) {
    throw new Error(
      `its decode threads load the glue by its own URL (${at}), which a bundler moved; serve the package's src/ and pkg/ as plain files and pass openInWorker's workerUrl (src/worker.js) for threads in a bundled app`,
    );
  }
}

let ready;
/**
 * Load the module and start `nThreads` decode threads (default: hardwareConcurrency) and,
 * unless `fetchWorker` is false, the fetch worker that serves chunk reads off this thread.
 * Resolves to the thread count.
 */
export function initialize(input, nThreads, { fetchWorker = true } = {}) {
  ready ??= (async () => {
    await checkUnbundled();
    await init(input === undefined ? undefined : { module_or_path: input });
    const n = Math.max(1, nThreads ?? globalThis.navigator?.hardwareConcurrency ?? 2);
    await wasm.initThreadPool(n);
    await engine.instance();
    if (fetchWorker) startFetchWorker();
    return n;
  })();
  return ready;
}

/** This instance's `WebAssembly.Memory` (shared): posted to the page for `openInWorker`'s batch views. */
export function sharedMemory() {
  return wasm.wasmMemory();
}

/** Reads the fetch worker has answered: `{ reads, bytes, inPlace, bodies, errors, running }`. */
export function fetchReport() {
  return { ...served };
}

export const open = makeOpen({
  instance: async () => {
    await initialize();
    return engine.instance();
  },
});
export { Dataset, Pass, EngineTrapError };
/** Where a trap on a decode thread is reported: a `BroadcastChannel` name (wasm/src/trap.rs, src/worker-core.js). */
export function setTrapChannel(name) {
  wasm.setTrapChannel(name);
}
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);
