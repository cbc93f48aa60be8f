// Faults below the storage layer through the Node package (issue 16, item 4): the wasm engine's
// fetch storage against the real misbehaving loopback server tests/servers/faulty_http.py,
// the cases of tests/tests/faults.rs. Transient faults are retried under `readPolicy` and give
// the file:// epoch's batches exactly; a permanent one rejects naming the chunk's key, or fills
// and records under `onBadChunk: "nan"`; a wrong answer to a range request is an error naming
// the key, never wrong data. The server counts each fault per path (`<fault>-<n>`: the first n
// GETs misbehave), so every read meets exactly the failures asked for and no clock decides a
// result; `-chunks` spares the metadata, so the store opens and its chunk reads meet the fault.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { open, openInWorker } from '../src/index.js';
import { FIXTURES, FAULTY_HTTP, faultySkip as skip, collect, digest } from '../test-support/helpers.js';

/** Retries enough for every transient fault below, a 1 ms backoff, and a read timeout short
 * enough that a stalled read is abandoned quickly (its length decides no result). No hedging:
 * the server's faults count each path's GETs, and these tests are about retries. */
const READ_POLICY = { retries: 4, backoffS: 0.001, requestTimeoutS: 0.5, hedge: false };

function options(onBadChunk = 'raise') {
  return { variables: ['t2m'], fractions: [1, 0, 0], batchSize: 7, blockChunks: 2, seed: 5, onBadChunk, readPolicy: READ_POLICY };
}

/** The train epoch's batches of `url`, or the error its open or pass rejected with. */
async function epoch(url, onBadChunk = 'raise') {
  const ds = await open(url, options(onBadChunk));
  try {
    return await collect(ds.train());
  } finally {
    ds.close();
  }
}

/** The digest of the same epoch from the local files. */
async function clean(store) {
  return digest(await epoch(pathToFileURL(join(FIXTURES, store)).href));
}

function faulty(session, fault, store) {
  return `${FAULTY_HTTP}/${session}/${fault}/${store}`;
}

// v3_zstd reads whole objects; v3_sharded reads ranges (a shard index as a suffix, then tiles).
const STORES = ['v3_zstd', 'v3_sharded'];

test('transient faults on chunk reads (503, 429 with Retry-After: 0, a reset, a cut body) are retried: the same batches as file://', { skip }, async () => {
  for (const store of STORES) {
    const want = await clean(store);
    for (const fault of ['503-2-chunks', '429-2-chunks', 'reset-1-chunks', 'cut-1-chunks']) {
      const got = await epoch(faulty(`transient-${store}`, fault, store)).catch((e) => assert.fail(`${fault} on ${store}: ${e.message}`));
      assert.equal(digest(got), want, `${fault} on ${store}: different batches`);
    }
  }
});

test('more transient failures than readPolicy.retries: the pass rejects naming the chunk\'s key', { skip }, async () => {
  // v3_zstd reads each chunk once, so 5 failures per key exhaust 1 + 4 attempts.
  await assert.rejects(epoch(faulty('exhausted', '503-5-chunks', 'v3_zstd')), (e) => {
    assert.match(e.message, /storage read failed after 5 attempt\(s\): HTTP 503/);
    assert.match(e.message, /\/v3_zstd\/t2m\/c\/\d+\/0\/0$/, 'the key comes last');
    return true;
  });
});

test('a stall past readPolicy.requestTimeoutS is abandoned and retried: the same batches, in a worker and on the main thread', { skip }, async () => {
  // The engine drops a timed-out read, and dropping it aborts its fetch (wasm/src/storage.rs
  // AbortOnDrop), which closes the socket and so ends the server's stall. Were it not
  // aborted, the open socket would keep this file's process alive (undici gives up after
  // 300 s) on the main thread; a worker's close() would still end it.
  for (const store of STORES) {
    const want = await clean(store);
    const wds = await openInWorker(faulty(`stall-${store}`, 'stall-1-chunks', store), options());
    try {
      assert.equal(digest(await collect(wds.train())), want, `stall on ${store} in a worker: different batches`);
    } finally {
      await wds.close();
    }
    assert.equal(digest(await epoch(faulty(`stall-main-${store}`, 'stall-1-chunks', store))), want, `stall on ${store}: different batches`);
  }
});

test('a wrong answer to a range request (200 with the whole object, a wrong Content-Range) is an error naming the key, never wrong data', { skip }, async () => {
  const want = await clean('v3_sharded');
  for (const fault of ['full200-all-chunks', 'badrange-all-chunks']) {
    let batches;
    try {
      batches = await epoch(faulty('ranges', fault, 'v3_sharded'));
    } catch (e) {
      assert.match(e.message, /\/v3_sharded\/t2m\/c\/[\d/]+$/, `${fault}: the error names the key last: ${e.message}`);
      continue;
    }
    // A client may take the whole object and cut the range itself; then it must be right.
    assert.equal(digest(batches), want, `${fault}: wrong bytes accepted`);
  }
});

test('a permanent fault (403) rejects naming the chunk\'s key, or under onBadChunk "nan" fills and records', { skip }, async () => {
  const url = faulty('permanent', '403-all-chunks', 'v3_zstd');
  await assert.rejects(epoch(url), (e) => {
    assert.match(e.message, /HTTP 403 Forbidden/);
    assert.match(e.message, /\/v3_zstd\/t2m\/c\/\d+\/0\/0$/, 'the key comes last');
    return true;
  });

  const ds = await open(url, options('nan'));
  const batches = await collect(ds.train());
  assert.equal(batches.reduce((n, b) => n + b.sampleIndices.length, 0), 80, 'every sample is still served once');
  for (const b of batches) assert.ok(b.arrays.t2m.data.every(Number.isNaN), 'filled with NaN');
  const bad = ds.badChunks();
  assert.equal(bad.length, 10, `each of the 10 chunks recorded once: ${JSON.stringify(bad)}`);
  for (const c of bad) {
    assert.equal(c.array, 't2m');
    assert.match(c.error, /HTTP 403 Forbidden/);
  }
  assert.deepEqual(bad.map((c) => c.chunk_index).sort((a, b) => a - b), [...Array(10).keys()]);
  ds.close();
});

test('transient faults on the metadata reads at open are retried', { skip }, async () => {
  const want = await clean('v3_zstd');
  for (const fault of ['503-2', '429-2', 'reset-1', 'cut-1']) {
    const got = await epoch(faulty('metadata', fault, 'v3_zstd'));
    assert.equal(digest(got), want, `${fault}: different batches`);
  }
});

test('transient faults on the metadata reads at open of concatenated stores are retried', { skip }, async () => {
  // `open([a, b])` reads every store's metadata (and the time coordinate it concatenates in
  // memory) before the dataset is built: under readPolicy too, as for a single store.
  const concat = async (urls) => {
    const ds = await open(urls, { ...options(), coords: true });
    try {
      return digest(await collect(ds.train()));
    } finally {
      ds.close();
    }
  };
  const local = pathToFileURL(join(FIXTURES, 'cf')).href;
  const want = await concat([local, local]);
  for (const fault of ['503-2', '429-2', 'reset-1', 'cut-1']) {
    const got = await concat([faulty(`concat-a-${fault}`, fault, 'cf'), faulty(`concat-b-${fault}`, fault, 'cf')]);
    assert.equal(got, want, `${fault}: different batches`);
  }
});
