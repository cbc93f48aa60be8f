// The edge-inference example (js/examples/edge-inference): a worker runs an ONNX model on
// onnxruntime-web, fed by the loader in a worker of its own, in Node and in headless Chromium.
// The model is the example's torch model (model.py), exported here to a temp folder; the
// reference is onnxruntime in Python (model.py predict) on the same batches, each built
// from the fixture's source values by the batch's sample indices (read from disk, not
// through the engine): so a wrong sample in a row, a value changed on the way, or a runtime
// that computes differently all show as a difference.
// Needs IB_ONNXRUNTIME_WEB and IB_ONNX_PY (js/examples/edge-inference/setup.sh, which
// scripts/test-wasm.sh runs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { infer } from '../examples/edge-inference/infer.js';
import { HTTP, skip, manifest, sourceRows, UNDER_CI } from '../test-support/helpers.js';
import { browserSkip, serveJs, serveDir, launch } from '../test-support/browser.js';

const ORT_DIR = process.env.IB_ONNXRUNTIME_WEB;
const ONNX_PY = process.env.IB_ONNX_PY;
const MODEL_PY = fileURLToPath(new URL('../examples/edge-inference/model.py', import.meta.url));
const onnxSkip = skip || (!ORT_DIR || !ONNX_PY ? 'IB_ONNXRUNTIME_WEB / IB_ONNX_PY unset: run scripts/test-wasm.sh (js/examples/edge-inference/setup.sh installs them)' : false);
if (onnxSkip && UNDER_CI) throw new Error(`${onnxSkip}; CI is set, where this is a failure, not a skip`);
const chromeSkip = onnxSkip || browserSkip;
// Float32 through two builds of onnxruntime (wasm SIMD vs native x86): the probabilities
// differed by 6e-8 to 9e-8 here (a few ulps); one input value off by 1 K, in one row of each
// batch, moves them by 3e-5 to 8e-5; rows paired with the wrong samples, by 1e-2 or more.
const TOLERANCE = 1e-6;
// The loader's options: several batches per pass, a short last one, shuffled train splits.
const OPTIONS = { batchSize: 6, blockChunks: 2, seed: 5 };

let dir; // the exported model, and for Chromium the files its page loads
let model;

/** Run model.py with `args`, `input` on its stdin; resolves to its stdout. */
function python(args, input) {
  return new Promise((resolve, reject) => {
    const p = spawn(ONNX_PY, [MODEL_PY, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`model.py ${args[0]} exited ${code}: ${err}`))));
    p.stdin.end(input ?? '');
  });
}

// Chromium: a page served from js/ starts the inference worker (worker.js), which imports
// onnxruntime-web and loads the model from a second loopback server (the temp folder: the
// model and a link to onnxruntime-web's dist/), and starts the loader's worker itself.
let chrome;
const servers = {};

