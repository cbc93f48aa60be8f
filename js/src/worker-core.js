// The protocol of `openInWorker`'s worker, shared by its entries: src/worker-web.js (a
// dedicated Web Worker; what bundlers follow from src/web.js), src/worker-node.js (a
// worker_threads Worker; src/index.js) and src/worker.js (either, picked at run time: the
// plain-file `workerUrl`). This module imports no entry and nothing of Node: each worker
// entry hands `serve` its port and how to load its build, so a bundler following the
// browser worker never reaches node:fs.
//
// The worker runs the loader and posts each batch to the page (src/worker-client.js) with
// its buffers in the transfer list, so they move instead of being copied. Batch buffers are
// fresh ArrayBuffers the engine copied out of wasm memory (one per array plus
// `sampleIndices` and, for patches, `patchOrigins`), so transferring them leaves nothing
// shared with the wasm heap. Under `batchViews` (the threaded build only, whose memory is
// shared with the page) each array is posted as a typed array over that shared memory
// instead, with no copy: the page reads it in place until its pass's next step
// (src/worker-client.js), as `open()`'s views.
//
// Protocol (one request → one reply, in order): { id, op, ...args } → { id, ok, value } or
// { id, ok: false, error: { message, trap } } (`trap`: the engine trapped; the page then
// terminates this worker and rejects every request still pending); unasked, { fatal:
// { message } } when a decode thread trapped (the same end). Ops run one at a time so every
// reply refers to the state the page last asked for (setEpoch before iter, etc.).

/**
 * The browser builds, for src/worker-web.js and src/worker.js: the threaded one
 * (`builds.threads()`, src/web-threads.js) when `want` allows it and this worker is
 * cross-origin isolated, else the one-thread one (`builds.web()`, src/web-engine.js: the
 * browser entry's engine without `openInWorker`). Resolves to `{ api, build, threads }`.
 */
export async function loadWeb(want, nThreads, fetchWorker, builds) {
  const isolated = globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function';
  if (want === true && !isolated) {
    throw new Error('threads: true needs a cross-origin-isolated page (serve it with Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp); use threads: "auto" to fall back');
  }
  if (want !== false && isolated) {
    try {
      const api = await builds.threads();
      const threads = await api.initialize(undefined, nThreads, { fetchWorker });
      return { api, build: 'web-threads', threads };
    } catch (e) {
      if (want === true) throw e;
      // "auto": the threaded package is missing or cannot start here; the one-thread build still works.
      console.warn(`insitubatch: threaded build unavailable (${e.message}); using one thread`);
    }
  }
  const api = await builds.web();
  await api.initialize();
  return { api, build: 'web', threads: 1 };
}

/**
 * Answer the page's requests on `port` (`{ post(msg, transfer), listen(cb) }`), one at a
 * time, in order. `load(want, nThreads, fetchWorker)` loads the engine's build at the first
 * `open` and resolves to `{ api, build, threads }` (`api`: the entry module, with `open`).
 */
