// Masks, weights, the rank mesh and coordinates in the JS package (`sampleMask`,
// `sampleWeights`, `modelParallel`/`modelParallelAxis`, `coords`, `sel`; docs/sampling.md,
// docs/coordinates.md): masked samples never drawn, integer weights drawn exactly that often,
// a group's parts rebuilding the whole rows, CF times decoded and selected by date, rows cut to
// a region by label on inner axes, and core's refusals reaching JS with core's message. The same batches as the native engine:
// js/test/parity.test.js (`DRAWN_CASES`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { open, openInWorker } from '../src/index.js';
import { HTTP, skip, collect } from '../test-support/helpers.js';

/** (80, 6, 7) time × lat × lon. */
const ZSTD = `${HTTP}/v3_zstd`;
const N = 80;
/** cf: 24 samples, time = 6 h steps from 2020-01-01 (hours since 2020-01-01, int64). */
const CF = `${HTTP}/cf`;
const T0_NS = BigInt(Date.UTC(2020, 0, 1)) * 1000000n;
const STEP_NS = 6n * 3600n * 1000000000n;

/** The samples one pass of `split` draws, in draw order. */
async function drawn(url, options, split = 'all') {
  const ds = await open(url, { batchSize: 8, seed: 5, ...options });
  const out = (await collect(ds.iter(split))).flatMap((b) => [...b.sampleIndices].map(Number));
  ds.close();
  return out;
}

test('masked samples are never drawn; integer weights are drawn exactly that often', { skip }, async () => {
  const mask = Array.from({ length: N }, (_, t) => t % 4 !== 1);
  assert.deepEqual(
    (await drawn(ZSTD, { sampleMask: mask })).sort((a, b) => a - b),
    [...Array(N).keys()].filter((t) => mask[t]),
  );
  const weights = Float64Array.from({ length: N }, (_, t) => (t % 2 ? 1 : 2));
  const counts = new Array(N).fill(0);
  for (const t of await drawn(ZSTD, { sampleWeights: weights })) counts[t]++;
  assert.deepEqual(counts, [...weights]);
});

test("a mesh group's parts rebuild whole rows, and both ranks draw the same rows", { skip }, async () => {
  const whole = await open(ZSTD, { variables: ['t2m'], batchSize: 8, seed: 5 });
  const want = await collect(whole.train());
  whole.close();
  const parts = [];
  for (const rank of [0, 1]) {
    const ds = await open(ZSTD, {
      variables: ['t2m'], batchSize: 8, seed: 5, rank, worldSize: 2, modelParallel: 2, modelParallelAxis: 'lat',
    });
    parts.push(await collect(ds.train()));
    ds.close();
  }
  assert.equal(parts[0].length, want.length);
  want.forEach((w, j) => {
    const [a, b] = [parts[0][j], parts[1][j]];
    assert.deepEqual([...a.sampleIndices], [...w.sampleIndices]);
    assert.deepEqual([...b.sampleIndices], [...w.sampleIndices]);
    assert.deepEqual(a.part, { dim: 'lat', index: 0, of: 2, start: 0, len: 3 });
    assert.deepEqual(b.part, { dim: 'lat', index: 1, of: 2, start: 3, len: 3 });
    assert.deepEqual(a.arrays.t2m.shape, [w.sampleIndices.length, 3, 7]);
    // Row i: lat 0..3 from rank 0, then lat 3..6 from rank 1.
    const row = 6 * 7, half = 3 * 7;
    for (let i = 0; i < w.sampleIndices.length; i++) {
      const got = [...a.arrays.t2m.data.subarray(i * half, (i + 1) * half), ...b.arrays.t2m.data.subarray(i * half, (i + 1) * half)];
      assert.deepEqual(got, [...w.arrays.t2m.data.subarray(i * row, (i + 1) * row)], `batch ${j} row ${i}`);
    }
  });
});

test('batches carry CF times as nanoseconds; sel by dates draws exactly those samples', { skip }, async () => {
  const ds = await open(CF, { batchSize: 5, coords: true });
  let seen = 0;
  for (const b of await collect(ds.all())) {
    assert.ok(b.coords.time instanceof BigInt64Array);
    b.sampleIndices.forEach((t, i) => assert.equal(b.coords.time[i], T0_NS + t * STEP_NS));
    seen += b.sampleIndices.length;
  }
  assert.equal(seen, 24);
  ds.close();
  const plain = await open(CF, { batchSize: 5 });
  assert.equal((await collect(plain.all()))[0].coords, undefined, 'coordinates are read only when asked for');
  plain.close();
  // As Python's test_coords: 2020-01-02 .. 2020-01-04T06:00 is samples 4 .. 13.
  const sel = { time: ['2020-01-02', '2020-01-04T06:00'] };
  assert.deepEqual((await drawn(CF, { sel })).sort((a, b) => a - b), [...Array(10).keys()].map((i) => i + 4));
  const worker = await openInWorker(CF, { batchSize: 4, sel });
  const batches = await collect(worker.all());
  assert.deepEqual(batches.flatMap((b) => [...b.coords.time]).sort(), [...Array(10).keys()].map((i) => T0_NS + BigInt(i + 4) * STEP_NS));
  await worker.close();
});

