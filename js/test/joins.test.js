// Stores joined by name in the JS package (`open({ name: store })`, docs/joins.md): store
// `name`'s arrays are `name/path`, every sample of an epoch comes once with each store's values
// of that sample, URLs, local paths and a Map mix, the worker joins URLs, and a join whose
// sample axes differ is refused with core's message, naming both arrays and every store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { open, openInWorker } from '../src/index.js';
import { FIXTURES, HTTP, skip, collect } from '../test-support/helpers.js';

const OPTS = { seed: 4, batchSize: 7, blockChunks: 2 };
/** (80, 6, 7) t2m and u10; (80, 10, 12) sharded t2m; (48, 6, 6) v2 t2m. */
const ZSTD = `${HTTP}/v3_zstd`;
const SHARDED = `${HTTP}/v3_sharded`;
const V2 = `${HTTP}/v2_blosc`;

/** One epoch of the `all` view: sample → label → its values. */
async function bySample(ds) {
  const rows = new Map();
  for await (const b of ds.iter('all')) {
    b.sampleIndices.forEach((t, i) => {
      const row = {};
      for (const [label, a] of Object.entries(b.arrays)) {
        const n = a.data.length / a.shape[0];
        row[label] = Array.from(a.data.slice(i * n, (i + 1) * n));
      }
      assert.ok(!rows.has(Number(t)), `sample ${t} twice`);
      rows.set(Number(t), row);
    });
  }
  ds.close();
  return rows;
}

/** The samples of each store read alone, under the join's labels. */
async function alone() {
  const [zstd, sharded] = [await bySample(await open(ZSTD, OPTS)), await bySample(await open(SHARDED, OPTS))];
  const want = new Map();
  for (const [t, row] of zstd) {
    want.set(t, { 'a/t2m': row.t2m, 'a/u10': row.u10, 'b/t2m': sharded.get(t).t2m });
  }
  return want;
}

test('a join pairs each store\'s values of every sample, once per epoch, whatever the stores are', { skip }, async () => {
  const want = await alone();
  assert.equal(want.size, 80);
  const sources = [
    { a: ZSTD, b: SHARDED },
    new Map([['a', ZSTD], ['b', path.join(FIXTURES, 'v3_sharded')]]),
  ];
  for (const source of sources) {
    const ds = await open(source, OPTS);
    assert.deepEqual([...ds.labels].sort(), ['a/t2m', 'a/u10', 'b/t2m']);
    assert.match(ds.url, /^join\(a=.*, b=.*\)$/);
    assert.deepEqual(await bySample(ds), want);
  }
});

test('openInWorker joins URLs, and refuses a storage object in a join, saying why', { skip }, async () => {
  const ds = await openInWorker({ a: ZSTD, b: SHARDED }, OPTS);
  try {
    let seen = 0;
    for await (const b of ds.iter('all')) {
      assert.deepEqual(Object.keys(b.arrays).sort(), ['a/t2m', 'a/u10', 'b/t2m']);
      seen += b.sampleIndices.length;
    }
    assert.equal(seen, 80);
  } finally {
    ds.close();
  }
  await assert.rejects(openInWorker({ a: ZSTD, b: { get: async () => null } }, OPTS), /a storage object cannot be sent to a worker/);
});

test('a join whose lengths differ, or with a bad name, is refused with core\'s message', { skip }, async () => {
  await assert.rejects(open({ a: ZSTD, b: V2 }, OPTS), (e) => {
    assert.match(e.message, /share the same sample-axis length/);
    assert.match(e.message, /a\/t2m/);
    assert.match(e.message, /join\(a=.*, b=.*v2_blosc\)$/);
    return true;
  });
  await assert.rejects(open({ 'a/b': ZSTD }, OPTS), /path segment/);
});

/** cf's t2m rows by sample: (24, 5, 6), time = 6 h steps from 2020-01-01, in chunks of 6. */
async function cfRows(cf) {
  const one = await open(cf, { variables: ['t2m'], batchSize: 5 });
  const whole = new Map();
  for (const b of await collect(one.all())) {
    b.sampleIndices.forEach((t, i) => whole.set(Number(t), b.arrays.t2m.data.slice(i * 30, (i + 1) * 30)));
  }
  one.close();
  return whole;
}

test('a list of stores is read end to end along the sample axis, on this thread and in a worker', { skip }, async () => {
  const cf = `${HTTP}/cf`;
  const whole = await cfRows(cf);
  for (const ds of [await open([cf, cf], { variables: ['t2m'], batchSize: 5, coords: true }), await openInWorker([cf, cf], { variables: ['t2m'], batchSize: 5, coords: true })]) {
    const seen = [];
    for (const b of await collect(ds.all())) {
      b.sampleIndices.forEach((t, i) => {
        const n = Number(t);
        assert.deepEqual(b.arrays.t2m.data.slice(i * 30, (i + 1) * 30), whole.get(n % 24), `sample ${n}`);
        assert.equal(b.coords.time[i], BigInt(Date.UTC(2020, 0, 1)) * 1000000n + BigInt(n % 24) * 6n * 3600n * 1000000000n);
        seen.push(n);
      });
    }
    assert.deepEqual(seen.sort((x, y) => x - y), [...Array(48).keys()]);
    await ds.close();
  }
  await assert.rejects(open([cf, `${HTTP}/cf_v2`], { batchSize: 5 }), /"t2m" differs between concatenated stores/);
  await assert.rejects(open([cf, cf], { batchSize: 5, concatDim: 'valid_time' }), /no array has a dimension named "valid_time"/);
});

test('a list inside a join is concatenated first, on this thread and in a worker', { skip }, async () => {
  const cf = `${HTTP}/cf`;
  const whole = await cfRows(cf);
  const joined = { a: [cf, cf], b: [cf, cf] };
  const opts = { variables: ['a/t2m', 'b/t2m'], batchSize: 5 };
  for (const ds of [await open(joined, opts), await openInWorker(joined, opts)]) {
    let seen = 0;
    for (const b of await collect(ds.all())) {
      b.sampleIndices.forEach((t, i) => {
        for (const k of ['a/t2m', 'b/t2m']) {
          assert.deepEqual(b.arrays[k].data.slice(i * 30, (i + 1) * 30), whole.get(Number(t) % 24), `${k} sample ${t}`);
        }
        seen++;
      });
    }
    assert.equal(seen, 48);
    await ds.close();
  }
});
