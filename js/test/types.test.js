// js/index.d.ts against what the engine really returns. The report types (src/reports.d.ts)
// are generated from the Rust report types by tools/boundary-types, which fails CI when the
// file is stale; what is checked here is what that cannot see: the values the engine sends
// (serde structs turned into JS by JSON.parse) must fit their declarations key for key, which
// covers schemars' reading of serde and the narrowings the Rust types state by hand for the
// schema (dtype, split and on_bad_chunk words, zarr_format), and the hand-written rest of
// index.d.ts (the options against the fields the engine parses, `ByteRange`) must
// compile and fit. Needs npm `typescript` ($IB_TYPESCRIPT, installed by scripts/test-wasm.sh)
// and, for the engine's values, the loopback HTTP server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { FIXTURES, HTTP, skip as noServer } from '../test-support/helpers.js';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  checkValue,
  declaredKeys,
  declarationsFromText,
  indexDtsPath,
  loadDeclarations,
  reachableInterfaces,
} from '../test-support/dts-check.js';

// Unset: skipped, saying so. Set but unloadable: a failure, so scripts/test-wasm.sh cannot
// pass without the check.
const TS_PATH = process.env.IB_TYPESCRIPT;
const ts = TS_PATH ? createRequire(import.meta.url)(TS_PATH) : undefined;
const noTs = ts ? false : 'IB_TYPESCRIPT is unset: run scripts/test-wasm.sh, which installs npm typescript';

/** The declared types of the engine's values (all but ByteRange generated), and where each comes from below. */
const ROOTS = ['DatasetReport', 'PassStats', 'ArrayInfo', 'DrawOrderReport', 'QualityPoint', 'BadChunk', 'ByteRange', 'ProbeReport', 'Checkpoint'];

/**
 * Every option `open()` takes, set (storageOptions, credentials and patchStride aside: EVERY_OTHER_OPTION), typed by index.d.ts:
 * checked against the declaration below and then opened, so the engine accepts each
 * declared field with its declared type.
 */
const EVERY_OPTION = {
  variables: { x: 't2m', y: { path: 't2m', shift: 2, sampleAxis: 0 } },
  sampleAxis: 0,
  shift: 1,
  fractions: [0.5, 0.25, 0.25],
  shuffleSplits: true,
  splitSeed: 4,
  sampleRange: [0, 64],
  batchSize: 8,
  blockChunks: 2,
  firstBlockChunks: 1,
  maxInflight: 4,
  seed: 3,
  shuffle: true,
  prefetchDepth: 2,
  cacheBudgetBytes: 1 << 24,
  onBadChunk: 'nan',
  readPolicy: { retries: 1, backoffS: 0.01, requestTimeoutS: 5, hedge: { maxShare: 0.1 } },
  rank: 0,
  worldSize: 1,
  nodeRanks: 1,
  batchViews: true,
  patch: { 1: 5 },
  patchMode: 'random',
  patchesPerSample: 2,
};
/**
 * Options core refuses beside EVERY_OPTION's (a stride is for grids), or that need another
 * store (a coordinate, a mesh axis, one mask entry per sample), a browser (`cacheDir`) or a
 * native process (`threads`, the metrics endpoint): type-checked, not opened.
 */
const EVERY_OTHER_OPTION = {
  storageOptions: { aws_region: 'x' },
  credentials: async () => ({ accessKeyId: 'a', secretAccessKey: 'b' }),
  patchStride: [[1, 2]],
  sampleMask: [true, false],
  sampleWeights: new Float64Array([1, 2]),
  modelParallel: 2,
  modelParallelAxis: 'lat',
  coords: true,
  sel: { time: ['2020-01-01', '2020-01-02T06:00'], level: { labels: [500, 850] } },
  concatDim: 'time',
  cacheDir: 'insitubatch/era5',
  persist: true,
  readonlyCache: false,
  resetStaleCache: false,
  sharedCache: false,
  threads: 2,
  metricsAddress: '127.0.0.1:0',
  metricsCorsOrigin: 'http://127.0.0.1:5173',
};
/** Declared `unknown` on purpose: a Zarr array's attributes are arbitrary JSON. */
const ALLOW_UNKNOWN = ['ArrayInfo.attributes'];

