// What the one-thread browser builds' engine entries share (src/web-engine.js: js/pkg/web;
// src/web-s3-engine.js: js/pkg/web-s3, with signed S3). Each entry names its glue and .wasm
// with literal `new URL(..., import.meta.url)`s, the form bundlers rewrite, and passes them in.
import { makeOpen, makeEngineHooks } from './facade.js';
import { Engine } from './engine.js';
import { makeOpenExplorer } from './explore.js';

/**
 * The engine over a `wasm-bindgen --target web` build: `init` and `glue` its statically
 * imported glue (generation 0); `glueUrl()` and `wasmUrl()` where the glue file and its .wasm
 * are, for the fresh instance after a trap (called then, not before: a bundle loaded from a
 * blob: URL cannot resolve them, and needs them only if it traps). Generation 0 is the statically imported glue;
 * after a trap each fresh instance comes from its own copy of the glue (an ES module is
 * instantiated once per URL, hence the query), so nothing of the trapped instance is shared
 * with it. A bundled app serves both files (the glue as it is, not bundled), so the fresh
 * instance loads there too. The .wasm is passed explicitly, as the copy's own default (a
 * name beside it) is not where a bundler put the file.
 */
export function makeWebEngine(init, glue, glueUrl, wasmUrl) {
  let input; // what initialize() was given: the .wasm's URL or bytes
  async function loadWeb(generation) {
    if (generation === 0) {
      await init(input === undefined ? undefined : { module_or_path: input });
      return glue;
    }
    const copy = new URL(glueUrl());
    copy.searchParams.set('instance', String(generation));
    const fresh = await import(/* @vite-ignore */ /* webpackIgnore: true */ copy.href);
    await fresh.default({ module_or_path: input ?? wasmUrl() });
    return fresh;
  }
  const engine = new Engine(loadWeb);
  return {
    /** Load the module (optional: `open` does it). `input`: a URL or bytes of the .wasm. */
    async initialize(wasmInput) {
      input ??= wasmInput;
      return (await engine.instance()).wasm;
    },
    open: makeOpen(engine),
    openExplorer: makeOpenExplorer(engine),
    hooks: makeEngineHooks(engine),
  };
}
