#!/usr/bin/env node
// Decoded MB/s of one cold epoch, the CLI bench's measure (batch bytes / wall time of the
// train view with fractions 1,0,0), for:
//   native  `insitubatch bench URL --threads 1` (the CLI, one decode thread)
//   native-file   the same reading the store's local path
//   node    wasm in Node, one thread (src/index.js), batches copied out of wasm memory
//   node-views   the same with `batchViews: true` (batches read in place, no copy)
//   node-N / node-N-views   wasm in Node with N decode threads (`insitubatch/threads`,
//           src/node-threads.js: the threaded build, its pool on worker_threads), copies / views
//   node-file-views / node-N-file-views   the same, the store read from its local path with
//           node:fs instead of over HTTP
//   chromium-1 / chromium-N   wasm in a dedicated worker of a cross-origin-isolated page,
//           the one-thread build vs the threaded build with N decode threads (chunk reads in
//           its fetch worker); chromium-N-reads-here the same with `fetchWorker: false`
//           (reads on the engine's thread, as before 2026-12-02); chromium-N-views the
//           threaded build with `batchViews` (batches read in place over its shared memory)
//   chromium-page / chromium-page-views   `open()` on the page's own thread (one-thread
//           build), batches copied vs `batchViews` (with --page-rows)
// All read the same store over the same loopback HTTP server (tests/servers/http_server.py).
// The rows are interleaved: each of `--runs` rounds runs every row once, in order, so a
// load change on a shared machine touches every row alike; each row reports the median
// and the min–max spread of its runs.
//
// Every row also gives its epoch's CPU per decoded GB (`cpu_s_per_gb`: user + system seconds
// of the process that runs the engine, its worker threads included, per 1e9 decoded bytes; the
// CLI's own epoch figure for `native`), beside `decode-alone`: the CLI's decode limit on one
// thread, timed after every chunk is fetched (`bench --decode-limit`), the CPU no loader can
// avoid for these bytes (#48; the Chromium rows have the per-process figures of `--cpu`).
//
// `--profile DIR` (Node's one-thread rows): a V8 CPU profile of each run's epoch, written to
// DIR/ROW-rROUND.cpuprofile (open it in Chrome's DevTools or speedscope for the flame graph),
// and each row's sampled time by where it went (`profile_ms`: the wasm decoders, the gather
// into batches, the rest of the engine, the HTTP client, Node's internals, glue, V8's own and
// native code, GC, idle), the median run's. The decode threads of the node-N rows are other
// threads: not in it. The sampler costs a little CPU of its own: compare CPU figures of runs
// made without it.
//
// `--rows a,b`: only the rows named. `--cpu` (Linux): each run also records the CPU seconds
// (user + system, from /proc) that every process spent during it, by kind: Chromium's
// renderer (the page, the engine's worker, its decode threads and fetch worker), its network
// service, GPU and browser processes, the loopback HTTP server, and this Node process; on a
// machine with few cores that says how much of an epoch's CPU the engine's threads can have.
//
//   node js/bench/bench.mjs --store DIR/c8.zarr [--cli PATH] [--threads 2] [--runs 3] [--page-rows] [--rows R,..] [--cpu] [--json OUT]
// Needs IB_PLAYWRIGHT_CORE (scripts/test-wasm.sh installs it) for the Chromium rows.
import { spawnSync } from 'node:child_process';
import * as os from 'node:os';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { open } from '../src/index.js';
import * as nodeThreads from '../src/node-threads.js';
import { serveDir, serveJs, launch, browserSkip } from '../test-support/browser.js';
import { portable } from './portable.js';

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
    'page-rows': { type: 'boolean', default: false },
    rows: { type: 'string' },
    cpu: { type: 'boolean', default: false },
    profile: { type: 'string' },
  },
});
if (!a.store) {
  console.error('usage: node js/bench/bench.mjs --store DIR/store.zarr [--cli target/release/insitubatch] [--threads 2] [--runs 3] [--page-rows] [--json OUT]');
  process.exit(2);
}
const RUNS = +a.runs;
if (!(RUNS >= 1)) throw new Error(`--runs must be a positive integer, got ${a.runs}`);
if (RUNS < 3) console.error(`${RUNS} round(s): fewer than 3, so a median and spread say little`);
const NTHREADS = +a.threads;
const options = { batchSize: +a['batch-size'], blockChunks: +a['block-chunks'], seed: 0 };
if (a['cache-budget-bytes']) options.cacheBudgetBytes = +a['cache-budget-bytes'];
const storeDir = resolve(a.store);
const data = await serveDir(dirname(storeDir));
const url = `${data.url}/${basename(storeDir)}`;
const series = {}; // row -> its runs, in round order
const wanted = a.rows ? new Set(a.rows.split(',')) : undefined;
const want = (key) => !wanted || wanted.has(key);

