// The previews' cache (src/cache.js over the browser's disk tier, wasm/src/opfs/): the
// dashboard's production build on Vite's preview server, whose store middleware counts the
// store's requests (IB_COUNT_STORE_REQUESTS, vite.config.js), driven in Debian's headless
// Chromium. An epoch previewed once is previewed again after a reload with zero chunk reads
// at the server, batch for batch the same; unticking the cache reads the store again, and
// so does the probe. Needs IB_WWW_STORE (scripts/test-www.sh sets it).
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { preview } from 'vite';

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const STORE = process.env.IB_WWW_STORE;
const CHROMIUM = process.env.IB_CHROMIUM ?? '/usr/bin/chromium';
if (!STORE) throw new Error('IB_WWW_STORE is not set; run scripts/test-www.sh');
/** Playwright waits on page states; this bound only turns a hang into an error. */
const HANG_GUARD_MS = 300_000;

let server;
let base;
let browser;
let page;
const pageErrors = [];

before(async () => {
  process.env.IB_STORE_DIR = STORE;
  process.env.IB_COUNT_STORE_REQUESTS = '1';
  server = await preview({ root: ROOT, logLevel: 'warn', preview: { host: '127.0.0.1', port: 0, strictPort: false } });
  base = server.resolvedUrls.local[0];
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
  page.setDefaultTimeout(HANG_GUARD_MS);
  page.on('pageerror', (e) => pageErrors.push(e.message));
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Chunk reads (anything but metadata) the store served since the last call. */
async function chunkReads() {
  const counts = await (await fetch(new URL('/__store-requests?reset', base))).json();
  return Object.entries(counts)
    .filter(([k]) => !/(zarr\.json|\.zarray|\.zattrs|\.zgroup|\.zmetadata)$/.test(k))
    .reduce((n, [, c]) => n + c, 0);
}

/** Open the demo store (the cache box as `cache` says) and wait for its report. */
async function openDemo({ cache = true } = {}) {
  await page.goto(`${base}`);
  await page.setChecked('#cache', cache);
  await page.click('#open-demo');
  await page.waitForSelector('#tune-section:not([hidden])');
  await page.waitForFunction(() => window.__ib.report);
}

/** Every batch of the train epoch the preview shows, as `[sample indices, SHA-256 of the batch]`. */
async function previewEpoch() {
  const out = [];
  for (let k = 0; ; k++) {
    await page.click('#next-batch');
    await page.waitForFunction((i) => window.__ib.preview.ended || window.__ib.preview.shown?.batch === i, k);
    const s = await page.evaluate(async () => {
      const p = window.__ib.preview;
      if (p.ended) return { ended: true };
      const b = p.history[p.pos];
      const parts = [];
      for (const label of Object.keys(b.arrays).sort()) {
        const d = b.arrays[label].data;
        parts.push(new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
      }
      const all = new Uint8Array(parts.reduce((n, x) => n + x.length, 0));
      let o = 0;
      for (const x of parts) {
        all.set(x, o);
        o += x.length;
      }
      const h = new Uint8Array(await crypto.subtle.digest('SHA-256', all));
      return { ended: false, indices: [...b.sampleIndices].map(Number), hash: [...h].map((x) => x.toString(16).padStart(2, '0')).join('') };
    });
    if (s.ended) return out;
    out.push([s.indices, s.hash]);
  }
}

it('a reload previews the cached epoch again with zero chunk reads at the server, the same batches', async () => {
  await openDemo();
  const status = await page.textContent('#status');
  assert.match(status, /previews cached in this browser \(opfs:insitubatch-dashboard\/[0-9a-f]{16}\)/, status);
  await chunkReads();
  const first = await previewEpoch();
  assert.ok(first.length > 0);
  assert.ok((await chunkReads()) > 0, 'the first preview read its chunks from the store');

  await page.reload();
  await page.click('#open-demo');
  await page.waitForSelector('#tune-section:not([hidden])');
  await page.waitForFunction(() => window.__ib.report);
  assert.match(await page.textContent('#status'), /previews cached in this browser/);
  const again = await previewEpoch();
  assert.deepEqual(again, first, 'the same batches, from the cache');
  assert.equal(await chunkReads(), 0, 'after the reload no chunk read reached the server');

  // Without the cache the same epoch is read from the store, and equals it.
  await openDemo({ cache: false });
  assert.match(await page.textContent('#status'), /previews read from the store \(cache off\)/);
  const uncached = await previewEpoch();
  assert.deepEqual(uncached, first);
  assert.ok((await chunkReads()) > 0, 'unticked, the preview reads the store');

  // The probe times the store even with the cache on.
  await openDemo();
  await page.click('#probe');
  await page.waitForFunction(() => window.__ib.probe.report || window.__ib.probe.error);
  assert.equal(await page.evaluate(() => window.__ib.probe.error), null);
  assert.ok((await chunkReads()) > 0, 'the probe reads the store');
  assert.deepEqual(pageErrors, []);
});
