#!/usr/bin/env node
// Edge inference from the command line: the model over one epoch of a store, in Node and/or
// headless Chromium, with the loader's and the model's throughput side by side.
//   node js/examples/edge-inference/run.mjs STORE VARIABLE --model MODEL.onnx [--model ...]
//       [--targets node,chromium] [--split all] [--epoch 0] [--batch-size 8] [--block-chunks 2]
//       [--ort-threads 1] [--runs 1] [--ort DIR]
// STORE: an http(s) URL, or a store folder, served on loopback (tests/servers/http_server.py)
// so that Node and Chromium read it alike. MODEL: model.py export's file. --ort: the
// onnxruntime-web package folder (default: $IB_ONNXRUNTIME_WEB, else ./node_modules here after
// `npm ci`). Chromium needs IB_PLAYWRIGHT_CORE and /usr/bin/chromium (js/test-support/browser.js).
// Each run times one pass of the loader alone (no model), then the pipelined pass (loader and
// model in their workers); each row gives the median of --runs.
import { existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { infer } from './infer.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    model: { type: 'string', multiple: true },
    targets: { type: 'string', default: 'node' },
    split: { type: 'string', default: 'all' },
    epoch: { type: 'string', default: '0' },
    'batch-size': { type: 'string', default: '8' },
    'block-chunks': { type: 'string', default: '2' },
    'ort-threads': { type: 'string', default: '1' },
    runs: { type: 'string', default: '1' },
    ort: { type: 'string' },
  },
});
const [store, variable] = positionals;
if (!store || !variable || !a.model?.length) {
  console.error('usage: node js/examples/edge-inference/run.mjs STORE VARIABLE --model MODEL.onnx [--model ...] [--targets node,chromium] [--split all] [--epoch 0] [--batch-size 8] [--block-chunks 2] [--ort-threads 1] [--runs 1] [--ort DIR]');
  process.exit(2);
}
const targets = a.targets.split(',');
for (const t of targets) if (!['node', 'chromium'].includes(t)) throw new Error(`--targets: unknown target ${JSON.stringify(t)}; use node, chromium or both`);
const ortDir = resolve(a.ort ?? process.env.IB_ONNXRUNTIME_WEB ?? join(HERE, 'node_modules/onnxruntime-web'));
if (!existsSync(join(ortDir, 'dist/ort.node.min.mjs'))) {
  throw new Error(`no onnxruntime-web at ${ortDir}: run \`npm ci\` in js/examples/edge-inference, or pass --ort (the package folder)`);
}
const runs = +a.runs;
if (!(runs >= 1)) throw new Error(`--runs must be a positive integer, got ${a.runs}`);
const options = { batchSize: +a['batch-size'], blockChunks: +a['block-chunks'], seed: 0 };

// Everything the runs read, on loopback: the store (unless it is a URL already), and for
// Chromium the js/ tree and a folder of the models and onnxruntime-web's dist/.
const browser = await import('../../test-support/browser.js');
const stops = [];
let url = store;
if (!/^https?:\/\//.test(store)) {
  const s = await browser.serveDir(dirname(resolve(store)));
  stops.push(() => s.stop());
  url = `${s.url}/${basename(resolve(store))}`;
}
const assets = mkdtempSync(join(tmpdir(), 'ib-edge-run-'));
stops.push(() => rmSync(assets, { recursive: true, force: true }));
let chrome, jsServer, assetServer;
try {
  if (targets.includes('chromium')) {
    if (browser.browserSkip) throw new Error(`Chromium: ${browser.browserSkip}`);
    symlinkSync(join(ortDir, 'dist'), join(assets, 'ort'));
    a.model.forEach((m, i) => symlinkSync(resolve(m), join(assets, `model${i}.onnx`)));
    chrome = await browser.launch();
    jsServer = await browser.serveJs();
    assetServer = await browser.serveDir(assets);
  }

  const one = async (target, i) => {
    const args = { url, variable, split: a.split, epoch: +a.epoch, options, ortThreads: +a['ort-threads'], loaderAlone: true };
    if (target === 'node') {
      return (await infer({ ...args, model: resolve(a.model[i]), ort: pathToFileURL(join(ortDir, 'dist/ort.node.min.mjs')).href })).stats;
    }
    const page = await chrome.page(`${jsServer.url}/test-support/page/`);
    try {
      return await page.evaluate(async (args) => (await (await import('/examples/edge-inference/infer.js')).infer(args)).stats, {
        ...args, model: `${assetServer.url}/model${i}.onnx`, ort: `${assetServer.url}/ort/ort.wasm.min.mjs`,
      });
    } finally {
      await page.close();
    }
  };

  const median = (xs) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)];
  const rows = [];
  // Interleaved: each round runs every row once, so a load change on a shared machine touches
  // every row alike.
  const results = new Map();
  for (let r = 0; r < runs; r++) {
    for (const target of targets) {
      for (let i = 0; i < a.model.length; i++) {
        const s = await one(target, i);
        const key = `${target}|${i}`;
        if (!results.has(key)) results.set(key, []);
        results.get(key).push(s);
        console.error(`round ${r + 1}/${runs}: ${target}, ${basename(a.model[i])}: ${s.samples} samples in ${s.seconds.toFixed(2)} s`);
      }
    }
  }
  for (const [key, ss] of results) {
    const [target, i] = key.split('|');
    const loader = median(ss.map((s) => s.loader.samples / s.loader.seconds));
    const loaderMB = median(ss.map((s) => s.loader.bytes / s.loader.seconds / 1e6));
    const model = median(ss.map((s) => s.samples / s.runSeconds));
    const both = median(ss.map((s) => s.samples / s.seconds));
    const idle = median(ss.map((s) => s.waitSeconds / s.seconds));
    rows.push(
      `| ${target === 'node' ? 'Node' : 'Chromium'} (${ss[0].build}) | ${basename(a.model[+i])} | ${loader.toFixed(1)} (${loaderMB.toFixed(1)} MB/s) | ` +
        `${model.toFixed(1)} | ${both.toFixed(1)} | ${(100 * idle).toFixed(0)}% | ${loader < model ? 'loader' : 'model'} |`,
    );
  }
  console.log(`${url} ${variable}, split ${a.split}, batch ${options.batchSize}, ${a['ort-threads']} model thread(s), median of ${runs} run(s); samples/s`);
  console.log('| runtime (loader build) | model | loader alone | model alone (Σ session.run) | pipelined | model waiting for batches | limiting stage |');
  console.log('|---|---|--:|--:|--:|--:|---|');
  for (const r of rows) console.log(r);
} finally {
  await chrome?.browser.close();
  jsServer?.stop();
  assetServer?.stop();
  for (const stop of stops.reverse()) stop();
}
