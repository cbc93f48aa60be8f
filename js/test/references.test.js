// Kerchunk reference sets over NetCDF4 files (tests/fixtures/make_virtual.py) in the JS package:
// `open('reference+' + url)` gives xarray's reading of the original files, the set and its files
// read in Node with node:fs or over HTTP with fetch, and in headless Chromium (on the page and in
// a worker) the same batches over HTTP; over the cloud-like store each chunk's bytes are fetched
// once per epoch; bad sets reject naming the chunk and the file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { open } from '../src/index.js';
import { FIXTURES, UNDER_CI, bytesOf, collect, digest, sourceRows } from '../test-support/helpers.js';
import { browserSkip, launch, serveDir, serveJs } from '../test-support/browser.js';

const VIRTUAL = process.env.INSITUBATCH_VIRTUAL_FIXTURES ?? (FIXTURES ? join(FIXTURES, 'virtual') : undefined);
const BIN = process.env.INSITUBATCH_CLOUD_STORE_BIN;
const why = !VIRTUAL || !existsSync(join(VIRTUAL, 'manifest.json'))
  ? 'no virtual fixtures (tests/fixtures/make_virtual.py, made with the zarr fixtures): run scripts/test-wasm.sh'
  : !BIN ? 'INSITUBATCH_CLOUD_STORE_BIN unset: run scripts/test-wasm.sh' : false;
if (why && UNDER_CI) throw new Error(`references.test.js: ${why}; CI is set, where this is a failure, not a skip`);
const skip = why;
const manifest = () => JSON.parse(readFileSync(join(VIRTUAL, 'manifest.json'), 'utf8'));
const VARIABLES = ['t2m', 'tp', 'msl', 'sst'];
const OPTS = { fractions: [1, 0, 0], batchSize: 7, blockChunks: 3, seed: 11 };

/** Every batch of an epoch against xarray's values of the original files, each sample once. */
async function checkEpoch(ds, store) {
  const rows = Object.fromEntries(VARIABLES.map((v) => [v, sourceRows(store.arrays[v], 0, VIRTUAL)]));
  const seen = [];
  for await (const b of ds.train()) {
    assert.deepEqual(Object.keys(b.arrays).sort(), [...VARIABLES].sort());
    b.sampleIndices.forEach((t, i) => {
      for (const v of VARIABLES) {
        const data = bytesOf(b.arrays[v].data);
        const n = data.length / b.arrays[v].shape[0];
        assert.ok(data.subarray(i * n, (i + 1) * n).equals(rows[v][Number(t)]), `${v}: sample ${t} differs from xarray's`);
      }
      seen.push(Number(t));
    });
  }
  seen.sort((a, b) => a - b);
  assert.deepEqual(seen, [...Array(store.arrays.t2m.shape[0]).keys()]);
  return ds.lastPass();
}

test('every reference set gives xarray\'s reading of the NetCDF4 files, its files read with node:fs', { skip }, async () => {
  const stores = manifest().stores;
  assert.ok(stores.length >= 6);
  assert.ok(stores.some((s) => s.path.endsWith('.parq')), 'kerchunk\'s Parquet form among them');
  for (const store of stores) {
    const ds = await open(`reference+${join(VIRTUAL, store.path)}`, OPTS);
    try {
      const stats = await checkEpoch(ds, store);
      assert.ok(stats.storage_reads < stats.tiles_read, `${store.path}: the chunks of one file coalesced`);
    } finally {
      ds.close();
    }
  }
});

/** A cloud-like store serving the virtual fixtures' folder. */
async function cloudStore() {
  const child = spawn(BIN, ['--root', VIRTUAL, '--port-file', '-'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`cloud-store exited with ${code} before listening`)));
    createInterface({ input: child.stdout }).once('line', resolve);
  });
  const base = `http://127.0.0.1:${line.trim()}`;
  const call = async (path) => JSON.parse(await (await fetch(base + path)).text());
  await call('/_ib/config?ttfb_ms=2');
  return { base, call, close: () => child.kill() };
}

