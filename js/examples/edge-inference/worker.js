// Edge inference in a worker: an ONNX model on onnxruntime-web (its WebAssembly backend), fed
// batches by the insitubatch loader running in a worker of its own (`openInWorker`, started
// from here), so decoding the next batch and running the model on this one overlap. Only the
// predictions go to the page, their buffers transferred. The same file runs as a browser
// module Worker and as a Node worker_threads Worker (infer.js starts it).
//
// The data path, copy by copy:
//   1. the loader's engine copies each batch out of its wasm memory into a fresh ArrayBuffer
//      (the default); under `views` (the threaded build, in a cross-origin-isolated page) it
//      does not: the batch is a view over the loader's shared memory (`batchViews`);
//   2. that buffer is transferred to this worker (moved, not copied);
//   3. `new ort.Tensor('float32', data, shape)` wraps the Float32Array as it is (no copy);
//   4. `session.run` copies the tensor into onnxruntime's own wasm memory: the one copy no
//      option avoids, since WebAssembly code reads only its own linear memory and
//      onnxruntime-web's CPU (wasm) backend takes no memory from outside (its zero-copy
//      inputs are WebGPU buffers, another backend).
// Stage times, for the limiting stage: `waitSeconds` is this worker idle, waiting for the
// loader's next batch; `runSeconds` is spent in `session.run`. With `loaderAlone`, one pass of
// the same epoch runs first with no model (a loader of its own, so nothing is cached for the
// timed pass): the loader's throughput on its own.

const IS_NODE = typeof process !== 'undefined' && !!process.versions?.node && typeof self === 'undefined';
let post, listen;
if (IS_NODE) {
  const { parentPort } = await import('node:worker_threads');
  post = (m, t) => parentPort.postMessage(m, t);
  listen = (cb) => parentPort.once('message', cb);
} else {
  post = (m, t) => self.postMessage(m, t);
  listen = (cb) => self.addEventListener('message', (e) => cb(e.data), { once: true });
}

/** onnxruntime-web, from `spec` (a URL, a path, or in Node the package name). */
async function loadOrt(spec) {
  if (!spec) {
    throw new Error("no onnxruntime-web module given: pass `ort`, the URL of onnxruntime-web's dist/ort.wasm.min.mjs where the page serves it");
  }
  try {
    return await import(/* @vite-ignore */ spec);
  } catch (e) {
    throw new Error(
      `onnxruntime-web did not load (${e.message}): run \`npm ci\` in js/examples/edge-inference, or pass \`ort\` where it is: ${spec}`,
      { cause: e },
    );
  }
}

/** A view of an output tensor's values that this worker owns whole, so it can be transferred. */
function owned(data) {
  return data.byteOffset === 0 && data.byteLength === data.buffer.byteLength ? data : data.slice();
}

/** The model as errors name it: its path or URL, or how many bytes were given. */
function named(model) {
  return typeof model === 'string' ? model : `a model of ${model?.byteLength} bytes`;
}

/** One pass with no model: the loader's own throughput. */
async function loaderOnly(openInWorker, { url, variable, split, epoch, options, how }) {
  const ds = await openInWorker(url, { ...options, variables: [variable] }, how);
  try {
    await ds.setEpoch(epoch);
    let samples = 0;
    let bytes = 0;
    const t0 = performance.now();
    for await (const b of ds.iter(split)) {
      samples += b.sampleIndices.length;
      bytes += b.arrays[variable].data.byteLength;
    }
    return { samples, bytes, seconds: (performance.now() - t0) / 1e3 };
  } finally {
    await ds.close();
  }
}

listen(async (req) => {
  const { url, variable, split = 'all', epoch = 0, options = {}, model, ort: ortSpec = IS_NODE ? 'onnxruntime-web' : undefined } = req;
  const { ortThreads = 1, views = false, loaderAlone = false, how = {} } = req;
  let ds;
  let pending; // the next batch, asked for before the model runs on this one
  try {
    const ort = await loadOrt(ortSpec);
    // One thread for the model by default: the loader's worker has the other core of a
    // two-core machine. More (`ortThreads`) needs a cross-origin-isolated page.
    ort.env.wasm.numThreads = ortThreads;
    let session;
    try {
      session = await ort.InferenceSession.create(model);
    } catch (e) {
      throw new Error(`onnxruntime-web could not load the model (${e.message ?? e}): ${named(model)}`, { cause: e });
    }
    if (session.inputNames.length !== 1) {
      throw new Error(`the model takes ${session.inputNames.length} inputs (${session.inputNames.join(', ')}); this example feeds it one variable: ${named(model)}`);
    }
    const [input] = session.inputNames;
    const [output] = session.outputNames;
    const { openInWorker } = await import(IS_NODE ? '../../src/index.js' : '../../src/web.js');
    const loader = loaderAlone ? await loaderOnly(openInWorker, { url, variable, split, epoch, options, how }) : undefined;

    ds = await openInWorker(url, { ...options, variables: [variable], ...(views ? { batchViews: true } : {}) }, how);
    await ds.setEpoch(epoch);
    const pass = ds.iter(split);
    const s = { samples: 0, batches: 0, bytes: 0, waitSeconds: 0, runSeconds: 0, firstBatchSeconds: 0 };
    const t0 = performance.now();
    pending = pass.next();
    for (;;) {
      const tw = performance.now();
      const b = await pending;
      pending = undefined;
      s.waitSeconds += (performance.now() - tw) / 1e3;
      if (s.batches === 0) s.firstBatchSeconds = s.waitSeconds;
      if (b === undefined) break;
      // A view batch is valid until the pass's next step: ask for the next one after the
      // model has read this one. A transferred batch is this worker's: ask now, so the loader
      // decodes it while the model runs.
      if (!views) pending = pass.next();
      const a = b.arrays[variable];
      if (a.dtype !== 'float32') {
        throw new Error(`${variable} is ${a.dtype}; this model takes float32 (cast it in the model, or pick a float32 variable): ${url}`);
      }
      const x = new ort.Tensor('float32', a.data, a.shape); // wraps a.data: no copy
      const tr = performance.now();
      let out;
      try {
        out = await session.run({ [input]: x });
      } catch (e) {
        throw new Error(`the model failed on batch ${b.index} (${variable}, shape [${a.shape}]): ${e.message ?? e}`, { cause: e });
      }
      s.runSeconds += (performance.now() - tr) / 1e3;
      s.samples += a.shape[0];
      s.batches++;
      s.bytes += a.data.byteLength;
      if (views) pending = pass.next(); // this batch's arrays are not read after this
      const probs = owned(out[output].data);
      const classes = probs.length / a.shape[0]; // the output's values per sample
      post({ kind: 'batch', index: b.index, sampleIndices: b.sampleIndices, probs, classes }, [probs.buffer, b.sampleIndices.buffer]);
    }
    s.seconds = (performance.now() - t0) / 1e3;
    post({ kind: 'done', stats: { ...s, loader, build: ds.build, threads: ds.threads, ortThreads, views }, pass: await ds.lastPass() });
  } catch (e) {
    pending?.catch(() => {}); // the batch asked for ahead is not wanted now; nor is its error
    post({ kind: 'error', message: e?.message ?? String(e) });
  } finally {
    await ds?.close();
  }
});
