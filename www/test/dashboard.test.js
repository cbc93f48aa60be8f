// The dashboard end to end: the production build on Vite's preview server (COOP/COEP, the
// store served same-origin), driven in Debian's headless Chromium by playwright-core.
// Needs (scripts/test-www.sh sets them): IB_WWW_STORE, a .zarr directory cropped from the
// CLI's demo store; IB_CLI, the `insitubatch` binary; IB_ARTIFACTS, where screenshots go.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { preview } from 'vite';
import { VIRIDIS, lutIndex } from '../src/colormap.js';

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const STORE = process.env.IB_WWW_STORE;
const CLI = process.env.IB_CLI;
const ARTIFACTS = process.env.IB_ARTIFACTS ?? path.join(ROOT, 'dist', 'artifacts');
const CHROMIUM = process.env.IB_CHROMIUM ?? '/usr/bin/chromium';
for (const [k, v] of Object.entries({ IB_WWW_STORE: STORE, IB_CLI: CLI })) {
  if (!v) throw new Error(`${k} is not set; run scripts/test-www.sh`);
}

let server;
let base;
let browser;
let page;
const pageErrors = [];

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  process.env.IB_STORE_DIR = STORE;
  server = await preview({ root: ROOT, logLevel: 'warn', preview: { host: '127.0.0.1', port: 0, strictPort: false } });
  base = server.resolvedUrls.local[0];
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
  page.on('pageerror', (e) => pageErrors.push(e.message));
});

after(async () => {
  await browser?.close();
  await server?.close();
});