test('index.d.ts compiles, with the generated report types it re-exports', { skip: noTs }, () => {
  const d = loadDeclarations(ts, indexDtsPath());
  assert.deepEqual(d.diagnostics, []);
  assert.ok(d.files.some((f) => f.endsWith('/src/reports.d.ts')), `src/reports.d.ts is loaded: ${d.files}`);
  for (const name of ROOTS) assert.ok(d.decls.has(name), `${name} is declared`);
  // Re-exported, so users import them from the package (tests/packages/js type-checks that).
  assert.match(readFileSync(indexDtsPath(), 'utf8'), /^export \* from '\.\/src\/reports\.js';$/m);
});

test('the checker finds missing, extra, mistyped and unchecked fields', { skip: noTs }, () => {
  const d = declarationsFromText(
    ts,
    `export interface Inner { a: number; tag: 'x' | 'y' }
     export interface Item { b: string }
     export interface Outer {
       inner: Inner; pairs: [string, number][]; opt?: string; maybe: number[] | null; any: unknown; items: Item[];
     }`,
  );
  const ok = { inner: { a: 1, tag: 'x' }, pairs: [['s', 1]], maybe: null, any: 3, items: [{ b: 'b' }] };
  assert.deepEqual(checkValue(d, 'Outer', ok, { allowUnknown: ['Outer.any'] }).errors, []);
  const bad = { inner: { tag: 'z', extra: true }, pairs: [['s', 's']], opt: 5, maybe: [1], any: 3, items: [] };
  const { errors } = checkValue(d, 'Outer', bad);
  for (const e of [
    'Outer.inner.a: declared in index.d.ts (Inner) but the engine did not send it',
    'Outer.inner.extra: sent by the engine but not declared in index.d.ts (Inner)',
    'Outer.pairs[0][1]: want a number, got "s"',
    'Outer.opt: want a string, got 5',
    'Outer.any: declared unknown; declare its real type so drift is caught',
  ]) {
    assert.ok(errors.includes(e), `${e}\n  not in\n${errors.join('\n')}`);
  }
  assert.ok(errors.some((e) => e.startsWith('Outer.inner.tag: fits no member')), errors.join('\n'));
  // An interface reached only through an empty array was never compared.
  const { visited } = checkValue(d, 'Outer', { ...ok, items: [] }, { allowUnknown: ['Outer.any'] });
  assert.deepEqual([...reachableInterfaces(d, ['Outer'])].filter((n) => !visited.has(n)), ['Item']);
});

test('the option types of index.d.ts are the fields the engine parses', { skip: noTs }, () => {
  const d = loadDeclarations(ts, indexDtsPath());
  const names = createRequire(import.meta.url)('../pkg/node/insitubatch_wasm.js').optionNames();
  const sorted = (a) => [...a].sort();
  assert.deepEqual(sorted(declaredKeys(d, 'OpenOptions')), sorted(names.open), 'OpenOptions vs the spec and JS\'s own keys');
  assert.deepEqual(sorted(declaredKeys(d, 'ReadPolicySpec')), sorted(names.readPolicy), 'ReadPolicySpec vs the spec');
  assert.deepEqual(sorted(declaredKeys(d, 'HedgeFields')), sorted(names['readPolicy.hedge']), 'HedgeFields vs the spec');
  assert.deepEqual(sorted(declaredKeys(d, 'VariableSpec')), sorted(names['variables.*']), 'VariableSpec vs the spec');
  const sample = { ...EVERY_OPTION, ...EVERY_OTHER_OPTION };
  assert.deepEqual(sorted(Object.keys(sample)), sorted(names.open), 'the sample sets every option');
  const r = checkValue(d, 'OpenOptions', sample);
  assert.deepEqual(r.errors, []);
  for (const n of ['VariableSpec', 'ReadPolicySpec', 'HedgeFields']) assert.ok(r.visited.has(n), `${n} checked`);
});

