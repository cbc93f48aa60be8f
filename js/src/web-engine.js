// The one-thread browser build's engine (`wasm-bindgen --target web`, ../pkg/web): `open`,
// the explorer and the hooks. The page's entry (src/web.js) adds `openInWorker`; the worker
// (src/worker-core.js) loads this module alone, so a bundled worker holds no worker of its own.
// No signed S3 here (the 2 MB gzipped budget): src/web-s3-engine.js is the same over ../pkg/web-s3.
import init, * as glue from '../pkg/web/insitubatch_wasm.js';
import { makeWebEngine } from './web-engine-core.js';
import { Dataset, Pass } from './facade.js';
import { EngineTrapError } from './engine.js';
import { Explorer } from './explore.js';

const web = makeWebEngine(
  init,
  glue,
  // Functions, not URLs: resolved only after a trap, since a bundle loaded from a blob: or
  // data: URL (the notebook widget's) cannot resolve a relative URL at all.
  () => new URL('../pkg/web/insitubatch_wasm.js', import.meta.url),
  () => new URL('../pkg/web/insitubatch_wasm_bg.wasm', import.meta.url),
);

/** Load the module (optional: `open` does it). `input`: a URL or bytes of the .wasm. */
export const initialize = web.initialize;
/** Open the Zarr store at `url` (http:// or https://, CORS on every response) or a storage object, and build a dataset. */
export const open = web.open;
export { Dataset, Pass, EngineTrapError };
/** Open a store's metadata once for many what-if questions (the dashboard; src/explore.js). */
export const openExplorer = web.openExplorer;
export { Explorer };
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = web.hooks;
