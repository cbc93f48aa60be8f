// Node with decode threads (the entry `insitubatch/threads`): the threaded build's wasm
// (pkg/web-threads' module, wasm-bindgen-rayon over shared memory) with its pool's threads as
// worker_threads (pkg/node-threads: the same glue, src/node-thread-pool.js as its thread
// starter). Node allows blocking waits on its main thread, so the engine runs here, not in a
// worker as in browsers. Reads: http(s):// URLs with node:http (src/node-http.js), local
// paths and file:// URLs with node:fs (src/node-storage.js), on this thread as the main entry
// reads them; kerchunk JSON reference sets. Not s3:// nor Icechunk (the threaded build leaves
// them out).
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { makeOpen, makeEngineHooks, isJoin, isStorage, joinEntries, Dataset, Pass } from './facade.js';
import { Engine, EngineTrapError } from './engine.js';
import { nextPool } from './node-thread-pool.js';
import { nodeHttpHook } from './node-http.js';
import { fileUrl, isLocal, nodeFileStorage } from './node-storage.js';

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
  // http(s):// reads through node:http rather than the runtime's fetch (src/node-http.js).
  glue.setFetchHook(nodeHttpHook(glue.wasmMemory()));
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

const openSource = makeOpen(
  {
    instance: async () => {
      await initialize();
      return engine.instance();
    },
  },
  { isLocal, nodeFileStorage, fileUrl },
);

/** The URLs in `source` (a URL, a storage object, an array or a join of them). */
function urlsOf(source) {
  if (Array.isArray(source)) return source.flatMap(urlsOf);
  if (isJoin(source)) return joinEntries(source).flatMap(([, one]) => urlsOf(one));
  return isStorage(source) ? [] : [String(source)];
}

/**
 * Open the Zarr store at `source` (an http(s):// URL, a local path or file:// URL, a kerchunk
 * JSON reference set `reference+URL`, a storage object, or an array or join of them) and
 * build a dataset, decoded on the threads of `initialize`.
 */
export async function open(source, options) {
  for (const u of urlsOf(source)) {
    if (/^(reference\+)?s3:\/\//i.test(u) || /^icechunk\+/i.test(u)) {
      throw new TypeError(
        `insitubatch/threads does not read s3:// nor Icechunk repositories (the threaded build leaves their code out); open them with the main entry 'insitubatch': ${u}`,
      );
    }
  }
  return openSource(source, options);
}
export { Dataset, Pass, EngineTrapError };
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);