const shot = (name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

/** The CLI's describe report for the same store and knobs. */
function cliDescribe(args) {
  const out = execFileSync(CLI, ['describe', `file://${STORE}`, '--json', ...args], { encoding: 'utf8' });
  return JSON.parse(out);
}

/** Set a control the way a user does (typing fires `input`), then wait for the new report. */
async function setControl(id, value) {
  const gen = await page.evaluate(() => Number(document.body.dataset.describeGen ?? 0));
  await page.fill(`#${id}`, String(value));
  await page.waitForFunction((g) => Number(document.body.dataset.describeGen ?? 0) > g, gen);
}

async function openDemo() {
  await page.goto(`${base}?demo`);
  await page.waitForSelector('#tune-section:not([hidden])');
  await page.waitForFunction(() => window.__ib.report);
}

// The demo store's values, computed independently of any decoder: native/src/demo.rs's
// formula in f32 arithmetic (Math.fround after each operation, as Rust's f32 does).
const f = Math.fround;
const M64 = (1n << 64n) - 1n;
function noise(i) {
  let z = (BigInt(i) + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  z ^= z >> 31n;
  return f(Number(z >> 40n) / 16777216) - 0.5;
}
const RAD = f(f(Math.PI) / 180);
function t2m(t, y, x) {
  const lat = f(f(90 - f(2 * y)) * RAD);
  const lon = f(f(2 * x) * RAD);
  const day = f(f(t * f(2 * Math.PI)) / 365);
  let v = f(f(273.15) + f(30 * f(Math.cos(lat))));
  v = f(v - f(f(10 * f(Math.sin(lat))) * f(Math.cos(day))));
  v = f(v + f(3 * f(Math.sin(f(lon + day)))));
  return f(v + noise((t * 91 + y) * 180 + x));
}

describe('dashboard', () => {
  it('opens the demo store and lists its arrays, coordinates marked as skipped', async () => {
    await openDemo();
    const rows = await page.$$eval('#arrays tbody tr', (trs) =>
      trs.map((tr) => ({ path: tr.dataset.path, role: tr.dataset.role, cells: [...tr.cells].map((c) => c.textContent) })),
    );
    assert.deepEqual(
      rows.map((r) => [r.path, r.role]),
      [['t2m', 'data'], ['u10', 'data'], ['lat', 'coordinate'], ['lon', 'coordinate'], ['time', 'coordinate']],
    );
    // Shape, chunks and dtype as the store's own metadata says.
    for (const r of rows) {
      const meta = JSON.parse(fs.readFileSync(path.join(STORE, r.path, 'zarr.json'), 'utf8'));
      assert.equal(r.cells[2], `[${meta.shape.join(', ')}]`, r.path);
      assert.equal(r.cells[3], `[${meta.chunk_grid.configuration.chunk_shape.join(', ')}]`, r.path);
      assert.equal(r.cells[5], meta.data_type, r.path);
      assert.equal(r.cells[6], 'bytes, zstd', r.path);
    }
    assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'COOP/COEP make the page cross-origin isolated');
    await shot('01-open');
  });

  it('shows the describe numbers `insitubatch describe --json` gives for the same configuration', async () => {
    await openDemo();
    const configs = [
      { controls: { batchSize: 8, blockChunks: 2, maxInflight: 4, prefetchDepth: 3, seed: 5, epoch: 2, threads: 2 },
        args: ['--batch-size', '8', '--block-chunks', '2', '--max-inflight', '4', '--prefetch-depth', '3', '--seed', '5', '--epoch', '2', '--threads', '2'] },
      { controls: { batchSize: 12, blockChunks: 1, maxInflight: 32, prefetchDepth: 1, seed: 0, epoch: 0, threads: 1, fracTrain: 0.5, fracVal: 0.25, fracTest: 0.25, budgetMiB: 40 },
        args: ['--batch-size', '12', '--block-chunks', '1', '--prefetch-depth', '1', '--threads', '1', '--fractions', '0.5,0.25,0.25', '--cache-budget-bytes', String(40 * 1024 * 1024)] },
    ];
    for (const { controls, args } of configs) {
      for (const [id, v] of Object.entries(controls)) await setControl(id, v);
      const ours = await page.evaluate(() => window.__ib.report);
      const cli = cliDescribe(args);
      // The one figure that differs by design: the page's engine can have the wasm
      // instance's maximum, the CLI the machine's memory (#16.5); the rest is the same report.
      assert.ok(ours.memory.memory_available_bytes > 0 && cli.memory.memory_available_bytes > 0);
      assert.deepEqual(
        { ...ours, memory: { ...ours.memory, memory_available_bytes: 0 } },
        { ...cli, memory: { ...cli.memory, memory_available_bytes: 0 } },
        `the whole report for ${args.join(' ')}`,
      );
      // And what is on screen is that report.
      const shown = await page.$$eval('#memory tr', (trs) => Object.fromEntries(trs.map((t) => [t.dataset.key, Number(t.dataset.bytes)])));
      for (const [k, v] of Object.entries(shown)) assert.equal(v, cli.memory[k], k);
      assert.equal(Number(await page.getAttribute('#quality', 'data-value')), cli.config.shuffle_quality);
    }
    await shot('02-describe');
  });

  it('recomputes the memory figure when a control moves, and explains a refused configuration', async () => {
    await openDemo();
    await setControl('batchSize', 8);
    await setControl('prefetchDepth', 2);
    const before = await page.evaluate(() => window.__ib.report.memory);
    const peakText = await page.textContent('#mem-peak-big');
    await setControl('prefetchDepth', 6);
    const after = await page.evaluate(() => window.__ib.report.memory);
    // Four more queued batches of 8 samples × (t2m + u10), 91 × 180 float32 each.
    assert.equal(after.queue_bytes - before.queue_bytes, 4 * 8 * 2 * 91 * 180 * 4);
    assert.ok(after.estimated_peak_bytes > before.estimated_peak_bytes);
    assert.notEqual(await page.textContent('#mem-peak-big'), peakText, 'the figure on screen changed');
    await setControl('fracTest', 0.5);
    const err = await page.textContent('#config-error');
    assert.match(err, /fractions must be non-negative and sum to 1\.0/);
    await setControl('fracTest', 0.1);
    assert.equal(await page.textContent('#config-error'), '');
    await shot('03-tune');
  });

  it('renders a batch: each canvas pixel is its source value through the colormap', async () => {
    await openDemo();
    await setControl('batchSize', 8);
    await page.click('#next-batch');
    await page.waitForSelector('#batch canvas');
    const shown = await page.evaluate(() => window.__ib.preview.shown);
    assert.equal(shown.label, 't2m');
    assert.equal(shown.sampleIndices.length, 8);
    const canvases = await page.$$eval('#batch canvas', (cs) =>
      cs.map((c) => ({ sample: Number(c.dataset.sample), w: c.width, h: c.height, px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data) })),
    );
    assert.deepEqual(canvases.map((c) => c.sample), shown.sampleIndices);
    // The colour bar's range is the batch's range of the source values.
    let lo = Infinity;
    let hi = -Infinity;
    const src = canvases.map(({ sample }) => {
      const v = new Float64Array(91 * 180);
      for (let y = 0; y < 91; y++) for (let x = 0; x < 180; x++) v[y * 180 + x] = t2m(sample, y, x);
      for (const x of v) [lo, hi] = [Math.min(lo, x), Math.max(hi, x)];
      return v;
    });
    assert.ok(Math.abs(shown.vmin - lo) < 1e-3 && Math.abs(shown.vmax - hi) < 1e-3, `${shown.vmin}..${shown.vmax} vs ${lo}..${hi}`);
    let exact = 0;
    let total = 0;
    for (const [k, c] of canvases.entries()) {
      assert.deepEqual([c.w, c.h], [180, 91]);
      for (let i = 0; i < 91 * 180; i++) {
        const want = lutIndex(src[k][i], shown.vmin, shown.vmax);
        const got = c.px.slice(i * 4, i * 4 + 4);
        assert.equal(got[3], 255, `sample ${c.sample} pixel ${i} is opaque`);
        // f32 trig here and in Rust may differ in the last bit: allow the neighbouring entry.
        const near = [want - 1, want, want + 1].filter((j) => j >= 0 && j < 256);
        const match = near.find((j) => VIRIDIS[j * 3] === got[0] && VIRIDIS[j * 3 + 1] === got[1] && VIRIDIS[j * 3 + 2] === got[2]);
        assert.notEqual(match, undefined, `sample ${c.sample} pixel (${i % 180}, ${Math.floor(i / 180)}): ${got} is not viridis[${want}] of ${src[k][i]}`);
        // Viridis repeats two colours in 8 bits, so compare colours, not table positions.
        exact += VIRIDIS[want * 3] === got[0] && VIRIDIS[want * 3 + 1] === got[1] && VIRIDIS[want * 3 + 2] === got[2];
        total += 1;
      }
    }
    assert.ok(exact / total > 0.999, `${exact} of ${total} pixels exact`);
    await page.locator('#preview-section').screenshot({ path: path.join(ARTIFACTS, '04-batch.png') });
  });

  it('steps through an epoch: the batches draw exactly the order pictured, and the next epoch differs', async () => {
    await openDemo();
    await setControl('batchSize', 8);
    await setControl('blockChunks', 2);
    const order = await page.evaluate(() => window.__ib.order.anchors);
    const drawn = [];
    for (let k = 0; ; k++) {
      await page.click('#next-batch');
      await page.waitForFunction((i) => window.__ib.preview.ended || window.__ib.preview.shown?.batch === i, k);
      const s = await page.evaluate(() => ({ ended: window.__ib.preview.ended, shown: window.__ib.preview.shown }));
      if (s.ended) break;
      drawn.push(...s.shown.sampleIndices);
      assert.ok(drawn.length <= order.length, 'no more samples than the epoch has');
    }
    assert.deepEqual(drawn, order);
    await page.click('#next-epoch');
    await page.waitForFunction(() => window.__ib.preview.shown?.epoch === 1);
    const e1 = await page.evaluate(() => window.__ib.preview.shown.sampleIndices);
    assert.notDeepEqual(e1, order.slice(0, 8));
    await shot('05-epochs');
  });

  it('previews a windowed view: input and target side by side, the target `shift` samples on', async () => {
    await openDemo();
    await setControl('batchSize', 4);
    await setControl('shift', 2);
    const report = await page.evaluate(() => window.__ib.report);
    assert.equal(report.config.windowed, true);
    assert.deepEqual(report.config.offsets, [['t2m', 0], ['u10', 0], ['t2m@+2', 2], ['u10@+2', 2]]);
    await page.click('#next-batch');
    await page.waitForFunction(() => window.__ib.preview.shown?.shift === 2);
    const shown = await page.evaluate(() => window.__ib.preview.shown);
    assert.deepEqual(shown.labels, ['t2m', 't2m@+2']);
    const figs = await page.$$eval('#batch figure', (fs) =>
      fs.map((f) => [...f.querySelectorAll('canvas')].map((c) => ({ label: c.dataset.label, sample: Number(c.dataset.sample), px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data) }))),
    );
    assert.equal(figs.length, 4);
    for (const [input, target] of figs) {
      assert.deepEqual([input.label, target.label], ['t2m', 't2m@+2']);
      for (const [pic, t] of [[input, input.sample], [target, input.sample + 2]]) {
        for (const [y, x] of [[0, 0], [45, 90], [90, 179], [30, 20]]) {
          const k = lutIndex(t2m(t, y, x), shown.vmin, shown.vmax);
          const i = (y * 180 + x) * 4;
          assert.deepEqual(pic.px.slice(i, i + 3), [VIRIDIS[k * 3], VIRIDIS[k * 3 + 1], VIRIDIS[k * 3 + 2]], `${pic.label} sample ${t} (${x}, ${y})`);
        }
      }
    }
    await page.locator('#preview-section').screenshot({ path: path.join(ARTIFACTS, '06-window.png') });
  });

  it('runs a live epoch in a worker to the end and shows the pass report', async () => {
    await openDemo();
    await setControl('batchSize', 4);
    await page.fill('#step-ms', '20');
    await page.click('#run');
    await page.waitForSelector('#live-state[data-state=done], #live-state[data-state=error]', { timeout: 60_000 });
    const live = await page.evaluate(() => ({ done: window.__ib.live.done, error: window.__ib.live.error, ticks: window.__ib.live.ticks }));
    assert.equal(live.error, null);
    const build = await page.evaluate(() => window.__ib.live.build);
    assert.ok(['web', 'web-threads'].includes(build.build), `the worker runs a browser build: ${JSON.stringify(build)}`);
    const report = await page.evaluate(() => window.__ib.report);
    const train = Object.fromEntries(report.config.batches_per_epoch).train;
    assert.equal(live.done.batches, train);
    assert.equal(live.done.stats.batches, train);
    assert.equal(live.done.stats.samples, Object.fromEntries(report.config.drawable_samples).train);
    assert.ok(live.ticks.length >= 2, `a live chart needs ticks, got ${live.ticks.length}`);
    assert.ok(live.ticks.every((t) => t.mbps >= 0 && t.stage), 'every tick has a rate and a stage');
    assert.ok(
      live.ticks.every((t) => Number.isInteger(t.queueNow) && t.queueNow >= 0 && t.queueNow <= t.queueCap),
      `every tick has the live queue depth within the prefetch depth: ${JSON.stringify(live.ticks.map((t) => [t.queueNow, t.queueCap]))}`,
    );
    assert.ok(['consumer', 'store', 'decode', 'residency', 'gather', 'batch_transform', 'unknown'].includes(live.done.stats.limiting_stage));
    assert.equal(await page.getAttribute('#pass-report', 'data-batches'), String(train));
    assert.match(await page.textContent('#pass-table'), /limiting stage/);
    await shot('07-live');
  });

  it('runs a live epoch of the windowed view in the worker', async () => {
    await openDemo();
    await setControl('batchSize', 4);
    await setControl('shift', 2);
    await page.fill('#step-ms', '0');
    await page.click('#run');
    await page.waitForSelector('#live-state[data-state=done], #live-state[data-state=error]', { timeout: 60_000 });
    const live = await page.evaluate(() => ({ done: window.__ib.live.done, error: window.__ib.live.error, labels: window.__ib.live.labels }));
    assert.equal(live.error, null);
    assert.deepEqual(live.labels, ['t2m', 't2m@+2', 'u10', 'u10@+2'], 'the worker reads the window the preview shows');
    const report = await page.evaluate(() => window.__ib.report);
    assert.equal(report.config.windowed, true);
    assert.equal(live.done.stats.samples, Object.fromEntries(report.config.drawable_samples).train, 'anchors past the window are not drawn');
  });

  it('opens an s3:// URL path-style through an endpoint (anonymous GETs)', async () => {
    await page.goto(base);
    await page.click('#open-section summary');
    const endpoint = new URL(base).origin;
    await page.fill('#s3-endpoint', endpoint);
    await page.fill('#url', 's3://store');
    await page.click('#open');
    await page.waitForSelector('#tune-section:not([hidden])');
    assert.equal(await page.getAttribute('#status', 'data-url'), `${endpoint}/store/`);
    assert.equal(await page.locator('#arrays tbody tr[data-role=data]').count(), 2);
  });

  it('says what was wrong, with the URL last, when a store is missing', async () => {
    await page.goto(base);
    await page.fill('#url', `${base}no-such-store.zarr`);
    await page.click('#open');
    await page.waitForSelector('#status.error');
    const msg = await page.textContent('#status');
    assert.match(msg, /no-such-store\.zarr\/?$/, msg);
    assert.deepEqual(pageErrors, []);
    await shot('08-missing');
  });
});
