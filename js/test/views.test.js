// `batchViews: true` (wasm/src/api/batch.rs `batch_view_to_js`, js/src/facade.js `viewBatch`):
// each batch's arrays are typed arrays over wasm memory instead of copies, valid until the
// pass's next step or close(). Over a whole epoch of every fixture store (read over the
// loopback HTTP server; sharded, blosc, gzip, v2, windows…) and every split, the views hold
// exactly the bytes of the copying path, and so do their `copy()`s read after the epoch
// ended (a copy does not change with later batches). A view read after wasm memory grew
// (which detaches a non-shared memory's old ArrayBuffer) still gives its batch; read after
// the next step or close() it throws instead of showing whatever the engine wrote there
// since, and after a trap it throws the EngineTrapError. openInWorker refuses the option
// (its batches are transferred, so already owned).
// In headless Chromium the same on the page's thread (test-support/views-cases.js).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { open, openInWorker, memoryBytes, heapBytes, __debugTrap, EngineTrapError } from '../src/index.js';
import { HTTP, skip, manifest, dataVars, collect, digest, bytesOf } from '../test-support/helpers.js';
import { syntheticStore } from '../test-support/synthetic-store.js';
import { browserSkip, serveJs, launch } from '../test-support/browser.js';

const SEED = 3, EPOCH = 2, BATCH = 7, BLOCK_CHUNKS = 2;
const SPLITS = ['train', 'val', 'test', 'all'];
const STALE = /valid until the pass's next step or close\(\); call batch\.copy\(\)/;

/**
 * The digest of `pass` (as helpers.js `digest`), each batch hashed before the next step, and
 * every batch's `copy()`; also checks that a batch's `data` is the same object on each read.
 */
async function viewDigest(pass) {
  const h = createHash('sha256');
  const copies = [];
  for await (const b of pass) {
    h.update(bytesOf(b.sampleIndices));
    for (const label of Object.keys(b.arrays).sort()) {
      const data = b.arrays[label].data;
      assert.equal(b.arrays[label].data, data, 'a view is not re-made while memory stays put');
      h.update(Buffer.from(label, 'utf8'));
      h.update(bytesOf(data));
    }
    copies.push(b.copy());
  }
  return { digest: h.digest('hex'), copies };
}

test('batchViews: every store and split equals the copying path bit for bit; copy() keeps its batch', { skip }, async () => {
  let compared = 0;
  for (const store of manifest().stores) {
    const vars = dataVars(store);
    const options = { variables: vars, sampleAxis: store.sample_axis, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS };
    const n = store.arrays[vars[0]].shape[store.sample_axis];
    // Plain, and a labelled window with shuffled splits and a sample range (several labels over one array).
    const cases = [
      options,
      {
        ...options,
        variables: { x: { path: vars[0] }, y: { path: vars[0], shift: 3 } },
        shuffleSplits: true, splitSeed: 5, sampleRange: [1, n - 1],
      },
    ];
    for (const opts of cases) {
      const copying = await open(`${HTTP}/${store.path}`, opts);
      const views = await open(`${HTTP}/${store.path}`, { ...opts, batchViews: true });
      copying.setEpoch(EPOCH);
      views.setEpoch(EPOCH);
      for (const split of SPLITS) {
        const key = `${store.name}/${split}${opts === options ? '' : '/knobs'}`;
        const want = digest(await collect(copying.iter(split)));
        const got = await viewDigest(views.iter(split));
        assert.equal(got.digest, want, `${key}: views differ from copies`);
        assert.equal(digest(got.copies), want, `${key}: copy() of views, read after the epoch, differs`);
        compared++;
      }
      copying.close();
      views.close();
    }
  }
  console.log(`batchViews: ${compared} passes equal to the copying path`);
});

const SMALL = syntheticStore({ samples: 40, rows: 4, cols: 8, chunkSamples: 5 });
const OPTS = { ...SMALL.options, batchSize: 4, blockChunks: 2, seed: 1, batchViews: true };

