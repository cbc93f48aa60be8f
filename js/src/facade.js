// The idiomatic API over the wasm-bindgen module, shared by the Node and browser entries.
// `wasm` is the wasm-bindgen module (its `open`, `Dataset` and `BatchStream`).

const SPLITS = ['train', 'val', 'test', 'all'];

/** `split` if it names a split, else an Error saying which ones exist. */
export function checkSplit(split) {
  if (!SPLITS.includes(split)) {
    throw new Error(`unknown split ${JSON.stringify(split)}; use "train", "val", "test" or "all"`);
  }
  return split;
}

/**
 * `for await (const b of pass)` over a class with `next()` (a batch, or `undefined` at the
 * end) and `close()`; an error or a `break` closes the pass.
 */
export class AsyncBatches {
  [Symbol.asyncIterator]() {
    return {
      next: async () => {
        try {
          const value = await this.next();
          return value === undefined ? { value: undefined, done: true } : { value, done: false };
        } catch (e) {
          await this.close();
          throw e;
        }
      },
      return: async () => {
        await this.close();
        return { value: undefined, done: true };
      },
    };
  }
}

/** The split views every dataset class has, over its own `iter(split)`. */
export class SplitViews {
  /** The train view of the current epoch (shuffled unless `shuffle: false`). */
  train() {
    return this.iter('train');
  }
  /** The validation view, in order. */
  val() {
    return this.iter('val');
  }
  /** The test view, in order. */
  test() {
    return this.iter('test');
  }
  /** Every split, in order. */
  all() {
    return this.iter('all');
  }
}

/** One pass over a split: an async iterable of batches (`for await (const b of ds.train())`). */
export class Pass extends AsyncBatches {
  #stream;
  constructor(stream) {
    super();
    this.#stream = stream;
    /** Batches this pass yields in all. */
    this.length = stream.length;
  }
  /** The next batch, or `undefined` after the last one. */
  async next() {
    if (!this.#stream) return undefined;
    const b = await this.#stream.next();
    if (b === undefined) this.close();
    return b;
  }
  /** Stats of this pass so far. */
  stats() {
    return this.#stream ? this.#stream.stats() : undefined;
  }
  /** End the pass now and free its memory (done for you by `break` in `for await`). */
  close() {
    if (this.#stream) {
      this.#stream.close();
      this.#stream.free();
      this.#stream = undefined;
    }
  }
}

/** An opened store. */
export class Dataset extends SplitViews {
  #ds;
  constructor(ds) {
    super();
    this.#ds = ds;
  }
  /** The static report (memory model, variables, notes); nothing is read. */
  describe(iterations = 1) {
    return this.#ds.describe(iterations);
  }
  /** The same report as text. */
  describeText(iterations = 1) {
    return this.#ds.describeText(iterations);
  }
  /** Reshuffle deterministically for `epoch`. */
  setEpoch(epoch) {
    this.#ds.setEpoch(epoch);
  }
  get epoch() {
    return this.#ds.epoch;
  }
  /** Variable labels, in batch order. */
  get labels() {
    return this.#ds.labels;
  }
  get url() {
    return this.#ds.url;
  }
  /** One epoch of `split` ("train" | "val" | "test" | "all"); starts reading now. */
  iter(split) {
    return new Pass(this.#ds.iter(checkSplit(split)));
  }
  /** Stats of the last pass that ended, or `undefined`. */
  lastPass() {
    return this.#ds.lastPass();
  }
  /** Chunks filled under `onBadChunk: "nan"` so far. */
  badChunks() {
    return this.#ds.badChunks();
  }
  /** Free the dataset's memory now (optional; it is also freed when collected). */
  close() {
    if (this.#ds) {
      this.#ds.free();
      this.#ds = undefined;
    }
  }
}

/**
 * Whether `source` is meant as a storage object (`{ get(key, range), list?, location? }`)
 * rather than a URL: any object but a `URL` (the engine says what a storage needs).
 */
export function isStorage(source) {
  return typeof source === 'object' && source !== null && !(source instanceof URL);
}

/**
 * `open(source, options)` bound to a loaded wasm-bindgen module. `source`: a URL, or a
 * storage object (wasm/src/js_storage.rs). `local`, in Node only: `{ isLocal(url),
 * nodeFileStorage(url) }` (src/node-storage.js), which turns `file://` URLs and plain paths
 * into a storage object; elsewhere the engine refuses them with what to use instead.
 */
export function makeOpen(getWasm, local) {
  return async function open(source, options = {}) {
    const wasm = await getWasm();
    if (isStorage(source)) {
      if (!wasm.openWithStorage) {
        throw new Error('this build (the threaded one, inside openInWorker) opens URLs only; open a storage object with open() from the main entry');
      }
      return new Dataset(await wasm.openWithStorage(source, undefined, options));
    }
    const url = String(source);
    if (local?.isLocal(url)) {
      return new Dataset(await wasm.openWithStorage(await local.nodeFileStorage(url), url, options));
    }
    return new Dataset(await wasm.open(url, options));
  };
}
