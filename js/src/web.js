// Browser entry (ESM). Loads the `wasm-bindgen --target web` build from ../pkg/web.
import init, * as wasm from '../pkg/web/insitubatch_wasm.js';
import { makeOpen, Dataset, Pass } from './facade.js';
import { makeOpenExplorer, Explorer } from './explore.js';

let ready;
/** Load the module (optional: `open` does it). `input`: a URL or bytes of the .wasm. */
export function initialize(input) {
  ready ??= init(input === undefined ? undefined : { module_or_path: input }).then(() => wasm);
  return ready;
}

/** Open the Zarr store at `url` (http:// or https://, CORS on every response) or a storage object, and build a dataset. */
export const open = makeOpen(() => initialize());
export { Dataset, Pass };
/** Open a store's metadata once for many what-if questions (the dashboard; src/explore.js). */
export const openExplorer = makeOpenExplorer(() => initialize());
export { Explorer };
export { openInWorker, WorkerDataset, WorkerPass } from './worker-client.js';