/** What kind of process `argv` is, for `--cpu`, or undefined for the rest of the machine. */
function processKind(argv) {
  if (argv[0]?.includes('chrom')) {
    const type = argv.find((x) => x.startsWith('--type='))?.slice(7);
    if (!type) return 'chromium-browser';
    if (type === 'utility') return argv.some((x) => x.includes('NetworkService')) ? 'chromium-network' : 'chromium-utility';
    return `chromium-${type}`;
  }
  if (argv.some((x) => x.endsWith('http_server.py'))) return 'http-server';
  if (+argv.pid === process.pid) return 'bench-node';
  return undefined;
}

/**
 * CPU seconds of the renderer's threads that are not Web Workers (its main thread, IO and
 * thread-pool threads: Chromium's own work for the page, fetch and messages included). The
 * workers (the engine's, its decode threads, the fetch worker) end with each run, so their
 * time is the renderer's total less this.
 */
function rendererOwnCpu(pid) {
  let ticks = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      if (comm.startsWith('DedicatedWorker')) continue;
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += +f[11] + +f[12];
    } catch {
      // the thread ended while we read it
    }
  }
  return ticks / 100;
}

/** CPU seconds (user + system) of every process now, summed by `processKind` (Linux /proc). */
function cpuByKind() {
  const out = {};
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // NUL-separated, but Chromium rewrites its children's titles as one space-separated string.
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split(/[\0 ]/);
      argv.pid = pid;
      const kind = processKind(argv) ?? 'other';
      out[kind] = (out[kind] ?? 0) + (+f[11] + +f[12]) / 100; // utime, stime in USER_HZ ticks
      if (kind === 'chromium-renderer') out['renderer-not-workers'] = (out['renderer-not-workers'] ?? 0) + rendererOwnCpu(pid);
    } catch {
      // the process ended while we read it
    }
  }
  return out;
}

/** `run()` with, under `--cpu`, the CPU each kind of process spent during it. */
async function measured(run) {
  const before = a.cpu ? cpuByKind() : undefined;
  const t0 = performance.now();
  const r = await run();
  if (before) {
    const after = cpuByKind();
    // Over the whole run, opening included (`seconds` is the epoch alone). A row's own
    // processes that exited before `after` (the native CLI) report their CPU themselves.
    const diff = Object.fromEntries(Object.keys(after).map((k) => [k, +(after[k] - (before[k] ?? 0)).toFixed(2)]));
    r.cpu = { ...diff, ...r.cpu };
    r.cpu_wall_s = +((performance.now() - t0) / 1e3).toFixed(2);
  }
  return r;
}
const add = async (key, run) => {
  if (want(key)) (series[key] ??= []).push(await measured(run));
};

/** One cold epoch of the native CLI, one decode thread, reading `where` (the HTTP URL, or the store's path). */
function nativeRun(where = url) {
  const r = spawnSync(a.cli, ['bench', where, '--threads', '1', '--epochs', '1', '--json',
    '--batch-size', a['batch-size'], '--block-chunks', a['block-chunks'],
    ...(a['cache-budget-bytes'] ? ['--cache-budget-bytes', a['cache-budget-bytes']] : [])], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`insitubatch bench failed: ${r.stderr}`);
  const j = JSON.parse(r.stdout);
  const e = (j.epochs ?? j.rows ?? [j])[0];
  // The CLI's own CPU seconds (`process_cpu_s`, open included): it has exited by the time
  // `--cpu` reads /proc.
  const cpu = j.process_cpu_s == null ? undefined : { 'native-cli': +j.process_cpu_s.toFixed(2) };
  return { mb_per_s: e.mb_per_s, seconds: e.seconds, limiting_stage: e.limiting_stage, times: e.times, cpu,
    cpu_s_per_gb: e.cpu_s_per_gb };
}