test("bad mask, weights, mesh and sel options are refused with core's message", { skip }, async () => {
  const refused = async (options, pattern) => {
    await assert.rejects(open(ZSTD, { batchSize: 8, ...options }), pattern);
  };
  await refused({ sampleMask: [true, false] }, /sampleMask has 2 entries/);
  await refused({ modelParallel: 2 }, /modelParallelAxis/);
  await refused({ modelParallelAxis: 'lat' }, /modelParallel is 1 \(no groups\); pass modelParallel > 1 too/);
  await refused({ sel: { time: ['soon', '2020-01-02'] } }, /"soon" is neither a number nor a date/);
  await refused({ sel: { time: [0, 1], lat: [0, 1] } }, /sel on "lat" needs its coordinate/);
});

test('sel on inner axes cuts every row to the region, as slicing the whole rows', { skip }, async () => {
  // cf's lat runs 60 to 40 (decreasing), lon 0 to 5: lat 42..56 is rows 1..4, lon 1..4 columns 1..5.
  const whole = await open(CF, { variables: ['t2m'], batchSize: 5, seed: 2 });
  const want = await collect(whole.all());
  whole.close();
  const ds = await open(CF, { variables: ['t2m'], batchSize: 5, seed: 2, sel: { lat: [42, 56], lon: [1, 4] } });
  const got = await collect(ds.all());
  ds.close();
  assert.equal(got.length, want.length);
  got.forEach((b, j) => {
    assert.deepEqual([...b.sampleIndices], [...want[j].sampleIndices], 'a region keeps the draw order');
    assert.deepEqual(b.arrays.t2m.shape, [b.sampleIndices.length, 3, 4]);
    const rows = [];
    for (let i = 0; i < b.sampleIndices.length; i++) {
      for (let y = 1; y < 4; y++) rows.push(...want[j].arrays.t2m.data.subarray(i * 30 + y * 6 + 1, i * 30 + y * 6 + 5));
    }
    assert.deepEqual([...b.arrays.t2m.data], rows, `batch ${j}`);
  });
  // A list of labels picks those positions in that order: lat 40 and 60 are rows 4 and 0.
  const picked = await open(CF, { variables: ['t2m'], batchSize: 5, seed: 2, sel: { lat: { labels: [40, 60] } } });
  const first = (await collect(picked.all()))[0];
  picked.close();
  assert.deepEqual(first.arrays.t2m.shape, [5, 2, 6]);
  for (let i = 0; i < 5; i++) {
    const whole = want[0].arrays.t2m.data;
    const row = [...whole.subarray(i * 30 + 24, i * 30 + 30), ...whole.subarray(i * 30, i * 30 + 6)];
    assert.deepEqual([...first.arrays.t2m.data.subarray(i * 12, (i + 1) * 12)], row, `row ${i}`);
  }
});

test('with coords, each patched row carries the coordinate values its patch covers', { skip }, async () => {
  // cf: lat = linspace(60, 40, 5), lon = linspace(0, 5, 6).
  const lat = [60, 55, 50, 45, 40], lon = [0, 1, 2, 3, 4, 5];
  const ds = await open(CF, { batchSize: 5, coords: true, patch: { lat: 2, lon: 3 }, patchMode: 'random', patchesPerSample: 2 });
  let rows = 0;
  for (const b of await collect(ds.all())) {
    const n = b.sampleIndices.length;
    assert.equal(b.coords.lat.length, n * 2);
    assert.equal(b.coords.lon.length, n * 3);
    for (let i = 0; i < n; i++) {
      const [y, x] = [Number(b.patchOrigins[2 * i]), Number(b.patchOrigins[2 * i + 1])];
      assert.deepEqual([...b.coords.lat.subarray(2 * i, 2 * i + 2)], lat.slice(y, y + 2));
      assert.deepEqual([...b.coords.lon.subarray(3 * i, 3 * i + 3)], lon.slice(x, x + 3));
    }
    rows += n;
  }
  assert.equal(rows, 48);
  ds.close();
});
