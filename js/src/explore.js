// The dashboard's questions (www/): a store's metadata opened once, then "what would this
// configuration do?" answered without touching the store: the describe report, the draw
// order of an epoch (which chunk each sample comes from), and shuffle quality against memory
// across block sizes. Every answer comes from the engine's own code (wasm/src/explore.rs).

import { AsyncBatches, checkSplit } from './facade.js';

/** A pass of `Explorer.iter`: an async iterable of batches. */
export class ExplorePass extends AsyncBatches {
  #s;
  constructor(s) {
    super();
    this.#s = s;
    this.length = s.length;
  }
  /** The next batch, or `undefined` after the last one. */
  async next() {
    if (!this.#s) return undefined;
    const b = await this.#s.next();
    if (b === undefined) this.close();
    return b;
  }
  /** Stats of this pass so far. */
  stats() {
    return this.#s ? this.#s.stats() : undefined;
  }
  /** End the pass now and free its memory. */
  close() {
    if (this.#s) {
      this.#s.close();
      this.#s.free();
      this.#s = undefined;
    }
  }
}

/** A store's metadata, opened once. Options are `open()`'s; nothing here reads the store. */
export class Explorer {
  #ex;
  constructor(ex) {
    this.#ex = ex;
  }
  get url() {
    return this.#ex.url;
  }
  /** Every array, data arrays first, then coordinates (`coordinate: true`). */
  arrays() {
    return this.#ex.arrays();
  }
  /**
   * The describe report for `options` at `epoch`, for `iterations` passes at once and
   * `threads` decode threads; `shift` ≠ 0 describes a windowed view (each variable also as
   * a target `label@+shift`).
   */
  describe(options = {}, { epoch = 0, iterations = 1, threads = 1, shift = 0 } = {}) {
    return this.#ex.describe(options, epoch, iterations, threads, shift);
  }
  /** The same report as text. */
  describeText(options = {}, { epoch = 0, iterations = 1, threads = 1, shift = 0 } = {}) {
    return this.#ex.describeText(options, epoch, iterations, threads, shift);
  }
  /** The draw order of one epoch of `split`: anchors, their chunks, shuffle blocks and quality. */
  drawOrder(options = {}, split = 'train', { epoch = 0, shift = 0 } = {}) {
    return this.#ex.drawOrder(options, checkSplit(split), epoch, shift);
  }
  /** Shuffle quality and memory of the train order for each `block_chunks` in `values`. */
  qualityCurve(options = {}, values = [1, 2, 4, 8, 16, 32], { epoch = 0, threads = 1, shift = 0 } = {}) {
    return this.#ex.qualityCurve(options, epoch, threads, shift, Float64Array.from(values));
  }
  /**
   * One epoch of `split`, read from the store on this thread, for previews: batches as
   * `open()` gives them; with `shift` ≠ 0 each variable also comes as its target `label@+shift`.
   */
  iter(options = {}, split = 'train', { epoch = 0, shift = 0 } = {}) {
    return new ExplorePass(this.#ex.iter(options, checkSplit(split), epoch, shift));
  }
  /** Free the explorer's memory now (optional). */
  close() {
    if (this.#ex) {
      this.#ex.free();
      this.#ex = undefined;
    }
  }
}

/**
 * `openExplorer(source, { variables })` bound to a loaded wasm-bindgen module. `source`: an
 * http(s) URL, or a storage object (`{ get(key, range), list?(prefix), location? }`, as
 * `open()` takes; the notebook widget's store read through the kernel).
 */
export function makeOpenExplorer(getWasm) {
  return async function openExplorer(source, { variables, url } = {}) {
    const wasm = await getWasm();
    if (source !== null && typeof source === 'object' && !(source instanceof URL)) {
      if (!wasm.openExplorerWithStorage) {
        throw new Error('this build (the threaded one, inside openInWorker) opens URLs only; open a storage object with openExplorer() from the main entry');
      }
      return new Explorer(await wasm.openExplorerWithStorage(source, url ?? source.location, variables));
    }
    return new Explorer(await wasm.openExplorer(String(source), variables));
  };
}
