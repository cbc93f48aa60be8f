// Traps as errors, the JS half (the wasm half is wasm/src/trap.rs). A panic or an
// out-of-memory abort in wasm is a trap: a `WebAssembly.RuntimeError` thrown out of whatever
// JS frame called into the instance. When that frame is one of our calls, we catch it; when
// it is the engine's own task (a microtask of wasm-bindgen-futures, where every read and
// decode runs), the loader attributes it (Node: each instance's own `queueMicrotask`) or,
// in browsers, a page's or worker's `error` listener claims it. Either way the
// instance is poisoned: every promise waiting on it rejects with an `EngineTrapError`
// (pending ones would otherwise never settle), its objects are never called again, and the
// next `open()` instantiates a fresh module.

/** An engine trap: the wasm instance died; open the store again (a fresh instance). */
export class EngineTrapError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'EngineTrapError';
  }
}

/** Whether `e` is a trap of a wasm instance (not an error the engine returned). */
export function isTrap(e) {
  if (typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError) return true;
  // Stack exhaustion in wasm surfaces as a RangeError in V8.
  return e instanceof RangeError && /call stack/i.test(e.message) && /wasm/.test(e.stack ?? '');
}

const GIB = 2 ** 30;

/** The clear error for a trap of `inst`, with the original as `cause`. */
function trapError(e, wasm) {
  let panic;
  let memory;
  let max;
  try {
    panic = wasm.lastPanic?.(); // small and read-only; the instance is not used after this
    memory = wasm.memoryBytes?.();
    max = wasm.memoryMaxBytes?.();
  } catch {
    // a second trap here only loses the details
  }
  const gib = (n) => `${((n ?? 0) / GIB).toFixed(2)} GiB`;
  const what = panic
    ? `a panic: ${panic}`
    : `${e?.message ?? e}, an abort without a panic message: most likely an allocation failed (its memory had grown to ${gib(memory)}${max ? ` of at most ${gib(max)}` : ''}); lower cacheBudgetBytes, prefetchDepth or batchSize, and see describe()'s peak estimate`;
  return new EngineTrapError(
    `the insitubatch wasm engine trapped (${what}). The engine instance is discarded: this pass and every dataset opened on it are closed, and the next open() starts a fresh instance; open the store again to continue`,
    { cause: e },
  );
}

/**
 * One instantiated wasm-bindgen module. `call` and `wait` are the only ways into it: a trap
 * (or a trap elsewhere in the instance while a promise is pending) poisons it.
 */
