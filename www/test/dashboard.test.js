// The dashboard end to end: the production build on Vite's preview server (COOP/COEP, the
// store served same-origin), driven in Debian's headless Chromium by playwright-core.
// Needs (scripts/test-www.sh sets them): IB_WWW_STORE, a .zarr directory cropped from the
// CLI's demo store; IB_CLI, the `insitubatch` binary; IB_ARTIFACTS, where screenshots go
// (each run writes the page at 1280×800 and at a phone's 390×844 there). The ERA5-sized
// store (721 × 1440, 33 MB chunks) is written once by test-support/era5-store.mjs.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { open } from 'insitubatch';
import { preview } from 'vite';
import { VIRIDIS, lutIndex } from '../src/colormap.js';
import { MEMORY_PARTS } from '../src/components.js';
import { LAT, LON, era5Store, era5Value } from '../test-support/era5-store.mjs';

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
/** Playwright waits on page states; this bound only turns a hang into an error, so it is far
 * above any wait here even on a loaded machine (Playwright's own default is 30 s). */
const HANG_GUARD_MS = 300_000;

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  process.env.IB_STORE_DIR = STORE;
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
  console.log(`screenshots (1280×800 and 390×844 among them): ${ARTIFACTS}`);
});

const SIZES = { desktop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } };

/**
 * Screenshots of what a user sees at both sizes (`NAME-1280x800.png`, `NAME-390x844.png`),
 * scrolled to `selector` (the page's top without one).
 */
async function shotsAtSizes(p, name, selector) {
  const was = p.viewportSize();
  for (const { width, height } of Object.values(SIZES)) {
    await p.setViewportSize({ width, height });
    await p.evaluate(async (sel) => {
      if (sel) document.querySelector(sel).scrollIntoView({ block: 'start' });
      else window.scrollTo(0, 0);
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    }, selector);
    await p.screenshot({ path: path.join(ARTIFACTS, `${name}-${width}x${height}.png`) });
  }
  await p.setViewportSize(was);
}

/** Where the side panel and the views are (page coordinates), and whether the page scrolls sideways. */
async function layoutOf(p) {
  // The charts follow their boxes on the next frame (ResizeObserver): wait for two.
  await p.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return p.evaluate(() => {
    const box = (sel) => {
      const r = document.querySelector(sel).getBoundingClientRect();
      return { left: r.left, right: r.right, top: r.top + scrollY, bottom: r.bottom + scrollY, width: r.width };
    };
    const doc = document.documentElement;
    return { side: box('aside.side'), views: box('main.views'), scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth };
  });
}

/** The content box of the `k`-th preview canvas, in page coordinates. */
function canvasBox(p, k) {
  return p.evaluate((i) => {
    const c = document.querySelectorAll('#batch canvas')[i];
    c.scrollIntoView({ block: 'center', inline: 'center' });
    const r = c.getBoundingClientRect();
    return { x: r.left + c.clientLeft, y: r.top + c.clientTop, w: c.clientWidth, h: c.clientHeight, sample: Number(c.dataset.sample), dw: c.width, dh: c.height };
  }, k);
}

