// The browser's disk tier (`cacheDir`, wasm/src/opfs/) in headless Chromium (playwright-core
// driving Debian's chromium): decoded chunks kept in the origin private file system. The store
// is served by its own tests/servers/http_server.py with --count-requests, so every test says
// how many chunk reads reached the network: a warm open, in a fresh worker, after a page
// reload or on the page itself, reads none, and its batches equal the uncached ones. Also:
// readonlyCache and the stale rules, one writer with readers excluded, writes cut short (a
// worker terminated mid-write, files damaged in place, swapped or planted) never read back as chunks, and a full
// quota (Chromium's, set small over CDP) stops the writes without changing a batch.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { FIXTURES, HTTP, skip } from '../test-support/helpers.js';
import { browserSkip, serveJs, serveDir, launch } from '../test-support/browser.js';

const off = skip || browserSkip;
const STORE = 'v3_zstd'; // t2m and u10, 80 samples in chunks of 8: 20 cached chunks in all
const OPTIONS = { variables: ['t2m', 'u10'], batchSize: 7, blockChunks: 2, seed: 3 };
const CHUNKS = 20;
const THREADS_PKG = new URL('../pkg/web-threads/insitubatch_wasm_bg.wasm', import.meta.url);
let chrome, pages, isolated, store;

before(async () => {
  if (off) return;
  chrome = await launch();
  pages = await serveJs();
  isolated = await serveJs({ coopCoep: true });
  store = await serveDir(FIXTURES, { countRequests: true });
});
after(async () => {
  await chrome?.browser.close();
  pages?.stop();
  isolated?.stop();
  store?.stop();
});

/** Chunk reads (GETs of anything but metadata) the store served since the last call. */
async function chunkReads() {
  const counts = await store.requests({ reset: true });
  const meta = /(zarr\.json|\.zarray|\.zattrs|\.zgroup|\.zmetadata)$/;
  return Object.entries(counts)
    .filter(([k]) => k.startsWith('GET ') && !meta.test(k))
    .reduce((n, [, c]) => n + c, 0);
}

/** `fn(arg)` of test-support/opfs-cases.js on `page`, with the browser's console on failure. */
async function call(page, fn, arg) {
  try {
    return await page.evaluate(async ([fn, arg]) => (await import('/test-support/opfs-cases.js'))[fn](arg), [fn, arg]);
  } catch (e) {
    throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
  }
}

/** A fresh page (its own browser context, so an empty private file system); `server`: whose origin. */
const newPage = (server = pages) => chrome.page(`${server.url}/test-support/page/`);

/** One pass that must succeed. */
async function pass(page, arg) {
  const r = await call(page, 'pass', arg);
  assert.equal(r.error, undefined, `${JSON.stringify(arg)}: ${r.error}`);
  return r;
}

const url = () => `${store.url}/${STORE}`;
const chunkFiles = (files) => Object.keys(files).filter((n) => n.endsWith('.ibchunk'));

test('Node has no private file system: cacheDir is refused there, and the flags are checked as natively', { skip }, async () => {
  const { open } = await import('../src/index.js');
  const fixture = `${HTTP}/${STORE}`;
  const refused = async (options, re) => {
    await assert.rejects(open(fixture, { ...OPTIONS, ...options }), (e) => {
      assert.match(e.message, re);
      return true;
    });
  };
  await refused({ cacheDir: 'c', persist: true }, /origin private file system .* Node has none.*: opfs:c$/s);
  await refused({ persist: true }, /persist requires cacheDir/);
  await refused({ cacheDir: 'c' }, /needs persist/);
  await refused({ cacheDir: 'c', readonlyCache: true, resetStaleCache: true }, /contradict/);
  await refused({ cacheDir: '../c', persist: true }, /names separated by '\/'/);
});

test('a warm open reads no chunk from the network: a fresh worker, after a reload, on the page', { skip: off }, async () => {
  const page = await newPage();
  try {
    const cached = { ...OPTIONS, cacheDir: 'insitubatch/one', persist: true };
    const plain = await pass(page, { url: url(), options: OPTIONS });
    const plainTrain = await pass(page, { url: url(), options: OPTIONS, split: 'train', epoch: 2 });
    assert.ok(plain.batches > 0);
    assert.equal(plain.diskTier, null);
    await chunkReads();

    const cold = await pass(page, { url: url(), options: cached });
    assert.equal(cold.build, 'web');
    assert.equal(cold.digest, plain.digest, 'a pass that fills the cache yields the uncached batches');
    assert.equal(cold.revived, 0);
    assert.equal(cold.diskTier, 'opfs:insitubatch/one [persist (writer lock)]');
    assert.ok((await chunkReads()) >= CHUNKS, 'the cold pass read its chunks from the store');
    const files = await call(page, 'listing', { dir: 'insitubatch/one' });
    assert.equal(chunkFiles(files).length, CHUNKS, JSON.stringify(files));

    for (const [what, arg] of [
      ['a fresh worker', { url: url(), options: cached }],
      ['another split and epoch', { url: url(), options: cached, split: 'train', epoch: 2 }],
    ]) {
      const warm = await pass(page, arg);
      assert.equal(warm.digest, arg.split ? plainTrain.digest : plain.digest, `${what}: the same batches`);
      assert.ok(warm.revived >= (arg.split ? 1 : CHUNKS), `${what}: revived ${warm.revived}`);
      assert.equal(await chunkReads(), 0, `${what}: no chunk read reached the network`);
    }

    await page.reload();
    const reloaded = await pass(page, { url: url(), options: cached });
    assert.equal(reloaded.digest, plain.digest);
    assert.ok(reloaded.revived >= CHUNKS);
    assert.equal(await chunkReads(), 0, 'after a reload: no chunk read reached the network');

    const onPage = await pass(page, { url: url(), options: cached, page: true });
    assert.equal(onPage.digest, plain.digest);
    assert.ok(onPage.revived >= CHUNKS);
    assert.equal(await chunkReads(), 0, 'open() on the page: no chunk read reached the network');
  } finally {
    await page.close();
  }
});