/**
 * Grow wasm memory for sure: decode a store whose one chunk (and batch) is larger than the
 * whole memory now, on a second dataset of the same instance.
 */
async function growMemory() {
  const before = await memoryBytes();
  const rows = 1024, chunkSamples = 4;
  const cols = Math.ceil((before + (16 << 20)) / (4 * rows * chunkSamples));
  const big = syntheticStore({ samples: chunkSamples, rows, cols, chunkSamples });
  const ds = await open(big.storage, { ...big.options, batchSize: chunkSamples });
  const pass = ds.all();
  assert.equal(big.check(await pass.next()), undefined);
  pass.close();
  ds.close();
  const after = await memoryBytes();
  assert.ok(after > before, `wasm memory grew (${before} -> ${after} bytes)`);
}

test('batchViews: a view read after wasm memory grew (its old ArrayBuffer detached) still gives its batch', async () => {
  const ds = await open(SMALL.storage, OPTS);
  const seen = [];
  const pass = ds.all();
  for (let step = 0; ; step++) {
    const b = await pass.next();
    if (!b) break;
    seen.push(...Array.from(b.sampleIndices, Number));
    if (step !== 0 && step !== 5) continue; // each growth about doubles the memory: twice is enough
    const taken = b.arrays.x.data;
    const want = taken.slice();
    await growMemory();
    assert.equal(taken.byteLength, 0, 'the typed array taken before the growth was detached with the old buffer');
    assert.notEqual(b.arrays.x.data, taken, 'data re-derived over the new buffer');
    assert.deepEqual(b.arrays.x.data, want);
    assert.equal(SMALL.check(b), undefined);
    assert.deepEqual(b.copy().arrays.x.data, want);
  }
  assert.deepEqual(seen.sort((x, y) => x - y), Array.from({ length: 40 }, (_, i) => i));
  ds.close();
});

test('batchViews: a view read after the next step or close() throws; copies stay; passes go on; close() frees every byte', async () => {
  const heap = await heapBytes();
  const ds = await open(SMALL.storage, OPTS);
  const pass = ds.train();
  const first = await pass.next();
  const kept = first.copy();
  assert.equal(SMALL.check(first), undefined);
  const second = await pass.next();
  assert.throws(() => first.arrays.x.data, STALE, 'after the next step');
  assert.throws(() => first.copy(), STALE);
  assert.equal(SMALL.check(second), undefined);
  assert.equal(SMALL.check(kept), undefined, 'the copy holds the first batch');
  assert.equal(typeof kept.copy, 'undefined', 'a copy is a batch of the default kind');
  pass.close();
  assert.throws(() => second.arrays.x.data, STALE, 'after close()');
  // break out of for await closes the pass: its last batch's views end with it.
  let last;
  for await (const b of ds.val()) {
    last = b;
    break;
  }
  assert.throws(() => last.arrays.x.data, STALE, 'after break');
  // An epoch to its end: the batch read before the end is stale once next() said so.
  const all = ds.all();
  let prev;
  for (let b = await all.next(); b; b = await all.next()) {
    if (prev) assert.throws(() => prev.arrays.x.data, STALE);
    assert.equal(SMALL.check(b), undefined);
    prev = b;
  }
  assert.throws(() => prev.arrays.x.data, STALE, 'after the pass ended');
  ds.close();
  assert.equal(await heapBytes(), heap, 'the held batches were given back');
});

test('batchViews: after a trap a view read throws the EngineTrapError; a fresh instance serves views again', async () => {
  const ds = await open(SMALL.storage, OPTS);
  const pass = ds.all();
  await __debugTrap('panic', 2);
  const b = await pass.next();
  assert.equal(SMALL.check(b), undefined);
  await assert.rejects(pass.next(), EngineTrapError);
  assert.throws(() => b.arrays.x.data, EngineTrapError);
  assert.throws(() => b.copy(), EngineTrapError);
  ds.close();
  const again = await open(SMALL.storage, OPTS);
  for await (const x of again.all()) assert.equal(SMALL.check(x), undefined);
  again.close();
});