/** The decode alone of every chunk on one thread (`bench --decode-limit`): its CPU per GB. */
function decodeAloneRun() {
  const r = spawnSync(a.cli, ['bench', url, '--decode-limit', '--threads', '1', '--json'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`insitubatch bench --decode-limit failed: ${r.stderr}`);
  const j = JSON.parse(r.stdout);
  return { mb_per_s: j.decode_limit_mb_per_s, seconds: j.seconds, limiting_stage: 'decode', cpu_s_per_gb: j.decode_cpu_s_per_gb };
}

/** One cold epoch in Node on this thread; `batchViews`: read the batches in place; `where`: the store's URL or path. */
async function nodeRun(batchViews, entry = { open }, where = url, key = undefined) {
  const ds = await entry.open(where, { ...options, fractions: [1, 0, 0], batchViews });
  const profiler = key && a.profile ? await startProfile() : undefined;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let bytes = 0;
  for await (const b of ds.train()) for (const x of Object.values(b.arrays)) bytes += x.data.byteLength;
  const seconds = (performance.now() - t0) / 1e3;
  const used = process.cpuUsage(cpu0); // microseconds, every thread of this process
  const profile_ms = profiler ? await profiler.stop(key) : undefined;
  const { limiting_stage, times } = ds.lastPass() ?? {};
  ds.close();
  return { mb_per_s: bytes / 1e6 / seconds, seconds, limiting_stage, times, profile_ms,
    cpu_s_per_gb: (used.user + used.system) / 1e6 / (bytes / 1e9) };
}

/**
 * V8's sampling profiler over this thread (node:inspector); `stop(key)` writes the profile to
 * `--profile`'s folder and resolves to its sampled milliseconds by `where` below.
 */
async function startProfile() {
  const { Session } = await import('node:inspector/promises');
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async stop(key) {
      const { profile } = await session.post('Profiler.stop');
      session.disconnect();
      mkdirSync(a.profile, { recursive: true });
      writeFileSync(`${a.profile}/${key}-r${(series[key]?.length ?? 0) + 1}.cpuprofile`, portable(JSON.stringify(profile)));
      return bySpent(profile);
    },
  };
}

/** The wasm decoders' functions (zstd, its Huffman and FSE stages, blosc, LZ4, zlib, snappy). */
const DECODER = /^(ZSTD_|HUF_|FSE_|blosc|LZ4|inflate|snappy)/;
/** Where a profile's samples went, in milliseconds, by the function each was in. */
function bySpent(profile) {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const out = {};
  profile.samples.forEach((id, i) => {
    const { functionName: f, url: u } = frames.get(id);
    const where = u.includes('.wasm')
      ? (DECODER.test(f) ? 'wasm decode' : /extend_from_slice|gather/.test(f) ? 'wasm gather' : 'wasm engine')
      : u.includes('undici') || /^node:(_http|https?$|net$|internal\/http)/.test(u) ? 'http client'
      : u.startsWith('node:') || /^[a-z_]+$/.test(u) ? 'node internals'
      : u.includes('insitubatch_wasm.js') ? 'wasm-bindgen glue'
      : f === '(garbage collector)' ? 'gc' : f === '(idle)' ? 'idle'
      : u === '' ? 'V8 and native code' : 'other JS';
    out[where] = (out[where] ?? 0) + profile.timeDeltas[i] / 1e3;
  });
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, +v.toFixed(1)]).sort((x, y) => y[1] - x[1]));
}

