// Node entry (ESM). Loads the `wasm-bindgen --target nodejs` build from ../pkg/node.
import { createRequire } from 'node:module';
import { makeOpen, Dataset, Pass } from './facade.js';
import { makeOpenExplorer, Explorer } from './explore.js';
import { isLocal, nodeFileStorage } from './node-storage.js';

const require = createRequire(import.meta.url);
let wasm;
function load() {
  // CommonJS glue; it reads the .wasm synchronously next to itself.
  wasm ??= require('../pkg/node/insitubatch_wasm.js');
  return wasm;
}

/**
 * Open the Zarr store at `url` (http://, https://, s3://, file:// or a plain path, read with
 * node:fs) or a storage object, and build a dataset.
 */
export const open = makeOpen(async () => load(), { isLocal, nodeFileStorage });
export { nodeFileStorage };
export { Dataset, Pass };
/** Open a store's metadata once for many what-if questions (the dashboard; src/explore.js). */
export const openExplorer = makeOpenExplorer(async () => load());
export { Explorer };
export { openInWorker, WorkerDataset, WorkerPass } from './worker-client.js';

/** Load the module now (optional: `open` does it). For symmetry with the browser entry. */
export async function initialize() {
  return load();
}
