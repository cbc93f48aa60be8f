// Types of the `insitubatch` package: the API, hand-written over the wasm-bindgen output; the
// reports and stats the engine returns (`DatasetReport`, `PassStats`, `ProbeReport`,
// `Checkpoint`, `BadChunk`, the explorer's `ArrayInfo`, `DrawOrderReport`, `QualityPoint`,
// and their parts: `VariableReport`, `Depths`, `SplitName`, `DTypeName`, ...) are generated from the Rust report
// types into src/reports.d.ts (tools/boundary-types; `cargo run -p insitubatch-boundary-types`
// rewrites it, and CI fails when it is stale), re-exported here; so are the options, into
// src/options.d.ts from core's `DatasetSpec` (`DatasetSpec`, `ReadPolicySpec`, `HedgeFields`,
// `VariableSpec`, `AxisSizes`, ...).
import type {
  ArrayInfo,
  BadChunk,
  Checkpoint,
  DatasetReport,
  DrawOrderReport,
  DTypeName,
  PassStats,
  ProbeReport,
  QualityPoint,
  SplitName,
} from './src/reports.js';
import type { DatasetSpec } from './src/options.js';

export * from './src/reports.js';
export * from './src/options.js';

/**
 * The options of `open()` and `openInWorker()`: core's spec of every plain-data option
 * (`batchSize`, `seed`, `readPolicy`, `patch`, `cacheDir`, ...: generated into
 * src/options.d.ts from core's `DatasetSpec`, with their defaults; the engine refuses unknown
 * keys and decides every default and rule) and this package's own keys, which are no data
 * for the engine. js/test/types.test.js checks these keys against the engine's.
 */
export interface OpenOptions extends DatasetSpec {
  /**
   * A windowed view: every variable again, `shift` samples on, labelled `label@+shift`
   * (`t2m@+6`; negative: `t2m@-6`). Anchors whose window leaves the array are not drawn. Default 0 (none).
   */
  shift?: number;
  /**
   * For `s3://` URLs, short-lived credentials instead of keys in `storageOptions`: called
   * when a request needs credentials, and again when a request needs them and the last
   * ones expire within a minute (`expiration`); never on a timer. Concurrent requests share
   * one call. The AWS SDK's credential providers (`fromCognitoIdentityPool(...)`) fit as
   * they are. `open()` only: a function cannot be sent to `openInWorker`'s worker.
   */
  credentials?: () => Promise<S3Credentials> | S3Credentials;
  /**
   * Batches as views into the engine's wasm memory instead of copies (default false): each
   * array's `data` is valid until the pass's next `next()` (the next step of `for await`) or
   * `close()`, and throws when read after; `batch.copy()` keeps one (`ViewBatch`). Saves a
   * copy of every batch. `openInWorker` takes it with the threaded build only (a
   * cross-origin-isolated page: the worker's memory is shared with the page, so the views
   * are over it) and refuses it elsewhere, saying why; the explorer ignores it.
   */
  batchViews?: boolean;
}

/** What an `OpenOptions.credentials` callback returns (the AWS SDK's `AwsCredentialIdentity`). */
export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  /** The session token of temporary credentials (STS, Cognito). */
  sessionToken?: string;
  /** When they expire: a `Date`, ms since 1970, or an ISO 8601 string; absent: never. */
  expiration?: Date | number | string;
}

/**
 * An error from the engine: its message names options in this package's spelling
 * (`patchMode`); `kind` says what went wrong as a word to branch on (`invalid_option`, the
 * store's `array_not_found`, `storage`, `decode`, ...; never match the message), `option`
 * the option an `invalid_option` error concerns (`readPolicy.backoffS`), and `name` follows
 * the kind (`InvalidOptionError`, `ArrayNotFoundError`, `InsitubatchIOError`, ...).
 */
export interface EngineError extends Error {
  kind: string;
  option?: string;
}

/** What `Storage.get` is asked for: half-open byte offsets, or the last `suffix` bytes. */
export type ByteRange = { start: number; end: number } | { suffix: number };

/**
 * A store `open()` reads through your own code (wasm/src/js_storage.rs): keys are relative
 * to the store's root (`t2m/zarr.json`, `t2m/c/0/0/0`).
 */
