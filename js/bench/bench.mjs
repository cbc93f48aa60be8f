#!/usr/bin/env node
// Decoded MB/s of one cold epoch, the CLI bench's measure (batch bytes / wall time of the
// train view with fractions 1,0,0), for:
//   native  `insitubatch bench URL --threads 1` (the CLI, one decode thread)
//   node    wasm in Node, one thread (src/index.js)
//   chromium-1 / chromium-N   wasm in a dedicated worker of a cross-origin-isolated page,
//           the one-thread build vs the threaded build with N decode threads
// All read the same store over the same loopback HTTP server (tests/servers/http_server.py).
//
//   node js/bench/bench.mjs --store DIR/c8.zarr [--cli PATH] [--threads 2] [--runs 3] [--json OUT]
// Needs IB_PLAYWRIGHT_CORE (scripts/test-wasm.sh installs it) for the Chromium rows.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { open } from '../src/index.js';
import { serveDir, serveJs, launch, browserSkip } from '../test-support/browser.js';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string' },
    cli: { type: 'string' },
    threads: { type: 'string', default: '2' },
    runs: { type: 'string', default: '3' },
    'batch-size': { type: 'string', default: '8' },
    'block-chunks': { type: 'string', default: '2' },
    json: { type: 'string' },
    only: { type: 'string' }, // "chromium" or "node": just those rows
    'cache-budget-bytes': { type: 'string' },
  },
});
if (!a.store) {
  console.error('usage: node js/bench/bench.mjs --store DIR/store.zarr [--cli target/release/insitubatch] [--threads 2] [--runs 3]');
  process.exit(2);
}
const RUNS = +a.runs;
const NTHREADS = +a.threads;
const options = { batchSize: +a['batch-size'], blockChunks: +a['block-chunks'], seed: 0 };
if (a['cache-budget-bytes']) options.cacheBudgetBytes = +a['cache-budget-bytes'];
const storeDir = resolve(a.store);
const data = await serveDir(dirname(storeDir));
const url = `${data.url}/${basename(storeDir)}`;
const rows = {};
const best = (xs) => xs.reduce((m, x) => (x.mb_per_s > m.mb_per_s ? x : m));

try {
  if (a.cli && !a.only) {
    const runs = [];
    for (let i = 0; i < RUNS; i++) {
      const r = spawnSync(a.cli, ['bench', url, '--threads', '1', '--epochs', '1', '--json',
        '--batch-size', a['batch-size'], '--block-chunks', a['block-chunks'],
        ...(a['cache-budget-bytes'] ? ['--cache-budget-bytes', a['cache-budget-bytes']] : [])], { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`insitubatch bench failed: ${r.stderr}`);
      const j = JSON.parse(r.stdout);
      const e = (j.epochs ?? j.rows ?? [j])[0];
      runs.push({ mb_per_s: e.mb_per_s, seconds: e.seconds, limiting_stage: e.limiting_stage });
    }
    rows.native = { ...best(runs), runs: runs.map((r) => +r.mb_per_s.toFixed(1)) };
  }

  const node = [];
  for (let i = 0; i < (a.only === 'chromium' ? 0 : RUNS); i++) {
    const ds = await open(url, { ...options, fractions: [1, 0, 0] });
    const t0 = performance.now();
    let bytes = 0;
    for await (const b of ds.train()) for (const x of Object.values(b.arrays)) bytes += x.data.byteLength;
    const seconds = (performance.now() - t0) / 1e3;
    node.push({ mb_per_s: bytes / 1e6 / seconds, seconds, limiting_stage: ds.lastPass()?.limiting_stage });
    ds.close();
  }
  if (node.length) rows.node = { ...best(node), runs: node.map((r) => +r.mb_per_s.toFixed(1)) };

  if (a.only === 'node') {
    // no Chromium rows
  } else if (browserSkip) {
    console.error(`skipping Chromium: ${browserSkip}`);
  } else {
    const page = await serveJs({ coopCoep: true });
    const chrome = await launch();
    try {
      const p = await chrome.page(`${page.url}/test-support/page/`);
      for (const [key, threads, nThreads] of [['chromium-1', false, 1], [`chromium-${NTHREADS}`, true, NTHREADS]]) {
        const runs = [];
        for (let i = 0; i < RUNS; i++) {
          runs.push(await p.evaluate(async (arg) => (await import('/bench/page.js')).coldEpoch(arg), { url, options, threads, nThreads }));
        }
        rows[key] = { ...best(runs), runs: runs.map((r) => +r.mb_per_s.toFixed(1)) };
      }
    } catch (e) {
      throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
    } finally {
      await chrome.browser.close();
      page.stop();
    }
  }
} finally {
  data.stop();
}

const ratios = {};
if (rows.native && rows.node) ratios.node_vs_native_one_thread = rows.node.mb_per_s / rows.native.mb_per_s;
if (rows['chromium-1']) ratios[`chromium_threads_${NTHREADS}_vs_one`] = rows[`chromium-${NTHREADS}`].mb_per_s / rows['chromium-1'].mb_per_s;
for (const [k, r] of Object.entries(rows)) {
  console.log(`${k.padEnd(12)} ${r.mb_per_s.toFixed(1).padStart(8)} MB/s  (best of ${r.runs.join(', ')}; limited by ${r.limiting_stage})`);
}
for (const [k, v] of Object.entries(ratios)) console.log(`${k}: ${v.toFixed(2)}`);
const out = { store: storeDir, options, rows, ratios, cpus: (await import('node:os')).availableParallelism() };
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 2));
