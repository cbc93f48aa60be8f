// Headless Chromium (playwright-core driving Debian's chromium): the worker helper in a
// dedicated Web Worker, on a page served from js/, reading the fixtures cross-origin. Batches
// equal the main-thread ones and the native digests; each transferred buffer is detached in
// the worker. In a cross-origin-isolated page (COOP/COEP) the worker picks the threaded build
// (pkg/web-threads) and gives the same digests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { HTTP, FAULTY_HTTP, faultySkip, skip, manifest, dataVars } from '../test-support/helpers.js';
import { browserSkip, serveDir, serveJs, launch } from '../test-support/browser.js';
import { REPO, TABLE, jsCases, nestedPaths } from '../test-support/option-table.js';

const DIGESTS = process.env.INSITUBATCH_NATIVE_DIGESTS;
// The parity parameters of wasm/tests/native_digest.rs.
const PARITY = { epoch: 2, splits: ['train', 'all'], options: { seed: 3, batchSize: 7, blockChunks: 2 } };
const STORES = ['v3_zstd', 'v3_blosc', 'v3_sharded', 'v2_blosc', 'v2_zlib', 'v3_gzip', 'multi_spc'];
const THREADS_PKG = new URL('../pkg/web-threads/insitubatch_wasm_bg.wasm', import.meta.url);

const off = skip || browserSkip;
let chrome, plain, isolated;

before(async () => {
  if (off) return;
  chrome = await launch();
  plain = await serveJs();
  isolated = await serveJs({ coopCoep: true });
});
after(async () => {
  await chrome?.browser.close();
  plain?.stop();
  isolated?.stop();
});

function stores() {
  const m = manifest().stores;
  return STORES.map((name) => {
    const s = m.find((x) => x.name === name);
    assert.ok(s, `fixture ${name}`);
    const vars = dataVars(s);
    return { name, path: s.path, vars, sampleAxis: s.sample_axis, n: s.arrays[vars[0]].shape[s.sample_axis] };
  });
}

async function run(server, fn, arg) {
  const page = await chrome.page(`${server.url}/test-support/page/`);
  try {
    return await page.evaluate(
      async ([fn, arg]) => (await import('/test-support/browser-cases.js'))[fn](arg),
      [fn, arg],
    );
  } catch (e) {
    throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
  } finally {
    await page.close();
  }
}

function checkDigests(res, { build, threads }) {
  const native = DIGESTS ? JSON.parse(readFileSync(DIGESTS, 'utf8')) : undefined;
  let compared = 0;
  for (const [name, r] of Object.entries(res.stores)) {
    assert.equal(r.build, build, `${name}: build`);
    assert.equal(r.threads, threads, `${name}: threads`);
    for (const split of PARITY.splits) {
      if (r.main[split]) assert.equal(r.worker[split], r.main[split], `${name}/${split}: worker differs from the page`);
      if (native) {
        assert.equal(r.worker[split], native[`${name}/${split}`], `${name}/${split}: worker differs from native`);
        compared++;
      }
    }
    assert.ok(r.transfer.batches > 0);
    assert.equal(r.transfer.buffers, r.transfer.batches * (r.labels + 1), `${name}: every array and sampleIndices transferred`);
    assert.equal(r.transfer.detached, r.transfer.buffers, `${name}: transferred buffers are detached in the worker`);
    assert.ok(r.pageBytes > 0);
    assert.equal(r.pageBytes, r.transfer.bytes, `${name}: the page received every transferred byte`);
  }
  return compared;
}

test('Chromium: a dedicated worker, one thread, equals the page and native', { skip: off }, async () => {
  const res = await run(plain, 'workerDigests', { http: HTTP, stores: stores(), ...PARITY, threads: 'auto', mainThread: true });
  assert.equal(res.isolated, false);
  const compared = checkDigests(res, { build: 'web', threads: 1 });
  for (const [name, r] of Object.entries(res.stores)) assert.equal(r.fetch, null, `${name}: one thread reads on the engine's thread`);
  console.log(`chromium worker (one thread): ${STORES.length} stores equal to the page${compared ? ` and ${compared} native digests` : ''}`);
});