test('over HTTP each chunk\'s bytes are fetched once per epoch, the ranges of a file coalesced', { skip }, async () => {
  const store = await cloudStore();
  try {
    const fixture = manifest().stores.find((s) => s.path === 'relative.json');
    const set = JSON.parse(readFileSync(join(VIRTUAL, 'relative.json'), 'utf8'));
    const want = {};
    let chunks = 0;
    for (const [key, v] of Object.entries(set.refs)) {
      if (Array.isArray(v) && VARIABLES.some((a) => key.startsWith(`${a}/`)) && !key.includes('/.')) {
        want[`/${v[0]}`] = (want[`/${v[0]}`] ?? 0) + v[2];
        chunks += 1;
      }
    }
    const readPolicy = { coalesceGapBytes: 0, hedge: false };
    const ds = await open(`reference+${store.base}/relative.json`, { ...OPTS, readPolicy });
    await store.call('/_ib/reset');
    let stats;
    try {
      stats = await checkEpoch(ds, fixture);
    } finally {
      ds.close();
    }
    const served = await store.call('/_ib/stats');
    const got = {};
    let gets = 0;
    for (const [path, c] of Object.entries(served.paths)) {
      got[path] = c.bytes;
      gets += c.requests;
    }
    assert.deepEqual(got, want, 'each chunk\'s bytes once, nothing else');
    assert.equal(stats.tiles_read, chunks);
    assert.equal(gets, stats.storage_reads, 'the pass counts what the store served');
    assert.ok(gets < chunks, `${gets} requests for ${chunks} chunks`);
  } finally {
    store.close();
  }
});

test('a Parquet reference set over HTTP gives xarray\'s reading, its records and files fetched', { skip }, async () => {
  const files = await serveDir(VIRTUAL);
  try {
    for (const fixture of manifest().stores.filter((s) => s.path.endsWith('.parq'))) {
      const ds = await open(`reference+${files.url}/${fixture.path}`, OPTS);
      try {
        await checkEpoch(ds, fixture);
      } finally {
        ds.close();
      }
    }
  } finally {
    files.stop();
  }
});

test('bad reference sets reject naming the chunk and the file', { skip }, async () => {
  for (const [name, c] of Object.entries(manifest().bad)) {
    await assert.rejects(async () => {
      const ds = await open(`reference+${join(VIRTUAL, c.path)}`, OPTS);
      try {
        for await (const _ of ds.train());
      } finally {
        ds.close();
      }
    }, (e) => {
      assert.ok(e.message.includes(c.chunk ?? 'chunk "'), `${name}: ${e.message}`);
      if (c.file) assert.ok(e.message.includes(c.file), `${name}: ${e.message}`);
      return true;
    });
  }
});

/** An epoch of `url` that must fail; its error's message. */
async function failedEpoch(url, options = OPTS) {
  let error;
  await assert.rejects(async () => {
    const ds = await open(url, options);
    try {
      for await (const _ of ds.train());
    } finally {
      ds.close();
    }
  }, (e) => { error = e; return true; });
  return error.message;
}

test('an Icechunk repository gives xarray\'s reading of the NetCDF4 files, read with node:fs at its tag, branch or snapshot, and so does VirtualiZarr\'s', { skip }, async () => {
  const repo = manifest().icechunk;
  const path = join(VIRTUAL, repo.path);
  for (const version of ['tag=v1', `snapshot=${repo.snapshots.v1}`]) {
    const ds = await open(`icechunk+${path}#${version}`, OPTS);
    try {
      const stats = await checkEpoch(ds, repo);
      assert.ok(stats.storage_reads < stats.tiles_read, `${version}: the chunks of one file coalesced`);
    } finally {
      ds.close();
    }
  }
  // The repository VirtualiZarr writes from the files (HDF5's filter order, fletcher32 first).
  const vz = manifest().virtualizarr;
  const vds = await open(`icechunk+${join(VIRTUAL, vz.path)}`, OPTS);
  try {
    await checkEpoch(vds, vz);
  } finally {
    vds.close();
  }
  // main removed sst after v1; an unknown branch is named.
  assert.match(await failedEpoch(`icechunk+${path}`, { ...OPTS, variables: VARIABLES }), /sst/);
  const nope = await failedEpoch(`icechunk+${path}#branch=nope`);
  assert.ok(nope.includes('branch "nope"') && nope.includes(repo.path), nope);
  for (const bad of [repo.bad, repo.outside]) {
    const message = await failedEpoch(`icechunk+${path}#branch=${bad.branch}`);
    assert.ok(message.includes(bad.chunk) && message.includes(bad.file), `${bad.branch}: ${message}`);
  }
});

