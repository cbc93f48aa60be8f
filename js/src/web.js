// Browser entry (ESM). Loads the `wasm-bindgen --target web` build from ../pkg/web.
import init, * as glue from '../pkg/web/insitubatch_wasm.js';
import { makeOpen, makeEngineHooks, Dataset, Pass } from './facade.js';
import { Engine, EngineTrapError } from './engine.js';
import { makeOpenExplorer, Explorer } from './explore.js';

let input; // what initialize() was given: the .wasm's URL or bytes
/**
 * Generation 0 is the statically imported glue; after a trap each fresh instance comes from
 * its own copy of the glue (an ES module is instantiated once per URL, hence the query), so
 * nothing of the trapped instance is shared with it.
 */
async function loadWeb(generation) {
  const arg = input === undefined ? undefined : { module_or_path: input };
  if (generation === 0) {
    await init(arg);
    return glue;
  }
  const fresh = await import(/* @vite-ignore */ new URL(`../pkg/web/insitubatch_wasm.js?instance=${generation}`, import.meta.url).href);
  await fresh.default(arg);
  return fresh;
}

const engine = new Engine(loadWeb);

/** Load the module (optional: `open` does it). `input`: a URL or bytes of the .wasm. */
export async function initialize(wasmInput) {
  input ??= wasmInput;
  return (await engine.instance()).wasm;
}

/** Open the Zarr store at `url` (http:// or https://, CORS on every response) or a storage object, and build a dataset. */
export const open = makeOpen(engine);
export { Dataset, Pass, EngineTrapError };
/** Open a store's metadata once for many what-if questions (the dashboard; src/explore.js). */
export const openExplorer = makeOpenExplorer(engine);
export { Explorer };
export { openInWorker, WorkerDataset, WorkerPass } from './worker-client.js';
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);
