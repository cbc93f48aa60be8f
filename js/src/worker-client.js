// `openInWorker(url, options)`: the loader in a dedicated Web Worker (browsers) or a
// worker_threads Worker (Node), so decoding never blocks the page. The returned dataset has
// the main-thread API, except that methods which need an answer from the worker return
// promises (`describe`, `lastPass`, `setEpoch`, `stats`, `probe`). Batches arrive with their buffers
// transferred (moved, not copied) from the worker or, under `batchViews` (the threaded
// build), as views over the worker's shared memory, valid until the pass's next step.

import { AsyncBatches, SplitViews, isJoin, isStorage, joinEntries, viewBatch, staleViewError } from './facade.js';
import { EngineTrapError } from './engine.js';

/**
 * The page side of a browser `Worker` (a dedicated module worker running src/worker-web.js,
 * src/worker.js or the app's `how.worker`): `{ post, listen, terminate }`. `what` names it
 * in errors.
 */
export function browserWorkerPort(w, what) {
  return {
    post: (m) => w.postMessage(m),
    listen: (onMsg, onErr) => {
      w.addEventListener('message', (e) => onMsg(e.data));
      w.addEventListener('error', (e) => onErr(new Error(`the loader worker failed: ${e.message ?? 'script error'} (${what})`)));
      w.addEventListener('messageerror', () => onErr(new Error('a message from the loader worker could not be read')));
    },
    terminate: () => w.terminate(),
  };
}

/** The parent side of a Node `worker_threads` Worker running src/worker-node.js (or src/worker.js). */
export function nodeWorkerPort(w) {
  return {
    post: (m) => w.postMessage(m),
    listen: (onMsg, onErr) => {
      w.on('message', onMsg);
      w.on('error', onErr);
      w.on('exit', (code) => onErr(new Error(`the loader worker exited (code ${code})`)));
    },
    terminate: () => w.terminate(),
  };
}

/**
 * The page side of the worker protocol (see src/worker-core.js): numbered requests, one reply
 * each. A worker whose engine trapped, or that died (an error event, an exit, a trap in its
 * decode pool), is terminated and every pending request rejects: nothing waits forever.
 */
class Channel {
  #port;
  #pending = new Map();
  #next = 1;
  #dead;
  constructor(port) {
    this.#port = port;
    port.listen(
      (m) => {
        if (m.fatal) return this.#die(new EngineTrapError(m.fatal.message));
        const p = this.#pending.get(m.id);
        if (!p) return;
        this.#pending.delete(m.id);
        if (m.ok) return p.resolve(m.value);
        const e = m.error.trap ? new EngineTrapError(m.error.message) : new Error(m.error.message);
        p.reject(e);
        if (m.error.trap) this.#die(e);
      },
      (e) =>
        this.#die(
          new EngineTrapError(`the loader worker died (${e.message}); it is terminated and the next openInWorker() starts a fresh one`, { cause: e }),
        ),
    );
  }
  #fail(e) {
    this.#dead ??= e;
    for (const p of this.#pending.values()) p.reject(e);
    this.#pending.clear();
  }
  /** Reject everything with `e` and stop the worker (once; later calls change nothing). */
  #die(e) {
    if (this.#dead) return;
    this.#fail(e);
    this.#port.terminate();
  }
  /** Why the worker is gone (an Error), or undefined while it serves. */
  get dead() {
    return this.#dead;
  }
  call(op, args = {}) {
    if (this.#dead) return Promise.reject(this.#dead);
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#port.post({ ...args, id, op });
    });
  }
  terminate() {
    this.#die(new Error('the worker dataset is closed'));
  }
}

