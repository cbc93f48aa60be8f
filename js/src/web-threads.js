// The threaded browser build (`pkg/web-threads`: wasm-bindgen-rayon, shared memory). Only
// usable where SharedArrayBuffer is (a cross-origin-isolated page) and, because decode
// threads share locks with the caller, only from a worker: src/worker.js picks it.
import init, * as wasm from '../pkg/web-threads/insitubatch_wasm.js';
import { makeOpen, Dataset, Pass } from './facade.js';

let ready;
/** Load the module and start `nThreads` decode threads (default: hardwareConcurrency). Resolves to the thread count. */
export function initialize(input, nThreads) {
  ready ??= (async () => {
    await init(input === undefined ? undefined : { module_or_path: input });
    const n = Math.max(1, nThreads ?? globalThis.navigator?.hardwareConcurrency ?? 2);
    await wasm.initThreadPool(n);
    return n;
  })();
  return ready;
}

export const open = makeOpen(async () => {
  await initialize();
  return wasm;
});
export { Dataset, Pass };
