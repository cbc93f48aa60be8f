// `insitubatch/threads` (Node): the engine with decode threads (src/node-threads.js). The
// dataset it opens is the main entry's; only how the store is named and how the threads
// start differ.
import type { ConcatenatedStores, Dataset, JoinedStores, OpenOptions, Storage, ViewBatch } from './index.js';
export type * from './index.js';
export { Dataset, Pass, EngineTrapError } from './index.js';

/**
 * Load the module and start `nThreads` decode threads (worker_threads over the module's
 * shared memory; default: the machine's available parallelism). Resolves to the thread
 * count. Optional: the first `open()` starts the default. Rejects another count once started.
 */
export declare function initialize(nThreads?: number): Promise<number>;
/**
 * Open a Zarr store and build a dataset decoded on the threads: an http(s):// URL, a local
 * path or file:// URL (node:fs), a kerchunk JSON reference set (`reference+URL`), a
 * `Storage` object, or a join or concatenation of them, as the main entry's `open`. s3://
 * and Icechunk repositories are refused: open them with the main entry.
 */
export declare function open(source: string | URL | Storage | JoinedStores | ConcatenatedStores, options: OpenOptions & { batchViews: true }): Promise<Dataset<ViewBatch>>;
export declare function open(source: string | URL | Storage | JoinedStores | ConcatenatedStores, options?: OpenOptions): Promise<Dataset>;