export interface Storage {
  /**
   * The object at `key`, or null/undefined when there is none. `range` undefined: the whole
   * object; `{ start, end }`: exactly those bytes (a range past the end must throw, not
   * read short); `{ suffix }`: the last `suffix` bytes (the whole object if shorter). Throw
   * an error with `transient: true` for a failure worth retrying under `readPolicy`.
   */
  get(key: string, range?: ByteRange): Promise<Uint8Array | ArrayBuffer | null | undefined> | Uint8Array | ArrayBuffer | null | undefined;
  /** Every key under `prefix` ("" or ending in "/"), recursively; null or absent: the store cannot list. */
  list?(prefix: string): Promise<string[] | null> | string[] | null;
  /** Where the store is, for error messages and `Dataset.url`. */
  location?: string;
}

/** float16/bfloat16 come as raw Uint16Array bits; bool as Uint8Array. */
export type TypedData =
  | Float32Array | Float64Array | Int8Array | Int16Array | Int32Array | BigInt64Array
  | Uint8Array | Uint16Array | Uint32Array | BigUint64Array;

export interface BatchArray {
  /**
   * Row-major `(rows, ...inner)` values: a copy out of wasm memory, or under `batchViews` a
   * view into it (read it before the pass's next step; see `ViewBatch`).
   */
  data: TypedData;
  shape: number[];
  dtype: DTypeName;
}

export interface Batch {
  /** Label → array; row i of every label belongs to anchor `sampleIndices[i]`. */
  arrays: Record<string, BatchArray>;
  /** The anchor sample index of each row. */
  sampleIndices: BigUint64Array;
  /** Label → window offset: label v of row i was read at sampleIndices[i] + offsets[v]. */
  offsets: Record<string, number>;
  /** Position of this batch in its epoch. */
  index: number;
  epoch: number;
  /**
   * With `patch`: row i is the patch of sample `sampleIndices[i]` starting at
   * `patchOrigins[i * patchDims.length + k]` on axis `patchDims[k]` (row-major, rows ×
   * axes; a `BigUint64Array`, as `sampleIndices`). Absent for whole samples.
   */
  patchOrigins?: BigUint64Array;
  /** With `patch`: the patched axes, in `patch`'s order, by dimension name (`axis{k}` for an unnamed axis). */
  patchDims?: string[];
  /**
   * With `coords` or `sel`: the sample axis's coordinate value of each row, by name; CF time
   * as nanoseconds since 1970 (`BigInt64Array`; `new Date(Number(ns / 1000000n))`), other
   * coordinates as numbers. With `patch`, also each patched axis's coordinate values that
   * each row's patch covers: rows × patch extent, row-major.
   */
  coords?: Record<string, BigInt64Array | Float64Array>;
  /** With `modelParallel`: this rank's slice `start .. start + len` of every row along `dim`, part `index` of `of`. */
  part?: { dim: string; index: number; of: number; start: number; len: number };
}

/**
 * A batch of `open(url, { batchViews: true })`: each `arrays[label].data` is a typed array
 * over the engine's wasm memory, re-made on each read if the memory grew (a non-shared
 * memory's old `ArrayBuffer` is detached when it grows). Valid until the pass's next
 * `next()` or `close()`: a read of `data` after that throws, and a typed array taken from it
 * earlier may show later batches' values (the engine reuses the buffer). `sampleIndices`,
 * `offsets`, `patchOrigins`, `patchDims`, `coords` and `part` are the batch's own.
 */
export interface ViewBatch extends Batch {
  /** A batch of the default kind, owned by you (nothing in it refers to wasm memory); throws once the views ended. */
  copy(): Batch;
}

/**
 * The wasm engine trapped (a panic, or out of memory): the pass rejects with this, the
 * instance is discarded with every dataset opened on it, and the next `open()` (or
 * `openInWorker()`, whose worker is terminated) starts a fresh one. `cause`: the original
 * `WebAssembly.RuntimeError` (main thread).
 */
export declare class EngineTrapError extends Error {
  readonly name: 'EngineTrapError';
}

/**
 * One pass over a split. `break` in `for await` ends it and frees its memory. `B`: `ViewBatch`
 * under `batchViews`, whose views end with the next `next()` or `close()`.
 */
