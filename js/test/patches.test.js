// Spatial patches in the JS package (`patch`, `patchMode`, `patchStride`, `patchesPerSample`;
// docs/patches.md): each batch row is one patch of one sample, placed by `patchOrigins` on the
// axes `patchDims`. Checked against the same store read without patches: a grid yields every
// (sample, origin) once per epoch, random patches are a function of (seed, epoch) and fit the
// field, and every patch holds exactly the box of its whole sample. The worker and
// `batchViews` carry the same patches; core's refusals reach JS with core's message. The
// same batches as the native engine: js/test/parity.test.js (`PATCH_CASES`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { open, openInWorker } from '../src/index.js';
import { HTTP, skip, collect, digest, bytesOf } from '../test-support/helpers.js';

const OPTS = { seed: 3, batchSize: 7, blockChunks: 2 };
/** (80, 6, 7) time × lat × lon: t2m one tile per chunk, u10 tiles of 3 × 4. */
const ZSTD = `${HTTP}/v3_zstd`;
/** (37, 13, 17) with no dimension names, on ragged chunks of 5 × 6 × 6. */
const RAGGED = `${HTTP}/v3_ragged`;

/** Each sample of one epoch of `split`, read whole: sample → label → its values (inner shape). */
async function wholeSamples(url, options, split, epoch) {
  const ds = await open(url, options);
  ds.setEpoch(epoch);
  const samples = new Map();
  for await (const b of ds.iter(split)) {
    b.sampleIndices.forEach((t, i) => {
      const row = {};
      for (const [label, a] of Object.entries(b.arrays)) {
        const n = a.data.length / a.shape[0];
        row[label] = a.data.slice(i * n, (i + 1) * n);
      }
      samples.set(Number(t), row);
    });
  }
  ds.close();
  return samples;
}

