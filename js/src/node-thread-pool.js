// The decode threads of the threaded build in Node: wasm-bindgen-rayon starts its pool's
// threads as Web Workers (its `startWorkers`, browser only: upstream has no Node support,
// RReverser/wasm-bindgen-rayon#24), so Node's package (pkg/node-threads, made by
// scripts/test-wasm.sh from the same wasm as pkg/web-threads) has this file in that helper's
// place: the same contract, over worker_threads.
import { Worker } from 'node:worker_threads';

/** The threads of the last pool started, and who hears when one of them fails. */
let lastPool = { workers: [], onError: undefined };

/**
 * Start the next pool's threads with `onError(e)` as their failure handler (a trap in a
 * decode thread ends that worker with an error; unheard, it would end the process), and
 * return the pool: `{ workers, onError }`, filled in once its threads are up.
 */
export function nextPool(onError) {
  lastPool = { workers: [], onError };
  return lastPool;
}

/**
 * Start `builder.numThreads()` worker_threads, each instantiating `module` over the shared
 * `memory` and entering rayon's thread loop (src/node-thread.js); resolves once every one is
 * ready, then lets rayon build its pool. The threads are unref'd: they never keep a finished
 * program alive. A thread that fails before it is ready rejects the start with its error.
 */
export async function startWorkers(module, memory, builder) {
  const n = builder.numThreads();
  if (n === 0) throw new Error('num_threads must be > 0.');
  const init = { module, memory, receiver: builder.receiver(), mainJS: builder.mainJS() };
  const pool = lastPool;
  pool.workers = await Promise.all(
    Array.from({ length: n }, () => {
      const worker = new Worker(new URL('./node-thread.js', import.meta.url), {
        workerData: init,
        name: 'insitubatch-decode',
        // A worker inherits the process's flags, and `--input-type` (`node --input-type=module
        // -e ...`) makes it refuse to start from a file.
        execArgv: process.execArgv.filter((a) => !a.startsWith('--input-type')),
      });
      return new Promise((resolve, reject) => {
        const failed = (e) => reject(new Error(`an insitubatch decode thread failed to start: ${e?.message ?? e}`, { cause: e }));
        worker.once('error', failed);
        worker.once('exit', (code) => failed(new Error(`it exited with code ${code}`)));
        worker.once('message', () => {
          worker.removeAllListeners('error');
          worker.removeAllListeners('exit');
          worker.on('error', (e) => pool.onError?.(e));
          worker.unref();
          resolve(worker);
        });
      });
    }),
  );
  builder.build();
}
