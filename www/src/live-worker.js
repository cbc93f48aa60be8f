// The live run: one epoch streamed in this worker (decode never blocks the page), with a tick
// every 100 ms: MB/s over the last interval, the batch queue as the engine records it, and
// the limiting stage so far. The pass report is posted at the end.
import { open } from 'insitubatch';

let stop = false;
const post = (m) => self.postMessage(m);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function run({ url, options, epoch, split, stepMs }) {
  const ds = await open(url, options);
  ds.setEpoch(epoch);
  const pass = ds.iter(split);
  const total = pass.length;
  post({ type: 'start', batches: total, split, isolated: self.crossOriginIsolated === true });
  const t0 = performance.now();
  let last = { t: t0, bytes: 0, asks: 0, empty: 0 };
  let bytes = 0;
  let batches = 0;
  const tick = (now) => {
    const s = pass.stats();
    if (!s) return;
    const d = s.depths;
    const asks = d.queue_samples - last.asks;
    post({
      type: 'tick',
      t: (now - t0) / 1000,
      mbps: (bytes - last.bytes) / 1e6 / Math.max((now - last.t) / 1000, 1e-6),
      // The engine samples the queue each time the caller asks: how often a batch was
      // already waiting, and the deepest it has been.
      readyShare: asks > 0 ? 1 - (d.queue_empty - last.empty) / asks : null,
      queuePeak: d.queue_peak,
      stage: s.limiting_stage,
      batches,
      total,
    });
    last = { t: now, bytes, asks: d.queue_samples, empty: d.queue_empty };
  };
  for (;;) {
    const b = await pass.next();
    if (b === undefined) break;
    for (const a of Object.values(b.arrays)) bytes += a.data.byteLength;
    batches += 1;
    const now = performance.now();
    if (now - last.t >= 100) tick(now);
    if (stop) {
      pass.close();
      break;
    }
    if (stepMs > 0) await sleep(stepMs);
  }
  const stats = ds.lastPass();
  post({ type: 'done', stats, batches, bytes, wall: (performance.now() - t0) / 1000, stopped: stop });
  ds.close();
}

self.onmessage = (e) => {
  if (e.data.type === 'stop') {
    stop = true;
    return;
  }
  run(e.data).catch((err) => post({ type: 'error', message: err?.message ?? String(err) }));
};
