// Edge inference in a worker: stream batches of one variable from a Zarr store with the
// insitubatch engine, run the model (model.js) on each batch here, and post only the
// predictions to the page (their buffers transferred). Works as a browser module Worker and
// as a Node worker_threads Worker.
import { makeModel, forward } from './model.js';

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

listen(async ({ url, variable, split = 'all', epoch = 0, options = {}, model: spec = {} }) => {
  try {
    const { open } = await import(IS_NODE ? '../../src/index.js' : '../../src/web.js');
    const ds = await open(url, { ...options, variables: [variable] });
    ds.setEpoch(epoch);
    let model;
    const t0 = performance.now();
    let samples = 0;
    for await (const b of ds.iter(split)) {
      const a = b.arrays[variable];
      if (!(a.data instanceof Float32Array)) throw new Error(`${variable} is ${a.dtype}; this example's model takes float32`);
      const rows = a.shape[0];
      const inputs = a.data.length / rows; // one sample's values, flattened
      model ??= makeModel({ ...spec, inputs });
      const probs = forward(model, a.data, rows);
      samples += rows;
      post({ kind: 'batch', index: b.index, sampleIndices: b.sampleIndices, probs, outputs: model.outputs }, [probs.buffer, b.sampleIndices.buffer]);
    }
    post({ kind: 'done', samples, seconds: (performance.now() - t0) / 1e3, pass: ds.lastPass() });
    ds.close();
  } catch (e) {
    post({ kind: 'error', message: e?.message ?? String(e) });
  }
});
