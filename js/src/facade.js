// The idiomatic API over the wasm-bindgen module, shared by the Node and browser entries.
// `wasm` is the wasm-bindgen module (its `open`, `Dataset` and `BatchStream`), reached
// through an `Instance` of src/engine.js, which turns a trap into an `EngineTrapError`.

import { EngineTrapError } from './engine.js';

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

/**
 * A batch of views into wasm `memory` (the `batchViews` option): `raw` is the engine's
 * (wasm/src/api/batch.rs `batch_view_to_js`: each array's `data`, `byteOffset` and `length`), and
 * `check()` throws unless the batch may still be read (its pass is still at this step, its
 * instance alive). Each read of `data` checks that, then re-derives the typed array if the
 * memory grew since (a non-shared memory detaches its old `ArrayBuffer`; a shared one, the
 * threaded build's, never does), so a read never sees a detached buffer or, through `data`,
 * a later batch. The rest of `raw` (`sampleIndices`, a patched batch's `patchOrigins` and
 * `patchDims`, `coords`, `part`) is the batch's own already and kept as is. `copy()` gives a batch of the
 * default kind, owned by the caller. Used for `open()`'s passes and, over the worker's
 * shared memory, for `openInWorker`'s.
 */
export function viewBatch(raw, memory, check) {
  const arrays = {};
  for (const [label, a] of Object.entries(raw.arrays)) {
    let view = a.data;
    const { byteOffset, length } = a;
    arrays[label] = {
      get data() {
        check();
        if (view.length !== length) view = new view.constructor(memory.buffer, byteOffset, length);
        return view;
      },
      shape: a.shape,
      dtype: a.dtype,
    };
  }
  const batch = { ...raw, arrays };
  Object.defineProperty(batch, 'copy', {
    value: () => copyBatch(batch),
    enumerable: false,
  });
  return batch;
}

/** The error for a view batch read after its pass moved on. */
export function staleViewError() {
  return new Error(
    "this batch's arrays were views into the engine's memory (batchViews), valid until the pass's next step or close(); call batch.copy() before moving on to keep a batch",
  );
}

/** An owned copy of a batch (the default kind: nothing in it refers to wasm memory). */
function copyBatch(b) {
  const arrays = {};
  for (const [label, a] of Object.entries(b.arrays)) {
    arrays[label] = { data: a.data.slice(), shape: [...a.shape], dtype: a.dtype };
  }
  const out = { arrays, sampleIndices: b.sampleIndices.slice(), offsets: { ...b.offsets }, index: b.index, epoch: b.epoch };
  if (b.patchOrigins) Object.assign(out, { patchOrigins: b.patchOrigins.slice(), patchDims: [...b.patchDims] });
  if (b.coords) out.coords = Object.fromEntries(Object.entries(b.coords).map(([k, v]) => [k, v.slice()]));
  if (b.part) out.part = { ...b.part };
  return out;
}

/**
 * One pass over a split: an async iterable of batches (`for await (const b of ds.train())`).
 * `inst`: the engine instance (src/engine.js) whose `stream` this is; a trap in it rejects
 * `next()` with an `EngineTrapError` instead of leaving it pending. Under `batchViews` the
 * engine holds each batch until the next step and this class wraps it (`viewBatch`).
 */
