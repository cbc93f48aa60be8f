// A page bundled from the installed package by Vite (index.html) and by webpack 5
// (webpack.config.js), neither told anything about it: the browser entry (src/web.js), its
// worker (src/worker-web.js, which both follow from `new Worker(new URL(...,
// import.meta.url))`) and the wasm and glue they load through `new URL(..., import.meta.url)`.
// Over the store at ?store=URL, each train epoch hashed as use-package.mjs hashes Node's:
//   page        open() on this thread, epoch 0;
//   pageTrap    twice, a forced trap (`__debugTrap`, as js/test/trap.test.js) in the second
//               next() of a pass: the pass rejects with an EngineTrapError, and open() again
//               runs on a fresh instance (its glue and wasm fetched from the bundle's files),
//               epoch 1;
//   worker      openInWorker() with no workerUrl, epoch 0;
//   workerTrap  the same trap in the worker: the pass rejects, the worker is terminated, and a
//               new openInWorker() serves epoch 1;
//   ownWorker   openInWorker() in a worker this page started on `insitubatch/worker`, epoch 1.
// The result goes on the page as JSON, with data-state ok | error: check.mjs waits on that.
import { open, openInWorker, EngineTrapError, __debugTrap, engineGeneration } from 'insitubatch';

const OPTIONS = { variables: ['t2m', 'u10'], batchSize: 8, blockChunks: 2, seed: 3, fractions: [0.5, 0.25, 0.25] };
const out = document.getElementById('result');

/** Every batch of `pass` hashed in order (sampleIndices, then each label and its data). */
async function hashed(pass) {
  const parts = [];
  const seen = new Set();
  let batches = 0;
  for await (const b of pass) {
    batches++;
    parts.push(new Uint8Array(b.sampleIndices.buffer, b.sampleIndices.byteOffset, b.sampleIndices.byteLength));
    for (const label of Object.keys(b.arrays).sort()) {
      const { data } = b.arrays[label];
      parts.push(new TextEncoder().encode(label), new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    }
    for (const t of b.sampleIndices) seen.add(t);
  }
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (all.set(p, at), at + p.length), 0);
  const digest = [...new Uint8Array(await crypto.subtle.digest('SHA-256', all))]
    .map((x) => x.toString(16).padStart(2, '0'))
    .join('');
  return { batches, samples: seen.size, digest };
}

/** How a pass armed to trap ends: the batches before, then what it rejected with. */
async function trapped(pass) {
  let batches = 0;
  try {
    for await (const b of pass) batches += b ? 1 : 0;
    return { batches, rejected: false };
  } catch (e) {
    return { batches, rejected: e instanceof EngineTrapError ? 'EngineTrapError' : `${e?.name}: ${e?.message}` };
  }
}

async function onPage(store) {
  const ds = await open(store, OPTIONS);
  const page = await hashed(ds.train());
  ds.close();

  // Twice: a recovery is not a one-off (each fresh instance's glue gets a URL of its own).
  const pageTrap = [];
  for (let round = 0; round < 2; round++) {
    const armed = await open(store, OPTIONS);
    const generation = engineGeneration();
    await __debugTrap('panic', 2);
    const t = await trapped(armed.train());
    armed.close();
    const fresh = await open(store, OPTIONS);
    t.fresh = engineGeneration() === generation + 1;
    fresh.setEpoch(1);
    t.after = await hashed(fresh.train());
    fresh.close();
    pageTrap.push(t);
  }
  return { page, pageTrap };
}

/** Epoch `epoch` through openInWorker (`how`: its third argument), and the build it ran. */
async function inWorker(store, epoch, how) {
  const wds = await openInWorker(store, OPTIONS, how);
  try {
    await wds.setEpoch(epoch);
    return { build: wds.build, ...(await hashed(wds.train())) };
  } finally {
    await wds.close();
  }
}

async function inWorkers(store) {
  const worker = await inWorker(store, 0);

  const armed = await openInWorker(store, OPTIONS);
  await armed.__debugTrap('panic', 2);
  const workerTrap = await trapped(armed.train());
  workerTrap.later = await armed.describe().then(() => 'resolved', (e) => (e instanceof EngineTrapError ? 'EngineTrapError' : `${e?.name}: ${e?.message}`));
  await armed.close();
  workerTrap.after = await inWorker(store, 1);

  const ownWorker = await inWorker(store, 1, {
    worker: () => new Worker(new URL('insitubatch/worker', import.meta.url), { type: 'module' }),
  });
  return { worker, workerTrap, ownWorker };
}

const store = new URLSearchParams(location.search).get('store');
(async () => ({ ...(await onPage(store)), ...(await inWorkers(store)) }))().then(
  (r) => {
    out.textContent = JSON.stringify(r);
    out.dataset.state = 'ok';
  },
  (e) => {
    out.textContent = `${e?.stack ?? e}`;
    out.dataset.state = 'error';
  },
);
