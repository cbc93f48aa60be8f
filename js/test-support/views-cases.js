// Page-side half of the Chromium test in js/test/views.test.js (`batchViews` on the page's
// thread, the one-thread web build), imported into test-support/page/. Returns plain JSON.
import { open, openInWorker, memoryBytes } from '../src/web.js';
import { digest } from './browser-cases.js';
import { syntheticStore } from './synthetic-store.js';

/** A batch of byte snapshots of `b` taken now (not through `copy()`), for `digest`. */
function snapshot(b) {
  const arrays = {};
  for (const [label, a] of Object.entries(b.arrays)) arrays[label] = { data: a.data.slice() };
  return { sampleIndices: b.sampleIndices.slice(), arrays };
}

/** The message of the error a read of `batch.arrays[label].data` throws, or undefined. */
function readError(batch, label) {
  try {
    void batch.arrays[label].data;
  } catch (e) {
    return e.message;
  }
}

/** Digests of a view pass: its views snapshotted before each next step, and their `copy()`s. */
async function viewDigests(pass) {
  const snaps = [];
  const copies = [];
  for await (const b of pass) {
    snaps.push(snapshot(b));
    copies.push(b.copy());
  }
  return { views: await digest(snaps), copies: await digest(copies) };
}

async function collect(pass) {
  const out = [];
  for await (const b of pass) out.push(b);
  return out;
}

/**
 * For each store and split: digests of the copying path, of the views (snapshotted before
 * each next step) and of their `copy()`s; then a view read after memory growth, and the
 * error of a view read after the next step.
 */
export async function viewsOnPage({ http, stores, splits, epoch, options }) {
  const passes = {};
  for (const s of stores) {
    const opts = { ...options, variables: s.vars, sampleAxis: s.sampleAxis };
    const copying = await open(`${http}/${s.path}`, opts);
    const views = await open(`${http}/${s.path}`, { ...opts, batchViews: true });
    copying.setEpoch(epoch);
    views.setEpoch(epoch);
    for (const split of splits) {
      passes[`${s.name}/${split}`] = { copying: await digest(await collect(copying.iter(split))), ...(await viewDigests(views.iter(split))) };
    }
    copying.close();
    views.close();
  }

  // Growth: a second dataset decodes a chunk larger than the whole memory.
  const small = syntheticStore({ samples: 20, rows: 4, cols: 8, chunkSamples: 5 });
  const ds = await open(small.storage, { ...small.options, batchSize: 4, batchViews: true });
  const pass = ds.train();
  const b = await pass.next();
  const taken = b.arrays.x.data;
  const before = await memoryBytes();
  const rows = 1024, chunkSamples = 4;
  const big = syntheticStore({ samples: chunkSamples, rows, cols: Math.ceil((before + (16 << 20)) / (4 * rows * chunkSamples)), chunkSamples });
  const grow = await open(big.storage, { ...big.options, batchSize: chunkSamples });
  const gp = grow.all();
  await gp.next();
  gp.close();
  grow.close();
  const growth = { before, after: await memoryBytes(), detached: taken.byteLength === 0, check: small.check(b) ?? null };
  await pass.next();
  let stale;
  try {
    void b.arrays.x.data;
  } catch (e) {
    stale = e.message;
  }
  pass.close();
  ds.close();
  return { passes, growth, stale };
}

/**
 * `batchViews` through `openInWorker` in a cross-origin-isolated page (the threaded build,
 * whose memory the page shares): for each store and split, digests of the worker's
 * transferred batches, of its views (snapshotted before each next step) and of their
 * `copy()`s; the transfer report of the view worker; the error of a view read after the
 * next step, and of one read after `close()`.
 */
export async function viewsInWorker({ http, stores, splits, epoch, options, nThreads }) {
  const passes = {};
  let report;
  for (const s of stores) {
    const opts = { ...options, variables: s.vars, sampleAxis: s.sampleAxis };
    const copying = await openInWorker(`${http}/${s.path}`, opts, { threads: true, nThreads });
    const views = await openInWorker(`${http}/${s.path}`, { ...opts, batchViews: true }, { threads: true, nThreads });
    await copying.setEpoch(epoch);
    await views.setEpoch(epoch);
    for (const split of splits) {
      const copied = await digest(await collect(copying.iter(split)));
      passes[`${s.name}/${split}`] = { copying: copied, ...(await viewDigests(views.iter(split))), build: views.build };
    }
    report = await views.transferReport();
    const pass = views.train();
    const first = await pass.next();
    await pass.next();
    const stale = readError(first, s.vars[0]);
    const second = await pass.next();
    await pass.close();
    passes[`${s.name}/stale`] = { stale, closed: readError(second, s.vars[0]), report };
    await copying.close();
    await views.close();
  }
  return passes;
}
