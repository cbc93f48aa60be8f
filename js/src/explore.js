// The dashboard's questions (www/): a store's metadata opened once, then "what would this
// configuration do?" answered without touching the store: the describe report, the draw
// order of an epoch (which chunk each sample comes from), and shuffle quality against memory
// across block sizes. Every answer comes from the engine's own code (wasm/src/explore.rs).

const SPLITS = ['train', 'val', 'test', 'all'];

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
  /** The describe report for `options` at `epoch`, for `iterations` passes at once and `threads` decode threads. */
  describe(options = {}, { epoch = 0, iterations = 1, threads = 1 } = {}) {
    return this.#ex.describe(options, epoch, iterations, threads);
  }
  /** The same report as text. */
  describeText(options = {}, { epoch = 0, iterations = 1, threads = 1 } = {}) {
    return this.#ex.describeText(options, epoch, iterations, threads);
  }
  /** The draw order of one epoch of `split`: anchors, their chunks, shuffle blocks and quality. */
  drawOrder(options = {}, split = 'train', { epoch = 0 } = {}) {
    if (!SPLITS.includes(split)) {
      throw new Error(`unknown split ${JSON.stringify(split)}; use "train", "val", "test" or "all"`);
    }
    return this.#ex.drawOrder(options, split, epoch);
  }
  /** Shuffle quality and memory of the train order for each `block_chunks` in `values`. */
  qualityCurve(options = {}, values = [1, 2, 4, 8, 16, 32], { epoch = 0, threads = 1 } = {}) {
    return this.#ex.qualityCurve(options, epoch, threads, Float64Array.from(values));
  }
  /** Free the explorer's memory now (optional). */
  close() {
    if (this.#ex) {
      this.#ex.free();
      this.#ex = undefined;
    }
  }
}

/** `openExplorer(url, { variables })` bound to a loaded wasm-bindgen module. */
export function makeOpenExplorer(getWasm) {
  return async function openExplorer(url, { variables } = {}) {
    const wasm = await getWasm();
    return new Explorer(await wasm.openExplorer(String(url), variables));
  };
}
