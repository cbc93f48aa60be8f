// One decode thread of the threaded build in Node (started by src/node-thread-pool.js): it
// instantiates the shared module over the shared memory, says it is ready, and runs rayon's
// thread loop, which returns only when the pool ends.
import { parentPort, workerData } from 'node:worker_threads';

const { module, memory, receiver, mainJS } = workerData;
const glue = await import(mainJS);
await glue.default({ module_or_path: module, memory });
parentPort.postMessage('ready');
glue.wbg_rayon_start_worker(receiver);
