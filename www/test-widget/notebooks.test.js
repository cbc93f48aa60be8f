// The notebook widget (insitubatch_rs.widgets.Preview) in a real JupyterLab and in marimo
// (`marimo run`), driven by playwright-core in Debian's headless Chromium: a notebook per
// store runs its one cell, and each batch image's pixels must be the source values (read by
// zarr-python, not by the engine) through the colour map. One store is a local path, read through the kernel (the
// browser cannot reach it); the same store served over loopback HTTP is fetched by the
// browser. Every wait is on an explicit signal: the servers' "is running at" / "URL:" lines,
// the notebook's kernel promise, the widget's data-state and data-run attributes.
// Needs (scripts/test-widget.sh sets them): IB_WIDGET_STORE, IB_WIDGET_PY (a venv with
// JupyterLab, marimo and the wheel), IB_SOURCE_PY (a python with zarr), IB_HTTP_SERVER, IB_ARTIFACTS.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { open } from 'insitubatch';
import { VIRIDIS, lutIndex } from '../src/colormap.js';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set; run scripts/test-widget.sh`);
  return v;
};
const STORE = env('IB_WIDGET_STORE');
const PY = env('IB_WIDGET_PY');
const SOURCE_PY = env('IB_SOURCE_PY');
const HTTP_SERVER = env('IB_HTTP_SERVER');
const ARTIFACTS = env('IB_ARTIFACTS');
const CHROMIUM = process.env.IB_CHROMIUM ?? '/usr/bin/chromium';
const TOKEN = 'ib-widget-test';
const KNOBS = 'variables=["t2m"], batch_size=4, block_chunks=2, seed=7';

const children = [];
let dir;
let lab;
let storeUrl;
let browser;

/** Resolve with the first match of `re` in `child`'s `stream`; reject if it exits first. */
function waitForLine(child, stream, re, what) {
  return new Promise((resolve, reject) => {
    let seen = '';
    const onData = (d) => {
      seen += d;
      const m = re.exec(seen);
      if (m) {
        child[stream].off('data', onData);
        resolve(m);
      }
    };
    child[stream].setEncoding('utf8').on('data', onData);
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before it was ready:\n${seen.slice(-3000)}`)));
  });
}

/** A free loopback port (JupyterLab takes a port number, not 0). */
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function notebook(name, source) {
  const nb = {
    cells: [{ cell_type: 'code', execution_count: null, id: 'preview', metadata: {}, outputs: [], source }],
    metadata: { kernelspec: { display_name: 'Python 3', language: 'python', name: 'python3' } },
    nbformat: 4,
    nbformat_minor: 5,
  };
  fs.writeFileSync(path.join(dir, name), JSON.stringify(nb));
}

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ib-widget-'));
  // The store over HTTP: the test servers' static server (CORS on every response), counting
  // its requests (the previews' cache test).
  const http = spawn('python3', [HTTP_SERVER, '--root', path.dirname(STORE), '--port', '0', '--port-file', '-', '--count-requests'], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(http);
  const [, port] = await waitForLine(http, 'stdout', /^(\d+)\n/, 'the HTTP server');
  storeUrl = `http://127.0.0.1:${port}/${path.basename(STORE)}`;
  // JupyterLab with its own config, data and runtime dirs; the app on window.jupyterapp.
  const labPort = await freePort();
  const home = path.join(dir, '.jupyter-home');
  lab = spawn(
    PY,
    ['-m', 'jupyter', 'lab', '--no-browser', '--allow-root', '--ip=127.0.0.1', `--port=${labPort}`, '--port-retries=0', `--IdentityProvider.token=${TOKEN}`,
      `--ServerApp.root_dir=${dir}`, '--expose-app-in-browser', '--LabApp.news_url=', '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate'],
    {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, JUPYTER_CONFIG_DIR: path.join(home, 'config'), JUPYTER_DATA_DIR: path.join(home, 'data'), JUPYTER_RUNTIME_DIR: path.join(home, 'runtime'), IPYTHONDIR: path.join(home, 'ipython'), JUPYTER_PLATFORM_DIRS: '1' },
    },
  );
  children.push(lab);
  lab.stdout.resume();
  await waitForLine(lab, 'stderr', /is running at:/, 'JupyterLab');
  lab.stderr.resume();
  lab.base = `http://127.0.0.1:${labPort}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

/** `marimo run` of `file` (an app of one widget per cell); resolves with its base URL once it serves. */
async function marimoRun(file) {
  const port = await freePort();
  const mo = spawn(PY, ['-m', 'marimo', 'run', file, '--headless', '--host', '127.0.0.1', `--port=${port}`, '--no-token'], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, HOME: path.join(dir, '.marimo-home') },
  });
  children.push(mo);
  mo.stderr.resume();
  await waitForLine(mo, 'stdout', /URL: http/, 'marimo');
  mo.stdout.resume();
  return `http://127.0.0.1:${port}`;
}

