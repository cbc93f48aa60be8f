#!/usr/bin/env node
// Experiment (issue #15: "fetch off the engine's thread"): how much faster one cold epoch in
// Node is when the HTTP reads run in worker_threads Workers (fetch + arrayBuffer there, the
// bytes transferred back and copied into wasm once by a storage object, wasm/src/js_storage.rs)
// instead of on the engine's own thread (`open(url)`, wasm/src/storage.rs). Both read with
// `batchViews`. Rounds are interleaved; each row prints its median and min–max.
// Not a product path: the worker's HTTP handling here is minimal (404 → missing, any other
// non-2xx → a transient error), where FetchStorage decides retries, ranges and aborts.
//
//   node js/bench/fetch-in-worker.mjs --store DIR/c8.zarr [--runs 3] [--workers 1,2]
import { Worker } from 'node:worker_threads';
import { basename, dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { open } from '../src/index.js';
import { serveDir } from '../test-support/browser.js';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string' },
    runs: { type: 'string', default: '3' },
    workers: { type: 'string', default: '1,2' },
    'batch-size': { type: 'string', default: '8' },
    'block-chunks': { type: 'string', default: '2' },
  },
});
if (!a.store) {
  console.error('usage: node js/bench/fetch-in-worker.mjs --store DIR/store.zarr [--runs 3] [--workers 1,2]');
  process.exit(2);
}
const storeDir = resolve(a.store);
const data = await serveDir(dirname(storeDir));
const base = `${data.url}/${basename(storeDir)}`;
const options = { batchSize: +a['batch-size'], blockChunks: +a['block-chunks'], seed: 0, fractions: [1, 0, 0], batchViews: true };

/** The worker: one fetch per request, the body's ArrayBuffer transferred back. */
const WORKER = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', async ({ id, url, range }) => {
  try {
    const headers = {};
    if (range) headers.Range = 'suffix' in range ? 'bytes=-' + range.suffix : 'bytes=' + range.start + '-' + (range.end - 1);
    const r = await fetch(url, { headers });
    if (r.status === 404) return parentPort.postMessage({ id, buf: null });
    if (!r.ok) throw new Error('HTTP ' + r.status + ': ' + url);
    const buf = await r.arrayBuffer();
    parentPort.postMessage({ id, buf }, [buf]);
  } catch (e) {
    parentPort.postMessage({ id, error: e.message });
  }
});`;

/** A storage object whose reads `n` workers serve, round robin. */
function workerStorage(n) {
  const workers = Array.from({ length: n }, () => new Worker(WORKER, { eval: true }));
  const pending = new Map();
  let next = 0;
  for (const w of workers) {
    w.on('message', ({ id, buf, error }) => {
      const p = pending.get(id);
      pending.delete(id);
      if (error) p.reject(Object.assign(new Error(error), { transient: true }));
      else p.resolve(buf && new Uint8Array(buf));
    });
  }
  return {
    location: base,
    get(key, range) {
      const id = next++;
      return new Promise((res, rej) => {
        pending.set(id, { resolve: res, reject: rej });
        workers[id % n].postMessage({ id, url: `${base}/${key}`, range });
      });
    },
    close: () => Promise.all(workers.map((w) => w.terminate())),
  };
}

async function epoch(source) {
  const ds = await open(source, options);
  const t0 = performance.now();
  let bytes = 0;
  for await (const b of ds.train()) for (const x of Object.values(b.arrays)) bytes += x.data.byteLength;
  const seconds = (performance.now() - t0) / 1e3;
  const decode = ds.lastPass().times.decode_s;
  ds.close();
  return { mb_per_s: bytes / 1e6 / seconds, decode_s: decode };
}

const rows = {};
try {
  for (let round = 0; round < +a.runs; round++) {
    (rows['open(url)'] ??= []).push(await epoch(base));
    for (const n of a.workers.split(',').map(Number)) {
      const storage = workerStorage(n);
      (rows[`${n} fetch worker(s)`] ??= []).push(await epoch(storage));
      await storage.close();
    }
  }
} finally {
  data.stop();
}
const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
for (const [k, runs] of Object.entries(rows)) {
  const mbs = runs.map((r) => r.mb_per_s);
  console.log(`${k.padEnd(20)} ${median(mbs).toFixed(1).padStart(7)} MB/s [${Math.min(...mbs).toFixed(1)}–${Math.max(...mbs).toFixed(1)}]  decode_s median ${median(runs.map((r) => r.decode_s)).toFixed(2)}`);
}
