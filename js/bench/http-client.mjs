#!/usr/bin/env node
// Node's two ways to read an http(s):// store, side by side in one process: the runtime's
// fetch (undici; what Node's entry used before 2026-12-07) and node:http (src/node-http.js,
// the read hook the entry now sets). Cold epochs alternate between the two on one wasm
// instance, so a load change on a shared machine touches both alike; each gives its CPU
// seconds (user + system, this process) per decoded GB, median and spread (#48).
//
//   node js/bench/http-client.mjs --store DIR/c8.zarr [--rounds 10] [--json OUT]
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { serveDir } from '../test-support/browser.js';
import { nodeHttpHook } from '../src/node-http.js';
import { portable } from './portable.js';

const { values: a } = parseArgs({
  options: { store: { type: 'string' }, rounds: { type: 'string', default: '10' }, json: { type: 'string' } },
});
if (!a.store) {
  console.error('usage: node js/bench/http-client.mjs --store DIR/c8.zarr [--rounds 10] [--json OUT]');
  process.exit(2);
}
const wasm = createRequire(import.meta.url)('../pkg/node/insitubatch_wasm.js');
const storeDir = resolve(a.store);
const server = await serveDir(dirname(storeDir));
const url = `${server.url}/${basename(storeDir)}`;
const hook = nodeHttpHook(wasm.wasmMemory());
const options = { batchSize: 8, blockChunks: 2, fractions: [1, 0, 0], batchViews: true };
const runs = { fetch: [], 'node:http': [] };

/** One cold epoch (a fresh dataset) read with `client`: its CPU seconds per decoded GB. */
async function epoch(client, seed) {
  wasm.setFetchHook(client === 'node:http' ? hook : undefined);
  const ds = await wasm.open(url, { ...options, seed });
  const pass = ds.iter('train');
  const cpu0 = process.cpuUsage();
  let bytes = 0;
  for (let b = await pass.next(); b; b = await pass.next()) {
    for (const x of Object.values(b.arrays)) bytes += x.data.byteLength;
  }
  const used = process.cpuUsage(cpu0);
  pass.free();
  ds.free();
  return (used.user + used.system) / 1e6 / (bytes / 1e9);
}

try {
  await epoch('fetch', 0); // the first epoch compiles the module's code: not counted
  for (let r = 0; r < +a.rounds; r++) {
    for (const client of Object.keys(runs)) runs[client].push(await epoch(client, r + 1));
  }
} finally {
  server.stop();
}
const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const rows = Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, {
  cpu_s_per_gb: { median: median(v), min: Math.min(...v), max: Math.max(...v) }, runs: v.map((x) => +x.toFixed(3)),
}]));
const each = runs['node:http'].map((x, i) => x / runs.fetch[i]);
const ratio = { median: rows['node:http'].cpu_s_per_gb.median / rows.fetch.cpu_s_per_gb.median, min: Math.min(...each), max: Math.max(...each) };
for (const [k, r] of Object.entries(rows)) {
  const c = r.cpu_s_per_gb;
  console.log(`${k.padEnd(10)} ${c.median.toFixed(2)} CPU-s per decoded GB [${c.min.toFixed(2)}–${c.max.toFixed(2)}] over ${r.runs.length} epochs`);
}
console.log(`node:http ÷ fetch: ${ratio.median.toFixed(2)} [${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)} per round]`);
const command = portable(['node js/bench/http-client.mjs', ...process.argv.slice(2)].join(' '));
if (a.json) writeFileSync(a.json, JSON.stringify({ command, options, rows, node_http_vs_fetch: ratio, node: process.version }, null, 2));