before(async () => {
  if (onnxSkip) return;
  dir = mkdtempSync(join(tmpdir(), 'ib-edge-'));
  model = join(dir, 'model.onnx');
  symlinkSync(join(ORT_DIR, 'dist'), join(dir, 'ort'));
  // The export (seconds: torch's import and its exporter) while Chromium starts.
  const exported = python(['export', model, '--channels', '8', '--classes', '4', '--center', '280', '--scale', '0.1', '--seed', '0']);
  exported.catch(() => {}); // awaited below, after the browser's start (which may fail first)
  if (!chromeSkip) {
    chrome = await launch();
    servers.plain = await serveJs();
    servers.isolated = await serveJs({ coopCoep: true });
    servers.assets = await serveDir(dir, { coopCoep: true });
  }
  await exported;
});
after(async () => {
  await chrome?.browser.close();
  for (const s of Object.values(servers)) s.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function store(name) {
  const s = manifest().stores.find((x) => x.name === name);
  assert.ok(s, `fixture ${name}`);
  return s;
}

/** A result of infer() as plain data (what a Chromium page can hand back). */
function plain(r) {
  return {
    batches: r.batches.map((b) => ({ index: b.index, sampleIndices: Array.from(b.sampleIndices, Number), probs: Array.from(b.probs), classes: b.classes })),
    stats: r.stats,
    pass: r.pass,
  };
}

/**
 * Check `res` (plain()) against onnxruntime in Python on the same batches, built from the
 * fixture's source values; `expected`: the samples the pass must have covered.
 */
async function checkAgainstPython(s, res, expected) {
  const a = s.arrays.t2m;
  const rows = sourceRows(a, s.sample_axis).map((r) => Array.from(new Float32Array(r.buffer.slice(r.byteOffset, r.byteOffset + r.length))));
  const inner = a.shape.filter((_, k) => k !== s.sample_axis);
  const req = { batches: res.batches.map((b) => ({ shape: [b.sampleIndices.length, ...inner], data: b.sampleIndices.flatMap((i) => rows[i]) })) };
  const ref = JSON.parse(await python(['predict', model], JSON.stringify(req))).outputs;
  assert.ok(res.batches.length > 1, 'several batches');
  const seen = new Set();
  let worst = 0;
  res.batches.forEach((b, k) => {
    assert.deepEqual(ref[k].shape, [b.sampleIndices.length, 4], `batch ${b.index}: Python's output shape`);
    assert.equal(b.classes, 4);
    assert.equal(b.probs.length, ref[k].data.length, `batch ${b.index}: one row of probabilities per sample`);
    b.probs.forEach((p, j) => (worst = Math.max(worst, Math.abs(p - ref[k].data[j]))));
    for (const i of b.sampleIndices) seen.add(i);
  });
  assert.ok(worst < TOLERANCE, `largest difference from onnxruntime in Python: ${worst}`);
  assert.equal(seen.size, expected, 'one prediction per sample of the pass');
  assert.equal(res.stats.samples, expected);
  // Predictions depend on the sample, far beyond the tolerance: a row paired with the wrong
  // sample would show.
  const first = res.batches[0].probs.slice(0, 4);
  let spread = 0;
  for (const b of res.batches) b.probs.forEach((p, j) => (spread = Math.max(spread, Math.abs(p - first[j % 4]))));
  assert.ok(spread > 100 * TOLERANCE, `predictions differ between samples (largest spread ${spread})`);
  assert.ok(res.stats.runSeconds > 0 && res.stats.seconds >= res.stats.runSeconds, 'stage times add up');
  return worst;
}

const nodeOrt = () => pathToFileURL(join(ORT_DIR, 'dist/ort.node.min.mjs')).href;

for (const [name, split] of [['v3_zstd', 'all'], ['v3_sharded', 'train']]) {
  test(`edge inference in Node (onnxruntime-web) over ${name} (${split}) equals onnxruntime in Python`, { skip: onnxSkip }, async (t) => {
    const s = store(name);
    const r = await infer({
      url: `${HTTP}/${s.path}`, variable: 't2m', split, epoch: 1, model, ort: nodeOrt(),
      options: { ...OPTIONS, sampleAxis: s.sample_axis }, loaderAlone: split === 'all',
    });
    const n = s.arrays.t2m.shape[s.sample_axis];
    t.diagnostic(`largest difference from onnxruntime in Python: ${await checkAgainstPython(s, plain(r), split === 'all' ? n : r.pass.samples)}`);
    assert.equal(r.predictions.size, r.stats.samples);
    assert.equal(r.stats.build, 'node');
    if (split === 'all') assert.equal(r.stats.loader.samples, n, 'the loader-alone pass covered the split');
  });
}

test('edge inference: a bad store is reported by the worker', { skip: onnxSkip }, async () => {
  await assert.rejects(infer({ url: `${HTTP}/no_such_store`, variable: 't2m', model, ort: nodeOrt() }), /no_such_store/);
});

test('edge inference: a variable of another dtype is refused, naming it', { skip: onnxSkip }, async () => {
  const s = store('ome_ngff');
  await assert.rejects(
    infer({ url: `${HTTP}/${s.path}`, variable: 'mask', model, ort: nodeOrt(), options: { sampleAxis: s.sample_axis } }),
    /mask is uint8; this model takes float32/,
  );
});

test('edge inference: onnxruntime-web missing is a clear error', { skip: onnxSkip }, async () => {
  await assert.rejects(
    infer({ url: `${HTTP}/v3_zstd`, variable: 't2m', model, ort: pathToFileURL(join(dir, 'no-such-ort.mjs')).href }),
    /onnxruntime-web did not load .*npm ci/,
  );
});

async function inChromium(server, args) {
  const page = await chrome.page(`${server.url}/test-support/page/`);
  try {
    return await page.evaluate(async (args) => {
      const { infer } = await import('/examples/edge-inference/infer.js');
      const r = await infer(args);
      return {
        batches: r.batches.map((b) => ({ index: b.index, sampleIndices: Array.from(b.sampleIndices, Number), probs: Array.from(b.probs), classes: b.classes })),
        stats: r.stats,
        pass: r.pass,
        isolated: self.crossOriginIsolated,
      };
    }, args);
  } catch (e) {
    throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
  } finally {
    await page.close();
  }
}

test('edge inference in Chromium: a worker on onnxruntime-web, batches transferred, equals onnxruntime in Python', { skip: chromeSkip }, async (t) => {
  const s = store('v3_zstd');
  const res = await inChromium(servers.plain, {
    url: `${HTTP}/${s.path}`, variable: 't2m', split: 'train', epoch: 1, options: { ...OPTIONS, sampleAxis: s.sample_axis },
    model: `${servers.assets.url}/model.onnx`, ort: `${servers.assets.url}/ort/ort.wasm.min.mjs`,
  });
  assert.equal(res.isolated, false);
  assert.equal(res.stats.build, 'web');
  t.diagnostic(`largest difference from onnxruntime in Python: ${await checkAgainstPython(s, res, res.pass.samples)}`);
});

test('edge inference in Chromium, cross-origin isolated: batches as views over the loader\'s shared memory, equal onnxruntime in Python', { skip: chromeSkip }, async (t) => {
  const s = store('v3_sharded');
  const res = await inChromium(servers.isolated, {
    url: `${HTTP}/${s.path}`, variable: 't2m', split: 'train', epoch: 1, options: { ...OPTIONS, sampleAxis: s.sample_axis },
    model: `${servers.assets.url}/model.onnx`, ort: `${servers.assets.url}/ort/ort.wasm.min.mjs`, views: true, how: { nThreads: 2 },
  });
  assert.equal(res.isolated, true);
  assert.equal(res.stats.build, 'web-threads', 'the loader runs the threaded build');
  assert.equal(res.stats.views, true);
  t.diagnostic(`largest difference from onnxruntime in Python: ${await checkAgainstPython(s, res, res.pass.samples)}`);
});
