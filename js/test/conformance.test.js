// wasm in Node over HTTP against the zarr-python fixtures: every sample once, values equal
// to the source, on v3 zstd/blosc/gzip, v2 blosc/zlib, sharded, ragged, CF, OME-NGFF.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { open } from '../src/index.js';
import { HTTP, skip, manifest, dataVars, sourceRows, bytesOf, collect } from '../test-support/helpers.js';

const OPTS = { batchSize: 7, blockChunks: 2, seed: 3 };

function storeOptions(store) {
  return { ...OPTS, variables: dataVars(store), sampleAxis: store.sample_axis };
}

test('every fixture store: each sample once, equal to the source', { skip }, async (t) => {
  const stores = manifest().stores;
  assert.ok(stores.length >= 10);
  for (const store of stores) {
    await t.test(store.name, async () => {
      const ds = await open(`${HTTP}/${store.path}`, storeOptions(store));
      const vars = dataVars(store);
      assert.deepEqual(ds.labels, vars);
      const n = store.arrays[vars[0]].shape[store.sample_axis];
      const pass = ds.all();
      const batches = await collect(pass);
      assert.equal(batches.length, pass.length);
      for (const label of vars) {
        const rows = sourceRows(store.arrays[label], store.sample_axis);
        const seen = [];
        for (const b of batches) {
          const a = b.arrays[label];
          assert.equal(a.dtype, store.arrays[label].dtype);
          assert.equal(a.shape[0], b.sampleIndices.length);
          const data = bytesOf(a.data);
          const rb = data.length / a.shape[0];
          b.sampleIndices.forEach((t, r) => {
            const s = Number(t) + b.offsets[label];
            assert.ok(data.subarray(r * rb, (r + 1) * rb).equals(rows[s]), `${store.name}/${label}: sample ${s} differs`);
            seen.push(Number(t));
          });
        }
        seen.sort((x, y) => x - y);
        assert.deepEqual(seen, [...Array(n).keys()], `${store.name}/${label}: every sample exactly once`);
      }
      const last = ds.lastPass();
      assert.equal(last.split, 'all');
      assert.equal(last.samples, n);
      ds.close();
    });
  }
});

test('splits partition the samples; train is shuffled and deterministic', { skip }, async () => {
  const store = manifest().stores.find((s) => s.name === 'v3_zstd');
  const url = `${HTTP}/${store.path}`;
  const order = async (seed, epoch) => {
    const ds = await open(url, { ...storeOptions(store), seed });
    ds.setEpoch(epoch);
    assert.equal(ds.epoch, epoch);
    const ids = (await collect(ds.train())).flatMap((b) => [...b.sampleIndices].map(Number));
    const rest = [];
    for (const split of ['val', 'test']) rest.push(...(await collect(ds.iter(split))).flatMap((b) => [...b.sampleIndices].map(Number)));
    return { ids, rest };
  };
  const a = await order(3, 1);
  const b = await order(3, 1);
  const c = await order(3, 2);
  assert.deepEqual(a.ids, b.ids, 'same seed and epoch: same order');
  assert.notDeepEqual(a.ids, c.ids, 'another epoch: another order');
  assert.notDeepEqual(a.ids, [...a.ids].sort((x, y) => x - y), 'train is shuffled');
  const all = [...a.ids, ...a.rest].sort((x, y) => x - y);
  assert.deepEqual(all, [...Array(80).keys()], 'train + val + test = every sample once');
});

test('describe() returns the memory report without reading data', { skip }, async () => {
  const ds = await open(`${HTTP}/v3_sharded`, { variables: ['t2m'], batchSize: 8 });
  const r = ds.describe();
  for (const k of ['floor_bytes', 'residency_bytes', 'inflight_bytes', 'queue_bytes', 'estimated_peak_bytes']) {
    assert.equal(typeof r.memory[k], 'number', k);
  }
  assert.ok(r.memory.floor_bytes > 0 && r.memory.estimated_peak_bytes >= r.memory.resident_max_bytes);
  assert.ok(r.memory.resident_max_bytes <= r.memory.residency_bytes);
  assert.equal(r.memory.iterations, 1);
  assert.equal(ds.describe(2).memory.iterations, 2);
  assert.ok(Array.isArray(r.variables) && Array.isArray(r.notes));
  assert.match(ds.describeText(), /t2m/);
  assert.equal(ds.lastPass(), undefined);
});

test('an early break ends the pass; the next epoch runs at once', { skip }, async () => {
  const ds = await open(`${HTTP}/v3_zstd`, { variables: ['t2m', 'u10'], batchSize: 4, blockChunks: 1 });
  for await (const b of ds.train()) {
    assert.equal(b.sampleIndices.length, 4);
    break;
  }
  ds.setEpoch(1);
  const batches = await collect(ds.train());
  assert.equal(batches.reduce((s, b) => s + b.sampleIndices.length, 0), 64);
  assert.ok(batches[0].arrays.t2m.data instanceof Float32Array);
  assert.deepEqual(batches[0].arrays.t2m.shape, [4, 6, 7]);
});

test('errors reach JS as Error with the engine message', { skip }, async () => {
  await assert.rejects(open(`${HTTP}/no_such_store`, { variables: ['t2m'] }), (e) => {
    assert.ok(e instanceof Error);
    assert.match(e.message, /no_such_store/);
    return true;
  });
  await assert.rejects(open(`${HTTP}/v3_zstd`, { batch_size: 3 }), /unknown option "batch_size"; the known ones are batchSize/);
  await assert.rejects(open('file:///nonexistent/x.zarr'), /no Zarr store exists at this path: file:\/\/\/nonexistent\/x.zarr/);
  await assert.rejects(open('http://127.0.0.1:9/x.zarr', { variables: ['t2m'] }), Error);
  // Without consolidated metadata, HTTP cannot discover arrays: the message says so.
  await assert.rejects(open(`${HTTP}/v3_gzip`), /variables/);
  const ds = await open(`${HTTP}/v3_zstd`, { variables: ['t2m'] });
  assert.throws(() => ds.iter('bogus'), /unknown split/);
  assert.throws(() => ds.setEpoch(-1), /non-negative integer/);
});