/** One pass over a split, read in the worker: an async iterable of batches. */
export class WorkerPass extends AsyncBatches {
  #ch;
  #id;
  #done = false;
  #memory; // the worker's shared memory, under batchViews
  #step = 0; // advanced by every next() and close(): a view batch is live at its own step only
  #checkpoint; // where the pass stands after the last batch received (each reply carries it)
  /**
   * `start`: the request that starts the pass in the worker (`{ op: 'iter', split }` or
   * `{ op: 'resume', checkpoint }`); `onStart(reply)` sees the worker's answer.
   */
  constructor(ch, start, memory, onStart) {
    super();
    this.#ch = ch;
    this.#memory = memory;
    this.length = undefined;
    const { op, ...args } = start;
    // Requests are answered in order, so next() may be called before this resolves.
    this.#id = ch.call(op, args).then((r) => {
      this.length = r.length;
      this.#checkpoint = r.checkpoint;
      onStart?.(r);
      return r.pass;
    });
    this.#id.catch(() => {}); // surfaced by next()
  }
  /** Batches this pass yields in all (resolves once the worker has planned the pass). */
  async size() {
    await this.#id;
    return this.length;
  }
  /**
   * The next batch (its buffers transferred from the worker), or `undefined` after the last.
   * Under `batchViews` its arrays are views over the worker's memory, and the previous
   * batch's views end here.
   */
  async next() {
    const step = ++this.#step;
    if (this.#done) return undefined;
    const pass = await this.#id;
    const { batch: r, checkpoint } = await this.#ch.call('next', { pass });
    this.#checkpoint = checkpoint;
    if (r === undefined) this.#done = true;
    if (r === undefined || !this.#memory) return r;
    return viewBatch(r, this.#memory, () => {
      if (this.#ch.dead) throw this.#ch.dead;
      if (this.#step !== step) throw staleViewError();
    });
  }
  /** Stats of this pass so far. */
  async stats() {
    return this.#ch.call('stats', { pass: await this.#id });
  }
  /**
   * Where this pass stands after the last batch received (`Pass.checkpoint()`): kept on this
   * side, so it is there after the pass ended or was closed, and after the worker died.
   * Resolves once the worker has started the pass.
   */
  async checkpoint() {
    await this.#id;
    return this.#checkpoint;
  }
  /** End the pass now (done for you by `break` in `for await`). */
  async close() {
    this.#step++;
    if (this.#done) return;
    this.#done = true;
    await this.#ch.call('closePass', { pass: await this.#id }).catch(() => {});
  }
}

/** A dataset whose engine runs in a worker. */
export class WorkerDataset extends SplitViews {
  #ch;
  #info;
  #epochCalls = 0; // setEpoch and resume calls so far: a resume's answer sets `epoch` only if it was the last
  constructor(ch, info) {
    super();
    this.#ch = ch;
    this.#info = info;
    this.epoch = info.epoch;
  }
  /** Which wasm build the worker runs: "web-threads", "web" (one thread) or "node". */
  get build() {
    return this.#info.build;
  }
  /** Decode threads in the worker (1 unless the threaded build runs). */
  get threads() {
    return this.#info.threads;
  }
  get labels() {
    return this.#info.labels;
  }
  get url() {
    return this.#info.url;
  }
  describe(iterations = 1) {
    return this.#ch.call('describe', { iterations });
  }
  describeText(iterations = 1) {
    return this.#ch.call('describeText', { iterations });
  }
  /** Reshuffle for `epoch`; passes started after this call use it (requests are ordered). */
  setEpoch(epoch) {
    this.#epochCalls++;
    this.epoch = epoch;
    return this.#ch.call('setEpoch', { epoch });
  }
  iter(split) {
    // The worker's engine reads the word: an unknown split rejects the pass's first next().
    return new WorkerPass(this.#ch, { op: 'iter', split }, this.#info.memory);
  }
  /**
   * `Dataset.resume` in the worker: the pass `checkpoint` was taken in, continued where it
   * stopped. A checkpoint the dataset cannot resume rejects the pass's first `next()` (or
   * `size()`). Sets `epoch` to the checkpoint's once the worker has started the pass.
   */
  resume(checkpoint) {
    const call = ++this.#epochCalls;
    return new WorkerPass(this.#ch, { op: 'resume', checkpoint }, this.#info.memory, (r) => {
      if (call === this.#epochCalls) this.epoch = r.epoch;
    });
  }
  /** `Dataset.checkpoint` in the worker: where the latest pass over `split` (default "train") stands. */
  checkpoint(split = 'train') {
    return this.#ch.call('checkpoint', { split });
  }
  lastPass() {
    return this.#ch.call('lastPass');
  }
  /** The probe's report (`Dataset.probe`), measured in the worker. */
  probe(chunks) {
    return this.#ch.call('probe', { chunks });
  }
  /** Chunks filled under `onBadChunk: "nan"` so far. */
  badChunks() {
    return this.#ch.call('badChunks');
  }
  /**
   * Diagnostics: chunk reads the threaded build's fetch worker served off the engine's
   * thread (`{ reads, bytes, inPlace, bodies, errors, running }`), or null where reads run on the
   * engine's thread (the one-thread build, Node, `fetchWorker: false`).
   */
  fetchReport() {
    return this.#ch.call('fetchReport');
  }
  /** Diagnostics: batches and buffers posted so far, and how many were detached in the worker afterwards. */
  transferReport() {
    return this.#ch.call('transferReport');
  }
  /** Tests only: force a trap in the worker's engine (src/facade.js `__debugTrap`). */
  __debugTrap(kind, after) {
    return this.#ch.call('debugTrap', { kind, after });
  }
  /** Tests only: make the threaded build's fetch worker fail (its reads go back to the engine's thread). */
  __debugFailFetchWorker() {
    return this.#ch.call('debugFailFetchWorker');
  }
  /** Bytes of the worker engine's wasm memory (wasm only grows: flat means nothing leaked). */
  memoryBytes() {
    return this.#ch.call('memoryBytes');
  }
  /** Bytes the worker engine's allocator has handed out and not had back. */
  heapBytes() {
    return this.#ch.call('heapBytes');
  }
  /** Free the dataset and stop the worker. */
  async close() {
    await this.#ch.call('close').catch(() => {});
    this.#ch.terminate();
  }
}

/**
 * Open the store at `url` in a new worker, with the options of `open()` (windows,
 * `onBadChunk`, `sampleRange`, `splitSeed`, `readPolicy`: plain data, posted as is).
 * `batchViews` needs the threaded build (a cross-origin-isolated page): the worker's memory
 * is shared, so batches are views over it, valid until the pass's next step (`copy()` keeps
 * one); elsewhere the worker refuses it, saying why. Without it, batches are transferred.
 * `how.threads`: "auto" (default: the threaded build when the page is cross-origin
 * isolated), true (require it) or false;
 * `how.nThreads`: decode threads (default `navigator.hardwareConcurrency`);
 * `how.fetchWorker`: in the threaded build, read chunks in a worker of their own, which
 *   writes them into the engine's shared memory (default true; false keeps reads on the
 *   engine's thread);
 * `how.worker`: a Worker the app started on the package's `insitubatch/worker` export (or
 *   a function returning one, called once per `openInWorker`); the dataset owns it from
 *   then on and terminates it on `close()` or a trap;
 * `how.workerUrl`: where src/worker.js (or src/worker-web.js) is served as a plain file.
 * Without either, the entry starts its own (src/web.js, src/index.js: `spawnWorker`).
 */
export function makeOpenInWorker(spawn) {
  return async function openInWorker(url, options = {}, how = {}) {
    const stores = isJoin(url) ? joinEntries(url) : Array.isArray(url) ? url.map((one) => ['', one]) : [['', url]];
    const urls = (one) => (Array.isArray(one) ? one.map(String) : String(one)); // a list inside a join is concatenated
    if (stores.some(([, one]) => (Array.isArray(one) ? one.some(isStorage) : isStorage(one)))) {
      throw new Error('openInWorker takes a URL: a storage object cannot be sent to a worker (its functions do not survive postMessage); open it with open() on this thread, or give the worker a URL');
    }
    if (typeof options?.credentials === 'function') {
      throw new Error("openInWorker cannot take a credentials callback: a function does not survive postMessage; pass the keys in storageOptions (aws_access_key_id, aws_secret_access_key, aws_session_token), or open() on this thread with the callback");
    }
    // A join crosses as a plain object of URLs, a concatenation as an array; the worker's
    // open() joins or concatenates them.
    const source = isJoin(url) ? Object.fromEntries(stores.map(([n, one]) => [n, urls(one)])) : urls(url);
    const ch = new Channel(await spawn(how));
    try {
      const info = await ch.call('open', { url: source, options, threads: how.threads ?? 'auto', nThreads: how.nThreads, fetchWorker: how.fetchWorker ?? true });
      return new WorkerDataset(ch, info);
    } catch (e) {
      ch.terminate();
      throw e;
    }
  };
}
