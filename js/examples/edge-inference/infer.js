// Edge inference, the page side: start the inference worker (worker.js) and collect the
// predictions it streams back. The same in Node (worker_threads) and in a browser page (a
// module Worker).

/**
 * Run the ONNX `model` over one epoch of `split` of `variable` in a worker; resolves to
 * `{ predictions, batches, stats, pass }`: `predictions` maps each sample index to its output
 * row (a Float32Array), `batches` lists each batch's `{ index, sampleIndices, probs, classes }`
 * in the order they ran, `stats` the stage times (worker.js), `pass` the loader's pass report.
 *
 * `model`: a path (Node) or URL (browsers) of the .onnx file, or its bytes (a Uint8Array).
 * `ort`: onnxruntime-web's module: in Node the package name by default (installed by `npm ci`
 * here), in a browser the URL of its `dist/ort.wasm.min.mjs`, with the .wasm beside it.
 * `options`: `open()`'s options for the loader; `how`: `openInWorker`'s third argument.
 * `views`: batches as views over the loader's shared memory (`batchViews`: the threaded build,
 * a cross-origin-isolated page); `ortThreads`: the model's threads (default 1);
 * `loaderAlone`: first time one pass with no model. `onBatch(message)` sees each batch.
 */
export async function infer({ url, variable, split = 'all', epoch = 0, options = {}, model, ort, ortThreads, views, loaderAlone, how, onBatch }) {
  const IS_NODE = typeof window === 'undefined' && typeof self === 'undefined';
  const src = new URL('./worker.js', import.meta.url);
  let w, on;
  if (IS_NODE) {
    const { Worker } = await import('node:worker_threads');
    w = new Worker(src);
    on = (cb, fail) => {
      w.on('message', cb);
      w.on('error', fail);
      w.on('exit', (code) => fail(new Error(`the inference worker exited (code ${code})`)));
    };
  } else {
    w = new Worker(src, { type: 'module' });
    on = (cb, fail) => {
      w.addEventListener('message', (e) => cb(e.data));
      w.addEventListener('error', (e) => fail(new Error(`the inference worker failed: ${e.message ?? 'script error'} (${src})`)));
    };
  }
  const predictions = new Map();
  const batches = [];
  try {
    return await new Promise((resolve, reject) => {
      on((m) => {
        if (m.kind === 'batch') {
          m.sampleIndices.forEach((s, r) => predictions.set(Number(s), m.probs.subarray(r * m.classes, (r + 1) * m.classes)));
          batches.push(m);
          onBatch?.(m);
        } else if (m.kind === 'done') {
          resolve({ predictions, batches, stats: m.stats, pass: m.pass });
        } else {
          reject(new Error(m.message));
        }
      }, reject);
      w.postMessage({ url, variable, split, epoch, options, model, ort, ortThreads, views, loaderAlone, how });
    });
  } finally {
    await w.terminate();
  }
}