export declare class Pass<B extends Batch = Batch> implements AsyncIterable<B> {
  /** Batches this pass yields in all. */
  readonly length: number;
  next(): Promise<B | undefined>;
  stats(): PassStats | undefined;
  /** Where this pass stands after the last batch it returned (also after it ended or was closed). */
  checkpoint(): Checkpoint;
  close(): void;
  [Symbol.asyncIterator](): AsyncIterator<B>;
}

/** An opened store; `B`: `ViewBatch` when opened with `batchViews: true`. */
export declare class Dataset<B extends Batch = Batch> {
  describe(iterations?: number): DatasetReport;
  describeText(iterations?: number): string;
  setEpoch(epoch: number): void;
  readonly epoch: number;
  readonly labels: string[];
  readonly url: string;
  iter(split: SplitName): Pass<B>;
  train(): Pass<B>;
  val(): Pass<B>;
  test(): Pass<B>;
  all(): Pass<B>;
  /**
   * The pass `checkpoint` was taken in, continued where it stopped (with its world size:
   * exactly the batches the uninterrupted pass would have yielded next; with another, this
   * rank's share of the samples no rank had consumed). Sets `epoch` to the checkpoint's.
   * Accepts the JSON text too (Python's `state_dict()`, the CLI's `--checkpoint` file).
   * Throws for a checkpoint of another seed, batch size or dataset.
   */
  resume(checkpoint: Checkpoint | string): Pass<B>;
  /** Where the latest pass over `split` (default "train") stands; before a pass of the current epoch, a fresh one's. */
  checkpoint(split?: SplitName): Checkpoint;
  lastPass(): PassStats | undefined;
  /**
   * Probe the store: a few real reads and decodes of the train split at the current epoch,
   * timed, and the epoch they predict; `chunks` (default 16, the engine's) are loaded at once
   * after the first. Nothing it loads is kept.
   */
  probe(chunks?: number): Promise<ProbeReport>;
  /** Chunks filled under `onBadChunk: "nan"` so far. */
  badChunks(): BadChunk[];
  close(): void;
}

/**
 * Open a Zarr store and build a dataset: `http://` or `https://` (fetch, with Range
 * requests); `s3://` (signed, with `storageOptions` or `credentials`); in Node also `file://` URLs and plain paths
 * (node:fs, ranged reads); a kerchunk reference set at any of them, `reference+URL` (its
 * files over http(s), s3, or in Node local paths; docs/references.md); an Icechunk repository,
 * `icechunk+URL#branch=NAME|tag=NAME|snapshot=ID` (in Node and the `insitubatch/web-s3` entry;
 * docs/references.md); or a `Storage` object of your own. A browser refuses local paths,
 * saying what to use instead. With `batchViews: true` its batches are `ViewBatch`es. A
 * `JoinedStores` reads several stores as one (docs/joins.md); `ConcatenatedStores` reads
 * them end to end along the sample axis.
 */
export declare function open(source: string | URL | Storage | JoinedStores | ConcatenatedStores, options: OpenOptions & { batchViews: true }): Promise<Dataset<ViewBatch>>;
export declare function open(source: string | URL | Storage | JoinedStores | ConcatenatedStores, options?: OpenOptions): Promise<Dataset>;
/**
 * Stores read end to end along the sample axis, in order (a decade kept one store per year):
 * every array with the dimension `concatDim` (default `"time"`) is the stores' arrays end to
 * end; the others come from the first store. They must agree on all but that length, and
 * each but the last must hold whole chunks along it (docs/joins.md).
 */
export type ConcatenatedStores = Array<string | URL | Storage>;
/**
 * Several stores that share the sample axis, by name: store `name`'s arrays are `name/path`
 * (labels, `variables`, `patch` axes), read under one plan and one budget. Their sample-axis
 * lengths, and where each has it the sample axis's coordinate, must agree.
 */
export type JoinedStores = { [name: string]: string | URL | Storage } | Map<string, string | URL | Storage>;
/** Node entry only: the `Storage` `open()` uses for a `file://` URL or a path (node:fs, ranged reads). */
export declare function nodeFileStorage(url: string | URL): Promise<Storage & { location: string; list(prefix: string): Promise<string[]> }>;
/**
 * Browser entry only: load the .wasm now (optional; `open` does it). Bytes are
 * `ArrayBuffer | ArrayBufferView` (the DOM's `BufferSource`, spelled so that Node projects,
 * which have `@types/node` but not the DOM library, type-check too).
 */