/** The knobs digests (windows, split seed, sample range) equal native's, in the worker and through a storage object. */
function checkKnobs(res, build) {
  const native = DIGESTS ? JSON.parse(readFileSync(DIGESTS, 'utf8')) : undefined;
  for (const [name, r] of Object.entries(res)) {
    assert.equal(r.build, build, `${name}: build`);
    assert.equal(r.storage, r.worker, `${name}: the page's storage object differs from the worker`);
    if (native) assert.equal(r.worker, native[`${name}/knobs/train`], `${name}/knobs: differs from native`);
  }
}

test('Chromium: windows and split knobs in a worker and through a storage object equal native', { skip: off }, async () => {
  const res = await run(plain, 'knobsDigests', { http: HTTP, stores: stores(), epoch: PARITY.epoch, options: PARITY.options, threads: 'auto' });
  checkKnobs(res, 'web');
});

const S3_AUTH = process.env.INSITUBATCH_S3_AUTH_ENDPOINT;
test('Chromium (insitubatch/web-s3): signed S3 on the page and in a worker equals native; the credentials callback is called again once its answer expires; a wrong secret is refused', { skip: off || (!S3_AUTH && 'INSITUBATCH_S3_AUTH_ENDPOINT unset: run scripts/test-wasm.sh') }, async () => {
  // The signature-checking moto server (tests/servers/s3_server.py --auth) holds v3_zstd only.
  const store = stores().find((s) => s.name === 'v3_zstd');
  const r = await run(plain, 's3Signed', {
    endpoint: S3_AUTH, bucket: 'signed', keyId: process.env.INSITUBATCH_S3_AUTH_KEY_ID, secret: process.env.INSITUBATCH_S3_AUTH_SECRET,
    store, epoch: PARITY.epoch, splits: PARITY.splits, options: PARITY.options,
  });
  const native = DIGESTS ? JSON.parse(readFileSync(DIGESTS, 'utf8')) : undefined;
  assert.match(r.plain.message, /no S3 support.*insitubatch\/web-s3/s, 'the default entry says where S3 is');
  assert.equal(r.workerBuild, 'web');
  for (const split of PARITY.splits) {
    if (native) assert.equal(r.page[split], native[`v3_zstd/${split}`], `${split}: signed S3 on the page differs from native`);
    assert.equal(r.worker[split], r.page[split], `${split}: the worker differs from the page`);
    assert.equal(r.callback[split], r.page[split], `${split}: the credentials callback's read differs`);
  }
  assert.equal(r.calls, 2, 'called once, and once more because the first answer expires within the refresh margin');
  assert.equal(r.wrong.ok, false);
  assert.ok(r.wrong.isError);
  assert.match(r.wrong.message, /SignatureDoesNotMatch|403/);
  assert.match(r.wrong.message, /check the access key id and secret/);
  assert.match(r.wrong.message, /s3:\/\/signed\/v3_zstd\/\S*$/, 'the URL last');
  assert.ok(!r.wrong.message.includes(process.env.INSITUBATCH_S3_AUTH_SECRET), 'no secret in the error');
  assert.match(r.throwing.message, /the credentials callback threw: no session/);
  assert.match(r.throwing.message, /s3:\/\/signed\/v3_zstd\/\S*$/, 'the URL last');
  assert.match(r.toWorker.message, /openInWorker cannot take a credentials callback/);
  console.log(`chromium signed S3 (moto with auth at ${S3_AUTH}): page, worker and callback equal${native ? ' to native' : ''}`);
});

