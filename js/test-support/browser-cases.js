// Page-side halves of js/test/browser.test.js, imported into test-support/page/ on the js/ origin
// (outside js/test/, so node --test does not run it as a test file).
// Each returns plain JSON for the Node side to assert on.
import { open, openInWorker, EngineTrapError, __debugTrap, engineGeneration, memoryBytes, heapBytes } from '../src/web.js';
import { syntheticStore } from './synthetic-store.js';

/** SHA-256 hex of a pass, as test-support/helpers.js `digest` (and the Rust tests) compute it. */
export async function digest(batches) {
  const parts = [];
  const enc = new TextEncoder();
  for (const b of batches) {
    parts.push(new Uint8Array(b.sampleIndices.buffer, b.sampleIndices.byteOffset, b.sampleIndices.byteLength));
    for (const label of Object.keys(b.arrays).sort()) {
      const d = b.arrays[label].data;
      parts.push(enc.encode(label), new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
    }
  }
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', all));
  return [...h].map((x) => x.toString(16).padStart(2, '0')).join('');
}

async function collect(pass) {
  const out = [];
  for await (const b of pass) out.push(b);
  return out;
}

/**
 * For each store: digests of `splits` at `epoch` read in a worker (threads: `threads`) and,
 * if `mainThread`, on the page too; the worker's build, thread count and transfer report.
 * `churn`: first abandon that many train passes after one batch each.
 */
export async function workerDigests({ http, stores, epoch, splits, options, threads, mainThread, nThreads, churn = 0, fetchWorker, workerUrl, ownWorker }) {
  const out = { isolated: globalThis.crossOriginIsolated === true, stores: {} };
  // `ownWorker`: a worker this page starts on that file and hands over (`how.worker`).
  const worker = ownWorker ? () => new Worker(ownWorker, { type: 'module' }) : undefined;
  for (const s of stores) {
    const opts = { ...options, variables: s.vars, sampleAxis: s.sampleAxis };
    const url = `${http}/${s.path}`;
    const wds = await openInWorker(url, opts, { threads, nThreads, fetchWorker, workerUrl, worker });
    // Passes abandoned after one batch, their decode jobs still queued or running: the
    // engine must stay intact for the passes after them.
    const received = (b) => b.sampleIndices.byteLength + Object.values(b.arrays).reduce((m, a) => m + a.data.byteLength, 0);
    let churnBytes = 0;
    for (let i = 0; i < churn; i++) {
      const p = wds.train();
      churnBytes += received(await p.next());
      await p.close();
    }
    await wds.setEpoch(epoch);
    const r = { build: wds.build, threads: wds.threads, worker: {}, main: {}, pageBytes: churnBytes };
    let main;
    if (mainThread) {
      main = await open(url, opts);
      main.setEpoch(epoch);
    }
    for (const split of splits) {
      const got = await collect(wds.iter(split));
      r.worker[split] = await digest(got);
      r.pageBytes += got.reduce((n, b) => n + received(b), 0);
      if (main) r.main[split] = await digest(await collect(main.iter(split)));
    }
    r.transfer = await wds.transferReport();
    r.fetch = await wds.fetchReport();
    r.labels = wds.labels.length;
    await wds.close();
    main?.close();
    out.stores[s.name] = r;
  }
  return out;
}

/**
 * The train epoch of each `{ url }` in `reads`, read in a worker of the threaded build (its
 * chunk reads in the fetch worker): `{ digest }` or `{ error }`, and the fetch report.
 */
export async function workerReads({ reads, options, nThreads }) {
  const out = [];
  for (const { url } of reads) {
    const wds = await openInWorker(url, options, { threads: true, nThreads });
    try {
      out.push({ url, build: wds.build, digest: await digest(await collect(wds.train())), fetch: await wds.fetchReport() });
    } catch (e) {
      out.push({ url, build: wds.build, error: e.message, fetch: await wds.fetchReport() });
    } finally {
      await wds.close();
    }
  }
  return out;
}

/**
 * A fetch worker that fails in the middle of a pass (`__debugFailFetchWorker` after its
 * first batch): the digests of that pass and of the next epoch's, beside the same two read
 * by a worker with `fetchWorker: false`, and the fetch report after.
 */
export async function fetchWorkerFails({ url, options, nThreads }) {
  const plain = await openInWorker(url, options, { threads: true, nThreads, fetchWorker: false });
  const want = [await digest(await collect(plain.train()))];
  await plain.setEpoch(1);
  want.push(await digest(await collect(plain.train())));
  await plain.close();
  const wds = await openInWorker(url, options, { threads: true, nThreads });
  try {
    const pass = wds.train();
    const batches = [await pass.next()];
    await wds.__debugFailFetchWorker();
    for (let b = await pass.next(); b !== undefined; b = await pass.next()) batches.push(b);
    const got = [await digest(batches)];
    await wds.setEpoch(1);
    got.push(await digest(await collect(wds.train())));
    return { want, got, fetch: await wds.fetchReport() };
  } finally {
    await wds.close();
  }
}

/** An error thrown in the worker, as the page sees it. */
export async function workerError({ url, options, threads }) {
  try {
    await openInWorker(url, options, { threads });
    return { ok: true };
  } catch (e) {
    return { ok: false, isError: e instanceof Error, message: e.message };
  }
}

/** How a pass that traps at its `after`-th next() ends: the batches before, then the error. */
async function trappedPass(pass) {
  let batches = 0;
  try {
    for await (const b of pass) batches += b ? 1 : 0;
    return { batches, rejected: false };
  } catch (e) {
    return { batches, rejected: true, isTrap: e instanceof EngineTrapError, name: e.name, message: e.message, cause: String(e.cause) };
  }
}

async function samples(pass) {
  let n = 0;
  for await (const b of pass) n += b.sampleIndices.length;
  return n;
}

/**
 * A forced panic (`__debugTrap`, wasm/src/trap.rs) inside the second `next()` of a pass: on
 * the page (unless `pageToo` is false), then in a worker (the build `threads` picks); each
 * time, how the pass ended, and the samples of the next open on a fresh instance / worker.
 */
export async function trapCases({ url, options, threads, nThreads, pageToo = true, workerKind = 'panic' }) {
  const out = {};
  if (pageToo) {
    const ds = await open(url, options);
    const generation = engineGeneration();
    await __debugTrap('panic', 2);
    out.page = await trappedPass(ds.all());
    const again = await open(url, options);
    out.page.fresh = engineGeneration() === generation + 1;
    out.page.samplesAfter = await samples(again.all());
    again.close();
  }
  const wds = await openInWorker(url, options, { threads, nThreads });
  out.worker = { build: wds.build };
  await wds.__debugTrap(workerKind, 2);
  Object.assign(out.worker, await trappedPass(wds.all()));
  out.worker.later = await wds.describe().then(() => 'resolved', (e) => `${e.name}: ${e.message}`);
  await wds.close();
  const fresh = await openInWorker(url, options, { threads, nThreads });
  out.worker.samplesAfter = await samples(fresh.all());
  await fresh.close();
  return out;
}

/**
 * `cycles` open/iterate/close cycles over a made-up store (test-support/synthetic-store.js:
 * `store` gives its size), each a whole train pass and an early break; wasm memory and the
 * allocator's bytes in use after each, also passed to `onCycle` as each cycle ends. `web`:
 * the package whose engine runs them (this realm's `src/web.js`: the page's, or in
 * test-support/close-loop-worker.js the worker's own).
 */
export async function closeLoop({ cycles, store, seed }, onCycle = () => {}, web = { open, memoryBytes, heapBytes }) {
  const s = syntheticStore(store);
  const out = { memory: [], heap: [], bad: [] };
  for (let i = 0; i < cycles; i++) {
    const bad = [];
    const ds = await web.open(s.storage, { ...s.options, batchSize: 8, blockChunks: 2, seed });
    for await (const b of ds.train()) {
      const why = s.check(b);
      if (why) bad.push(why);
    }
    for await (const b of ds.all()) break;
    ds.close();
    const cycle = { cycle: i, memory: await web.memoryBytes(), heap: await web.heapBytes(), bad };
    out.memory.push(cycle.memory);
    out.heap.push(cycle.heap);
    out.bad.push(...bad);
    onCycle(cycle);
  }
  return out;
}

/**
 * `closeLoop` inside the page's own dedicated module worker (test-support/
 * close-loop-worker.js imports the web package there, as an app running inference in a
 * worker would), not `openInWorker`'s: the worker posts each cycle's figures as it ends, the
 * page gathers them. `inWorker`: the worker said it ran in a `DedicatedWorkerGlobalScope`.
 */
export async function closeLoopInWorker(arg) {
  const worker = new Worker(new URL('./close-loop-worker.js', import.meta.url), { type: 'module' });
  const out = { memory: [], heap: [], bad: [], cycles: [] };
  try {
    await new Promise((resolve, reject) => {
      worker.addEventListener('message', ({ data }) => {
        if (data.error) return reject(new Error(`the close loop failed in the worker: ${data.error}`));
        if (data.done) return resolve(Object.assign(out, { inWorker: data.inWorker }));
        out.cycles.push(data.cycle);
        out.memory.push(data.memory);
        out.heap.push(data.heap);
        out.bad.push(...data.bad);
      });
      worker.addEventListener('error', (e) => reject(new Error(`the worker failed: ${e.message ?? 'script error'}`)));
      worker.addEventListener('messageerror', () => reject(new Error('a message from the worker could not be read')));
      worker.postMessage(arg);
    });
    return out;
  } finally {
    worker.terminate();
  }
}

/** `open(url)` on the page, as the page sees its failure. */
export async function openError({ url, options }) {
  try {
    await open(url, options);
    return { ok: true };
  } catch (e) {
    return { ok: false, isError: e instanceof Error, message: e.message };
  }
}

/** A storage object over `fetch` with Range requests: the caller's own storage on the page. */
function fetchStorage(base) {
  return {
    location: base,
    async get(key, range) {
      const headers = {};
      if (range?.suffix !== undefined) headers.Range = `bytes=-${range.suffix}`;
      else if (range !== undefined) headers.Range = `bytes=${range.start}-${range.end - 1}`;
      const r = await fetch(`${base}/${key}`, { headers });
      if (r.status === 404) return null;
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      return new Uint8Array(await r.arrayBuffer());
    },
  };
}

/**
 * The knobs case of wasm/tests/native_digest.rs (a labelled window, shuffled splits with
 * their own seed, a sample range) for each store: the train digest in a worker (threads:
 * `threads`), and on the page through a storage object over fetch.
 */
export async function knobsDigests({ http, stores, epoch, options, threads, nThreads }) {
  const out = {};
  for (const s of stores) {
    const v = s.vars[0];
    const opts = {
      ...options,
      variables: { x: { path: v, sampleAxis: s.sampleAxis }, y: { path: v, shift: 3, sampleAxis: s.sampleAxis } },
      shuffleSplits: true, splitSeed: 5, sampleRange: [1, s.n - 1],
    };
    const wds = await openInWorker(`${http}/${s.path}`, opts, { threads, nThreads });
    await wds.setEpoch(epoch);
    const worker = await digest(await collect(wds.train()));
    const build = wds.build;
    await wds.close();
    const main = await open(fetchStorage(`${http}/${s.path}`), opts);
    main.setEpoch(epoch);
    out[s.name] = { build, worker, storage: await digest(await collect(main.train())) };
    main.close();
  }
  return out;
}

/**
 * Signed S3 from the page (`insitubatch/web-s3`: the one-thread build with object_store's
 * AmazonS3, SigV4 through ring)
 * against the signature-checking moto server at `endpoint`, bucket `bucket`:
 * digests of `splits` at `epoch` with the keys in `storageOptions`, on the page and in a
 * one-thread worker; with a `credentials` callback whose first answer expires within the
 * refresh margin (so the next request asks again) and whose second does not (`calls`); and
 * the errors of a wrong secret, a callback that throws, and a callback sent to a worker.
 */
export async function s3Signed({ endpoint, bucket, keyId, secret, store, epoch, splits, options }) {
  // The entry with signed S3 (pkg/web-s3); src/web.js's build refuses s3:// (plainRefuses).
  const { open, openInWorker } = await import('../src/web-s3.js');
  const plain = await openError({ url: `s3://${bucket}/${store.path}`, options: { variables: store.vars } });
  const url = `s3://${bucket}/${store.path}`;
  const base = { ...options, variables: store.vars, sampleAxis: store.sampleAxis };
  const where = { aws_endpoint: endpoint, aws_region: 'us-east-1', aws_allow_http: 'true' };
  const keys = { ...where, aws_access_key_id: keyId, aws_secret_access_key: secret };
  const digests = async (ds) => {
    const out = {};
    await ds.setEpoch(epoch);
    for (const split of splits) out[split] = await digest(await collect(ds.iter(split)));
    await ds.close();
    return out;
  };
  const failure = async (p) => {
    try {
      await p;
      return { ok: true };
    } catch (e) {
      return { ok: false, isError: e instanceof Error, message: e.message };
    }
  };
  const out = { url, plain };
  // The refusals first: a page's HTTP cache may answer a GET it has seen with a right
  // signature (a private cache may keep answers to requests with Authorization).
  out.wrong = await failure(open(url, { ...base, storageOptions: { ...keys, aws_secret_access_key: `${secret}-wrong` } }));
  out.throwing = await failure(
    open(url, {
      ...base,
      storageOptions: where,
      readPolicy: { retries: 0 },
      credentials: () => {
        throw new Error('no session');
      },
    }),
  );
  out.page = await digests(await open(url, { ...base, storageOptions: keys }));
  const wds = await openInWorker(url, { ...base, storageOptions: keys }, { threads: false });
  out.workerBuild = wds.build;
  out.worker = await digests(wds);
  let calls = 0;
  const credentials = async () => {
    calls++;
    // The first answer expires in 30 s, inside the engine's one-minute refresh margin: the
    // next request calls again. The second (an ISO string) is good for an hour.
    const expiration = calls === 1 ? Date.now() + 30_000 : new Date(Date.now() + 3_600_000).toISOString();
    return { accessKeyId: keyId, secretAccessKey: secret, expiration };
  };
  out.callback = await digests(await open(url, { ...base, storageOptions: where, credentials }));
  out.calls = calls;
  out.toWorker = await failure(openInWorker(url, { ...base, storageOptions: where, credentials }, { threads: false }));
  return out;
}

/**
 * Digests of a train epoch of the kerchunk reference set at `url` (`reference+http://…`), read
 * on the page and in a worker (js/test/references.test.js compares them with Node's); and of
 * the Icechunk repository at `icechunk` (`icechunk+http://…`, its native `time` chunks), which
 * the default build refuses and `insitubatch/web-s3` reads.
 */
export async function referenceDigests({ url, options, parquet, icechunk }) {
  const ds = await open(url, options);
  const main = await digest(await collect(ds.train()));
  ds.close();
  const wds = await openInWorker(url, options, { threads: 'auto' });
  const worker = await digest(await collect(wds.train()));
  await wds.close();
  // The default browser build has no Parquet reader: a Parquet set is refused, saying why.
  const parquetRefusal = parquet
    ? await open(parquet, options).then((d) => { d.close(); return null; }, (e) => e.message)
    : null;
  let icechunkRefusal = null;
  let icechunkDigest = null;
  if (icechunk) {
    icechunkRefusal = await open(icechunk, options).then((d) => { d.close(); return null; }, (e) => e.message);
    const s3 = await import('../src/web-s3.js');
    const ids = await s3.open(icechunk, { ...options, variables: ['time'] });
    icechunkDigest = await digest(await collect(ids.train()));
    ids.close();
  }
  return { main, worker, parquetRefusal, icechunkRefusal, icechunkDigest };
}

/**
 * The option table's cases (tests/options/cases.json, in JS's spelling: test-support/option-table.js)
 * on this page, the browser build on one thread, over `store` (an http URL): each case's train
 * digest after its warm pass, or the engine's error (`kind`, `option`, `name`, message).
 */
export async function optionWalk({ store, cases }) {
  const out = {};
  for (const { name, options, warm, stores } of cases) {
    const url = stores > 1 ? Array(stores).fill(store) : store;
    try {
      if (warm) {
        const w = await open(url, warm);
        await collect(w.train());
        w.close();
      }
      const ds = await open(url, options);
      out[name] = { digest: await digest(await collect(ds.train())) };
      ds.close();
    } catch (e) {
      out[name] = { error: { kind: e.kind, option: e.option, name: e.name, message: e.message } };
    }
  }
  return out;
}