export class Instance {
  /** The EngineTrapError once the instance has trapped. */
  trapped;
  #waiters = new Set();
  #objects = new Set();
  #onBusy;
  /** `onBusy(busy)`: told when the first wait starts and when the last one ends (Engine's). */
  constructor(wasm, onBusy) {
    this.wasm = wasm;
    this.#onBusy = onBusy;
  }
  /** `fn(wasm)`, synchronously; a trap poisons the instance and throws the clear error. */
  call(fn) {
    if (this.trapped) throw this.trapped;
    try {
      return fn(this.wasm);
    } catch (e) {
      throw isTrap(e) ? this.poison(e) : e;
    }
  }
  /** `promise` from this instance, or the trap error if the instance traps before it settles. */
  async wait(promise) {
    if (this.trapped) throw this.trapped;
    let reject;
    const dead = new Promise((_, r) => {
      reject = r;
    });
    this.#waiters.add(reject);
    if (this.#waiters.size === 1) this.#onBusy?.(true);
    try {
      return await Promise.race([promise, dead]);
    } catch (e) {
      throw isTrap(e) ? this.poison(e) : e;
    } finally {
      this.#waiters.delete(reject);
      if (this.#waiters.size === 0) this.#onBusy?.(false);
    }
  }
  /** Whether a promise of this instance is being waited on. */
  get waiting() {
    return this.#waiters.size > 0;
  }
  /**
   * Remember a wasm-bindgen object of this instance, so that a trap detaches it (no later
   * `free()`, not even by its FinalizationRegistry, runs in the dead instance). Returns a
   * token for `forget` (weak: an object dropped without close() is still collected).
   */
  track(obj) {
    const ref = new WeakRef(obj);
    this.#objects.add(ref);
    return ref;
  }
  forget(ref) {
    this.#objects.delete(ref);
  }
  /** Free a tracked object (`close()`): a no-op once the instance has trapped. */
  free(obj, ref) {
    this.#objects.delete(ref);
    if (!this.trapped) this.call(() => obj.free());
  }
  /** Mark the instance dead with the trap `e`; returns the EngineTrapError (the same one each time). */
  poison(e) {
    if (this.trapped) return this.trapped;
    this.trapped = trapError(e, this.wasm);
    for (const reject of this.#waiters) reject(this.trapped);
    this.#waiters.clear();
    for (const ref of this.#objects) ref.deref()?.__destroy_into_raw?.();
    this.#objects.clear();
    return this.trapped;
  }
}

const engines = new Set();

/** Browsers (page or worker): claim uncaught traps so they do not reach the console as unhandled. */
function onErrorEvent(ev) {
  if (claim(ev.error)) ev.preventDefault();
}

function claim(e) {
  if (!isTrap(e)) return false;
  let claimed = false;
  for (const engine of engines) claimed = engine.claim(e) || claimed;
  return claimed;
}

let installed = false;
/**
 * Browsers: an `error` listener on the page's or worker's global. Node needs none: its
 * loader gives each instance its own `queueMicrotask` (src/index.js), and a listener for
 * `uncaughtException` would change how the whole process handles every other error.
 */
function installHandlers() {
  if (installed) return;
  installed = true;
  const isNode = typeof process !== 'undefined' && !!process.versions?.node;
  if (!isNode && typeof globalThis.addEventListener === 'function') {
    globalThis.addEventListener('error', onErrorEvent);
  }
}

/**
 * The engine of one build: `load(generation)` instantiates a fresh wasm-bindgen module
 * (generation 0 first, a new one after each trap). `instance()` is the live one.
 * `onBusy(busy)` (optional) is told when the live instance starts and stops being waited on:
 * Node's threaded build keeps the process alive only then (src/node-threads.js).
 */
export class Engine {
  #load;
  #generation = 0;
  #current; // a promise of the live Instance
  #live; // the live Instance once loaded
  #dead = 0; // instances that trapped
  #onBusy;
  constructor(load, { onBusy } = {}) {
    this.#load = load;
    this.#onBusy = onBusy;
    engines.add(this);
  }
  /** The live instance, instantiating a fresh module if the last one trapped. */
  instance() {
    if (!this.#current || this.#live?.trapped) {
      const generation = this.#generation++;
      if (this.#live) this.#dead++;
      this.#live = undefined;
      const box = {};
      // A trap the loader attributes to this instance (Node: its own queueMicrotask).
      const onTrap = (e) => (box.instance ? box.instance.poison(e) : undefined);
      this.#current = Promise.resolve()
        .then(() => this.#load(generation, onTrap))
        .then((wasm) => {
          installHandlers();
          box.instance = new Instance(wasm, this.#onBusy);
          this.#live = box.instance;
          return this.#live;
        });
      this.#current.catch(() => {
        this.#current = undefined; // a failed load is retried by the next call
      });
    }
    return this.#current;
  }
  /** How many instances were started (1 until the first trap). */
  get generation() {
    return this.#generation;
  }
  /**
   * An uncaught trap nothing attributed (browsers; Node outside engine tasks, e.g. a
   * finalizer). The live instance's if it is waited on, or if no instance died before (a
   * dead one's leftover tasks may still trap); else a dead instance's, swallowed.
   */
  claim(e) {
    const live = this.#live;
    if (live && !live.trapped && (live.waiting || this.#dead === 0)) {
      live.poison(e);
      return true;
    }
    return this.#dead > 0 || !!live?.trapped;
  }
}