test('batchViews: openInWorker in Node (no shared memory) refuses the option, saying why', async () => {
  await assert.rejects(openInWorker('http://127.0.0.1:9/x.zarr', { batchViews: true }), /batchViews in openInWorker needs the threaded build.*runs the node build.*cross-origin isolated/);
});

// Chromium: the same on the page's thread (the one-thread web build, a non-shared memory).
const off = skip || browserSkip;
let chrome, page, isolated;
before(async () => {
  if (off) return;
  chrome = await launch();
  page = await serveJs();
  isolated = await serveJs({ coopCoep: true });
});
after(async () => {
  await chrome?.browser.close();
  page?.stop();
  isolated?.stop();
});

/** `fn(arg)` of test-support/views-cases.js on a fresh page of `server`, with Chromium's log on failure. */
async function onPage(server, fn, arg) {
  const p = await chrome.page(`${server.url}/test-support/page/`);
  try {
    return await p.evaluate(async ([name, a]) => (await import('/test-support/views-cases.js'))[name](a), [fn, arg]);
  } catch (e) {
    throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
  } finally {
    await p.close();
  }
}

test('Chromium: batchViews on the page equal the copying path and survive memory growth', { skip: off }, async () => {
  const stores = manifest().stores
    .filter((s) => ['v3_zstd', 'v3_sharded', 'v2_blosc', 'multi_spc'].includes(s.name))
    .map((s) => ({ name: s.name, path: s.path, vars: dataVars(s), sampleAxis: s.sample_axis }));
  const res = await onPage(page, 'viewsOnPage', { http: HTTP, stores, splits: SPLITS, epoch: EPOCH, options: { seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS } });
  for (const [key, r] of Object.entries(res.passes)) {
    assert.equal(r.views, r.copying, `${key}: views differ from copies on the page`);
    assert.equal(r.copies, r.copying, `${key}: copy() of views differs on the page`);
  }
  assert.equal(Object.keys(res.passes).length, stores.length * SPLITS.length);
  assert.ok(res.growth.after > res.growth.before, `memory grew on the page (${JSON.stringify(res.growth)})`);
  assert.equal(res.growth.detached, true, 'the old buffer was detached');
  assert.equal(res.growth.check, null, 'the view still gives its batch after growth');
  assert.match(res.stale, STALE);
});

const THREADS_PKG = new URL('../pkg/web-threads/insitubatch_wasm_bg.wasm', import.meta.url);
test('Chromium, cross-origin isolated: batchViews through openInWorker (the threaded build\'s shared memory) equal its transferred batches', { skip: off || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  const stores = manifest().stores
    .filter((s) => ['v3_zstd', 'v3_sharded', 'multi_spc'].includes(s.name))
    .map((s) => ({ name: s.name, path: s.path, vars: dataVars(s), sampleAxis: s.sample_axis }));
  const res = await onPage(isolated, 'viewsInWorker', { http: HTTP, stores, splits: SPLITS, epoch: EPOCH, options: { seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS }, nThreads: 2 });
  for (const s of stores) {
    for (const split of SPLITS) {
      const r = res[`${s.name}/${split}`];
      assert.equal(r.build, 'web-threads', `${s.name}/${split}: build`);
      assert.equal(r.views, r.copying, `${s.name}/${split}: worker views differ from its transferred batches`);
      assert.equal(r.copies, r.copying, `${s.name}/${split}: copy() of worker views differs`);
    }
    const { stale, closed, report } = res[`${s.name}/stale`];
    assert.match(stale, STALE, `${s.name}: a view read after the next step`);
    assert.match(closed, STALE, `${s.name}: a view read after close()`);
    assert.ok(report.views > 0, `${s.name}: batches posted as views`);
    assert.equal(report.bytes, 0, `${s.name}: no array copied out and transferred: ${JSON.stringify(report)}`);
  }
});
