// Node entry (ESM). Loads the `wasm-bindgen --target nodejs` build from ../pkg/node.
import Module from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { makeOpen, makeEngineHooks, Dataset, Pass } from './facade.js';
import { Engine, EngineTrapError, isTrap } from './engine.js';
import { makeOpenExplorer, Explorer } from './explore.js';
import { nodeHttpHook } from './node-http.js';
import { fileUrl, isLocal, nodeFileStorage } from './node-storage.js';
import { makeOpenInWorker, nodeWorkerPort } from './worker-client.js';

const GLUE = fileURLToPath(new URL('../pkg/node/insitubatch_wasm.js', import.meta.url));

/**
 * A fresh instance of the CommonJS glue (and so of the wasm module) for each generation:
 * `require` would hand back the cached, trapped one. Each copy gets its own
 * `queueMicrotask`, through which every task of the engine runs (wasm-bindgen-futures
 * schedules its queue with it), so a trap in an engine task is attributed to exactly this
 * instance instead of becoming an uncaught exception that ends the process.
 */
function loadNode(generation, onTrap) {
  const m = new Module(GLUE, null);
  m.filename = GLUE;
  m.paths = Module._nodeModulePaths(dirname(GLUE));
  m.ibQueueMicrotask = (task) =>
    queueMicrotask(() => {
      try {
        task();
      } catch (e) {
        if (!isTrap(e)) throw e;
        onTrap(e);
      }
    });
  // Shadows the global for the glue only (same line: the glue's line numbers stay right).
  const source = `const queueMicrotask = module.ibQueueMicrotask; ${readFileSync(GLUE, 'utf8')}`;
  m._compile(source, `${GLUE}#instance-${generation}`);
  // http(s):// reads through node:http rather than the runtime's fetch (src/node-http.js).
  m.exports.setFetchHook(nodeHttpHook(m.exports.wasmMemory()));
  return m.exports;
}

const engine = new Engine(loadNode);

/**
 * Open the Zarr store at `url` (http://, https://, s3://, file:// or a plain path, read with
 * node:fs; or a kerchunk reference set at any of them, `reference+URL`) or a storage object,
 * and build a dataset.
 */
export const open = makeOpen(engine, { isLocal, nodeFileStorage, fileUrl });
export { nodeFileStorage };
export { Dataset, Pass, EngineTrapError };
/** Open a store's metadata once for many what-if questions (the dashboard; src/explore.js). */
export const openExplorer = makeOpenExplorer(engine);
export { Explorer };
/**
 * `openInWorker`'s worker in Node: the app's (`how.worker`), the file at `how.workerUrl`, or
 * src/worker-node.js (the Node entry in a worker_threads Worker).
 */
function spawnWorker(how) {
  const given = typeof how.worker === 'function' ? how.worker() : how.worker;
  return nodeWorkerPort(given ?? new Worker(how.workerUrl ?? new URL('./worker-node.js', import.meta.url)));
}
/** Open the store at `url` in a worker_threads Worker (src/worker-client.js). */
export const openInWorker = makeOpenInWorker(spawnWorker);
export { WorkerDataset, WorkerPass } from './worker-client.js';
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);

/** Load the module now (optional: `open` does it). For symmetry with the browser entry. */
export async function initialize() {
  return (await engine.instance()).wasm;
}
