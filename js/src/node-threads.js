// Node with decode threads (the entry `insitubatch/threads`): the threaded build's wasm
// (pkg/web-threads' module, wasm-bindgen-rayon over shared memory) with its pool's threads as
// worker_threads (pkg/node-threads: the same glue, src/node-thread-pool.js as its thread
// starter). Node allows blocking waits on its main thread, so the engine runs here, not in a
// worker as in browsers. Reads: http(s):// URLs with the runtime's fetch.
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { makeOpen, makeEngineHooks, Dataset, Pass } from './facade.js';
import { Engine, EngineTrapError } from './engine.js';
import { nextPool } from './node-thread-pool.js';

const GLUE = new URL('../pkg/node-threads/insitubatch_wasm.js', import.meta.url);
const WASM = new URL('../pkg/web-threads/insitubatch_wasm_bg.wasm', import.meta.url);

let nThreads;
let moduleBytes;
/** The live instance's decode threads (src/node-thread-pool.js `nextPool`). */
let threads = { workers: [] };

/**
 * A fresh instance for each generation: the glue imported again under its own query (a new
 * module, so a new memory and a new rayon pool; its threads import the same URL), after the
 * last generation's threads are ended. A decode thread's trap poisons its instance.
 */
async function loadThreads(generation, onTrap) {
  for (const w of threads.workers) await w.terminate();
  threads = nextPool((e) => onTrap(e));
  const glue = await import(`${GLUE.href}?generation=${generation}`);
  moduleBytes ??= readFileSync(WASM);
  await glue.default({ module_or_path: moduleBytes });
  await glue.initThreadPool(nThreads ?? defaultThreads());
  return glue;
}

function defaultThreads() {
  return Math.max(1, availableParallelism());
}

/**
 * The engine's promises settle through `Atomics.waitAsync` on the decode threads' memory,
 * which does not keep Node's event loop alive: while the engine is waited on, one decode
 * thread is ref'd so that the program does not exit under a pending `await`; otherwise
 * they are all unref'd, so a finished program exits.
 */
function keepAlive(busy) {
  const w = threads.workers[0];
  if (busy) w?.ref();
  else w?.unref();
}

const engine = new Engine(loadThreads, { onBusy: keepAlive });

let ready;
/**
 * Load the module and start `n` decode threads (default: the machine's available
 * parallelism); resolves to the thread count. Optional: `open` does it with the default.
 * Asking again for another count once started rejects: the pool is fixed for the process.
 */
export function initialize(n) {
  if (n !== undefined && !(Number.isInteger(n) && n >= 1)) {
    return Promise.reject(new TypeError(`initialize(n): n is the number of decode threads, a positive integer; got ${n}`));
  }
  if (ready && n !== undefined && n !== nThreads) {
    return Promise.reject(new Error(`the decode threads are already started (${nThreads}); call initialize(${n}) before the first open()`));
  }
  nThreads ??= n ?? defaultThreads();
  ready ??= engine.instance().then(() => nThreads);
  return ready;
}

const openUrl = makeOpen({
  instance: async () => {
    await initialize();
    return engine.instance();
  },
});

/**
 * Open the Zarr store at an http(s):// `url` (or an array of them, concatenated) and build a
 * dataset, decoded on the threads of `initialize`.
 */
export async function open(source, options) {
  const urls = Array.isArray(source) ? source : [source];
  for (const u of urls) {
    if (typeof u !== 'string' || !/^https?:\/\//i.test(u)) {
      throw new TypeError(
        `insitubatch/threads reads http(s):// URLs only (its build has no file or s3 access); open local paths and s3:// with the main entry 'insitubatch', or serve the store over HTTP: ${String(u)}`,
      );
    }
  }
  return openUrl(source, options);
}
export { Dataset, Pass, EngineTrapError };
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);