test('the threaded build (a cross-origin-isolated page) fills and revives the cache the same way', { skip: off || (!existsSync(THREADS_PKG) && 'js/pkg/web-threads is not built') }, async () => {
  const page = await newPage(isolated);
  try {
    const cached = { ...OPTIONS, cacheDir: 'insitubatch/threads', persist: true };
    const plain = await pass(page, { url: url(), options: OPTIONS, how: { threads: true } });
    assert.equal(plain.build, 'web-threads');
    await chunkReads();
    const cold = await pass(page, { url: url(), options: cached, how: { threads: true } });
    assert.equal(cold.digest, plain.digest);
    assert.ok((await chunkReads()) >= CHUNKS);
    const warm = await pass(page, { url: url(), options: cached, how: { threads: true } });
    assert.equal(warm.build, 'web-threads');
    assert.equal(warm.digest, plain.digest);
    assert.ok(warm.revived >= CHUNKS);
    assert.equal(await chunkReads(), 0, 'the threaded build revives every chunk: no read reaches the network');
    // The one-thread build reads what the threaded one wrote: one format, one cache.
    const one = await pass(page, { url: url(), options: cached, how: { threads: false } });
    assert.equal(one.build, 'web');
    assert.equal(one.digest, plain.digest);
    assert.equal(await chunkReads(), 0);
  } finally {
    await page.close();
  }
});

test('readonlyCache reads a warm cache and refuses a chunk it lacks; stale pipelines are refused or reset per array', { skip: off }, async () => {
  const page = await newPage();
  try {
    const dir = 'insitubatch/rules';
    const plain = await pass(page, { url: url(), options: OPTIONS, split: 'train' });
    await pass(page, { url: url(), options: { ...OPTIONS, cacheDir: dir, persist: true }, split: 'train' });
    await chunkReads();
    const readonly = { ...OPTIONS, cacheDir: dir, readonlyCache: true };
    const warm = await pass(page, { url: url(), options: readonly, split: 'train' });
    assert.equal(warm.digest, plain.digest);
    assert.equal(warm.diskTier, `opfs:${dir} [read-only (shared lock)]`);
    assert.equal(await chunkReads(), 0);
    const lacking = await call(page, 'pass', { url: url(), options: readonly, split: 'all' });
    assert.match(lacking.error ?? '', /readonlyCache: true but chunk \d+ of array "(t2m|u10)" is not in the cache/);
    const none = await call(page, 'pass', { url: url(), options: { ...OPTIONS, cacheDir: 'nowhere', readonlyCache: true } });
    assert.match(none.error ?? '', /readonlyCache requires an existing cacheDir.*opfs:nowhere$/s);
    const bare = await call(page, 'pass', { url: url(), options: { ...OPTIONS, cacheDir: dir } });
    assert.match(bare.error ?? '', /needs persist/);

    // The same store under another URL is another pipeline (the store is part of it).
    const other = url().replace('127.0.0.1', 'localhost');
    const writer = { ...OPTIONS, cacheDir: dir, persist: true };
    const stale = await call(page, 'pass', { url: other, options: writer, split: 'train' });
    assert.match(stale.error ?? '', /the cached chunks of \["t2m", "u10"\] are stale.*resetStaleCache: true/s);
    const staleRo = await call(page, 'pass', { url: other, options: readonly, split: 'train' });
    assert.match(staleRo.error ?? '', /are stale.*A read-only opener cannot reset them/s);
    const before = chunkFiles(await call(page, 'listing', { dir }));
    // Reset t2m only: u10 keeps its chunks.
    const reset = await pass(page, {
      url: other,
      options: { ...writer, variables: ['t2m'], resetStaleCache: true },
      split: 'train',
    });
    assert.equal(reset.revived, 0, 'reset arrays start cold');
    assert.ok((await chunkReads()) > 0);
    const after = chunkFiles(await call(page, 'listing', { dir }));
    const u10 = (names) => names.filter((n) => n.startsWith('u10__')).sort();
    const t2m = (names) => names.filter((n) => n.startsWith('t2m__')).sort();
    assert.deepEqual(u10(after), u10(before), "u10's chunks are left as they were");
    assert.equal(t2m(after).length, t2m(before).length, 't2m: the same chunks, rewritten');
    assert.equal(t2m(after).filter((n) => t2m(before).includes(n)).length, 0, "t2m's stale files are gone");
    const u10Warm = await pass(page, { url: url(), options: { ...writer, variables: ['u10'] }, split: 'train' });
    assert.ok(u10Warm.revived > 0);
    assert.equal(await chunkReads(), 0, 'u10 is still warm for the first URL');
  } finally {
    await page.close();
  }
});

