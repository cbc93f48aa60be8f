// Types of the `insitubatch` package: the API, hand-written over the wasm-bindgen output; the
// reports and stats the engine returns (`DatasetReport`, `PassStats`, `ProbeReport`,
// `Checkpoint`, `BadChunk`, the explorer's `ArrayInfo`, `DrawOrderReport`, `QualityPoint`,
// and their parts: `VariableReport`, `Depths`, `SplitName`, `DTypeName`, ...) are generated from the Rust report
// types into src/reports.d.ts (tools/boundary-types; `cargo run -p insitubatch-boundary-types`
// rewrites it, and CI fails when it is stale), re-exported here; so are the options' knobs,
// into src/options.d.ts from core's `Knobs`.
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
import type { Knobs } from './src/options.js';

export * from './src/reports.js';
export type { Knobs } from './src/options.js';

/**
 * The options of `open()` and `openInWorker()`: core's knobs (`batchSize`, `seed`,
 * `onBadChunk`, ...; generated into src/options.d.ts from core's `Knobs`, with their
 * defaults) and this package's own (wasm/src/options.rs `JsOpenOptions`; the engine refuses
 * unknown keys). js/test/types.test.js checks these keys against the engine's.
 */
export interface OpenOptions extends Knobs {
  /**
   * Array paths to read (labels = paths), or labelled variables in order (the first is the
   * split's reference), e.g. `{ x: 't2m', y: { path: 't2m', shift: 6 } }`: several labels
   * may read one array at different offsets (windows; decoded once). Absent: discover them
   * (needs consolidated metadata over HTTP, or a storage that lists).
   */
  variables?: string[] | Record<string, string | VariableSpec>;
  /** The sample axis of every variable. Default 0. */
  sampleAxis?: number;
  /**
   * A windowed view: every variable again, `shift` samples on, labelled `label@+shift`
   * (`t2m@+6`; negative: `t2m@-6`). Anchors whose window leaves the array are not drawn. Default 0 (none).
   */
  shift?: number;
  /** Train/val/test fractions of sample-axis chunks. Default [0.8, 0.1, 0.1]. */
  fractions?: [number, number, number];
  /** Shuffle chunks between splits (default false: contiguous runs, safe for time series). */
  shuffleSplits?: boolean;
  /** The seed of `shuffleSplits`. Default: `seed`. */
  splitSeed?: number | bigint;
  /** Split only the chunks overlapping samples `[start, stop)` (snapped outward to chunks). */
  sampleRange?: [number, number];
  /** Retries, backoff and request timeout of storage reads. */
  readPolicy?: ReadPolicyOptions;
  /**
   * For `s3://bucket/prefix` URLs (Node, and in browsers the entry `insitubatch/web-s3`):
   * object_store's S3 options as strings, the keys of Python's
   * `storage_options` and the CLI's `--storage-option`, e.g. `{ aws_endpoint, aws_region,
   * aws_access_key_id, aws_secret_access_key, aws_session_token, aws_allow_http: 'true' }`.
   * wasm cannot read the environment, so pass them here. Requests are signed (SigV4).
   */
  storageOptions?: Record<string, string>;
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
  /**
   * Cut each sample into patches (docs/patches.md): the patch size on each patched inner axis,
   * by dimension name (`dimension_names`, or `_ARRAY_DIMENSIONS` in Zarr v2) or axis index
   * (digits), e.g. `{ lat: 45, lon: 90 }`. Each batch row is then one patch of one sample
   * (`patchOrigins`), and each chunk is still read once per epoch. The order given is the
   * column order of `patchOrigins`; an object lists integer-like keys (`{ 2: 8 }`) first, so
   * to put an index after a name use a `Map` or `[[axis, size], ...]`. A variable without
   * the patched axes is read whole, its rows repeated per patch. Default: whole samples.
   */
  patch?: AxisSizes;
  /**
   * `"grid"` (default): every patch of a grid, each once per epoch (a remainder narrower
   * than a patch at the far edge is never drawn); `"random"`: `patchesPerSample` patches per
   * sample at uniform origins, drawn anew each epoch from `(seed, epoch, split)`.
   */
  patchMode?: 'grid' | 'random';
  /** A grid's step per patched axis (axes not named step by their size; smaller overlaps). Grid only. */
  patchStride?: AxisSizes;
  /** Random patches per sample and epoch. Default 1. Random only. */
  patchesPerSample?: number;
  /**
   * One boolean per sample of the sample axis (docs/sampling.md): a `false` sample is never
   * drawn, and a chunk whose samples are all masked is never read. Default: every sample.
   */
  sampleMask?: boolean[];
  /**
   * One weight per sample (an array or a `Float64Array`): its expected draws per epoch (a
   * weight of 2 is drawn twice as often as 1; a fractional part is one more draw with that
   * probability, per `(seed, epoch)`). Each chunk is still read once per epoch.
   */
  sampleWeights?: number[] | Float64Array;
  /**
   * A rank mesh (docs/distributed.md): groups of this many consecutive ranks draw the same
   * rows, each rank taking its part of every row along `modelParallelAxis` (`batch.part`).
   * Default 1: none.
   */
  modelParallel?: number;
  /** The axis `modelParallel` splits rows along: a dimension name or an axis index. */
  modelParallelAxis?: string | number;
  /**
   * Select by label, inclusive, one range per dimension: on the sample axis's coordinate the
   * samples (implies `coords`), `{ time: ['2010-01-01', '2019-12-31'] }` (dates
   * `YYYY-MM-DD[THH:MM[:SS]]`, UTC) or numbers; on an inner dimension's coordinate the region
   * every row is cut to, `{ lat: [30, 60] }` (a decreasing coordinate too; patches on that axis
   * lie inside it, and only the tiles it touches are read). `{ labels: [...] }` picks exactly
   * those labels in that order: `{ level: { labels: [500, 850] } }` (on the sample axis, those
   * samples).
   */
  sel?: Record<string, [string | number, string | number] | { labels: (string | number)[] }>;
  /** With a list of stores (`open([a, b])`): the dimension they are concatenated along. Default `"time"`. */
  concatDim?: string;
  /**
   * A directory in the browser's origin private file system where decoded chunks are kept
   * across passes and page loads (Python's `cache_dir`; docs/disk-tier.md "In the browser"):
   * `"insitubatch/era5"`. Needs `persist` or `readonlyCache`. Pages and workers
   * of a browser; Node has none. One writer, or readers only, per directory.
   */
  cacheDir?: string;
  /** Keep cached chunks for later passes and page loads (with `cacheDir`). */
  persist?: boolean;
  /** Read a complete cache a writer warmed; write nothing; a chunk it lacks is an error. */
  readonlyCache?: boolean;
  /** Delete the cached chunks of arrays whose pipeline changed instead of refusing. */
  resetStaleCache?: boolean;
}