const shot = (name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

/** The CLI's describe report for the same store URL and knobs: the page's own HTTP URL, since
 * the report depends on where reads come from (a local store's read window starts narrower,
 * and so does the memory it counts for reads). */
async function cliDescribe(args) {
  const url = new URL('/store', base).href;
  // Not execFileSync: the store is served by this process, whose event loop must run.
  const { stdout } = await promisify(execFile)(CLI, ['describe', url, '--json', ...args], { encoding: 'utf8' });
  return JSON.parse(stdout);
}

/** Set a control the way a user does (typing fires `input`; a select, its choice), then wait for the new report. */
async function setControl(id, value) {
  const gen = await page.evaluate(() => Number(document.body.dataset.describeGen ?? 0));
  if ((await page.$eval(`#${id}`, (e) => e.tagName)) === 'SELECT') await page.selectOption(`#${id}`, String(value));
  else await page.fill(`#${id}`, String(value));
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
      { controls: { batchSize: 8, blockChunks: 2, firstBlockChunks: 1, maxInflight: 4, prefetchDepth: 3, seed: 5, epoch: 2, threads: 2 },
        args: ['--batch-size', '8', '--block-chunks', '2', '--first-block-chunks', '1', '--max-inflight', '4', '--prefetch-depth', '3', '--seed', '5', '--epoch', '2', '--threads', '2'] },
      { controls: { batchSize: 12, blockChunks: 1, firstBlockChunks: '', maxInflight: 32, prefetchDepth: 1, seed: 0, epoch: 0, threads: 1, fracTrain: 0.5, fracVal: 0.25, fracTest: 0.25, budgetMiB: 40 },
        args: ['--batch-size', '12', '--block-chunks', '1', '--prefetch-depth', '1', '--threads', '1', '--fractions', '0.5,0.25,0.25', '--cache-budget-bytes', String(40 * 1024 * 1024)] },
    ];
    for (const { controls, args } of configs) {
      for (const [id, v] of Object.entries(controls)) await setControl(id, v);
      const ours = await page.evaluate(() => window.__ib.report);
      const cli = await cliDescribe(args);
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
      const blocks = await page.textContent('#splits tr[data-key=block_chunks] td');
      const smaller = cli.config.first_block_chunks < cli.config.block_chunks;
      assert.equal(smaller, controls.firstBlockChunks === 1, 'the asked first block is the smaller one');
      assert.equal(blocks.includes(`the first of ${cli.config.first_block_chunks}`), smaller, blocks);
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
    // The charts' legends name their series; none shows uPlot's `--` for "no value here".
    for (const chart of ['#live-chart', '#quality-chart']) {
      const legend = await page.textContent(`${chart} .u-legend`);
      assert.ok(legend.trim() && !legend.includes('--'), `${chart} legend: ${legend}`);
    }
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

  /**
   * Read the next preview batch, and the same first batch of a dataset `open()`ed in Node on
   * the store's directory with the options the preview used (another engine instance, another
   * storage): the origins and samples the page shows must be the engine's.
   */
  async function previewAgainstOpen() {
    await page.click('#next-batch');
    await page.waitForFunction(() => window.__ib.preview.shown?.patchOrigins);
    const { shown, opts } = await page.evaluate(() => ({ shown: window.__ib.preview.shown, opts: window.__ib.preview.opts }));
    const ds = await open(STORE, opts);
    try {
      const pass = ds.train();
      const b = await pass.next();
      pass.close();
      assert.deepEqual(shown.patchDims, b.patchDims);
      assert.deepEqual(shown.sampleIndices, [...b.sampleIndices].map(Number));
      assert.deepEqual(shown.patchOrigins, [...b.patchOrigins].map(Number));
    } finally {
      ds.close();
    }
    return shown;
  }

  /** The patch map's rectangles (`data-*` and geometry) and grid cells. */
  const patchMapShown = () =>
    page.evaluate(() => {
      const svg = document.querySelector('#patch-map svg');
      const num = (e, k) => Number(e.getAttribute(k));
      return {
        hidden: document.getElementById('patch-map').hidden,
        field: [Number(svg.dataset.height), Number(svg.dataset.width)],
        axes: [svg.dataset.y, svg.dataset.x],
        grid: [...svg.querySelectorAll('.ib-patch-grid')].map((r) => [num(r, 'y'), num(r, 'x')]),
        patches: [...svg.querySelectorAll('g.ib-patch')].map((g) => {
          const r = g.querySelector('rect');
          return { row: Number(g.dataset.row), sample: Number(g.dataset.sample), origin: g.dataset.origin, box: ['y', 'x', 'height', 'width'].map((k) => num(r, k)) };
        }),
      };
    });

  it('previews grid patches: the patches note, one rectangle per row at the origins the engine gives, each picture its patch', async () => {
    await openDemo();
    await setControl('batchSize', 8);
    await setControl('blockChunks', 2);
    await setControl('patch', 'lat=45,lon=90');
    // The whole report is the CLI's for the same patches (as for the other controls).
    const ours = await page.evaluate(() => window.__ib.report);
    const cli = await cliDescribe(['--batch-size', '8', '--block-chunks', '2', '--threads', '1', '--patch', 'lat=45,lon=90']);
    assert.deepEqual({ ...ours, memory: { ...ours.memory, memory_available_bytes: 0 } }, { ...cli, memory: { ...cli.memory, memory_available_bytes: 0 } });
    // The patches note is on screen, first and marked.
    const notes = await page.$$eval('#notes li', (lis) => lis.map((li) => ({ code: li.dataset.code, key: li.classList.contains('ib-note-key'), text: li.textContent })));
    assert.equal(notes[0].code, 'patches', JSON.stringify(notes));
    assert.ok(notes[0].key);
    assert.equal(notes[0].text, `patches (dataset, note): ${cli.notes.find((n) => n.code === 'patches').message}`);
    assert.match(notes[0].text, /every patch of a grid, 4 per sample/);
    // The draw order counts rows: 4 patches of each train sample.
    const order = await page.evaluate(() => window.__ib.order);
    assert.equal(order.anchors.length, 4 * Object.fromEntries(ours.config.drawable_samples).train);

    const shown = await previewAgainstOpen();
    assert.deepEqual(shown.patchDims, ['lat', 'lon']);
    const map = await patchMapShown();
    assert.equal(map.hidden, false);
    assert.deepEqual([map.field, map.axes], [[91, 180], ['lat', 'lon']], "the map is the sample's field, lat down, lon across as in the pictures");
    // The 2 × 2 grid (a 91st latitude and no more: patches never leave the field), dashed behind.
    assert.deepEqual(map.grid, [[0, 0], [0, 90], [45, 0], [45, 90]]);
    assert.equal(map.patches.length, 8, 'one rectangle per batch row');
    for (const [r, p] of map.patches.entries()) {
      const [y, x] = shown.patchOrigins.slice(2 * r, 2 * r + 2);
      assert.deepEqual([p.row, p.sample, p.origin], [r, shown.sampleIndices[r], `${y},${x}`]);
      assert.deepEqual(p.box, [y, x, 45, 90], `row ${r}'s rectangle is its patch`);
    }
    // Each picture is its row's patch: its pixels are the source values from the origin on.
    const pics = await page.$$eval('#batch canvas', (cs) => cs.map((c) => ({ w: c.width, h: c.height, px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data) })));
    assert.equal(pics.length, 8);
    for (const [r, pic] of pics.entries()) {
      assert.deepEqual([pic.w, pic.h], [90, 45]);
      const [oy, ox] = shown.patchOrigins.slice(2 * r, 2 * r + 2);
      for (const [y, x] of [[0, 0], [44, 89], [20, 33], [44, 0]]) {
        const want = lutIndex(t2m(shown.sampleIndices[r], oy + y, ox + x), shown.vmin, shown.vmax);
        const got = pic.px.slice((y * 90 + x) * 4, (y * 90 + x) * 4 + 3);
        const near = [want - 1, want, want + 1].filter((j) => j >= 0 && j < 256);
        assert.ok(near.some((j) => VIRIDIS[j * 3] === got[0] && VIRIDIS[j * 3 + 1] === got[1] && VIRIDIS[j * 3 + 2] === got[2]), `row ${r} (${x}, ${y}): ${got} vs viridis[${want}]`);
      }
    }
    // Captions name the patch; hovering a picture highlights its rectangle, and the reverse.
    assert.match(await page.textContent('#batch figure[data-row="3"] figcaption'), new RegExp(`^#3 sample ${shown.sampleIndices[3]}, patch at lat ${shown.patchOrigins[6]}, lon ${shown.patchOrigins[7]}$`));
    await page.hover('#batch figure[data-row="3"]');
    await page.waitForSelector('#patch-map g.ib-patch.ib-hl[data-row="3"]');
    assert.equal(await page.locator('#patch-map g.ib-patch.ib-hl').count(), 1);
    // Rectangles of rows at one origin overlap, so the event goes to the rectangle itself.
    await page.dispatchEvent('#patch-map g.ib-patch[data-row="5"]', 'mouseenter');
    assert.equal(await page.getAttribute('#batch figure[data-row="5"]', 'class'), 'sample ib-hl');
    await page.locator('#preview-section').screenshot({ path: path.join(ARTIFACTS, '09-patches.png') });
    await shotsAtSizes(page, '09-patches', '#preview-section');

    // The live run streams the patched epoch: every batch the report counts.
    await page.click('#run');
    await page.waitForSelector('#live-state[data-state=done], #live-state[data-state=error]');
    const live = await page.evaluate(() => ({ done: window.__ib.live.done, error: window.__ib.live.error }));
    assert.equal(live.error, null);
    assert.equal(live.done.stats.batches, Object.fromEntries(ours.config.batches_per_epoch).train);
    assert.deepEqual(pageErrors, []);
  });

  it('previews random patches: per-sample draws in the note, the stride off, rectangles at the drawn origins', async () => {
    await openDemo();
    await setControl('batchSize', 6);
    await setControl('patch', 'lat=32,lon=32');
    await setControl('patchMode', 'random');
    await setControl('patchesPerSample', 3);
    assert.equal(await page.isDisabled('#patchStride'), true, 'a stride is for grids');
    assert.equal(await page.isDisabled('#patchesPerSample'), false);
    const notes = await page.$$eval('#notes li[data-code="patches"]', (lis) => lis.map((li) => li.textContent));
    assert.equal(notes.length, 1);
    assert.match(notes[0], /3 at random origins per sample and epoch/);
    const shown = await previewAgainstOpen();
    const map = await patchMapShown();
    assert.deepEqual(map.grid, [], 'no grid behind random patches');
    assert.deepEqual(map.patches.map((p) => p.origin), [0, 1, 2, 3, 4, 5].map((r) => shown.patchOrigins.slice(2 * r, 2 * r + 2).join(',')));
    for (const p of map.patches) assert.ok(p.box[0] + 32 <= 91 && p.box[1] + 32 <= 180, `a patch never leaves the field: ${p.box}`);
  });

  it("shows a refused patch in the banner with the engine's words, and clears it once the patch fits", async () => {
    await openDemo();
    for (const [text, re] of [
      ['lat=400', /^the configuration was refused: patch size 400 on lat must be between 1 and the axis length 91/],
      ['height=8', /^the configuration was refused: patch names "height" but no variable has it/],
      ['lat', /^the configuration was refused: patch: "lat" is not AXIS=SIZE/],
    ]) {
      await setControl('patch', text);
      await page.waitForSelector('#banner:not([hidden])');
      assert.match(await page.textContent('#banner-text'), re);
      assert.equal(`the configuration was refused: ${await page.textContent('#config-error')}`, await page.textContent('#banner-text'));
    }
    await shot('09-patch-refused');
    // The preview meets the same refusal, in the banner too, never a crash.
    await setControl('patch', 'lon=999');
    await page.click('#next-batch');
    await page.waitForFunction(() => document.getElementById('banner-text').textContent.startsWith('reading a preview batch failed'));
    assert.match(await page.textContent('#banner-text'), /patch size 999 on lon must be between 1 and the axis length 180/);
    await setControl('patch', 'lat=45');
    await setControl('patch', 'lat=45,lon=90');
    assert.equal(await page.textContent('#config-error'), '');
    await setControl('patch', 'lat=400');
    await setControl('patch', 'lat=45');
    assert.equal(await page.isHidden('#banner'), true, "the refusal's banner goes once the patch fits");
    assert.deepEqual(pageErrors, []);
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
    // The banner says it too, and goes away from the keyboard.
    await page.waitForSelector('#banner:not([hidden])');
    assert.match(await page.textContent('#banner-text'), /^opening the store failed: .*no-such-store\.zarr\/?$/);
    await shot('08-missing');
    await page.focus('#banner-close');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#banner[hidden]', { state: 'attached' });
  });

  it('watches a running job: its Prometheus endpoint, one row per rank, the figures the job reports', async () => {
    // A real job: the CLI over the store, its endpoint on a free port, held after its first
    // epoch's pass ended (one 48-sample batch) and one batch into the next (no sleeps: the test
    // acts on the lines the CLI prints). `cors`: the origin the job lets read its metrics.
    const startJob = async (cors) => {
      const job = spawn(CLI, ['bench', STORE, '--epochs', '2', '--batch-size', '48', '--fractions', '1,0,0',
        '--metrics-address', '127.0.0.1:0', ...(cors ? ['--metrics-cors-origin', cors] : []),
        '--pause-after-batches', '2', '--threads', '1']);
      // The first match of `re` in what `stream` printed; `re` ends at a newline, as a chunk
      // may end mid-line.
      const lines = async (stream, re) => {
        let text = '';
        for await (const chunk of stream) {
          text += chunk;
          const m = re.exec(text);
          if (m) return m;
        }
        throw new Error(`the job ended before printing ${re}: ${text}`);
      };
      try {
        const [[, endpoint]] = await Promise.all([lines(job.stderr, /metrics: (\S+)\r?\n/), lines(job.stdout, /paused after 2 batches\r?\n/)]);
        return { job, endpoint };
      } catch (e) {
        job.kill('SIGKILL');
        throw e;
      }
    };
    const watch = async (endpoint) => {
      await page.fill('#job-url', endpoint);
      await page.click('#watch');
      await page.waitForSelector('#job-state[data-state=ok], #job-state[data-state=error]');
    };
    await page.goto(base);
    const origin = new URL(base).origin;
    assert.equal(await page.textContent('#job-hint .job-origin'), origin, 'the page says which origin to name');
    // A job that names no origin lets no page read it, and the page says what to pass.
    const closed = await startJob(null);
    try {
      await watch(closed.endpoint);
      assert.equal(await page.getAttribute('#job-state', 'data-state'), 'error');
      const said = await page.textContent('#job-state');
      assert.ok(said.includes(`--metrics-cors-origin ${origin}`) && said.endsWith(closed.endpoint), said);
      await page.click('#unwatch');
    } finally {
      closed.job.kill('SIGKILL');
    }
    const { job, endpoint } = await startJob(origin);
    try {
      await watch(endpoint);
      assert.equal(await page.getAttribute('#job-state', 'data-state'), 'ok', await page.textContent('#job-state'));
      const cells = await page.$$eval('#job-table tr[data-rank="0"][data-split="train"] td', (tds) =>
        Object.fromEntries(tds.map((td) => [td.dataset.key, td.textContent])));
      assert.equal(cells.rank, '0 of 1');
      assert.equal(cells.passes, '1', "the first epoch's pass ended; the second is held");
      assert.equal(cells.samples, '48');
      assert.match(cells.rate, /^[0-9.]+$/);
      assert.notEqual(cells.stage, '–');
      // The page shows what the endpoint says: compare with a direct read.
      const text = await (await fetch(endpoint)).text();
      assert.match(text, /insitubatch_samples_total\{split="train",rank="0",world_size="1"\} 48/);
      await page.click('#unwatch');
      await shot('15-job');
    } finally {
      job.kill('SIGKILL');
    }
    // The refused read is logged by Chromium on the console, not thrown on the page.
    assert.deepEqual(pageErrors, []);
  });

  it('lays out the side panel beside the views at 1280×800 and above them at 390×844, without sideways scrolling', async () => {
    await openDemo();
    await setControl('batchSize', 8);
    await page.click('#next-batch');
    await page.waitForSelector('#batch canvas');
    await page.setViewportSize(SIZES.desktop);
    const wide = await layoutOf(page);
    assert.ok(wide.side.right <= wide.views.left, `side panel left of the views: ${JSON.stringify(wide)}`);
    assert.ok(wide.side.top < wide.views.bottom && wide.views.top < wide.side.bottom, 'side by side, not stacked');
    assert.ok(wide.views.width >= 800, `the views get most of the width: ${wide.views.width}`);
    assert.ok(wide.scrollWidth <= wide.clientWidth, `no horizontal overflow at 1280: ${wide.scrollWidth} > ${wide.clientWidth}`);
    await page.setViewportSize(SIZES.phone);
    const narrow = await layoutOf(page);
    assert.ok(narrow.views.top >= narrow.side.bottom, `stacked on a phone: ${JSON.stringify(narrow)}`);
    assert.ok(narrow.scrollWidth <= narrow.clientWidth, `no horizontal overflow at 390: ${narrow.scrollWidth} > ${narrow.clientWidth}`);
    // The configuration folds away, and the views come up under the store.
    await page.click('#controls-details > summary');
    const folded = await layoutOf(page);
    assert.ok(folded.side.bottom < narrow.side.bottom - 400, `folded: ${folded.side.bottom} vs ${narrow.side.bottom}`);
    await page.click('#controls-details > summary');
    // The batch pictures fit the phone's width.
    const widest = await page.$$eval('#batch canvas', (cs) => Math.max(...cs.map((c) => c.getBoundingClientRect().right)));
    assert.ok(widest <= 390, `preview pictures end at ${widest}`);
    await page.setViewportSize({ width: 1300, height: 1000 });
    await shotsAtSizes(page, '10-layout');
  });

  it('is keyboard friendly: every control has a label, Tab reaches the controls, focus is visible', async () => {
    await openDemo();
    const unlabelled = await page.$$eval('input, select, button', (els) =>
      els.filter((e) => !(e.labels?.length || e.getAttribute('aria-label') || (e.tagName === 'BUTTON' && e.textContent.trim()))).map((e) => e.id || e.outerHTML),
    );
    assert.deepEqual(unlabelled, [], 'controls without a label');
    await page.focus('#url');
    const reached = [];
    for (let i = 0; i < 60 && !reached.includes('batchSize'); i++) {
      await page.keyboard.press('Tab');
      reached.push(await page.evaluate(() => document.activeElement?.id ?? ''));
    }
    assert.ok(reached.includes('open') && reached.includes('batchSize'), `Tab order from the URL: ${reached.join(' ')}`);
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    assert.notEqual(outline, 'none', 'the focused control shows a focus ring');
    // A control changed from the keyboard updates the report.
    const gen = await page.evaluate(() => Number(document.body.dataset.describeGen));
    await page.keyboard.press('ArrowUp');
    await page.waitForFunction((g) => Number(document.body.dataset.describeGen) > g, gen);
    assert.equal(await page.evaluate(() => window.__ib.report.config.batch_size), 33);
  });

  it('draws memory as a stacked bar whose segments are the describe numbers of the CLI', async () => {
    await openDemo();
    for (const [id, v] of Object.entries({ batchSize: 8, blockChunks: 2, prefetchDepth: 3, threads: 1, budgetMiB: 40 })) await setControl(id, v);
    const cli = await cliDescribe(['--batch-size', '8', '--block-chunks', '2', '--prefetch-depth', '3', '--threads', '1', '--cache-budget-bytes', String(40 * 1024 * 1024)]);
    const segs = await page.$$eval('#memory-bar .ib-membar-seg', (ss) => ss.map((s) => ({ key: s.dataset.key, bytes: Number(s.dataset.bytes), width: s.getBoundingClientRect().width })));
    const track = await page.$eval('#memory-bar .ib-membar-track', (t) => t.clientWidth);
    assert.deepEqual(segs.map((s) => s.key), [...MEMORY_PARTS.map(([k]) => k), 'overhead_bytes']);
    for (const [k] of MEMORY_PARTS) assert.equal(segs.find((s) => s.key === k).bytes, cli.memory[k], k);
    const parts = segs.filter((s) => s.key !== 'overhead_bytes').reduce((a, s) => a + s.bytes, 0);
    assert.equal(parts, cli.memory.accounted_bytes, 'the parts add up to the accounted bytes');
    assert.equal(parts + segs.at(-1).bytes, cli.memory.estimated_peak_bytes, 'with the overhead, to the estimated peak');
    const widths = segs.reduce((a, s) => a + s.width, 0);
    assert.ok(Math.abs(widths - track) <= 1, `the segments fill the bar: ${widths} of ${track}`);
    // Each segment's label carries its size, as the engine's human_bytes writes it.
    const legend = await page.$$eval('#memory-bar .ib-membar-legend li', (ls) => ls.map((l) => l.textContent));
    // The demo store (6 MiB) is smaller than the 40 MiB budget: the bar counts the store.
    assert.ok(cli.memory.resident_max_bytes < cli.memory.residency_bytes, 'the demo store, not the budget');
    assert.match(legend[0], /^residency 6\.0 MiB \(.*\), all of the store \(the budget given is 40\.0 MiB\)$/);
    assert.match(await page.textContent('#memory-bar .ib-membar-avail'), /estimated peak .* of .* available/);
    await page.locator('#tune-section').screenshot({ path: path.join(ARTIFACTS, '11-memory.png') });
  });

  it('shows the source value under the cursor when hovering a preview pixel', async () => {
    await openDemo();
    await page.setViewportSize(SIZES.desktop);
    await setControl('batchSize', 8);
    await page.click('#next-batch');
    await page.waitForSelector('#batch canvas');
    const shown = await page.evaluate(() => window.__ib.preview.shown);
    for (const [k, x, y] of [[0, 37, 20], [3, 179, 90], [7, 0, 0], [5, 120, 64]]) {
      const b = await canvasBox(page, k);
      assert.deepEqual([b.dw, b.dh], [180, 91]);
      await page.mouse.move(b.x + ((x + 0.5) * b.w) / 180, b.y + ((y + 0.5) * b.h) / 91);
      const h = await page.$eval('#hover-value', (o) => ({ ...o.dataset, text: o.textContent }));
      assert.equal(b.sample, shown.sampleIndices[k]);
      assert.deepEqual([Number(h.sample), h.label], [b.sample, 't2m'], h.text);
      // The pointer lands on whole CSS pixels, so the value may be a neighbour's.
      assert.ok(Math.abs(Number(h.x) - x) <= 1 && Math.abs(Number(h.y) - y) <= 1, `pointed at (${x}, ${y}): ${h.text}`);
      const want = t2m(b.sample, Number(h.y), Number(h.x));
      assert.ok(Math.abs(Number(h.value) - want) < 1e-3, `${h.value} vs ${want}`);
      assert.match(h.text, new RegExp(`^t2m, sample ${b.sample}, column ${h.x}, row ${h.y}: [0-9.]+ K$`));
    }
    await shotsAtSizes(page, '12-preview', '#preview-section');
    await page.setViewportSize({ width: 1300, height: 1000 });
  });

  it('probes the demo store: what it measured, the predicted epoch, and a suggestion one click applies', async () => {
    await openDemo();
    for (const [id, v] of Object.entries({ batchSize: 8, blockChunks: 2, maxInflight: 200, threads: 1 })) await setControl(id, v);
    const describeGen = await page.evaluate(() => Number(document.body.dataset.describeGen));
    await page.click('#probe');
    await page.waitForSelector('#probe-state[data-state=done], #probe-state[data-state=error]');
    const P = await page.evaluate(() => window.__ib.probe);
    assert.equal(P.error, null);
    const r = P.report;
    assert.deepEqual([r.split, r.epoch, r.decode_threads], ['train', 0, 1]);
    assert.ok(['store', 'decode'].includes(r.predicted.limiting_stage), r.predicted.limiting_stage);
    assert.ok(r.requests > 0 && r.bytes_read > 0 && r.predicted.seconds > 0 && r.notes.length > 0, JSON.stringify(r));
    assert.equal(await page.evaluate(() => Number(document.body.dataset.describeGen)), describeGen, 'probing changes no control');
    // The epoch it predicts is the one the CLI's probe plans for the same configuration.
    const cli = (await cliDescribe(['--batch-size', '8', '--block-chunks', '2', '--max-inflight', '200', '--threads', '1', '--probe'])).probe;
    assert.deepEqual([r.predicted.decoded_bytes, r.split, r.epoch], [cli.predicted.decoded_bytes, cli.split, cli.epoch]);
    // What is on screen is that report: measured, predicted, suggested, and the notes.
    const shown = await page.$$eval('#probe-report tr', (trs) => Object.fromEntries(trs.map((t) => [t.dataset.key, t.dataset.value])));
    assert.deepEqual(
      [shown.first_byte_s, shown.link_capped, shown.compression_ratio, shown.requests, shown.seconds, shown.first_batch_s, shown.limiting_stage, shown.suggested],
      [String(r.first_byte_s), String(r.link_capped), String(r.compression_ratio), String(r.requests), String(r.predicted.seconds), String(r.predicted.first_batch_s), r.predicted.limiting_stage, `${r.suggested_max_inflight},${r.suggested_block_chunks}`],
    );
    assert.equal(await page.locator('#probe-report .ib-probe-notes li').count(), r.notes.length);
    const progress = await page.evaluate(() => window.__ib.progress.filter((e) => e.kind === 'probe').map((e) => e.text));
    assert.deepEqual(progress, ['probing the store (train, epoch 0)'], 'a progress line while it read');
    assert.equal(await page.isHidden('#probe-progress'), true, 'and it goes with the report on screen');
    assert.equal(await page.getAttribute('#probe-report', 'data-stale'), 'false');
    await page.locator('#probe-card').screenshot({ path: path.join(ARTIFACTS, '13-probe.png') });
    await page.setViewportSize(SIZES.phone);
    const narrow = await layoutOf(page);
    assert.ok(narrow.scrollWidth <= narrow.clientWidth, `the probe report fits a phone: ${narrow.scrollWidth} > ${narrow.clientWidth}`);
    await page.setViewportSize({ width: 1300, height: 1000 });
    await shotsAtSizes(page, '13-probe', '#probe-card');
    // One click puts the suggestion into the controls, and the report follows.
    await page.click('#probe-apply');
    await page.waitForFunction((g) => Number(document.body.dataset.describeGen) > g, describeGen);
    assert.equal(await page.inputValue('#maxInflight'), String(r.suggested_max_inflight));
    assert.equal(await page.inputValue('#blockChunks'), String(r.suggested_block_chunks));
    const config = await page.evaluate(() => window.__ib.report.config);
    assert.deepEqual([config.max_inflight, config.block_chunks_requested], [r.suggested_max_inflight, r.suggested_block_chunks]);
    const changed = r.suggested_max_inflight !== 200 || r.suggested_block_chunks !== 2;
    assert.equal(await page.getAttribute('#probe-report', 'data-stale'), String(changed), 'the probe on screen says when it measured other settings');
    assert.deepEqual(pageErrors, []);
  });

  it('shows a probe that cannot read the store in the error banner, the key last', async () => {
    await openDemo();
    await setControl('batchSize', 8);
    // The store refuses every chunk from now on (403: not worth a retry).
    await page.route('**/store/t2m/c/**', (route) => route.fulfill({ status: 403, body: 'denied' }));
    try {
      await page.click('#probe');
      await page.waitForSelector('#probe-state[data-state=error]');
    } finally {
      await page.unroute('**/store/t2m/c/**');
    }
    await page.waitForSelector('#banner:not([hidden])');
    const msg = await page.textContent('#banner-text');
    assert.match(msg, /^probing the store failed: .*403.*\/store\/t2m\/c\/[0-9/]+$/, msg);
    assert.equal(await page.textContent('#probe-report'), '', 'no report left from before');
    assert.equal(await page.isEnabled('#probe'), true, 'the probe button is back');
    assert.equal(await page.isHidden('#probe-progress'), true, 'no progress line left behind');
    assert.equal(await page.isDisabled('#probe-apply'), true, 'nothing to apply');
  });

  it('shows a live run that fails in its worker in the error banner', async () => {
    await openDemo();
    // The worker opens the store on its own: point it at one that is not there.
    const gone = await page.evaluate(() => (window.__ib.url = `${location.origin}/no-such-store.zarr`));
    await page.click('#run');
    await page.waitForSelector('#live-state[data-state=error]', { timeout: 60_000 });
    await page.waitForSelector('#banner:not([hidden])');
    const msg = await page.textContent('#banner-text');
    assert.ok(msg.startsWith('the live run failed: ') && msg.includes(gone), msg);
    assert.equal(await page.isEnabled('#run'), true, 'the run button is back');
    assert.equal(await page.isHidden('#live-progress'), true, 'no progress line left behind');
  });

  it('shows an unhandled failure of the page in the error banner', async () => {
    await openDemo();
    assert.equal(await page.isHidden('#banner'), true);
    const errors = pageErrors.length;
    await page.evaluate(() => {
      setTimeout(() => Promise.reject(new Error('the engine trapped (a test)')));
    });
    await page.waitForSelector('#banner:not([hidden])');
    assert.equal(await page.textContent('#banner-text'), 'a task failed: the engine trapped (a test)');
    pageErrors.splice(errors); // the rejection was on purpose
  });
});