/** The engine's values for a sharded store (shard set) and a plain one (shard null). */
async function engineValues() {
  const { open, openExplorer } = await import('../src/index.js');
  const values = [];
  for (const store of ['v3_sharded', 'v3_zstd']) {
    const url = `${HTTP}/${store}`;
    const opts = { variables: ['t2m'], batchSize: 8, blockChunks: 2, seed: 3 };
    const ds = await open(url, opts);
    values.push([`${store} describe()`, 'DatasetReport', ds.describe()]);
    // A pass's stats() is there while it runs (it is freed at its end); lastPass() after.
    const pass = ds.train();
    await pass.next();
    values.push([`${store} pass.stats()`, 'PassStats', pass.stats()]);
    values.push([`${store} pass.checkpoint()`, 'Checkpoint', pass.checkpoint()]);
    for await (const _ of pass);
    values.push([`${store} lastPass()`, 'PassStats', ds.lastPass()]);
    values.push([`${store} probe()`, 'ProbeReport', await ds.probe(2)]);
    ds.close();
    const ex = await openExplorer(url);
    ex.arrays().forEach((a, i) => values.push([`${store} arrays()[${i}]`, 'ArrayInfo', a]));
    values.push([`${store} explorer describe()`, 'DatasetReport', ex.describe(opts, { shift: 1 })]);
    values.push([`${store} drawOrder()`, 'DrawOrderReport', ex.drawOrder(opts, 'train')]);
    ex.qualityCurve(opts, [1, 2]).forEach((q, i) => values.push([`${store} qualityCurve()[${i}]`, 'QualityPoint', q]));
    const preview = ex.iter(opts, 'all');
    await preview.next();
    values.push([`${store} explorer pass stats()`, 'PassStats', preview.stats()]);
    preview.close();
    values.push([`${store} explorer probe()`, 'ProbeReport', await ex.probe(opts, { shift: 1, chunks: 2 })]);
    ex.close();
  }
  // Every option at once, on a storage object whose chunk reads of t2m chunk 1 fail: the
  // engine accepts the declared options, and the ranges and bad chunks it reports fit.
  const { nodeFileStorage } = await import('../src/index.js');
  const inner = await nodeFileStorage(pathToFileURL(join(FIXTURES, 'v3_sharded')));
  const ranges = [];
  const storage = {
    get(key, range) {
      if (range !== undefined) ranges.push(range);
      return key.startsWith('t2m/c/1/') && range?.end !== undefined ? Promise.reject(new Error('bad')) : inner.get(key, range);
    },
  };
  // A checkpoint with a history: taken by 2 ranks, resumed by 1.
  const two = await open(`${HTTP}/v3_zstd`, { variables: ['t2m'], batchSize: 8, worldSize: 2 });
  const head = two.train();
  await head.next();
  const one = await open(`${HTTP}/v3_zstd`, { variables: ['t2m'], batchSize: 8 });
  const resumed = one.resume(head.checkpoint());
  const elastic = resumed.checkpoint();
  assert.equal(elastic.history.length, 1);
  values.push(['an elastic resume\'s checkpoint()', 'Checkpoint', elastic]);
  resumed.close();
  head.close();
  two.close();
  one.close();
  const ds = await open(storage, EVERY_OPTION);
  for await (const _ of ds.all());
  const bad = ds.badChunks();
  assert.ok(bad.length > 0, 'a chunk was filled');
  bad.forEach((b, i) => values.push([`badChunks()[${i}]`, 'BadChunk', b]));
  assert.ok(ranges.some((r) => 'suffix' in r) && ranges.some((r) => 'end' in r), 'both kinds of range were asked for');
  ranges.forEach((r, i) => values.push([`storage.get range ${i}`, 'ByteRange', r]));
  ds.close();
  return values;
}

test('the reports and stats the engine returns match index.d.ts', { skip: noTs || noServer }, async () => {
  const d = loadDeclarations(ts, indexDtsPath());
  const errors = [];
  const visited = new Set();
  for (const [where, type, value] of await engineValues()) {
    const r = checkValue(d, type, value, { allowUnknown: ALLOW_UNKNOWN });
    r.errors.forEach((e) => errors.push(`${where}: ${e}`));
    r.visited.forEach((v) => visited.add(v));
  }
  assert.deepEqual(errors, [], `index.d.ts and the engine disagree:\n${errors.join('\n')}`);
  const unchecked = [...reachableInterfaces(d, ROOTS)].filter((n) => !visited.has(n));
  assert.deepEqual(unchecked, [], 'declared interfaces no engine value reached (make the sample produce one)');
});