after(async () => {
  await browser?.close();
  for (const c of children) c.kill('SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** Open `name` in JupyterLab, run its cell once the kernel is up, and wait for the widget's verdict. */
async function runNotebook(name) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  // A workspace of its own, reset: nothing restored from the other notebook's page.
  await page.goto(`${lab.base}/lab/workspaces/${path.parse(name).name}/tree/${name}?reset&token=${TOKEN}`);
  await page.waitForFunction((n) => window.jupyterapp?.shell?.currentWidget?.context?.path === n, name);
  await page.evaluate(async () => {
    const panel = window.jupyterapp.shell.currentWidget;
    await panel.context.ready;
    await panel.sessionContext.ready;
    await window.jupyterapp.commands.execute('notebook:run-all-cells');
  });
  const w = await page.waitForSelector('.ib-widget[data-state="drawn"], .ib-widget[data-state="error"]', { timeout: 180_000 });
  const state = await w.getAttribute('data-state');
  assert.equal(state, 'drawn', `the widget failed: ${await w.getAttribute('data-error')}`);
  return { page, widget: w, errors, requests };
}

/** t2m at `samples`, as zarr-python reads the store (float32, row-major [n, 91, 180]). */
function sourceValues(samples) {
  const out = path.join(dir, 'source.f32');
  const code = `import sys, zarr, numpy as np
a = zarr.open_array(sys.argv[1], path='t2m', mode='r')
np.ascontiguousarray(a.get_orthogonal_selection((list(map(int, sys.argv[3].split(','))),)), dtype='<f4').tofile(sys.argv[2])`;
  execFileSync(SOURCE_PY, ['-c', code, STORE, out, samples.join(',')]);
  const b = fs.readFileSync(out);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

/**
 * Every batch image's pixel is viridis of its source value on the colour bar's range; a
 * target image (`t2m@+k`, a windowed view) shows sample + k. Returns the input samples.
 */
async function checkPixels(widget, { shift = 0, rows = 4 } = {}) {
  const shown = await widget.evaluate((root) => {
    const box = root.querySelector('.ib-batch');
    return {
      vmin: Number(box.dataset.vmin),
      vmax: Number(box.dataset.vmax),
      label: box.dataset.label,
      canvases: [...box.querySelectorAll('.ib-grid canvas')].map((c) => ({
        label: c.dataset.label,
        sample: Number(c.dataset.sample),
        w: c.width,
        h: c.height,
        px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data),
      })),
    };
  });
  assert.equal(shown.label, 't2m');
  const labels = shift ? ['t2m', `t2m@+${shift}`] : ['t2m'];
  assert.equal(shown.canvases.length, rows * labels.length, `batch_size=${rows}: ${rows} samples × ${labels.join(' | ')}`);
  assert.deepEqual(shown.canvases.slice(0, labels.length).map((c) => c.label), labels);
  // The source sample each image shows: the input's, or the target's `shift` later.
  const samples = shown.canvases.map((c) => c.sample + (c.label === 't2m' ? 0 : shift));
  const n = 91 * 180;
  const src = sourceValues(samples);
  let [lo, hi] = [Infinity, -Infinity];
  for (const v of src) [lo, hi] = [Math.min(lo, v), Math.max(hi, v)];
  assert.deepEqual([shown.vmin, shown.vmax], [lo, hi], "the colour bar's range is the batch's source range");
  for (const [k, c] of shown.canvases.entries()) {
    assert.deepEqual([c.w, c.h], [180, 91]);
    for (let i = 0; i < n; i++) {
      const j = lutIndex(src[k * n + i], lo, hi);
      const want = [VIRIDIS[j * 3], VIRIDIS[j * 3 + 1], VIRIDIS[j * 3 + 2], 255];
      const got = c.px.slice(i * 4, i * 4 + 4);
      if (got.some((g, q) => g !== want[q])) {
        assert.fail(`${c.label} of sample ${c.sample} pixel (${i % 180}, ${Math.floor(i / 180)}): ${got} is not viridis[${j}] = ${want} of ${src[k * n + i]}`);
      }
    }
  }
  return shown.canvases.filter((c) => c.label === 't2m').map((c) => c.sample);
}

/** t2m of each `[sample, lat, lon]` patch of `h` × `w`, as zarr-python reads it (float32, row-major [n, h, w]). */
function patchSourceValues(patches, h, w) {
  const out = path.join(dir, 'patches.f32');
  const code = `import json, sys, zarr, numpy as np
a = zarr.open_array(sys.argv[1], path='t2m', mode='r')
h, w = int(sys.argv[4]), int(sys.argv[5])
np.stack([a[s, y : y + h, x : x + w] for s, y, x in json.loads(sys.argv[3])]).astype('<f4').tofile(sys.argv[2])`;
  execFileSync(SOURCE_PY, ['-c', code, STORE, out, JSON.stringify(patches), String(h), String(w)]);
  const b = fs.readFileSync(out);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

describe('notebook widget in marimo (marimo run)', () => {
  it('a local store through the kernel and the HTTP store from the browser: pixels equal the source through the colour map', async () => {
    const cell = (store) => `@app.cell
def _():
    import marimo as mo
    from insitubatch_rs.widgets import Preview
    w = mo.ui.anywidget(Preview(${JSON.stringify(store)}, ${KNOBS}))
    w
    return
`;
    fs.writeFileSync(path.join(dir, 'local_app.py'), `import marimo\n\napp = marimo.App()\n\n\n${cell(STORE)}`);
    fs.writeFileSync(path.join(dir, 'http_app.py'), `import marimo\n\napp = marimo.App()\n\n\n${cell(storeUrl)}`);
    for (const [file, source] of [['local_app.py', 'kernel'], ['http_app.py', 'browser']]) {
      const base = await marimoRun(file);
      const page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(base);
      const w = await page.waitForSelector('.ib-widget[data-state="drawn"], .ib-widget[data-state="error"]', { timeout: 180_000 });
      assert.equal(await w.getAttribute('data-state'), 'drawn', `the widget failed: ${await w.getAttribute('data-error')}`);
      assert.equal(await w.getAttribute('data-source'), source);
      await checkPixels(w);
      await w.screenshot({ path: path.join(ARTIFACTS, `marimo-${source}.png`) });
      assert.deepEqual(errors, []);
      await page.close();
    }
  });
});

/** Chunk reads (GETs of anything but metadata) the HTTP store served since the last call. */
async function chunkReads() {
  const counts = await (await fetch(`${new URL(storeUrl).origin}/__requests?reset`)).json();
  const meta = /(zarr\.json|\.zarray|\.zattrs|\.zgroup|\.zmetadata)$/;
  return Object.entries(counts)
    .filter(([k]) => k.startsWith('GET ') && !meta.test(k))
    .reduce((n, [, c]) => n + c, 0);
}

/** Step `widget` through its epoch ("next batch" until it ends): each batch's samples and colour range. */
async function previewEpoch(page, widget) {
  const out = [];
  for (;;) {
    const shown = await widget.evaluate((root) => {
      const box = root.querySelector('.ib-batch');
      return { drawn: root.dataset.drawn, samples: [...box.querySelectorAll('.ib-grid canvas')].map((c) => Number(c.dataset.sample)), range: [box.dataset.vmin, box.dataset.vmax] };
    });
    out.push({ samples: shown.samples, range: shown.range });
    await (await widget.$('button.ib-next')).click();
    // The widget's root (marimo draws it in a shadow root: passed as a handle, not looked up).
    await page.waitForFunction(([r, d]) => r.dataset.state === 'ended' || r.dataset.state === 'error' || r.dataset.drawn !== d, [widget, shown.drawn]);
    const state = await widget.getAttribute('data-state');
    assert.notEqual(state, 'error', await widget.getAttribute('data-error'));
    if (state === 'ended') return out;
  }
}

describe('notebook widget: the previews cache (marimo run, the HTTP store)', () => {
  it('a reload previews the cached epoch again with zero chunk reads at the server', async () => {
    const app = path.join(dir, 'cache_app.py');
    fs.writeFileSync(
      app,
      `import marimo\n\napp = marimo.App()\n\n\n@app.cell\ndef _():\n    import marimo as mo\n    from insitubatch_rs.widgets import Preview\n    w = mo.ui.anywidget(Preview(${JSON.stringify(storeUrl)}, ${KNOBS}))\n    w\n    return\n`,
    );
    const base = await marimoRun(app);
    const page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    const drawn = async () => {
      const w = await page.waitForSelector('.ib-widget[data-state="drawn"], .ib-widget[data-state="error"]', { timeout: 180_000 });
      assert.equal(await w.getAttribute('data-state'), 'drawn', `the widget failed: ${await w.getAttribute('data-error')}`);
      assert.match(await w.getAttribute('data-cache'), /^insitubatch-widget\/[0-9a-f]{16}$/, 'the preview reads through the cache');
      return w;
    };
    await chunkReads();
    await page.goto(base);
    const first = await previewEpoch(page, await drawn());
    assert.ok(first.length > 1);
    assert.ok((await chunkReads()) > 0, 'the first epoch read its chunks from the store');
    await page.reload();
    const again = await previewEpoch(page, await drawn());
    assert.deepEqual(again, first, 'the same batches, from the cache');
    assert.equal(await chunkReads(), 0, 'after the reload no chunk read reached the server');
    assert.deepEqual(errors, []);
    await page.close();
  });
});

describe('notebook widget in JupyterLab', () => {
  let localSamples;

  it('a local store, read through the kernel: describe, draw order, and pixels equal the source through the colour map', async () => {
    notebook('local.ipynb', `from insitubatch_rs.widgets import Preview\nPreview(${JSON.stringify(STORE)}, ${KNOBS})`);
    const { page, widget, errors } = await runNotebook('local.ipynb');
    assert.equal(await widget.getAttribute('data-source'), 'kernel');
    assert.equal(await widget.evaluate((r) => r.querySelectorAll('tr[data-key="estimated_peak_bytes"]').length), 1, 'the describe memory table');
    assert.match(await widget.evaluate((r) => r.querySelector('.ib-caption').textContent), /samples of train, epoch 0/);
    localSamples = await checkPixels(widget);
    // The live run: the whole train epoch, every batch the describe report counts.
    const want = await widget.evaluate((r) => r.querySelector('tr[data-split="train"] td').textContent);
    await (await widget.$('button.ib-run')).click();
    await page.waitForSelector('.ib-widget[data-run="done"], .ib-widget[data-run="error"]');
    assert.equal(await widget.getAttribute('data-run'), 'done', await widget.getAttribute('data-error'));
    const got = await widget.evaluate((r) => r.querySelector('.ib-live tr[data-key="batches"]').dataset.value);
    assert.match(want, new RegExp(`, ${got} batches$`), `the live run's batch count against the describe report's: ${want}`);
    assert.ok(await widget.$('.ib-live tr[data-key="limiting_stage"]'), 'the pass report names the limiting stage');
    // The probe, its reads through the kernel too: a predicted epoch and a suggestion.
    await (await widget.$('button.ib-probe-run')).click();
    await page.waitForSelector('.ib-widget[data-probe="done"], .ib-widget[data-probe="error"]');
    assert.equal(await widget.getAttribute('data-probe'), 'done', await widget.getAttribute('data-probe-error'));
    assert.match(await widget.evaluate((r) => r.querySelector('.ib-probe tr[data-key="limiting_stage"]').dataset.value), /^(store|decode)$/);
    assert.match(await widget.evaluate((r) => r.querySelector('.ib-probe-apply').textContent), /max_inflight=\d+, block_chunks=\d+/);
    await widget.screenshot({ path: path.join(ARTIFACTS, 'widget-local.png') });
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('the same store over HTTP, fetched by the browser: the same batch, pixel for pixel', async () => {
    notebook('http.ipynb', `from insitubatch_rs.widgets import Preview\nPreview(${JSON.stringify(storeUrl)}, ${KNOBS})`);
    const { page, widget, errors, requests } = await runNotebook('http.ipynb');
    assert.equal(await widget.getAttribute('data-source'), 'browser');
    assert.ok(requests.some((u) => u.startsWith(`${storeUrl}/t2m/c/`)), 'the browser fetched the chunks itself');
    const samples = await checkPixels(widget);
    if (localSamples) assert.deepEqual(samples, localSamples, 'same knobs, same store: the same first batch');
    await widget.screenshot({ path: path.join(ARTIFACTS, 'widget-http.png') });
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('patched and weighted (numpy weights) through the kernel: the notes, a patch map at the engine’s origins, each picture its patch', async () => {
    // Random patches and per-sample weights, the weights a numpy array: the knobs must reach
    // the engine as Python gave them, so the first batch is the one a JS open() with the same
    // options reads (another engine instance on the store's directory).
    const patchKnobs = 'patch={"lat": 45, "lon": 90}, patch_mode="random", patches_per_sample=2, sample_weights=np.where(np.arange(48) % 2 == 0, 2.0, 1.0)';
    notebook('patches.ipynb', `import numpy as np\nfrom insitubatch_rs.widgets import Preview\nPreview(${JSON.stringify(STORE)}, ${KNOBS}, ${patchKnobs})`);
    const { page, widget, errors } = await runNotebook('patches.ipynb');
    const notes = await widget.evaluate((r) => [...r.querySelectorAll('.ib-notes li')].map((li) => ({ code: li.dataset.code, key: li.classList.contains('ib-note-key'), text: li.textContent })));
    assert.deepEqual(notes.slice(0, 2).map((n) => [n.code, n.key]), [['patches', true], ['sample-draws', true]], JSON.stringify(notes));
    assert.match(notes[0].text, /2 at random origins per sample and epoch/);
    assert.match(notes[1].text, /weights: about \d+ train rows per epoch \(the sum of the weights times the patches per sample\), an effective sample size of \d+/);
    const ds = await open(STORE, {
      variables: ['t2m'], batchSize: 4, blockChunks: 2, seed: 7, patch: { lat: 45, lon: 90 }, patchMode: 'random', patchesPerSample: 2,
      sampleWeights: Array.from({ length: 48 }, (_, i) => (i % 2 === 0 ? 2 : 1)),
    });
    let want;
    try {
      const pass = ds.train();
      want = await pass.next();
      pass.close();
    } finally {
      ds.close();
    }
    const shown = await widget.evaluate((r) => {
      const svg = r.querySelector('.ib-patchmap svg');
      return {
        field: svg && [Number(svg.dataset.height), Number(svg.dataset.width)],
        grid: svg?.querySelectorAll('.ib-patch-grid').length,
        patches: [...r.querySelectorAll('.ib-patchmap g.ib-patch')].map((g) => ({ sample: Number(g.dataset.sample), origin: g.dataset.origin.split(',').map(Number) })),
        vmin: Number(r.querySelector('.ib-batch').dataset.vmin),
        vmax: Number(r.querySelector('.ib-batch').dataset.vmax),
        pics: [...r.querySelectorAll('.ib-grid canvas')].map((c) => ({ w: c.width, h: c.height, px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data) })),
        captions: [...r.querySelectorAll('.ib-grid figcaption')].map((c) => c.textContent),
      };
    });
    assert.deepEqual(shown.field, [91, 180]);
    assert.equal(shown.grid, 0, 'no grid behind random patches');
    const rows = [0, 1, 2, 3].map((r) => ({ sample: Number(want.sampleIndices[r]), origin: [...want.patchOrigins.subarray(2 * r, 2 * r + 2)].map(Number) }));
    assert.deepEqual(shown.patches, rows, 'one rectangle per row, at the origins the engine gives');
    assert.deepEqual(shown.captions, rows.map((p, r) => `#${r} sample ${p.sample}, patch at lat ${p.origin[0]}, lon ${p.origin[1]}`));
    // Each picture is its patch of the source, through the colour map.
    const src = patchSourceValues(rows.map((p) => [p.sample, ...p.origin]), 45, 90);
    for (const [r, pic] of shown.pics.entries()) {
      assert.deepEqual([pic.w, pic.h], [90, 45]);
      for (let i = 0; i < 45 * 90; i++) {
        const j = lutIndex(src[r * 45 * 90 + i], shown.vmin, shown.vmax);
        const got = pic.px.slice(i * 4, i * 4 + 3);
        if (got.some((g, q) => g !== VIRIDIS[j * 3 + q])) assert.fail(`row ${r} pixel (${i % 90}, ${Math.floor(i / 90)}): ${got} is not viridis[${j}] of ${src[r * 45 * 90 + i]}`);
      }
    }
    await widget.screenshot({ path: path.join(ARTIFACTS, 'widget-patches.png') });
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('a windowed view (shift=2) through the kernel: input | target pairs, the target 2 samples on', async () => {
    notebook('window.ipynb', `from insitubatch_rs.widgets import Preview\nPreview(${JSON.stringify(STORE)}, ${KNOBS}, shift=2)`);
    const { page, widget, errors } = await runNotebook('window.ipynb');
    await checkPixels(widget, { shift: 2 });
    await widget.screenshot({ path: path.join(ARTIFACTS, 'widget-window.png') });
    assert.deepEqual(errors, []);
    await page.close();
  });
});
