// Page side of js/bench/bench.mjs: one cold epoch of the train view in a worker, timed.
import { open, openInWorker } from '../src/web.js';

/** Decoded MB/s of one cold epoch (`fractions: [1, 0, 0]`, the CLI bench's view), in a fresh worker. */
export async function coldEpoch({ url, options, threads, nThreads, fetchWorker, batchViews }) {
  const wds = await openInWorker(url, { ...options, fractions: [1, 0, 0], batchViews }, { threads, nThreads, fetchWorker });
  try {
    const t0 = performance.now();
    let bytes = 0, samples = 0, ttfb;
    for await (const b of wds.train()) {
      ttfb ??= (performance.now() - t0) / 1e3;
      samples += b.sampleIndices.length;
      for (const a of Object.values(b.arrays)) bytes += a.data.byteLength;
    }
    const seconds = (performance.now() - t0) / 1e3;
    return { build: wds.build, threads: wds.threads, isolated: globalThis.crossOriginIsolated, seconds, samples, bytes, ttfb, mb_per_s: bytes / 1e6 / seconds, limiting_stage: (await wds.lastPass())?.limiting_stage, pass: await wds.lastPass(), fetch: await wds.fetchReport() };
  } finally {
    await wds.close();
  }
}

/** The same on the page's own thread with `open()` (the one-thread build); `batchViews`: batches read in place. */
export async function coldEpochOnPage({ url, options, batchViews }) {
  const ds = await open(url, { ...options, fractions: [1, 0, 0], batchViews });
  try {
    const t0 = performance.now();
    let bytes = 0;
    for await (const b of ds.train()) for (const a of Object.values(b.arrays)) bytes += a.data.byteLength;
    const seconds = (performance.now() - t0) / 1e3;
    const pass = ds.lastPass();
    return { seconds, bytes, mb_per_s: bytes / 1e6 / seconds, limiting_stage: pass?.limiting_stage, pass };
  } finally {
    ds.close();
  }
}