/**
 * `OpenOptions.patch` and `patchStride`: a count per axis (a dimension name, or an axis
 * index as digits or a number), in the order given.
 */
export type AxisSizes = Record<string, number> | Map<string | number, number> | [string | number, number][];

/** One labelled variable of `OpenOptions.variables`. */
export interface VariableSpec {
  /** The array path. */
  path: string;
  /** Read `shift` samples on from the anchor (a window offset). Default 0. */
  shift?: number;
  /** This variable's sample axis. Default: `OpenOptions.sampleAxis`. */
  sampleAxis?: number;
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

/** `OpenOptions.readPolicy` (core's ReadPolicy; its defaults where absent). */
export interface ReadPolicyOptions {
  /** Attempts after the first for a transient failure. Default 4. */
  retries?: number;
  /** First backoff, milliseconds; doubles per attempt. Default 100. */
  backoffMs?: number;
  /** A request with no answer after this many milliseconds is a transient failure. Default 120000. */
  requestTimeoutMs?: number;
  /** Ranges of one shard at most this many bytes apart are read by one request. Default 1048576. */
  coalesceGapBytes?: number;
  /** A coalesced request spans at most this many bytes (0: every inner chunk alone). Default 67108864. */
  coalesceMaxBytes?: number;
  /**
   * `false`: never send a second request for a slow read; `true` (default, remote stores
   * only): a request unanswered after 2x the running 95th-percentile latency gets a second
   * one, at most 5% of requests; or the policy's own fields.
   */
  hedge?: boolean | HedgePolicyOptions;
  /** Stored bytes read ahead for a shard's inner chunks a pass needs soon may hold at most this much. Default: a quarter of the residency floor; 0: off. */
  readAheadBytes?: number;
}

/** `ReadPolicyOptions.hedge` as an object (core's HedgePolicy; its defaults where absent). */
export interface HedgePolicyOptions {
  /** The running latency quantile a request is compared with. Default 0.95. */
  quantile?: number;
  /** A request unanswered after this multiple of that quantile is hedged. Default 2. */
  multiple?: number;
  /** Hedges are at most this share of the requests made (one is always allowed). Default 0.05. */
  maxShare?: number;
  /** Answers seen before any request is hedged. Default 8. */
  minSamples?: number;
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
 * files over http(s), s3, or in Node local paths; docs/references.md); or a `Storage` object of your own. A browser refuses local paths,
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