export class Pass extends AsyncBatches {
  #inst;
  #stream;
  #ref;
  #views;
  #step = 0; // advanced by every next() and close(): a view batch is live at its own step only
  #final; // the checkpoint the pass ended at, kept once its stream is freed
  constructor(inst, stream) {
    super();
    this.#inst = inst;
    this.#stream = stream;
    this.#ref = inst.track(stream);
    this.#views = inst.call(() => stream.batchViews);
    /** Batches this pass yields in all. */
    this.length = stream.length;
  }
  /** The next batch, or `undefined` after the last one; under `batchViews` the previous batch's views end here. */
  async next() {
    const step = ++this.#step;
    if (!this.#stream) return undefined;
    const stream = this.#stream;
    let b;
    try {
      b = await this.#inst.wait(this.#inst.call(() => stream.next()));
    } catch (e) {
      if (e instanceof EngineTrapError) this.close(); // the pass died with its instance
      throw e;
    }
    if (b === undefined) this.close();
    if (b === undefined || !this.#views) return b;
    const inst = this.#inst;
    return viewBatch(b, inst.call((w) => w.wasmMemory()), () => {
      if (inst.trapped) throw inst.trapped;
      if (this.#step !== step) throw staleViewError();
    });
  }
  /** Stats of this pass so far. */
  stats() {
    const stream = this.#stream;
    return stream ? this.#inst.call(() => stream.stats()) : undefined;
  }
  /**
   * Where this pass stands after the last batch it returned: core's checkpoint, a plain
   * JSON-serializable object (the same format as Python's `state_dict()` and the CLI's
   * `--checkpoint` file). `ds.resume(checkpoint)` continues from there, in this process or
   * another. Also after the pass ended or was closed.
   */
  checkpoint() {
    const stream = this.#stream;
    if (stream) return this.#inst.call(() => stream.checkpoint());
    if (this.#final === undefined && this.#inst.trapped) throw this.#inst.trapped;
    return this.#final;
  }
  /**
   * End the pass now and free its memory (done for you by `break` in `for await`). After a
   * trap there is nothing to free: the memory went with the instance.
   */
  close() {
    this.#step++;
    const stream = this.#stream;
    if (!stream) return;
    this.#stream = undefined;
    if (this.#inst.trapped) return this.#inst.forget(this.#ref);
    if (stream.checkpoint) this.#final = this.#inst.call(() => stream.checkpoint()); // not the explorer's passes
    this.#inst.call(() => stream.close());
    this.#inst.free(stream, this.#ref);
  }
}

/** An opened store. */
export class Dataset extends SplitViews {
  #inst;
  #ds;
  #ref;
  constructor(inst, ds) {
    super();
    this.#inst = inst;
    this.#ds = ds;
    this.#ref = inst.track(ds);
  }
  /** `fn(ds)` on the open dataset: an Error once closed, the EngineTrapError once its engine trapped. */
  #with(fn) {
    const ds = this.#ds;
    if (!ds) throw new Error('the dataset is closed; open the store again');
    return this.#inst.call(() => fn(ds));
  }
  /** The static report (memory model, variables, notes); nothing is read. */
  describe(iterations = 1) {
    return this.#with((ds) => ds.describe(iterations));
  }
  /** The same report as text. */
  describeText(iterations = 1) {
    return this.#with((ds) => ds.describeText(iterations));
  }
  /** Reshuffle deterministically for `epoch`. */
  setEpoch(epoch) {
    this.#with((ds) => ds.setEpoch(epoch));
  }
  get epoch() {
    return this.#with((ds) => ds.epoch);
  }
  /** Variable labels, in batch order. */
  get labels() {
    return this.#with((ds) => ds.labels);
  }
  get url() {
    return this.#with((ds) => ds.url);
  }
  /** One epoch of `split` ("train" | "val" | "test" | "all"); starts reading now. */
  iter(split) {
    // The engine reads the word (core's one parser), so an unknown split is its error.
    return new Pass(this.#inst, this.#with((ds) => ds.iter(split)));
  }
  /**
   * The pass `checkpoint` was taken in (`pass.checkpoint()`, `ds.checkpoint()`, or its JSON
   * text: Python's `state_dict()`, the CLI's `--checkpoint` file), continued where it
   * stopped; starts reading now. With the world size it was taken with: exactly the batches
   * the uninterrupted pass would have yielded next. With another: this rank's share of the
   * samples no rank had consumed. Sets `epoch` to the checkpoint's. Throws for a checkpoint
   * of another seed, batch size or dataset.
   */
  resume(checkpoint) {
    return new Pass(this.#inst, this.#with((ds) => ds.resume(checkpoint)));
  }
  /**
   * Where the latest pass over `split` (default "train") stands, as `pass.checkpoint()`
   * (also after it ended); before a pass of the current epoch, a fresh pass's checkpoint.
   */
  checkpoint(split = 'train') {
    return this.#with((ds) => ds.checkpoint(split));
  }
  /**
   * Probe the store: time a few real reads and decodes of the train split at the current
   * epoch and predict its epoch (`chunks` at once after the first; default the engine's
   * `PROBE_CHUNKS`). Reads the store; nothing it loads is kept.
   */
  async probe(chunks) {
    return this.#inst.wait(this.#with((ds) => ds.probe(chunks)));
  }
  /** Stats of the last pass that ended, or `undefined`. */
  lastPass() {
    return this.#with((ds) => ds.lastPass());
  }
  /** Chunks filled under `onBadChunk: "nan"` so far. */
  badChunks() {
    return this.#with((ds) => ds.badChunks());
  }
  /**
   * Free the dataset's memory now (optional; it is also freed when collected). Its passes
   * end: a pass in progress holds the engine until it is closed or collected.
   */
  close() {
    const ds = this.#ds;
    if (!ds) return;
    this.#ds = undefined;
    this.#inst.free(ds, this.#ref); // a no-op on a trapped instance, beyond forgetting it
  }
}

/**
 * Test and diagnostics hooks of an engine (src/engine.js), exported doc-hidden by each entry:
 * `__debugTrap(kind, after)` forces a trap (wasm/src/trap.rs: "panic", "oom" or
 * "unreachable"; now, or inside the `after`-th pass `next()` from now), `memoryBytes()` is
 * the live instance's linear memory (it only grows), `heapBytes()` the bytes its allocator
 * has handed out and not had back, `engineGeneration()` how many instances were started.
 */
export function makeEngineHooks(engine) {
  return {
    async __debugTrap(kind, after) {
      const inst = await engine.instance();
      inst.call((w) => w.__debugTrap(kind, after));
    },
    async memoryBytes() {
      return (await engine.instance()).call((w) => w.memoryBytes());
    },
    async heapBytes() {
      return (await engine.instance()).call((w) => w.heapBytes());
    },
    engineGeneration: () => engine.generation,
  };
}

/**
 * Whether `source` is meant as a storage object (`{ get(key, range), list?, location? }`)
 * rather than a URL: any object but a `URL` (the engine says what a storage needs).
 */
export function isStorage(source) {
  return typeof source === 'object' && source !== null && !(source instanceof URL);
}

/** The members that make an object a storage object, even a faulty one (the engine says what is wrong). */
const STORAGE_MEMBERS = ['get', 'list', 'location'];

/**
 * Whether `source` joins several stores (docs/joins.md): a `Map`, or an object that is
 * neither a `URL` nor a storage object (none of `get`, `list`, `location`),
 * `{ name: url or storage }`. Stores named like those members are joined with a `Map`.
 */
export function isJoin(source) {
  if (Array.isArray(source)) return false; // a list of stores is concatenated
  return source instanceof Map || (isStorage(source) && !STORAGE_MEMBERS.some((k) => k in source));
}

/** A join's `[name, store]` pairs, in the order given. */
export function joinEntries(source) {
  return (source instanceof Map ? [...source.entries()] : Object.entries(source)).map(([n, one]) => [String(n), one]);
}

/**
 * `open(source, options)` over an engine (src/engine.js: a fresh wasm instance after a
 * trap). `source`: a URL, a storage object (wasm/src/js_storage.rs), a join of them by
 * name (`isJoin`), or an array of them, concatenated along the sample axis; a URL may be a
 * kerchunk reference set, `reference+URL`, or an Icechunk repository, `icechunk+URL#VERSION`. `local`, in Node only: `{ isLocal(url),
 * nodeFileStorage(url), fileUrl(path) }` (src/node-storage.js), which turns `file://` URLs and
 * plain paths into a storage object (and a reference set's local files into reads under `/`);
 * elsewhere the engine refuses them with what to use instead.
 */
/** The prefix of a kerchunk reference set's URL (`reference+https://host/era5.json`). */
const REFERENCE_PREFIX = 'reference+';
/** The prefix of an Icechunk repository's URL (`icechunk+https://host/era5#tag=v1`). */
const ICECHUNK_PREFIX = 'icechunk+';

/** `url`'s prefix when it names a reference set or an Icechunk repository, else undefined. */
const prefixOf = (url) => [REFERENCE_PREFIX, ICECHUNK_PREFIX].find((p) => url.startsWith(p));

export function makeOpen(engine, local) {
  /** One store of a join, as `openJoined` takes it: a URL, a storage object, or an array of them (concatenated first). */
  const joinPart = async (one) => {
    if (Array.isArray(one)) return Promise.all(one.map(joinPart));
    if (isStorage(one)) return one;
    const url = String(one);
    return local?.isLocal(url) && !prefixOf(url) ? local.nodeFileStorage(url) : url;
  };
  return async function open(source, options = {}) {
    const inst = await engine.instance();
    const opened = (f) => inst.wait(inst.call(f)).then((ds) => new Dataset(inst, ds));
    if (Array.isArray(source)) {
      const parts = await Promise.all(source.map(joinPart));
      return opened((w) => w.openConcat(parts, options));
    }
    if (isJoin(source)) {
      const entries = joinEntries(source);
      const parts = await Promise.all(entries.map(([, one]) => joinPart(one)));
      return opened((w) => w.openJoined(entries.map(([name]) => name), parts, options));
    }
    if (isStorage(source)) {
      if (!inst.wasm.openWithStorage) {
        throw new Error('this build (the threaded one, inside openInWorker) opens URLs only; open a storage object with open() from the main entry');
      }
      return opened((w) => w.openWithStorage(source, undefined, options));
    }
    const url = String(source);
    const prefix = prefixOf(url);
    if (prefix) {
      // A kerchunk reference set or an Icechunk repository (wasm/src/refs.rs). In Node its
      // local files (and a local set or repository) are read through a node:fs store rooted
      // at `/`; elsewhere its files are URLs. An Icechunk URL's fragment names its version.
      if (local && inst.wasm.openReferences) {
        const inner = url.slice(prefix.length);
        const cut = prefix === ICECHUNK_PREFIX && inner.includes('#') ? inner.indexOf('#') : inner.length;
        const [where, fragment] = [inner.slice(0, cut), inner.slice(cut)];
        const absolute = local.isLocal(where) ? prefix + local.fileUrl(where) + fragment : url;
        const root = await local.nodeFileStorage('/');
        return opened((w) => w.openReferences(absolute, root, options));
      }
      return opened((w) => w.open(url, options));
    }
    if (local?.isLocal(url)) {
      const storage = await local.nodeFileStorage(url);
      return opened((w) => w.openWithStorage(storage, url, options));
    }
    return opened((w) => w.open(url, options));
  };
}
