// Run from a clean folder outside the repo, where `npm install <tarball>` put the package:
// the installed `insitubatch` (Node entry), imported by its name, on the v3_zstd fixture
// store read from a path, a file:// URL and the loopback HTTP server. Every row of one
// train epoch is compared with the values zarr-python wrote (the fixture's values file), and
// the three sources must give the same batches. Then epoch 1 over HTTP, on this thread and
// through `openInWorker` (its worker src/worker-node.js, as the package's `insitubatch/worker`
// export resolves under the `node` condition; once started by the package, once by this
// script and handed over). The last stdout line is the HTTP passes as JSON
// ({ "0": { batches, samples, digest }, "1": ... } by epoch), which the browser check
// compares with the bundled pages'. And epoch 1 over HTTP with decode threads, from the
// `insitubatch/threads` export (Node's threaded entry; its threads start from the install).
//
//   node use-package.mjs FIXTURES_DIR HTTP_STORE_URL
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { open, openInWorker } from 'insitubatch';

const [fixtures, httpUrl] = process.argv.slice(2);
assert.ok(fixtures && httpUrl, 'usage: node use-package.mjs FIXTURES_DIR HTTP_STORE_URL');
const entry = fileURLToPath(import.meta.resolve('insitubatch'));
assert.equal(entry, resolve('node_modules/insitubatch/src/index.js'), 'imported from the install, not the repo');

const STORE = 'v3_zstd';
const OPTIONS = { variables: ['t2m', 'u10'], batchSize: 8, blockChunks: 2, seed: 3, fractions: [0.5, 0.25, 0.25] };
const store = JSON.parse(readFileSync(join(fixtures, 'manifest.json'), 'utf8')).stores.find((s) => s.name === STORE);
assert.equal(store.sample_axis, 0, 'the row comparison below assumes sample-first arrays');

/** The values zarr-python wrote for `label`, one Buffer per sample (C order, sample axis first). */
function sourceRows(label) {
  const a = store.arrays[label];
  assert.equal(a.dtype, 'float32');
  const raw = readFileSync(join(fixtures, a.values_file));
  const rowBytes = (raw.length / a.shape[0]) | 0;
  return Array.from({ length: a.shape[0] }, (_, t) => raw.subarray(t * rowBytes, (t + 1) * rowBytes));
}
const rows = Object.fromEntries(OPTIONS.variables.map((v) => [v, sourceRows(v)]));
const bytesOf = (v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

/** One train epoch (`epoch`) from `source`, each row checked against the source values. */
async function trainEpoch(source, epoch = 0) {
  const ds = await open(source, OPTIONS);
  ds.setEpoch(epoch);
  const drawable = Object.fromEntries(ds.describe().config.drawable_samples).train;
  const got = await checkedPass(ds.train(), source, drawable);
  assert.equal(ds.lastPass().batches, got.batches);
  ds.close();
  return got;
}

/** Every batch of `pass`, each row checked against the source values, hashed in order. */
async function checkedPass(pass, source, drawable) {
  const hash = createHash('sha256');
  const seen = new Set();
  let batches = 0;
  for await (const b of pass) {
    batches++;
    hash.update(bytesOf(b.sampleIndices));
    for (const label of Object.keys(b.arrays).sort()) {
      const { data, shape, dtype } = b.arrays[label];
      assert.equal(dtype, 'float32');
      assert.ok(data instanceof Float32Array);
      assert.deepEqual(shape.slice(1), store.arrays[label].shape.slice(1));
      const rowBytes = data.byteLength / shape[0];
      b.sampleIndices.forEach((t, i) => {
        const got = bytesOf(data).subarray(i * rowBytes, (i + 1) * rowBytes);
        assert.ok(got.equals(rows[label][Number(t)]), `${source}: ${label} row of sample ${t} differs from the source`);
      });
      hash.update(Buffer.from(label, 'utf8'));
      hash.update(bytesOf(data));
    }
    for (const t of b.sampleIndices) {
      assert.ok(!seen.has(t), `${source}: sample ${t} drawn twice in one epoch`);
      seen.add(t);
    }
  }
  assert.equal(seen.size, drawable, `${source}: every drawable train sample once`);
  return { batches, samples: seen.size, digest: hash.digest('hex') };
}

/** Epoch `epoch` of the train split in a worker (`how`: openInWorker's third argument). */
async function workerEpoch(source, epoch, how) {
  const wds = await openInWorker(source, OPTIONS, how);
  try {
    assert.equal(wds.build, 'node');
    await wds.setEpoch(epoch);
    const drawable = Object.fromEntries((await wds.describe()).config.drawable_samples).train;
    return await checkedPass(wds.train(), `${source} (worker)`, drawable);
  } finally {
    await wds.close();
  }
}

const storeDir = join(fixtures, store.path);
const fromPath = await trainEpoch(storeDir);
const fromFileUrl = await trainEpoch(pathToFileURL(storeDir).href);
const fromHttp = await trainEpoch(httpUrl);
assert.deepEqual(fromFileUrl, fromPath, 'file:// and a path give the same batches');
assert.deepEqual(fromHttp, fromPath, 'HTTP and a path give the same batches');
const epoch1 = await trainEpoch(httpUrl, 1);
assert.notEqual(epoch1.digest, fromHttp.digest, 'epoch 1 is shuffled anew');
const workerEntry = fileURLToPath(import.meta.resolve('insitubatch/worker'));
assert.equal(workerEntry, resolve('node_modules/insitubatch/src/worker-node.js'), 'insitubatch/worker: the Node worker under the node condition');
assert.deepEqual(await workerEpoch(httpUrl, 1), epoch1, 'openInWorker (its own worker) gives the same batches');
assert.deepEqual(await workerEpoch(httpUrl, 1, { worker: () => new Worker(new URL(import.meta.resolve('insitubatch/worker'))) }), epoch1, 'openInWorker in a worker on insitubatch/worker gives the same batches');
const threadsEntry = fileURLToPath(import.meta.resolve('insitubatch/threads'));
assert.equal(threadsEntry, resolve('node_modules/insitubatch/src/node-threads.js'), 'insitubatch/threads: the Node threaded entry');
const threads = await import('insitubatch/threads');
assert.equal(await threads.initialize(2), 2);
const withThreads = await threads.open(httpUrl, OPTIONS);
withThreads.setEpoch(1);
assert.deepEqual(await checkedPass(withThreads.train(), `${httpUrl} (2 decode threads)`, Object.fromEntries(withThreads.describe().config.drawable_samples).train), epoch1, 'insitubatch/threads gives the same batches');
withThreads.close();
console.log(`node: insitubatch from ${entry}`);
console.log(`node: ${STORE} (path, file://, HTTP): ${fromPath.batches} train batches, ${fromPath.samples} samples, each row equal to zarr-python's values`);
console.log(`node: epoch 1 over HTTP equal on this thread, in openInWorker's worker, in one on insitubatch/worker (${workerEntry}) and on 2 decode threads (insitubatch/threads)`);
console.log(JSON.stringify({ 0: fromHttp, 1: epoch1 }));
