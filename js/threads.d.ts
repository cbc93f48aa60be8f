// `insitubatch/threads` (Node): the engine with decode threads (src/node-threads.js). The
// dataset it opens is the main entry's; only how the store is named and how the threads
// start differ.
import type { Dataset, OpenOptions, ViewBatch } from './index.js';
export type * from './index.js';
export { Dataset, Pass, EngineTrapError } from './index.js';

/**
 * Load the module and start `nThreads` decode threads (worker_threads over the module's
 * shared memory; default: the machine's available parallelism). Resolves to the thread
 * count. Optional: the first `open()` starts the default. Rejects another count once started.
 */
export declare function initialize(nThreads?: number): Promise<number>;
/**
 * Open the Zarr store at an http(s):// URL (or several, concatenated) and build a dataset
 * decoded on the threads. Local paths, file:// and s3:// are refused: open them with the
 * main entry.
 */
export declare function open(source: string | string[], options: OpenOptions & { batchViews: true }): Promise<Dataset<ViewBatch>>;
export declare function open(source: string | string[], options?: OpenOptions): Promise<Dataset>;