/** The box of `src` (C order over `inner`) at `origin` with extent `size` on inner axes `axes`. */
function subBox(src, inner, axes, origin, size) {
  const start = inner.map(() => 0);
  const len = [...inner];
  axes.forEach((a, k) => {
    start[a] = origin[k];
    len[a] = size[k];
  });
  const strides = inner.map((_, a) => inner.slice(a + 1).reduce((p, x) => p * x, 1));
  const out = new src.constructor(len.reduce((p, x) => p * x, 1));
  const idx = len.map(() => 0);
  for (let e = 0; e < out.length; e++) {
    out[e] = src[idx.reduce((at, x, a) => at + (start[a] + x) * strides[a], 0)];
    for (let a = len.length - 1; a >= 0; a--) {
      if (++idx[a] < len[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

/** Row i's origin, one start per patched axis. */
function originOf(b, i) {
  const n = b.patchDims.length;
  return [...b.patchOrigins.subarray(i * n, (i + 1) * n)].map(Number);
}

/**
 * Every row of `batches` is the box of its whole sample (`whole`, by `wholeSamples`) at its
 * origin: `axes` are the inner axes of `patchDims`, `inner` each label's whole-sample shape.
 * Returns the rows as `sample/origin` keys, in draw order.
 */
function checkBoxes(batches, whole, { dims, axes, size, inner }) {
  const keys = [];
  for (const b of batches) {
    assert.deepEqual(b.patchDims, dims);
    assert.ok(b.patchOrigins instanceof BigUint64Array, 'origins are u64, as sampleIndices');
    assert.equal(b.patchOrigins.length, b.sampleIndices.length * dims.length, 'row-major: rows × axes');
    b.sampleIndices.forEach((t, i) => {
      const origin = originOf(b, i);
      keys.push(`${t}/${origin}`);
      for (const [label, a] of Object.entries(b.arrays)) {
        const n = a.data.length / a.shape[0];
        const want = subBox(whole.get(Number(t))[label], inner, axes, origin, size);
        assert.ok(bytesOf(a.data.subarray(i * n, (i + 1) * n)).equals(bytesOf(want)), `${label} sample ${t} at ${origin}`);
      }
    });
  }
  return keys;
}

/** A patched pass's fingerprint: the digest, then each batch's `dims:origins` (as parity.test.js). */
function patchedDigest(batches) {
  return [digest(batches), ...batches.map((b) => `${b.patchDims}:${[...b.patchOrigins]}`)].join(' ');
}

test('grid patches: every (sample, origin) once per epoch, each the box of its whole sample', { skip }, async () => {
  const opts = { ...OPTS, variables: ['t2m', 'u10'] };
  const whole = await wholeSamples(ZSTD, opts, 'train', 1);
  const ds = await open(ZSTD, { ...opts, patch: { lat: 3, lon: 3 }, patchStride: { lon: 2 } });
  ds.setEpoch(1);
  const pass = ds.train();
  const batches = await collect(pass);
  assert.equal(pass.length, batches.length);
  for (const b of batches) {
    for (const a of Object.values(b.arrays)) assert.deepEqual(a.shape, [b.sampleIndices.length, 3, 3]);
  }
  const keys = checkBoxes(batches, whole, { dims: ['lat', 'lon'], axes: [0, 1], size: [3, 3], inner: [6, 7] });
  // 6 latitudes by 3: starts 0, 3; 7 longitudes by 3 stepping 2: starts 0, 2, 4 (the last one never drawn).
  const want = [...whole.keys()].flatMap((t) => [0, 3].flatMap((y) => [0, 2, 4].map((x) => `${t}/${y},${x}`)));
  assert.equal(new Set(keys).size, keys.length, 'no (sample, origin) twice');
  assert.deepEqual([...keys].sort(), want.sort(), 'every (sample, origin) of the split');
  ds.close();
});

test("the order of `patch` is the column order of patchOrigins, on names and axis indices", { skip }, async () => {
  const named = await open(ZSTD, { ...OPTS, variables: ['t2m'], patch: { lon: 3, lat: 2 } });
  const whole = await wholeSamples(ZSTD, { ...OPTS, variables: ['t2m'] }, 'all', 0);
  const batches = await collect(named.all());
  assert.deepEqual(batches[0].arrays.t2m.shape.slice(1), [2, 3], 'the array keeps its own axis order');
  checkBoxes(batches, whole, { dims: ['lon', 'lat'], axes: [1, 0], size: [3, 2], inner: [6, 7] });
  named.close();
  // Axis indices: a Map and [axis, size] pairs keep their order; an object lists integer keys first.
  const base = { ...OPTS, variables: ['t2m'] };
  const ragged = await wholeSamples(RAGGED, base, 'train', 0);
  const seen = [];
  for (const patch of [new Map([[2, 5], [1, 4]]), [[2, 5], ['1', 4]]]) {
    const ds = await open(RAGGED, { ...base, patch });
    const got = await collect(ds.train());
    checkBoxes(got, ragged, { dims: ['axis2', 'axis1'], axes: [1, 0], size: [5, 4], inner: [13, 17] });
    seen.push(patchedDigest(got));
    ds.close();
  }
  assert.equal(seen[0], seen[1], 'a Map and pairs are the same patch');
  const object = await open(RAGGED, { ...base, patch: { 2: 5, 1: 4 } });
  const first = await object.train().next();
  assert.deepEqual(first.patchDims, ['axis1', 'axis2'], "a JS object's integer-like keys come first, ascending");
  object.close();
});

test('random patches: the same for a seed and epoch, others next epoch, inside the field', { skip }, async () => {
  const base = { ...OPTS, variables: ['t2m'] };
  const opts = { ...base, patch: { 1: 4, 2: 5 }, patchMode: 'random', patchesPerSample: 3 };
  const pass = async (epoch) => {
    const ds = await open(RAGGED, opts);
    ds.setEpoch(epoch);
    const batches = await collect(ds.train());
    ds.close();
    return batches;
  };
  const [a, again, next] = [await pass(2), await pass(2), await pass(3)];
  assert.equal(patchedDigest(a), patchedDigest(again), 'same seed and epoch: same samples, origins and bytes');
  const origins = (bs) => bs.flatMap((b) => [...b.patchOrigins]);
  assert.notDeepEqual(origins(next), origins(a), 'the next epoch draws other origins');
  const whole = await wholeSamples(RAGGED, base, 'train', 2);
  const keys = checkBoxes(a, whole, { dims: ['axis1', 'axis2'], axes: [0, 1], size: [4, 5], inner: [13, 17] });
  const perSample = new Map();
  for (const k of keys) {
    const [t, o] = k.split('/');
    perSample.set(t, (perSample.get(t) ?? 0) + 1);
    const [y, x] = o.split(',').map(Number);
    assert.ok(y <= 13 - 4 && x <= 17 - 5, `origin ${o} fits the field`);
  }
  assert.deepEqual([...perSample.keys()].sort(), [...whole.keys()].map(String).sort(), 'every sample of the split');
  assert.ok([...perSample.values()].every((n) => n === 3), 'patchesPerSample rows per sample');
});

test('openInWorker and batchViews carry the same patches', { skip }, async () => {
  const opts = { ...OPTS, variables: ['t2m', 'u10'], patch: { lat: 3, lon: 3 } };
  const main = await open(ZSTD, opts);
  const want = await collect(main.train());
  main.close();
  const wds = await openInWorker(ZSTD, opts);
  const got = await collect(wds.train());
  assert.equal(patchedDigest(got), patchedDigest(want), 'the worker yields the main-thread patches');
  const r = await wds.transferReport();
  assert.equal(r.buffers, r.batches * (2 + 2), 'each array, sampleIndices and patchOrigins are transferred');
  assert.equal(r.detached, r.buffers);
  await wds.close();
  const views = await open(ZSTD, { ...opts, batchViews: true });
  const copies = [];
  let i = 0;
  for await (const b of views.train()) {
    assert.deepEqual([...b.patchOrigins], [...want[i].patchOrigins]);
    assert.deepEqual(b.patchDims, want[i].patchDims);
    const c = b.copy();
    assert.notEqual(c.patchOrigins, b.patchOrigins, 'a copy owns its origins');
    copies.push(c);
    i++;
  }
  assert.equal(patchedDigest(copies), patchedDigest(want), 'views and their copies hold the same patches');
  views.close();
});

test('whole samples have no patch fields; bad patch options are refused with what to do', { skip }, async () => {
  const ds = await open(ZSTD, { ...OPTS, variables: ['t2m'] });
  const b = await ds.train().next();
  assert.ok(!('patchOrigins' in b) && !('patchDims' in b));
  ds.close();
  const refused = (options, message) => assert.rejects(open(ZSTD, { variables: ['t2m'], ...options }), message);
  await refused({ patch: { lat: 3 }, patchMode: 'tiles' }, /patchMode must be 'grid' or 'random', got "tiles"/);
  await refused({ patch: { lat: 3 }, patchesPerSample: 2 }, /patchesPerSample is for patchMode 'random'/);
  await refused({ patchesPerSample: 2 }, /pass patch too/);
  await refused({ patch: { depth: 3 } }, /depth/);
  await refused({ patch: { lat: 7 } }, /between 1 and the axis length 6/);
  await refused({ patch: [[-1, 3]] }, /patch\[0\]\[0\]: axis index -1 is negative/);
  await refused({ patch: 3 }, /patch: invalid type/);
});
