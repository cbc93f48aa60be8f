// The Node project only (tsconfig.json, @types/node): a worker_threads Worker on the
// package's `insitubatch/worker` export (its `node` condition), handed to openInWorker.
import { Worker } from 'node:worker_threads';
import { openInWorker } from 'insitubatch';

export async function ownWorker(url: string): Promise<number> {
  const worker = new Worker(new URL(import.meta.resolve('insitubatch/worker')));
  const wds = await openInWorker(url, { batchSize: 8 }, { worker });
  let batches = 0;
  for await (const batch of wds.train()) batches += batch.sampleIndices.length > 0 ? 1 : 0;
  await wds.close();
  return batches;
}

// Node's threaded entry, typed by the package's threads.d.ts (its `types` condition).
import * as threads from 'insitubatch/threads';

export async function withThreads(url: string): Promise<number> {
  const n: number = await threads.initialize(2);
  const ds: threads.Dataset = await threads.open(url, { batchSize: 8 });
  let rows = 0;
  for await (const batch of ds.train()) rows += batch.sampleIndices.length;
  ds.close();
  return rows * n;
}