export declare function initialize(input?: string | URL | Response | ArrayBuffer | ArrayBufferView): Promise<unknown>;

/** Where `openInWorker` runs the engine. */
export interface WorkerOptions {
  /**
   * "auto" (default): the threaded build (`pkg/web-threads`, wasm-bindgen-rayon) when the page
   * is cross-origin isolated (COOP `same-origin` + COEP `require-corp`), else one thread;
   * true: require it (rejects otherwise); false: one thread. Node: always one thread.
   */
  threads?: 'auto' | boolean;
  /** Decode threads of the threaded build. Default `navigator.hardwareConcurrency`. */
  nThreads?: number;
  /**
   * The threaded build only: read chunks in a worker of their own (`src/fetch-worker.js`,
   * served beside `src/worker.js`), which writes each body straight into the engine's shared
   * memory, so the engine's thread neither drains nor copies it. Default true.
   */
  fetchWorker?: boolean;
  /**
   * The worker to run in, started by the app: a module Worker on the package's
   * `insitubatch/worker` export (`new Worker(new URL('insitubatch/worker', import.meta.url),
   * { type: 'module' })` in a bundled page; a `worker_threads` Worker in Node), or a function
   * returning one, called once per `openInWorker`. The dataset owns it: `close()` and a trap
   * terminate it. Without it (and `workerUrl`) `openInWorker` starts its own, which bundlers
   * (Vite, webpack 5) bundle with the wasm it loads.
   */
  worker?: LoaderWorker | (() => LoaderWorker);
  /** URL of `src/worker.js` (or `src/worker-web.js`) served as a plain file. */
  workerUrl?: string | URL;
}

/**
 * What `openInWorker` needs of a worker it is given: a browser `Worker` or a Node
 * `worker_threads` Worker (spelled without either's library, so that Node and DOM projects
 * both type-check).
 */
export interface LoaderWorker {
  postMessage(message: unknown): void;
  terminate(): unknown;
}

/** Counters of the worker's batch posts (diagnostics). */
export interface TransferReport {
  /** Batches posted to the page. */
  batches: number;
  /** Buffers in their transfer lists (each array's, `sampleIndices`' and, when present, `patchOrigins`' and each coordinate's). */
  buffers: number;
  /** Of those, how many had byteLength 0 in the worker after posting (moved, not copied). */
  detached: number;
  /** Bytes moved. */
  bytes: number;
  /** Batches posted as views over the shared memory instead (`batchViews`, threaded build): not counted above. */
  views: number;
}

/** Chunk reads the threaded build's fetch worker served (diagnostics). */
export interface FetchReport {
  /** Reads answered (with a body, or a status that is not 2xx). */
  reads: number;
  /** Their bytes. */
  bytes: number;
  /** Bodies of ranged reads written straight into the engine's memory. */
  inPlace: number;
  /** Bodies sent back to be copied in (whole objects, suffixes, and a range the server answered with the whole object). */
  bodies: number;
  /** Reads that failed in the worker (network errors, aborts); the engine retried or dropped them. */
  errors: number;
  /** Whether the worker still serves reads (false after it failed: reads went back to the engine's thread). */
  running: boolean;
}