const wantNode = a.only !== 'chromium';
const wantChromium = a.only !== 'node' && !browserSkip;
if (a.only !== 'node' && browserSkip) console.error(`skipping Chromium: ${browserSkip}`);
let chrome, page, p;
try {
  if (wantChromium) {
    page = await serveJs({ coopCoep: true });
    chrome = await launch();
    p = await chrome.page(`${page.url}/test-support/page/`);
  }
  for (let round = 0; round < RUNS; round++) {
    if (a.cli && !a.only) await add('native', () => nativeRun());
    if (a.cli && !a.only) await add('native-file', () => nativeRun(storeDir));
    if (a.cli && !a.only) await add('decode-alone', () => decodeAloneRun());
    if (wantNode) {
      await add('node', () => nodeRun(false, { open }, url, 'node'));
      await add('node-views', () => nodeRun(true, { open }, url, 'node-views'));
      await add('node-file-views', () => nodeRun(true, { open }, storeDir, 'node-file-views'));
      await nodeThreads.initialize(NTHREADS);
      await add(`node-${NTHREADS}`, () => nodeRun(false, nodeThreads));
      await add(`node-${NTHREADS}-views`, () => nodeRun(true, nodeThreads));
      await add(`node-${NTHREADS}-file-views`, () => nodeRun(true, nodeThreads, storeDir));
    }
    if (wantChromium) {
      const workerRows = [
        ['chromium-1', false, 1, true, false],
        [`chromium-${NTHREADS}`, true, NTHREADS, true, false],
        [`chromium-${NTHREADS}-reads-here`, true, NTHREADS, false, false],
        [`chromium-${NTHREADS}-views`, true, NTHREADS, true, true],
      ];
      for (const [key, threads, nThreads, fetchWorker, batchViews] of workerRows) {
        try {
          await add(key, () => p.evaluate(async (arg) => (await import('/bench/page.js')).coldEpoch(arg), { url, options, threads, nThreads, fetchWorker, batchViews }));
        } catch (e) {
          throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
        }
      }
      for (const [key, batchViews] of a['page-rows'] ? [['chromium-page', false], ['chromium-page-views', true]] : []) {
        try {
          await add(key, () => p.evaluate(async (arg) => (await import('/bench/page.js')).coldEpochOnPage(arg), { url, options, batchViews }));
        } catch (e) {
          throw new Error(`${e.message}\n${chrome.logs.join('\n')}`);
        }
      }
    }
    console.error(`round ${round + 1}/${RUNS} done`);
  }
} finally {
  await chrome?.browser.close();
  page?.stop();
  data.stop();
}

const median = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
/**
 * `{ mb_per_s (median), min, max, runs, limiting_stage (the most common), times (the pass's
 * stage times in the run nearest the median: where an epoch's time went) }`.
 */
