// The package's public API as a TypeScript user writes it, type-checked (tsc --noEmit,
// strict) against the installed package's index.d.ts. Never run: only its types matter.
import { open, openInWorker, type Batch, type DatasetReport, type OpenOptions, type PassStats, type ViewBatch } from 'insitubatch';

const options: OpenOptions = {
  variables: { x: 't2m', y: { path: 't2m', shift: 6 } },
  batchSize: 32,
  blockChunks: 4,
  seed: 7n,
  fractions: [0.8, 0.1, 0.1],
  sampleRange: [0, 8760],
  shuffleSplits: true,
  onBadChunk: 'nan',
  readPolicy: { retries: 4, backoffS: 0.1, requestTimeoutS: 120 },
};

export async function train(url: string): Promise<number> {
  const ds = await open(url, options);
  const report: DatasetReport = ds.describe();
  const peak: number = report.memory.estimated_peak_bytes;
  const drawable = new Map(report.config.drawable_samples);
  let sum = 0;
  for (let epoch = 0; epoch < 2; epoch++) {
    ds.setEpoch(epoch);
    for await (const batch of ds.train()) {
      const b: Batch = batch;
      const { data, shape } = b.arrays.x;
      if (data instanceof Float32Array) sum += data[0] * shape[0];
      const first: bigint = b.sampleIndices[0];
      sum += Number(first) + b.offsets.y;
    }
    const stats: PassStats | undefined = ds.lastPass();
    if (stats) sum += stats.batches + stats.times.decode_s;
  }
  for (const note of report.notes) sum += note.severity === 'warn' ? 1 : 0;
  ds.close();
  return sum + peak + (drawable.get('train') ?? 0);
}

/** `batchViews`: views into wasm memory until the next step; `copy()` keeps a batch. */
export async function views(url: string): Promise<Batch[]> {
  const ds = await open(url, { batchViews: true, batchSize: 8 });
  const kept: Batch[] = [];
  for await (const batch of ds.val()) {
    const b: ViewBatch = batch;
    if (b.arrays.x.data[0] !== 0) kept.push(b.copy());
  }
  ds.close();
  return kept;
}

export async function inWorker(url: string): Promise<string> {
  const wds = await openInWorker(url, { variables: ['t2m'], batchSize: 8 }, { threads: 'auto' });
  await wds.setEpoch(1);
  for await (const batch of wds.val()) void batch.index;
  const text = await wds.describeText();
  await wds.close();
  return `${wds.build}: ${text}`;
}
