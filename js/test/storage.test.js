// Storages in Node: the node:fs store behind file:// URLs and plain paths (ranged reads), a
// caller's own storage object (wasm/src/js_storage.rs), and what a misbehaving one turns
// into (an Error with the engine's message, never a trap); the open() knobs that reach the
// engine through it (onBadChunk, readPolicy, windows). Core's storage conformance suite runs
// against the node:fs store in wasm/tests/node.rs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, open as openFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { open, openInWorker, nodeFileStorage } from '../src/index.js';
import { FIXTURES, skip, collect, digest } from '../test-support/helpers.js';

const OPTS = { variables: ['t2m'], batchSize: 8, blockChunks: 2, seed: 3 };

/** A storage object over the fixture `name` that records every call and may change answers. */
async function recording(name, change = {}) {
  const inner = await nodeFileStorage(join(FIXTURES, name));
  const calls = [];
  return {
    calls,
    location: `test://${name}`,
    async get(key, range) {
      calls.push({ key, range });
      if (change.get) return change.get(key, range, () => inner.get(key, range));
      return inner.get(key, range);
    },
    list: 'list' in change ? change.list : (prefix) => inner.list(prefix),
  };
}

test('the node:fs store reads ranges at an offset, never the whole file', async () => {
  // A sparse 8 GiB file: a whole-file read would fail (ERR_FS_FILE_TOO_LARGE) or take 8 GiB.
  const dir = await mkdtemp(join(tmpdir(), 'ib-node-storage-'));
  try {
    const fh = await openFile(join(dir, 'big'), 'w');
    const size = 8 * 2 ** 30;
    await fh.write(Uint8Array.from([1, 2, 3]), 0, 3, size - 3);
    await fh.close();
    const s = await nodeFileStorage(pathToFileURL(dir));
    assert.deepEqual([...(await s.get('big', { start: size - 3, end: size }))], [1, 2, 3]);
    assert.deepEqual([...(await s.get('big', { suffix: 2 }))], [2, 3]);
    assert.deepEqual((await s.get('big', { start: 5, end: 9 })).length, 4);
    await assert.rejects(s.get('big', { start: size - 1, end: size + 1 }), /reaches past the end of the object/);
    assert.equal(await s.get('nope', { start: 0, end: 1 }), null, 'a missing key is null');
    assert.equal(await s.get('', undefined), null, 'a directory is not an object');
    await assert.rejects(s.get('../etc/passwd'), /leaves the store/);
    assert.deepEqual(await s.list(''), ['big']);
    assert.equal(s.location, pathToFileURL(dir).href);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a storage object yields the batches of the file:// URL, and sharded reads come as ranges', { skip }, async () => {
  for (const name of ['v3_zstd', 'v3_sharded']) {
    const url = pathToFileURL(join(FIXTURES, name)).href;
    const want = digest(await collect((await open(url, OPTS)).all()));
    const s = await recording(name);
    const ds = await open(s, OPTS);
    assert.equal(ds.url, `test://${name}`, 'the object\'s location names it');
    assert.equal(digest(await collect(ds.all())), want, name);
    const chunkCalls = s.calls.filter((c) => c.key.includes('/c/'));
    assert.ok(chunkCalls.length > 0);
    if (name === 'v3_sharded') {
      assert.ok(chunkCalls.some((c) => c.range?.suffix !== undefined), 'shard indexes are read as suffixes');
      assert.ok(chunkCalls.some((c) => c.range?.end !== undefined), 'inner chunks are read as byte ranges');
    }
  }
  // Discovery lists through the object; without list(), a store cannot be discovered.
  const listed = await open(await recording('v3_gzip'), { batchSize: 8 });
  assert.deepEqual(listed.labels, ['t2m']);
  await assert.rejects(open(await recording('v3_gzip', { list: undefined })), /variables/);
});

test('a misbehaving storage object is an Error naming the method, the value and the key', { skip }, async () => {
  await assert.rejects(open({ location: 'x' }), /a storage needs a get\(key, range\) method/);
  await assert.rejects(open({ get: 5 }), /storage.get must be a function, got number/);
  await assert.rejects(
    open({ get() { throw new Error('boom'); } }, OPTS),
    (e) => e instanceof Error && /storage\.get failed: boom/.test(e.message) && /t2m\/zarr\.json/.test(e.message),
  );
  await assert.rejects(open({ get: async () => 5 }, OPTS), /storage\.get resolved to number; it must resolve to a Uint8Array/);
  await assert.rejects(open({ get: async () => { throw 'a string'; } }, OPTS), /storage\.get failed: a string/);
  await assert.rejects(open({ get: async () => null, list: async () => 'nope' }), /storage\.list resolved to string/);
  await assert.rejects(open(await recording('v3_zstd'), { ...OPTS, storageOptions: { a: 'b' } }), /apply only to a store opened by s3:\/\/ URL/);
  // A short read of a range is refused here, whatever the JS side claims.
  const short = await recording('v3_sharded', {
    get: async (key, range, real) => {
      const b = await real();
      return range?.end !== undefined && key.includes('/c/') ? b.subarray(1) : b;
    },
  });
  await assert.rejects(collect((await open(short, OPTS)).all()), /storage\.get returned \d+ bytes for the byte range/);
});

test('onBadChunk "nan" fills chunks the storage cannot read; "raise" fails the pass', { skip }, async () => {
  const failing = { get: async (key, range, real) => (key.startsWith('t2m/c/1/') ? Promise.reject(new Error('disk on fire')) : real()) };
  await assert.rejects(collect((await open(await recording('v3_zstd', failing), OPTS)).all()), /disk on fire/);
  const ds = await open(await recording('v3_zstd', failing), { ...OPTS, onBadChunk: 'nan' });
  assert.equal(ds.describe().config.on_bad_chunk, 'nan');
  const batches = await collect(ds.all());
  assert.equal(batches.reduce((n, b) => n + b.sampleIndices.length, 0), 80, 'every sample is still yielded');
  const bad = ds.badChunks();
  assert.equal(bad.length, 1);
  assert.equal(bad[0].array, 't2m');
  assert.equal(bad[0].chunk_index, 1);
  assert.match(bad[0].error, /disk on fire/);
  const row = 6 * 7;
  for (const b of batches) {
    b.sampleIndices.forEach((s, r) => {
      const filled = Number.isNaN(b.arrays.t2m.data[r * row]);
      assert.equal(filled, s >= 8n && s < 16n, `sample ${s}`);
    });
  }
  assert.equal(ds.lastPass().bad_chunks, 1);
  await assert.rejects(open(await recording('v3_zstd'), { onBadChunk: 'skip' }), /onBadChunk must be "raise" or "nan", got "skip"/);
});

test('readPolicy: transient storage errors are retried as many times as it says', { skip }, async () => {
  const flaky = () => {
    const failed = new Set();
    return {
      get: async (key, range, real) => {
        if (key.includes('/c/') && !failed.has(key)) {
          failed.add(key);
          throw Object.assign(new Error('try again'), { transient: true });
        }
        return real();
      },
    };
  };
  const url = pathToFileURL(join(FIXTURES, 'v3_zstd')).href;
  const want = digest(await collect((await open(url, OPTS)).all()));
  const ok = await open(await recording('v3_zstd', flaky()), { ...OPTS, readPolicy: { retries: 1, backoffS: 0 } });
  assert.equal(digest(await collect(ok.all())), want);
  const none = await open(await recording('v3_zstd', flaky()), { ...OPTS, readPolicy: { retries: 0 } });
  await assert.rejects(collect(none.all()), /try again/);
  await assert.rejects(open(url, { readPolicy: { retry: 1 } }), /unknown key of readPolicy "readPolicy\.retry"; the known ones are readPolicy\.retries/);
  await assert.rejects(open(url, { readPolicy: { backoffS: -5 } }), /readPolicy\.backoffS must be a finite number of seconds >= 0, got -5/);
  // The milliseconds of old are refused naming their key in seconds (durations are seconds everywhere).
  await assert.rejects(open(url, { readPolicy: { backoffMs: 5 } }), (e) => {
    assert.match(e.message, /readPolicy\.backoffMs is now readPolicy\.backoffS, in seconds/);
    assert.equal(e.kind, 'invalid_option');
    assert.equal(e.option, 'readPolicy.backoffMs');
    return true;
  });
});

test('windows: labelled variables and shift, on file:// and in a worker', { skip }, async () => {
  const url = pathToFileURL(join(FIXTURES, 'v3_zstd')).href;
  const opts = { variables: { x: 't2m', y: { path: 't2m', shift: 2 } }, shift: 1, batchSize: 8, blockChunks: 2, seed: 3 };
  const ds = await open(url, opts);
  assert.deepEqual(ds.labels, ['x', 'x@+1', 'y', 'y@+1']);
  const batches = await collect(ds.train());
  const [b] = batches;
  assert.deepEqual(b.offsets, { x: 0, y: 2, 'x@+1': 1, 'y@+1': 3 });
  // The target rows are the input rows `shift` samples on.
  const plain = await open(url, { variables: ['t2m'], batchSize: 80, shuffle: false });
  const [all] = await collect(plain.all());
  const row = 6 * 7;
  const at = new Map([...all.sampleIndices].map((s, r) => [Number(s), r]));
  const rowOf = (s) => all.arrays.t2m.data.subarray(at.get(s) * row, (at.get(s) + 1) * row);
  b.sampleIndices.forEach((s, r) => {
    for (const [label, off] of Object.entries(b.offsets)) {
      assert.deepEqual(b.arrays[label].data.subarray(r * row, (r + 1) * row), rowOf(Number(s) + off), `${label} row ${r}`);
    }
  });
  const drawn = batches.flatMap((x) => [...x.sampleIndices].map(Number));
  assert.ok(Math.max(...drawn) <= 79 - 3, 'no anchor whose window runs past the end');
  // The same options in a worker (Node worker_threads, file://): the same batches.
  const wds = await openInWorker(url, opts);
  assert.deepEqual(wds.labels, ds.labels);
  assert.equal(digest(await collect(wds.train())), digest(batches));
  assert.deepEqual(await wds.badChunks(), []);
  await wds.close();
  await assert.rejects(openInWorker(await recording('v3_zstd')), /a storage object cannot be sent to a worker/);
  await assert.rejects(open(url, { variables: { y: { path: 't2m', offset: 1 } } }), (e) => {
    assert.match(e.message, /unknown key of variables\.y "variables\.y\.offset"; the known ones are variables\.y\.path, variables\.y\.shift/);
    assert.equal(e.kind, 'invalid_option');
    return true;
  });
});