describe('dashboard on an ERA5-sized store (721 × 1440 float32, 33 MB chunks)', () => {
  let era5;
  let server2;
  let p;
  before(async () => {
    era5 = era5Store({ time: 24, chunk: 8 });
    // A second preview server: the store plugin serves IB_STORE_DIR as it is at start.
    process.env.IB_STORE_DIR = era5;
    server2 = await preview({ root: ROOT, logLevel: 'warn', preview: { host: '127.0.0.1', port: 0, strictPort: false } });
    process.env.IB_STORE_DIR = STORE;
    p = await browser.newPage({ viewport: SIZES.desktop });
    p.setDefaultTimeout(HANG_GUARD_MS);
    p.on('pageerror', (e) => pageErrors.push(e.message));
  });
  after(async () => {
    await p?.close();
    await server2?.close();
  });

  async function set(id, value) {
    const gen = await p.evaluate(() => Number(document.body.dataset.describeGen ?? 0));
    await p.fill(`#${id}`, String(value));
    await p.waitForFunction((g) => Number(document.body.dataset.describeGen ?? 0) > g, gen);
  }

  it('previews a batch with a progress line while it loads, the pixels and hover values the source values', async () => {
    await p.goto(`${server2.resolvedUrls.local[0]}?demo`);
    await p.waitForFunction(() => window.__ib.report);
    const arrays = await p.evaluate(() => window.__ib.arrays.map((a) => [a.path, a.shape, a.chunks]));
    assert.deepEqual(arrays, [['t2m', [24, LAT, LON], [8, LAT, LON]]]);
    for (const [id, v] of Object.entries({ fracTrain: 1, fracVal: 0, fracTest: 0, batchSize: 4, blockChunks: 1 })) await set(id, v);
    assert.equal(await p.textContent('#config-error'), '');
    await p.click('#next-batch');
    await p.waitForFunction(() => window.__ib.preview.shown?.batch === 0, null, { timeout: 120_000 });
    const progress = await p.evaluate(() => window.__ib.progress);
    assert.deepEqual(progress.filter((e) => e.kind === 'preview').map((e) => e.text), ['reading batch 1 of 6 (epoch 0)'], 'a progress line while the batch loaded');
    assert.equal(await p.isHidden('#preview-progress'), true, 'and it goes when the batch is on screen');
    const shown = await p.evaluate(() => window.__ib.preview.shown);
    assert.equal(shown.sampleIndices.length, 4);
    // A few pixels of each picture through the colour map, then hover values.
    for (let k = 0; k < 4; k++) {
      const px = await p.evaluate((i) => {
        const c = document.querySelectorAll('#batch canvas')[i];
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        return [[0, 0], [720, 360], [1439, 720], [333, 111]].map(([x, y]) => [x, y, Array.from(d.slice((y * c.width + x) * 4, (y * c.width + x) * 4 + 4))]);
      }, k);
      for (const [x, y, got] of px) {
        const j = lutIndex(era5Value(shown.sampleIndices[k], y, x), shown.vmin, shown.vmax);
        assert.deepEqual(got, [VIRIDIS[j * 3], VIRIDIS[j * 3 + 1], VIRIDIS[j * 3 + 2], 255], `sample ${shown.sampleIndices[k]} (${x}, ${y})`);
      }
      const b = await canvasBox(p, k);
      assert.deepEqual([b.dw, b.dh], [LON, LAT]);
      await p.mouse.move(b.x + b.w * 0.61, b.y + b.h * 0.37);
      const h = await p.$eval('#hover-value', (o) => ({ ...o.dataset }));
      assert.equal(Number(h.sample), b.sample);
      const [cssX, cssY] = [LON / b.w, LAT / b.h]; // data pixels per CSS pixel
      assert.ok(Math.abs(Number(h.x) - 0.61 * LON) <= cssX + 1 && Math.abs(Number(h.y) - 0.37 * LAT) <= cssY + 1, `(${h.x}, ${h.y})`);
      assert.equal(Number(h.value), era5Value(b.sample, Number(h.y), Number(h.x)), `hover at (${h.x}, ${h.y})`);
    }
    await shotsAtSizes(p, '20-era5-preview', '#preview-section');
  });

  it('streams a live epoch in the worker, with progress, to its pass report', async () => {
    await p.fill('#step-ms', '0');
    await p.click('#run');
    await p.waitForSelector('#live-state[data-state=done], #live-state[data-state=error]', { timeout: 300_000 });
    const live = await p.evaluate(() => ({ done: window.__ib.live.done, error: window.__ib.live.error }));
    assert.equal(live.error, null);
    assert.equal(live.done.batches, 6);
    assert.equal(live.done.stats.samples, 24);
    assert.equal(live.done.bytes, 24 * LAT * LON * 4);
    const progress = await p.evaluate(() => window.__ib.progress.filter((e) => e.kind === 'live').map((e) => e.text));
    assert.deepEqual(progress, ['starting the worker']);
    assert.deepEqual(await p.$eval('#live-progress progress', (e) => [e.value, e.max]), [6, 6], 'the bar ended full');
    assert.equal(await p.textContent('#live-batches'), '6 of 6');
    assert.match(await p.textContent('#live-mbps'), /^[0-9.]+ MB\/s$/);
    assert.match(await p.textContent('#pass-table'), /limiting stage/);
    await p.click('#pass-details summary');
    assert.equal(await p.isVisible('#pass-table'), true, 'the pass report is one click away');
    await shotsAtSizes(p, '21-era5-live', '#live-section');
    assert.deepEqual(pageErrors, []);
  });
});