test('one writer: a second writer and readers are refused while it is open, readers share', { skip: off }, async () => {
  const page = await newPage();
  try {
    const r = await call(page, 'exclusion', { url: url(), options: { ...OPTIONS, cacheDir: 'insitubatch/locks' } });
    assert.match(r.secondWriter ?? '', /cacheDir is in use: another writer or readers .* held it.*opfs:insitubatch\/locks$/s);
    assert.match(r.readerBesideWriter ?? '', /cacheDir is in use: a writer/);
    assert.match(r.sameInstance ?? '', /already open in this page or worker/);
    assert.equal(r.twoReaders, true);
    assert.match(r.writerBesideReaders ?? '', /cacheDir is in use: another writer or readers/);
    assert.equal(r.writerAfter, null, 'a writer opens once the readers closed');
  } finally {
    await page.close();
  }
});

test('a worker killed mid-write, and chunk files damaged, swapped or planted, never read back as chunks', { skip: off }, async () => {
  const page = await newPage();
  try {
    const dir = 'insitubatch/torn';
    const cached = { ...OPTIONS, cacheDir: dir, persist: true };
    const plain = await pass(page, { url: url(), options: OPTIONS });
    const { name } = await call(page, 'killMidWrite', { url: url(), options: cached, stopAfter: 200 });
    const cut = await call(page, 'listing', { dir });
    assert.ok(name in cut, `the cut write's file ${name} is listed: ${JSON.stringify(cut)}`);
    assert.ok(cut[name] < 200, `the browser never committed the cut write: ${cut[name]} bytes`);
    await chunkReads();
    const after = await pass(page, { url: url(), options: cached });
    assert.equal(after.digest, plain.digest, 'the batches after a killed write are the uncached ones');
    assert.equal(after.revived, 0, 'no cut write was revived');
    assert.ok((await chunkReads()) >= CHUNKS);

    // Files written whole by the browser's own API, but as an interrupted write leaves them.
    const files = chunkFiles(await call(page, 'listing', { dir })).sort();
    assert.equal(files.length, CHUNKS);
    const damaged = await call(page, 'damage', { dir, names: files });
    const again = await pass(page, { url: url(), options: cached });
    assert.equal(again.digest, plain.digest, 'damaged files are read from the store instead');
    assert.equal(Object.keys(damaged).length, 5, JSON.stringify(damaged));
    assert.equal(again.revived, CHUNKS - 5, JSON.stringify(damaged));
    assert.equal(await chunkReads() > 0, true);
    assert.ok(again.notes.some((n) => /a cached chunk file .* it is read from the store instead and written again/.test(n)), again.notes.join('\n'));
    const healed = await pass(page, { url: url(), options: cached });
    assert.equal(healed.digest, plain.digest);
    assert.ok(healed.revived >= CHUNKS, 'the damaged chunks were written again');
    assert.equal(await chunkReads(), 0);
  } finally {
    await page.close();
  }
});

test('a full quota stops the writes, said in describe(), and changes no batch', { skip: off }, async () => {
  const page = await newPage();
  try {
    const dir = 'insitubatch/quota';
    const cached = { ...OPTIONS, cacheDir: dir, persist: true };
    const plain = await pass(page, { url: url(), options: OPTIONS });
    const cdp = await page.context().newCDPSession(page);
    // About six chunk files (1.5 KB each, t2m's and u10's), then QuotaExceededError.
    await cdp.send('Storage.overrideQuotaForOrigin', { origin: pages.url, quotaSize: 10_000 });
    const full = await pass(page, { url: url(), options: cached });
    assert.equal(full.digest, plain.digest, 'batches past a full quota are the uncached ones');
    assert.match(full.diskTier, /writes stopped/);
    assert.ok(full.notes.some((n) => /storage quota is full \(QuotaExceededError/.test(n)), full.notes.join('\n'));
    const kept = chunkFiles(await call(page, 'listing', { dir }));
    assert.ok(kept.length < CHUNKS, `${kept.length} chunk files under a 10 kB quota`);
    await chunkReads();
    const next = await pass(page, { url: url(), options: cached });
    assert.equal(next.digest, plain.digest);
    assert.ok(next.revived >= 1 || kept.length === 0, 'what was written before the quota ran out is revived');
  } finally {
    await page.close();
  }
});