export function serve(port, load) {
  let api; // the entry module: { open, initialize }
  let dataset;
  let build;
  let threads = 1;
  const passes = new Map();
  let nextPass = 1;
  const transfer = { batches: 0, buffers: 0, detached: 0, bytes: 0, views: 0 };
  let views = false; // batchViews: batches posted as views over the shared memory

  /**
   * The threaded build's decode threads are workers of their own, whose traps nothing hears;
   * the engine posts them on a BroadcastChannel (wasm/src/trap.rs) and this worker passes
   * them on as `{ fatal }`: the page terminates it and rejects every pending request.
   */
  function watchDecodeThreads() {
    if (!api.setTrapChannel) return;
    const name = `insitubatch-trap-${crypto.randomUUID()}`;
    const channel = new BroadcastChannel(name);
    channel.onmessage = (e) =>
      port.post({
        fatal: {
          message: `the insitubatch wasm engine trapped (${e.data}). The worker is terminated with every pass and request in it; the next openInWorker() starts a fresh one`,
        },
      });
    api.setTrapChannel(name);
  }

  /** What a copied batch's reply transfers: every buffer of it (each one fresh, the batch's own). */
  function buffersOf(batch) {
    const out = ownBuffers(batch);
    for (const a of Object.values(batch.arrays)) out.push(a.data.buffer);
    return out;
  }

  /**
   * The buffers the engine made fresh for a batch of either kind (`sampleIndices` and, when
   * present, `patchOrigins` and each coordinate's values): moved to the page, never views over
   * wasm memory.
   */
  function ownBuffers(batch) {
    const out = [batch.sampleIndices.buffer];
    if (batch.patchOrigins) out.push(batch.patchOrigins.buffer);
    for (const v of Object.values(batch.coords ?? {})) out.push(v.buffer);
    return out;
  }

  /** A view batch as posted: each array's typed array over the shared memory, with its place in it. */
  function viewsOf(batch) {
    const arrays = {};
    for (const [label, a] of Object.entries(batch.arrays)) {
      const data = a.data; // checks that the batch is still this pass's step
      arrays[label] = { data, byteOffset: data.byteOffset, length: data.length, shape: a.shape, dtype: a.dtype };
    }
    return { ...batch, arrays };
  }

  /** A pass the page may now step: its id, length, epoch and starting checkpoint. */
  function started(pass) {
    const id = nextPass++;
    passes.set(id, pass);
    return { pass: id, length: pass.length, epoch: dataset.epoch, checkpoint: pass.checkpoint() };
  }

  function passOf(id) {
    const p = passes.get(id);
    if (!p) throw new Error(`pass ${id} is closed or unknown; start a new one with iter()`);
    return p;
  }

  const ops = {
    async open({ url, options, threads: want = 'auto', nThreads, fetchWorker = true }) {
      if (dataset) throw new Error('this worker already holds a dataset; open another with a new openInWorker()');
      ({ api, build, threads } = await load(want, nThreads, fetchWorker));
      if (options?.batchViews && build !== 'web-threads') {
        throw new Error(
          `batchViews in openInWorker needs the threaded build, whose memory the page can share; this worker runs the ${build} build. Serve the page cross-origin isolated (Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp) with threads "auto" or true, or drop the option: batches are then transferred, already yours`,
        );
      }
      watchDecodeThreads();
      dataset = await api.open(url, options);
      views = options?.batchViews === true;
      const memory = views ? api.sharedMemory() : undefined;
      return { build, threads, labels: dataset.labels, epoch: dataset.epoch, url: dataset.url, memory };
    },
    describe: ({ iterations }) => dataset.describe(iterations),
    describeText: ({ iterations }) => dataset.describeText(iterations),
    setEpoch: ({ epoch }) => {
      dataset.setEpoch(epoch);
      return dataset.epoch;
    },
    lastPass: () => dataset.lastPass(),
    probe: ({ chunks }) => dataset.probe(chunks),
    badChunks: () => dataset.badChunks(),
    iter: ({ split }) => started(dataset.iter(split)),
    resume: ({ checkpoint }) => started(dataset.resume(checkpoint)),
    checkpoint: ({ split }) => dataset.checkpoint(split),
    // Each reply carries the pass's checkpoint after that batch, so the page has it without
    // asking (and after the pass ended).
    async next({ pass }) {
      const p = passOf(pass);
      const batch = await p.next();
      const checkpoint = p.checkpoint();
      if (batch === undefined) {
        passes.delete(pass);
        return { value: { batch: undefined, checkpoint } };
      }
      if (views) return { value: { batch: viewsOf(batch), checkpoint }, transfer: ownBuffers(batch), views: true };
      return { value: { batch, checkpoint }, transfer: buffersOf(batch) };
    },
    stats: ({ pass }) => passes.get(pass)?.stats(),
    closePass({ pass }) {
      passes.get(pass)?.close();
      passes.delete(pass);
    },
    transferReport: () => ({ ...transfer }),
    // Chunk reads served off this thread (the threaded build's fetch worker), else null.
    fetchReport: () => api.fetchReport?.() ?? null,
    // Tests and diagnostics (src/facade.js makeEngineHooks): a forced trap, the memory figure.
    debugTrap: ({ kind, after }) => api.__debugTrap(kind, after),
    debugFailFetchWorker: () => api.__debugFailFetchWorker(),
    memoryBytes: () => api.memoryBytes(),
    heapBytes: () => api.heapBytes(),
    close() {
      for (const p of passes.values()) p.close();
      passes.clear();
      dataset?.close();
      dataset = undefined;
    },
  };

  let queue = Promise.resolve();
  port.listen((msg) => {
    queue = queue.then(async () => {
      const { id, op } = msg;
      try {
        const fn = ops[op];
        if (!fn) throw new Error(`unknown worker op ${JSON.stringify(op)}`);
        if (['debugTrap', 'debugFailFetchWorker', 'memoryBytes', 'heapBytes'].includes(op) && !api) throw new Error('the engine is not loaded yet; open a dataset first');
        if (!['open', 'transferReport', 'fetchReport', 'debugTrap', 'debugFailFetchWorker', 'memoryBytes', 'heapBytes'].includes(op) && !dataset) throw new Error('the dataset is not open (open failed or was closed)');
        const r = await fn(msg);
        if (op === 'next') {
          const bytes = (r.transfer ?? []).reduce((n, b) => n + b.byteLength, 0);
          port.post({ id, ok: true, value: r.value }, r.transfer ?? []);
          if (r.views) {
            transfer.views++;
          } else if (r.transfer) {
            // The buffers now belong to the page: here they are detached (byteLength 0).
            transfer.batches++;
            transfer.buffers += r.transfer.length;
            transfer.bytes += bytes;
            transfer.detached += r.transfer.filter((b) => b.byteLength === 0).length;
          }
        } else {
          port.post({ id, ok: true, value: r });
        }
      } catch (e) {
        // A trap (src/engine.js) ends this worker: the page terminates it and rejects the rest.
        port.post({ id, ok: false, error: { message: e?.message ?? String(e), trap: e?.name === 'EngineTrapError' } });
      }
    });
  });
}
