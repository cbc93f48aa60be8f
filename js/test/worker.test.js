// openInWorker in Node (worker_threads): the same batches as the main-thread dataset, with
// every batch buffer transferred (detached in the worker after posting), errors as Error.
// The browser half (a dedicated Web Worker in headless Chromium) is js/test/browser.test.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { open, openInWorker } from '../src/index.js';
import { HTTP, skip, manifest, dataVars, collect, digest } from '../test-support/helpers.js';

const OPTS = { batchSize: 7, blockChunks: 2, seed: 3 };

test('a worker yields the main-thread batches, buffers transferred', { skip }, async () => {
  for (const name of ['v3_zstd', 'v3_sharded', 'v2_blosc']) {
    const store = manifest().stores.find((s) => s.name === name);
    const opts = { ...OPTS, variables: dataVars(store), sampleAxis: store.sample_axis };
    const url = `${HTTP}/${store.path}`;
    const main = await open(url, opts);
    const wds = await openInWorker(url, opts);
    assert.equal(wds.build, 'node');
    assert.equal(wds.threads, 1);
    assert.deepEqual(wds.labels, main.labels);
    for (const epoch of [0, 2]) {
      main.setEpoch(epoch);
      await wds.setEpoch(epoch);
      for (const split of ['train', 'all']) {
        const want = await collect(main.iter(split));
        const pass = wds.iter(split);
        const got = await collect(pass);
        assert.equal(pass.length, want.length);
        assert.equal(got.length, want.length);
        assert.ok(got[0].arrays[main.labels[0]].data instanceof want[0].arrays[main.labels[0]].data.constructor);
        assert.deepEqual(got[0].arrays[main.labels[0]].shape, want[0].arrays[main.labels[0]].shape);
        assert.equal(digest(got), digest(want), `${name}/${split}/epoch ${epoch}`);
      }
    }
    const r = await wds.transferReport();
    assert.ok(r.batches > 0);
    assert.equal(r.buffers, r.batches * (main.labels.length + 1), 'each array and sampleIndices is transferred');
    assert.equal(r.detached, r.buffers, 'every transferred buffer is detached (byteLength 0) in the worker');
    assert.ok(r.bytes > 0);
    const last = await wds.lastPass();
    assert.equal(last.split, 'all');
    assert.match(await wds.describeText(), new RegExp(main.labels[0]));
    assert.equal((await wds.describe()).memory.iterations, 1);
    await wds.close();
    main.close();
  }
});

test('a worker pass: early break, then the next epoch', { skip }, async () => {
  const wds = await openInWorker(`${HTTP}/v3_zstd`, { variables: ['t2m', 'u10'], batchSize: 4, blockChunks: 1 });
  const pass = wds.train();
  assert.equal(await pass.size(), 16);
  for await (const b of pass) {
    assert.equal(b.sampleIndices.length, 4);
    break;
  }
  const live = wds.val();
  await live.next();
  assert.equal((await live.stats()).split, 'val', 'stats of a pass in progress');
  await live.close();
  await wds.setEpoch(1);
  const batches = await collect(wds.train());
  assert.equal(batches.reduce((s, b) => s + b.sampleIndices.length, 0), 64);
  await wds.close();
  await assert.rejects(wds.describe(), /closed/);
});

test('worker errors reach the page as Error with the engine message', { skip }, async () => {
  await assert.rejects(openInWorker(`${HTTP}/no_such_store`, { variables: ['t2m'] }), (e) => {
    assert.ok(e instanceof Error);
    assert.match(e.message, /no_such_store/);
    return true;
  });
  await assert.rejects(openInWorker(`${HTTP}/v3_zstd`, { batch_size: 3 }), /unknown option "batch_size"; the known ones are batchSize/);
  await assert.rejects(openInWorker(`${HTTP}/v3_zstd`, { variables: ['t2m'] }, { threads: true }), /browsers only/);
  const wds = await openInWorker(`${HTTP}/v3_zstd`, { variables: ['t2m'] });
  await assert.rejects(wds.iter('bogus').next(), /unknown split/);
  await assert.rejects(wds.setEpoch(-1), /non-negative integer/);
  await wds.close();
});

test('the worker from a plain file (workerUrl: src/worker.js, both targets in one) or started by the caller (how.worker) yields the same batches', { skip }, async () => {
  const url = `${HTTP}/v3_zstd`;
  const opts = { ...OPTS, variables: ['t2m', 'u10'] };
  const main = await open(url, opts);
  main.setEpoch(1);
  const want = digest(await collect(main.train()));
  main.close();
  const hows = {
    'workerUrl src/worker.js': { workerUrl: new URL('../src/worker.js', import.meta.url) },
    'how.worker (a Worker)': { worker: new Worker(new URL('../src/worker-node.js', import.meta.url)) },
    'how.worker (a function)': { worker: () => new Worker(new URL('../src/worker-node.js', import.meta.url)) },
  };
  for (const [what, how] of Object.entries(hows)) {
    const wds = await openInWorker(url, opts, how);
    assert.equal(wds.build, 'node', what);
    await wds.setEpoch(1);
    assert.equal(digest(await collect(wds.train())), want, what);
    await wds.close();
  }
});
