// The bundler project only (tsconfig.web.json, the DOM's types): an app that starts the
// package's worker itself, in the form Vite and webpack 5 bundle, and hands it over.
import { openInWorker } from 'insitubatch';

export async function ownWorker(url: string): Promise<number> {
  const start = () => new Worker(new URL('insitubatch/worker', import.meta.url), { type: 'module' });
  const wds = await openInWorker(url, { batchSize: 8 }, { worker: start });
  let batches = 0;
  for await (const batch of wds.train()) batches += batch.sampleIndices.length > 0 ? 1 : 0;
  await wds.close();
  return batches;
}
