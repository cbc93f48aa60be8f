// The threaded browser build (`pkg/web-threads`: wasm-bindgen-rayon, shared memory). Only
// usable where SharedArrayBuffer is (a cross-origin-isolated page) and, because decode
// threads share locks with the caller, only from a worker: src/worker.js picks it.
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

let ready;
/** Load the module and start `nThreads` decode threads (default: hardwareConcurrency). Resolves to the thread count. */
export function initialize(input, nThreads) {
  ready ??= (async () => {
    await init(input === undefined ? undefined : { module_or_path: input });
    const n = Math.max(1, nThreads ?? globalThis.navigator?.hardwareConcurrency ?? 2);
    await wasm.initThreadPool(n);
    await engine.instance();
    return n;
  })();
  return ready;
}

export const open = makeOpen({
  instance: async () => {
    await initialize();
    return engine.instance();
  },
});
export { Dataset, Pass, EngineTrapError };
/** Where a trap on a decode thread is reported: a `BroadcastChannel` name (wasm/src/trap.rs, src/worker.js). */
export function setTrapChannel(name) {
  wasm.setTrapChannel(name);
}
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);