test('an Icechunk repository over HTTP reads its native chunks and never this machine\'s files', { skip }, async () => {
  const repo = manifest().icechunk;
  const files = await serveDir(VIRTUAL);
  try {
    const url = `icechunk+${files.url}/${repo.path}#tag=v1`;
    const message = await failedEpoch(url);
    assert.ok(/(t2m|tp|msl|sst)\/c\//.test(message) && message.includes('refers to the local file file://'), message);
    // The time coordinate is a native chunk of the repository: read over HTTP, xarray's values.
    const ds = await open(url, { ...OPTS, variables: ['time'] });
    try {
      const rows = sourceRows(repo.arrays.time, 0, VIRTUAL);
      let seen = 0;
      for await (const b of ds.train()) {
        const data = bytesOf(b.arrays.time.data);
        const n = data.length / b.arrays.time.shape[0];
        b.sampleIndices.forEach((t, i) => assert.ok(data.subarray(i * n, (i + 1) * n).equals(rows[Number(t)]), `time ${t}`));
        seen += b.sampleIndices.length;
      }
      assert.equal(seen, repo.arrays.time.shape[0]);
    } finally {
      ds.close();
    }
  } finally {
    files.stop();
  }
});

test('Chromium reads a reference set over HTTP, on the page and in a worker, and web-s3 an Icechunk repository: the batches of Node', { skip: skip || browserSkip }, async () => {
  const files = await serveDir(VIRTUAL);
  const page = await serveJs();
  const chrome = await launch();
  try {
    const url = `reference+${files.url}/relative.json`;
    const fixture = manifest().stores.find((s) => s.path === 'relative.json');
    const ds = await open(url, OPTS);
    try {
      await checkEpoch(ds, fixture);
    } finally {
      ds.close();
    }
    const again = await open(url, OPTS);
    const want = digest(await collect(again.train()));
    again.close();
    const icechunk = `icechunk+${files.url}/${manifest().icechunk.path}#tag=v1`;
    const times = await open(icechunk, { ...OPTS, variables: ['time'] });
    const wantTimes = digest(await collect(times.train()));
    times.close();
    const p = await chrome.page(`${page.url}/test-support/page/`);
    let got;
    try {
      got = await p.evaluate(
        async (arg) => (await import('/test-support/browser-cases.js')).referenceDigests(arg),
        { url, options: OPTS, parquet: `reference+${files.url}/combined.parq`, icechunk },
      );
    } catch (e) {
      throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
    } finally {
      await p.close();
    }
    assert.equal(got.main, want, 'the page reads what Node reads');
    assert.equal(got.worker, want, 'and so does a worker');
    assert.match(got.parquetRefusal ?? '', /does not read kerchunk's Parquet reference sets.*web-s3/, 'the page build refuses Parquet, saying what to use');
    assert.match(got.icechunkRefusal ?? '', /does not read Icechunk repositories.*web-s3/, 'the page build refuses Icechunk, saying what to use');
    assert.equal(got.icechunkDigest, wantTimes, 'insitubatch/web-s3 reads the repository as Node does');
  } finally {
    await chrome.browser.close();
    page.stop();
    files.stop();
  }
});