/** A pass read in the worker. Batches arrive with their buffers transferred. */
export declare class WorkerPass implements AsyncIterable<Batch> {
  /** Batches this pass yields in all; `undefined` until the worker has planned it (see `size()`). */
  readonly length: number | undefined;
  size(): Promise<number>;
  next(): Promise<Batch | undefined>;
  stats(): Promise<PassStats | undefined>;
  /** Where this pass stands after the last batch received (kept on the page: also after it ended, or the worker died). */
  checkpoint(): Promise<Checkpoint>;
  close(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<Batch>;
}

/** A dataset whose engine runs in a dedicated worker; calls that need the worker's answer return promises. */
export declare class WorkerDataset {
  /** "web-threads", "web" (one thread) or "node". */
  readonly build: 'web-threads' | 'web' | 'node';
  /** Decode threads in the worker. */
  readonly threads: number;
  readonly epoch: number;
  readonly labels: string[];
  readonly url: string;
  describe(iterations?: number): Promise<DatasetReport>;
  describeText(iterations?: number): Promise<string>;
  /** Passes started after this call use `epoch` (requests reach the worker in order). */
  setEpoch(epoch: number): Promise<number>;
  iter(split: SplitName): WorkerPass;
  train(): WorkerPass;
  val(): WorkerPass;
  test(): WorkerPass;
  all(): WorkerPass;
  /** `Dataset.resume` in the worker; a checkpoint it cannot resume rejects the pass's first `next()`. */
  resume(checkpoint: Checkpoint | string): WorkerPass;
  checkpoint(split?: SplitName): Promise<Checkpoint>;
  lastPass(): Promise<PassStats | undefined>;
  /** `Dataset.probe`, measured in the worker. */
  probe(chunks?: number): Promise<ProbeReport>;
  /** Chunks filled under `onBadChunk: "nan"` so far. */
  badChunks(): Promise<BadChunk[]>;
  transferReport(): Promise<TransferReport>;
  /** `null` where reads run on the engine's thread (one-thread build, Node, `fetchWorker: false`). */
  fetchReport(): Promise<FetchReport | null>;
  /** Free the dataset and stop the worker. */
  close(): Promise<void>;
}

/**
 * Open the store at `url` in a new dedicated Web Worker (browsers) or worker_threads Worker
 * (Node), with every option of `open()`. Batches arrive transferred or, under `batchViews`
 * (the threaded build only), as views over the worker's shared memory, valid until the
 * pass's next step (`copy()` keeps one). URLs only (one, or a join of them by name): a
 * `Storage` object cannot be posted.
 */
export declare function openInWorker(
  url: string | URL | { [name: string]: string | URL } | Map<string, string | URL> | Array<string | URL>,
  options?: OpenOptions,
  how?: WorkerOptions,
): Promise<WorkerDataset>;

// ---- The dashboard's questions (src/explore.js; wasm/src/explore.rs) ----

export interface WhatIf {
  epoch?: number;
  /** A windowed view: each variable also as its target `label@+shift` (0: the options' own `shift`). */
  shift?: number;
  /** Concurrent passes the memory model assumes. Default 1. */
  iterations?: number;
  /** Decode threads the memory model assumes (the CLI's --threads). Default 1. */
  threads?: number;
}

/** A store's metadata, opened once; every method but `iter` and `probe` answers without reading the store. */
export declare class Explorer {
  readonly url: string;
  arrays(): ArrayInfo[];
  describe(options?: OpenOptions, whatIf?: WhatIf): DatasetReport;
  describeText(options?: OpenOptions, whatIf?: WhatIf): string;
  drawOrder(options?: OpenOptions, split?: SplitName, at?: { epoch?: number; shift?: number }): DrawOrderReport;
  qualityCurve(options?: OpenOptions, blockChunks?: number[], at?: { epoch?: number; threads?: number; shift?: number }): QualityPoint[];
  /**
   * One epoch of `split` read on this thread (previews); `shift` ≠ 0 adds targets `label@+shift`.
   * Through the explorer's `cacheDir` (given to `openExplorer`) unless `cache` is false.
   */
  iter(options?: OpenOptions, split?: SplitName, at?: { epoch?: number; shift?: number; cache?: boolean }): ExplorePass;
  /**
   * Probe the store for `options` (this one reads it): a few real reads and decodes of the
   * train split, timed on this thread, and the epoch they predict for `threads` decode
   * threads (default 1); `chunks` as `Dataset.probe`.
   */
  probe(options?: OpenOptions, at?: { epoch?: number; shift?: number; chunks?: number; threads?: number }): Promise<ProbeReport>;
  close(): void;
}

/** A pass of `Explorer.iter`. */
export declare class ExplorePass implements AsyncIterable<Batch> {
  readonly length: number;
  next(): Promise<Batch | undefined>;
  stats(): PassStats | undefined;
  close(): void;
  [Symbol.asyncIterator](): AsyncIterator<Batch>;
}

/** Open a store's metadata once, for many what-if questions (the dashboard): an http(s) URL, or a `Storage` object (the notebook widget reads through the kernel with one). */
export declare function openExplorer(
  source: string | URL | Storage,
  options?: { variables?: string[]; url?: string } & Pick<OpenOptions, 'cacheDir' | 'persist' | 'readonlyCache' | 'resetStaleCache'>,
): Promise<Explorer>;
