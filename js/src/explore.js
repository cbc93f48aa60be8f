// The dashboard's questions (www/): a store's metadata opened once, then "what would this
// configuration do?" answered without touching the store: the describe report, the draw
// order of an epoch (which chunk each sample comes from), and shuffle quality against memory
// across block sizes; and, reading a little of the store, the probe's predicted epoch. Every
// answer comes from the engine's own code (wasm/src/explore.rs).

import { Pass } from './facade.js';

/** A pass of `Explorer.iter`: an async iterable of batches (a `Pass` of the explorer's stream). */
export class ExplorePass extends Pass {
  /** A preview has no checkpoint: resume passes of a dataset (`open()`). */
  checkpoint() {
    throw new Error("an explorer pass is a preview and has no checkpoint; open() the store and use the dataset's passes to resume");
  }
}

/** A store's metadata, opened once. Options are `open()`'s; only `iter` and `probe` read the store. */
export class Explorer {
  #inst;
  #ex;
  #ref;
  constructor(inst, ex) {
    this.#inst = inst;
    this.#ex = ex;
    this.#ref = inst.track(ex);
  }
  /** `fn(ex)` on the open explorer: an Error once closed, the EngineTrapError once its engine trapped. */
  #with(fn) {
    const ex = this.#ex;
    if (!ex) throw new Error('the explorer is closed; open it again');
    return this.#inst.call(() => fn(ex));
  }
  get url() {
    return this.#with((ex) => ex.url);
  }
  /** Every array, data arrays first, then coordinates (`coordinate: true`). */
  arrays() {
    return this.#with((ex) => ex.arrays());
  }
  /**
   * The describe report for `options` at `epoch`, for `iterations` passes at once and
   * `threads` decode threads; `shift` ≠ 0 describes a windowed view (each variable also as
   * a target `label@+shift`).
   */
  describe(options = {}, { epoch = 0, iterations = 1, threads = 1, shift = 0 } = {}) {
    return this.#with((ex) => ex.describe(options, epoch, iterations, threads, shift));
  }
  /** The same report as text. */
  describeText(options = {}, { epoch = 0, iterations = 1, threads = 1, shift = 0 } = {}) {
    return this.#with((ex) => ex.describeText(options, epoch, iterations, threads, shift));
  }
  /** The draw order of one epoch of `split`: anchors, their chunks, shuffle blocks and quality. */
  drawOrder(options = {}, split = 'train', { epoch = 0, shift = 0 } = {}) {
    return this.#with((ex) => ex.drawOrder(options, split, epoch, shift));
  }
  /** Shuffle quality and memory of the train order for each `block_chunks` in `values`. */
  qualityCurve(options = {}, values = [1, 2, 4, 8, 16, 32], { epoch = 0, threads = 1, shift = 0 } = {}) {
    return this.#with((ex) => ex.qualityCurve(options, epoch, threads, shift, Float64Array.from(values)));
  }
  /**
   * Probe the store for `options`: a few real reads and decodes of the train split at
   * `epoch` (a windowed view when `shift` ≠ 0), timed on this thread, and the epoch they
   * predict for `threads` decode threads (`chunks` as `Dataset.probe`). Unlike the other
   * questions, this one reads the store.
   */
  async probe(options = {}, { epoch = 0, shift = 0, chunks, threads = 1 } = {}) {
    return this.#inst.wait(this.#with((ex) => ex.probe(options, epoch, shift, chunks, threads)));
  }
  /**
   * One epoch of `split`, read from the store on this thread, for previews: batches as
   * `open()` gives them; with `shift` ≠ 0 each variable also comes as its target `label@+shift`.
   * Through the explorer's `cacheDir` if it has one, unless `cache` is false (a run timed
   * against the store).
   */
  iter(options = {}, split = 'train', { epoch = 0, shift = 0, cache = true } = {}) {
    return new ExplorePass(this.#inst, this.#with((ex) => ex.iter(options, split, epoch, shift, cache)));
  }
  /** Free the explorer's memory now (optional). */
  close() {
    const ex = this.#ex;
    if (!ex) return;
    this.#ex = undefined;
    this.#inst.free(ex, this.#ref); // a no-op on a trapped instance, beyond forgetting it
  }
}

/**
 * `openExplorer(source, { variables, cacheDir, persist, readonlyCache, resetStaleCache })`
 * over an engine (src/engine.js). `source`: an http(s) URL, or a storage object
 * (`{ get(key, range), list?(prefix), location? }`, as `open()` takes; the notebook widget's
 * store read through the kernel). `cacheDir` and its flags, as `open()` takes them: a disk
 * tier in the origin private file system for the explorer's passes (`iter`; wasm/src/opfs/),
 * held until `close()`; the what-ifs answer without it, and the probe reads the store.
 */
export function makeOpenExplorer(engine) {
  return async function openExplorer(source, { variables, url, cacheDir, persist, readonlyCache, resetStaleCache } = {}) {
    const inst = await engine.instance();
    const opened = (f) => inst.wait(inst.call(f)).then((ex) => new Explorer(inst, ex));
    const cache = { cacheDir, persist, readonlyCache, resetStaleCache };
    if (source !== null && typeof source === 'object' && !(source instanceof URL)) {
      if (!inst.wasm.openExplorerWithStorage) {
        throw new Error('this build (the threaded one, inside openInWorker) opens URLs only; open a storage object with openExplorer() from the main entry');
      }
      return opened((w) => w.openExplorerWithStorage(source, url ?? source.location, variables, cache));
    }
    return opened((w) => w.openExplorer(String(source), variables, cache));
  };
}