test('Chromium: a local path is refused on the page, saying what to use', { skip: off }, async () => {
  for (const url of ['/data/era5.zarr', 'file:///data/era5.zarr', 'era5.zarr']) {
    const r = await run(plain, 'openError', { url });
    assert.equal(r.ok, false, url);
    assert.ok(r.isError);
    assert.match(r.message, /a local path cannot be read in a browser; serve the store over http\(s\):\/\//);
    assert.ok(r.message.endsWith(url), r.message);
  }
});

test('Chromium: worker errors are Error with the engine message', { skip: off }, async () => {
  const r = await run(plain, 'workerError', { url: `${HTTP}/no_such_store`, options: { variables: ['t2m'] } });
  assert.equal(r.ok, false);
  assert.ok(r.isError);
  assert.match(r.message, /no_such_store/);
  const t = await run(plain, 'workerError', { url: `${HTTP}/v3_zstd`, options: { variables: ['t2m'] }, threads: true });
  assert.match(t.message, /cross-origin-isolated/);
});

test('Chromium, cross-origin isolated: the worker picks the threaded build, same digests', { skip: off || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  assert.ok(existsSync(THREADS_PKG), 'scripts/test-wasm.sh builds js/pkg/web-threads');
  const res = await run(isolated, 'workerDigests', { http: HTTP, stores: stores(), ...PARITY, threads: 'auto', nThreads: 2, mainThread: true, churn: 3 });
  assert.equal(res.isolated, true, 'the COOP/COEP page is cross-origin isolated');
  const compared = checkDigests(res, { build: 'web-threads', threads: 2 });
  checkFetchWorker(res);
  checkKnobs(await run(isolated, 'knobsDigests', { http: HTTP, stores: stores(), epoch: PARITY.epoch, options: PARITY.options, threads: 'auto', nThreads: 2 }), 'web-threads');
  console.log(`chromium worker (threads build, 2 threads): ${STORES.length} stores equal${compared ? ` and ${compared} native digests` : ''}`);
});

test('Chromium: the plain-file worker (workerUrl: src/worker.js, as the dashboard passes it) and one the page starts (how.worker), one thread and, cross-origin isolated, threaded: same digests', { skip: off || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  const some = stores().filter((s) => ['v3_zstd', 'v3_sharded'].includes(s.name));
  for (const how of [{ workerUrl: '/src/worker.js' }, { ownWorker: '/src/worker-web.js' }]) {
    const one = await run(plain, 'workerDigests', { http: HTTP, stores: some, ...PARITY, threads: 'auto', mainThread: true, ...how });
    checkDigests(one, { build: 'web', threads: 1 });
    const threaded = await run(isolated, 'workerDigests', { http: HTTP, stores: some, ...PARITY, threads: 'auto', nThreads: 2, mainThread: true, ...how });
    checkDigests(threaded, { build: 'web-threads', threads: 2 });
    checkFetchWorker(threaded);
  }
});

/**
 * The threaded build's chunk reads went through its fetch worker (wasm/src/storage.rs
 * `off_thread`): every store read something there, the worker still runs, and every read it
 * answered brought bytes. Reads abandoned by the churn passes may have ended as errors.
 */
function checkFetchWorker(res) {
  for (const [name, r] of Object.entries(res.stores)) {
    assert.ok(r.fetch, `${name}: a fetch report`);
    assert.equal(r.fetch.running, true, `${name}: the fetch worker still serves reads`);
    assert.ok(r.fetch.reads > 0 && r.fetch.bytes > 0, `${name}: chunk reads served off the engine's thread: ${JSON.stringify(r.fetch)}`);
  }
}

test('Chromium, cross-origin isolated: the threaded build with fetchWorker: false reads on the engine thread, same digests', { skip: off || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  const res = await run(isolated, 'workerDigests', { http: HTTP, stores: stores(), ...PARITY, threads: 'auto', nThreads: 2, mainThread: true, fetchWorker: false });
  checkDigests(res, { build: 'web-threads', threads: 2 });
  for (const [name, r] of Object.entries(res.stores)) assert.equal(r.fetch.reads, 0, `${name}: no read went to a fetch worker`);
});

test('Chromium, cross-origin isolated: the fetch worker against a misbehaving server: faults retried, a stall aborted, a whole object for a range cut right, a 403 named', { skip: off || faultySkip || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  // The cases of js/test/faults.test.js, through the fetch worker: v3_zstd reads whole
  // objects (bodies sent back), v3_sharded ranges (bodies written in place).
  const options = { variables: ['t2m'], fractions: [1, 0, 0], batchSize: 7, blockChunks: 2, seed: 5, readPolicy: { retries: 4, backoffS: 0.001, requestTimeoutS: 0.5 } };
  const faulty = (session, fault, store) => `${FAULTY_HTTP}/${session}/${fault}/${store}`;
  const reads = [];
  for (const store of ['v3_zstd', 'v3_sharded']) {
    reads.push({ url: `${HTTP}/${store}`, store, want: 'clean' });
    for (const fault of ['503-2-chunks', 'reset-1-chunks', 'cut-1-chunks', 'stall-1-chunks']) reads.push({ url: faulty(`fw-${fault}`, fault, store), store, want: 'same' });
  }
  reads.push({ url: faulty('fw-full200', 'full200-all-chunks', 'v3_sharded'), store: 'v3_sharded', want: 'same' });
  reads.push({ url: faulty('fw-403', '403-all-chunks', 'v3_zstd'), store: 'v3_zstd', want: /HTTP 403 Forbidden.*\/v3_zstd\/t2m\/c\/\d+\/0\/0$/ });
  const got = await run(isolated, 'workerReads', { reads, options, nThreads: 2 });
  const clean = {};
  for (const [i, r] of got.entries()) {
    const { store, want } = reads[i];
    assert.equal(r.build, 'web-threads', r.url);
    assert.ok(r.fetch?.running, `${r.url}: the fetch worker still runs`);
    if (want === 'clean') {
      assert.ok(r.digest, `${r.url}: ${r.error}`);
      clean[store] = r.digest;
    } else if (want === 'same') {
      assert.equal(r.digest, clean[store], `${r.url}: ${r.error ?? 'different batches'}`);
    } else {
      assert.match(r.error ?? 'no error', want, r.url);
    }
    assert.ok(r.fetch.reads > 0, `${r.url}: reads went through the fetch worker: ${JSON.stringify(r.fetch)}`);
  }
  const inPlace = got.find((r) => r.url === `${HTTP}/v3_sharded`);
  assert.ok(inPlace.fetch.inPlace > 0, `a sharded store's tiles are written in place: ${JSON.stringify(inPlace.fetch)}`);
  // Chromium may answer later ranges of an object it cached whole (206 from its cache), so
  // only the first answer per object is sure to be the server's 200.
  const whole = got.find((r) => r.url.includes('full200'));
  assert.ok(whole.fetch.bodies > 0, `a whole object sent for a range comes back as a body, cut here: ${JSON.stringify(whole.fetch)}`);
  const stalled = got.filter((r) => r.url.includes('stall'));
  for (const r of stalled) assert.ok(r.fetch.errors > 0, `${r.url}: the stalled read was aborted in the fetch worker: ${JSON.stringify(r.fetch)}`);
});

test('Chromium, cross-origin isolated: a fetch worker that fails mid-pass sends its reads back to the engine\'s thread: the same batches', { skip: off || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  for (const store of ['v3_zstd', 'v3_sharded']) {
    const options = { variables: ['t2m'], batchSize: 7, blockChunks: 2, seed: 5, readPolicy: { retries: 2, backoffS: 0.001 } };
    const r = await run(isolated, 'fetchWorkerFails', { url: `${HTTP}/${store}`, options, nThreads: 2 });
    assert.deepEqual(r.got, r.want, `${store}: the failed worker's passes differ from reads on the engine's thread`);
    assert.equal(r.fetch.running, false, `${store}: the failed fetch worker is stopped`);
  }
});

/** What trapCases reports for a pass that trapped at its second next(). */
function checkTrapped(r, where) {
  assert.equal(r.batches, 1, `${where}: one batch before the trap`);
  assert.equal(r.rejected, true, `${where}: the pass rejects`);
  assert.equal(r.name, 'EngineTrapError', `${where}: ${r.message}`);
  assert.match(r.message, /wasm engine trapped \(a panic: .*forced by __debugTrap/, where);
}

test('Chromium: a trap rejects the pass (page and worker) and a fresh instance or worker serves the next', { skip: off }, async () => {
  const options = { variables: ['t2m'], batchSize: 8, blockChunks: 2 };
  const r = await run(plain, 'trapCases', { url: `${HTTP}/v3_zstd`, options, threads: 'auto' });
  checkTrapped(r.page, 'page');
  assert.equal(r.page.isTrap, true);
  assert.match(r.page.cause, /RuntimeError/, 'the original trap is the cause');
  assert.equal(r.page.fresh, true, 'the next open() instantiated a fresh module');
  assert.equal(r.page.samplesAfter, 80);
  assert.equal(r.worker.build, 'web');
  checkTrapped(r.worker, 'worker');
  assert.match(r.worker.later, /^EngineTrapError/, 'the trapped worker answers nothing more');
  assert.equal(r.worker.samplesAfter, 80);
});

/** The close loop's arguments: 6 chunks of 8 × 1024 × 1024 float32 (32 MiB each), made up where the loop runs. */
const CLOSE_LOOP = { cycles: 20, seed: 7, store: { samples: 48, rows: 1024, cols: 1024, chunkSamples: 8 } };

/** Every batch right, and wasm memory and bytes in use after each cycle the same as after the first. */
function checkFlat(r) {
  assert.deepEqual(r.bad, []);
  assert.equal(r.memory.length, CLOSE_LOOP.cycles);
  assert.ok(r.memory[0] > 128 * 2 ** 20, `big enough to matter (${r.memory[0]} bytes)`);
  assert.deepEqual(r.memory, r.memory.map(() => r.memory[0]), `wasm memory after each cycle: ${r.memory.join(', ')}`);
  assert.deepEqual(r.heap, r.heap.map(() => r.heap[0]), `bytes in use after each cycle: ${r.heap.join(', ')}`);
}

test('Chromium: close() gives all memory back: 20 open/iterate/close cycles on the page, wasm memory flat after the first', { skip: off }, async () => {
  checkFlat(await run(plain, 'closeLoop', CLOSE_LOOP));
});

test("Chromium: close() gives all memory back in the page's own dedicated worker: 20 cycles, wasm memory flat after the first", { skip: off }, async () => {
  // A module worker that imports the web package itself (not openInWorker's worker, which
  // holds one dataset and takes its memory with it when closed), reporting every cycle.
  const r = await run(plain, 'closeLoopInWorker', CLOSE_LOOP);
  assert.equal(r.inWorker, true, 'the loop ran in a DedicatedWorkerGlobalScope');
  assert.deepEqual(r.cycles, [...Array(CLOSE_LOOP.cycles).keys()], 'one report per cycle, in order');
  checkFlat(r);
});

test('Chromium, cross-origin isolated: a trap in the threaded worker rejects the pass, a new worker serves the next', { skip: off || (!existsSync(THREADS_PKG) && !process.env.IB_REQUIRE_THREADS && 'js/pkg/web-threads not built') }, async () => {
  const options = { variables: ['t2m'], batchSize: 8, blockChunks: 2 };
  const r = await run(isolated, 'trapCases', { url: `${HTTP}/v3_zstd`, options, threads: 'auto', nThreads: 2, pageToo: false });
  assert.equal(r.worker.build, 'web-threads');
  checkTrapped(r.worker, 'threaded worker');
  assert.equal(r.worker.samplesAfter, 80);
  // A panic on a decode thread, which the pass then waits for forever (the hang of issue
  // 16): reported over the engine's BroadcastChannel, the worker is terminated.
  const p = await run(isolated, 'trapCases', { url: `${HTTP}/v3_zstd`, options, threads: 'auto', nThreads: 2, pageToo: false, workerKind: 'pool' });
  assert.equal(p.worker.batches, 1);
  assert.equal(p.worker.name, 'EngineTrapError', p.worker.message);
  assert.match(p.worker.message, /wasm engine trapped \(a panic: a trap forced by __debugTrap in a decode thread .*, in decode thread \d\)/);
  assert.match(p.worker.later, /^EngineTrapError/);
  assert.equal(p.worker.samplesAfter, 80);
});

test('Chromium: every case of the option table, the same batches as the CLI, Python and Node', { skip: off }, async () => {
  // tests/options/store.zarr over HTTP (the browser build reads no paths); each cache case
  // its own directory in this profile's origin private file system.
  const store = await serveDir(join(REPO, 'tests/options'));
  try {
    const names = createRequire(import.meta.url)('../pkg/node/insitubatch_wasm.js').optionNames();
    const run0 = Date.now();
    const walks = jsCases('browser', nestedPaths(names), (c) => `options-walk/${run0}/${TABLE.cases.indexOf(c)}`);
    const cases = walks.filter((w) => !w.skip).map((w) => ({ name: w.case.name, options: w.options, warm: w.warm, stores: w.case.stores }));
    const res = await run(plain, 'optionWalk', { store: `${store.url}/store.zarr`, cases });
    for (const w of walks) {
      if (w.skip) {
        console.log(`options walk (browser): skip ${JSON.stringify(w.case.name)}: ${w.skip}`);
        continue;
      }
      const r = res[w.case.name];
      const { expect } = w.case;
      if (expect === 'batches') {
        assert.equal(r.digest, w.case.digest, `${w.case.name}: ${r.error?.message ?? 'other batches than the table\'s'}`);
      } else {
        const option = expect.option?.split('.').map((p) => p.replace(/_([a-z0-9])/g, (_, x) => x.toUpperCase())).join('.');
        assert.equal(r.error?.kind, expect.kind, `${w.case.name}: ${JSON.stringify(r)}`);
        assert.equal(r.error?.option, option, `${w.case.name}: ${r.error?.message}`);
      }
    }
    console.log(`options walk (browser): ${cases.length} cases`);
  } finally {
    store.stop();
  }
});
