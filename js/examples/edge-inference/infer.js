// Edge inference, the page side: start the worker (worker.js) and collect the predictions it
// streams back. The same in Node (worker_threads) and in a browser page (a module Worker).

/** Run the model over one epoch of `split` in a worker; resolves to predictions by sample index. */
export async function infer({ url, variable, split = 'all', epoch = 0, options = {}, model = {}, onBatch }) {
  const IS_NODE = typeof window === 'undefined' && typeof self === 'undefined';
  const src = new URL('./worker.js', import.meta.url);
  let w, on, stop;
  if (IS_NODE) {
    const { Worker } = await import('node:worker_threads');
    w = new Worker(src);
    on = (cb, fail) => {
      w.on('message', cb);
      w.on('error', fail);
    };
    stop = () => w.terminate();
  } else {
    w = new Worker(src, { type: 'module' });
    on = (cb, fail) => {
      w.addEventListener('message', (e) => cb(e.data));
      w.addEventListener('error', (e) => fail(new Error(e.message)));
    };
    stop = () => w.terminate();
  }
  const predictions = new Map(); // sample index → Float32Array of class probabilities
  try {
    return await new Promise((resolve, reject) => {
      on((m) => {
        if (m.kind === 'batch') {
          m.sampleIndices.forEach((s, r) => predictions.set(Number(s), m.probs.subarray(r * m.outputs, (r + 1) * m.outputs)));
          onBatch?.(m);
        } else if (m.kind === 'done') {
          resolve({ predictions, samples: m.samples, seconds: m.seconds, pass: m.pass });
        } else {
          reject(new Error(m.message));
        }
      }, reject);
      w.postMessage({ url, variable, split, epoch, options, model });
    });
  } finally {
    await stop();
  }
}