function summary(runs) {
  const mbs = runs.map((r) => r.mb_per_s);
  const stages = runs.map((r) => r.limiting_stage);
  const common = [...stages].sort((x, y) => stages.filter((s) => s === y).length - stages.filter((s) => s === x).length)[0];
  const mid = median(mbs);
  const nearest = runs.reduce((m, r) => (Math.abs(r.mb_per_s - mid) < Math.abs(m.mb_per_s - mid) ? r : m));
  const perGb = runs.map((r) => r.cpu_s_per_gb).filter((x) => x != null);
  const cpu_s_per_gb = perGb.length ? { median: median(perGb), min: Math.min(...perGb), max: Math.max(...perGb) } : undefined;
  return { mb_per_s: mid, min: Math.min(...mbs), max: Math.max(...mbs), runs: mbs.map((x) => +x.toFixed(1)), limiting_stage: common, times: nearest.times ?? nearest.pass?.times, cpu: nearest.cpu, cpu_wall_s: nearest.cpu_wall_s, seconds: nearest.seconds, cpu_s_per_gb, profile_ms: nearest.profile_ms };
}
const rows = Object.fromEntries(Object.entries(series).map(([k, runs]) => [k, summary(runs)]));
/** Ratio of medians, with the range of the per-round ratios (rounds are interleaved). */
function ratio(num, den) {
  const each = series[num].map((r, i) => r.mb_per_s / series[den][i].mb_per_s);
  return { median: rows[num].mb_per_s / rows[den].mb_per_s, min: Math.min(...each), max: Math.max(...each) };
}
const ratios = {};
if (rows.native && rows.node) ratios.node_vs_native_one_thread = ratio('node', 'native');
for (const key of ['node-file-views', `node-${NTHREADS}-file-views`]) {
  if (rows['native-file'] && rows[key]) ratios[`${key.replaceAll('-', '_')}_vs_native_file_one_thread`] = ratio(key, 'native-file');
}
if (rows.native && rows['node-views']) ratios.node_views_vs_native_one_thread = ratio('node-views', 'native');
if (rows.node && rows['node-views']) ratios.node_views_vs_node = ratio('node-views', 'node');
for (const key of [`node-${NTHREADS}`, `node-${NTHREADS}-views`, 'node-file-views', `node-${NTHREADS}-file-views`]) {
  if (rows.native && rows[key]) ratios[`${key.replaceAll('-', '_')}_vs_native_one_thread`] = ratio(key, 'native');
}
if (rows['chromium-page'] && rows['chromium-page-views']) ratios.chromium_page_views_vs_copies = ratio('chromium-page-views', 'chromium-page');
if (rows['chromium-1'] && rows[`chromium-${NTHREADS}`]) ratios[`chromium_threads_${NTHREADS}_vs_one`] = ratio(`chromium-${NTHREADS}`, 'chromium-1');
if (rows['chromium-1'] && rows[`chromium-${NTHREADS}-reads-here`]) ratios[`chromium_threads_${NTHREADS}_reads_here_vs_one`] = ratio(`chromium-${NTHREADS}-reads-here`, 'chromium-1');
if (rows[`chromium-${NTHREADS}-reads-here`] && rows[`chromium-${NTHREADS}`]) ratios.chromium_fetch_worker_vs_reads_here = ratio(`chromium-${NTHREADS}`, `chromium-${NTHREADS}-reads-here`);
if (rows['chromium-1'] && rows[`chromium-${NTHREADS}-views`]) ratios[`chromium_threads_${NTHREADS}_views_vs_one`] = ratio(`chromium-${NTHREADS}-views`, 'chromium-1');
for (const [k, r] of Object.entries(rows)) {
  console.log(`${k.padEnd(20)} ${r.mb_per_s.toFixed(1).padStart(8)} MB/s  [${r.min.toFixed(1)}–${r.max.toFixed(1)}] median of ${r.runs.length} (${r.runs.join(', ')}); limited by ${r.limiting_stage}`);
}
for (const [k, r] of Object.entries(rows)) {
  if (!r.cpu || r.cpu_wall_s == null) continue; // --cpu's per-process figures
  const ours = Object.entries(r.cpu).filter(([p]) => p !== 'other' && p !== 'renderer-not-workers').reduce((n, [, v]) => n + v, 0);
  console.log(`${k.padEnd(20)} CPU s in its median run (${r.cpu_wall_s} s with the open, ${(ours / r.cpu_wall_s).toFixed(2)} cores busy): ${Object.entries(r.cpu).filter(([, v]) => v > 0).map(([p, v]) => `${p} ${v}`).join(', ')}`);
}
const gb = (k) => rows[k]?.cpu_s_per_gb?.median;
for (const [k, r] of Object.entries(rows)) {
  const c = r.cpu_s_per_gb;
  if (!c) continue;
  const vs = (base) => (gb(base) && k !== base ? `, ${(c.median / gb(base)).toFixed(2)}× ${base}` : '');
  console.log(`${k.padEnd(20)} ${c.median.toFixed(2)} CPU-s per decoded GB [${c.min.toFixed(2)}–${c.max.toFixed(2)}]${vs('native')}${vs('decode-alone')}`);
}
/** Each row's CPU per decoded GB ÷ native's and ÷ the decode alone's (medians). */
const cpuRatios = Object.fromEntries(Object.keys(rows).filter((k) => gb(k)).map((k) => [k, {
  vs_native: gb('native') ? gb(k) / gb('native') : undefined,
  vs_decode_alone: gb('decode-alone') ? gb(k) / gb('decode-alone') : undefined,
}]));
for (const [k, r] of Object.entries(rows)) {
  if (!r.profile_ms) continue;
  const total = Object.values(r.profile_ms).reduce((n, v) => n + v, 0);
  console.log(`${k.padEnd(20)} profile of its median run: ${Object.entries(r.profile_ms).map(([w, v]) => `${w} ${(100 * v / total).toFixed(0)}%`).join(', ')}`);
}
for (const [k, v] of Object.entries(ratios)) console.log(`${k}: ${v.median.toFixed(2)} [${v.min.toFixed(2)}–${v.max.toFixed(2)} per round]`);
const command = portable(['node js/bench/bench.mjs', ...process.argv.slice(2)].join(' '));
const out = { command, store: portable(storeDir), options, rows, ratios, cpu_ratios: cpuRatios, cpus: os.availableParallelism(), loadavg: os.loadavg() };
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 2));
