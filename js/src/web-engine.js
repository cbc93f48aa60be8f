// The one-thread browser build's engine (`wasm-bindgen --target web`, ../pkg/web): `open`,
// the explorer and the hooks. The page's entry (src/web.js) adds `openInWorker`; the worker
// (src/worker-core.js) loads this module alone, so a bundled worker holds no worker of its own.
import init, * as glue from '../pkg/web/insitubatch_wasm.js';
import { makeOpen, makeEngineHooks, Dataset, Pass } from './facade.js';
import { Engine, EngineTrapError } from './engine.js';
import { makeOpenExplorer, Explorer } from './explore.js';

let input; // what initialize() was given: the .wasm's URL or bytes
/**
 * Generation 0 is the statically imported glue; after a trap each fresh instance comes from
 * its own copy of the glue (an ES module is instantiated once per URL, hence the query), so
 * nothing of the trapped instance is shared with it. That copy is the glue file itself and
 * the .wasm beside it, each named by a literal `new URL(..., import.meta.url)`, the form
 * bundlers (Vite, webpack 5) rewrite to the file they emit: a bundled app serves both
 * (the glue as it is, not bundled), so the fresh instance loads there too. The .wasm is
 * passed explicitly, as the copy's own default (a name beside it) is not where a bundler
 * put the file.
 */
async function loadWeb(generation) {
  if (generation === 0) {
    await init(input === undefined ? undefined : { module_or_path: input });
    return glue;
  }
  const copy = new URL('../pkg/web/insitubatch_wasm.js', import.meta.url);
  copy.searchParams.set('instance', String(generation));
  const fresh = await import(/* @vite-ignore */ /* webpackIgnore: true */ copy.href);
  await fresh.default({ module_or_path: input ?? new URL('../pkg/web/insitubatch_wasm_bg.wasm', import.meta.url) });
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
/** Test and diagnostics hooks (src/facade.js makeEngineHooks). */
export const { __debugTrap, memoryBytes, heapBytes, engineGeneration } = makeEngineHooks(engine);
