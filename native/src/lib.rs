//! # insitubatch-native
//!
//! insitubatch on tokio (I/O), object_store (storage) and rayon (decode): open a Zarr store
//! by URL and iterate shuffled, split-aware training batches from plain Rust.
//!
//! ```
//! # fn main() -> Result<(), insitubatch_native::NativeError> {
//! # let dir = std::env::temp_dir().join(format!("insitubatch-doc-{}", std::process::id()));
//! // A short demo store (the CLI's default); any URL works: s3://, gs://, az://, http(s)://.
//! let store = insitubatch_native::demo::write_demo_store_sized(&dir, 48)?;
//! let ds = insitubatch_native::open(store.to_str().unwrap(), insitubatch_native::OpenOptions::default())?;
//! for batch in ds.train()? {
//!     let batch = batch?;
//!     // A zero-copy ndarray view of the batch's (rows, lat, lon) values.
//!     let t2m = batch.view::<f32>("t2m")?;
//!     assert_eq!(t2m.shape(), [batch.len(), 91, 180]);
//! }
//! println!("{}", ds.last_pass().unwrap().summary());
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

pub mod cache;
pub mod demo;
pub mod metrics;
pub mod runtime;
pub mod scaler_file;
pub mod storage;

use std::sync::Arc;

pub use cache::CacheOptions;
pub use insitubatch_core as core;
use insitubatch_core::transform::{BatchTransform, Scoped};
pub use insitubatch_core::{
    Batch, BatchStream, Checkpoint, Cut, DType, Dataset, DatasetBuilder, DatasetOptions, DatasetSpec, NdArray,
    OnBadChunk, PassObserver, PassStats, ReadPolicy, ReadPolicySpec, ResolvedSpec, Split, SplitManifest, SplitOptions,
    Storage, TierOpener, Variable, VariablesSpec,
};
pub use insitubatch_core::{DatasetReport, QualityPoint, human_bytes};
pub use runtime::{NativeRuntime, RayonPool, TokioExecutor};
pub use storage::{ObjectStoreStorage, icechunk, open_storage, refs};

/// Everything that can go wrong here; messages end with the URL or path.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The engine's error (its message already ends with the key or URL).
    #[error(transparent)]
    Core(#[from] insitubatch_core::Error),
    /// The URL cannot be parsed.
    #[error("invalid store URL ({message}): {url}")]
    Url {
        /// What is wrong.
        message: String,
        /// The URL as given.
        url: String,
    },
    /// The store cannot be opened (missing, unsupported scheme, bad option).
    #[error("{message}: {url}")]
    Open {
        /// What is wrong and what to do.
        message: String,
        /// The URL as given.
        url: String,
    },
    /// Threads could not be started.
    #[error("{0}")]
    Runtime(String),
    /// The demo store could not be written.
    #[error("{message}: {path}")]
    Demo {
        /// What failed.
        message: String,
        /// The store directory.
        path: String,
    },
}

/// `Result` with [`NativeError`].
pub type Result<T, E = NativeError> = std::result::Result<T, E>;

/// How to open a store: core's [`DatasetSpec`] (every plain-data option, as the Python and
/// JS packages and the CLI pass it) beside what only a program can pass.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Every plain-data option: knobs, split, variables by path, read policy, patches,
    /// selections, masks and weights, the mesh, storage options, cache flags, threads, the
    /// metrics endpoint. Resolved (its defaults and rules) by [`DatasetSpec::resolve`].
    pub spec: DatasetSpec,
    /// Labelled geometries instead of `spec.variables`: windows (`geometry.shift(k)`) and
    /// several labels over one array, as objects. Each geometry carries its own sample axis.
    pub labelled: Option<Vec<Variable>>,
    /// A split manifest to use instead of the spec's fractions (e.g. one saved by an earlier run).
    pub manifest: Option<SplitManifest>,
    /// Chunk transforms (cached with the chunk, in the disk tier too).
    pub chunk_transforms: Vec<Scoped>,
    /// Batch transforms, run on the pool after the gather.
    pub batch_transforms: Vec<Arc<dyn BatchTransform>>,
    /// Told of every pass's report when it ends (callbacks; the metrics endpoint adds its own).
    pub observers: Vec<Arc<dyn PassObserver>>,
    /// A disk tier of the caller's own instead of the one `spec.cache_dir` describes.
    pub tier: Option<Arc<dyn TierOpener>>,
}

impl OpenOptions {
    /// Options with this spec and nothing program-side.
    pub fn from_spec(spec: DatasetSpec) -> Self {
        Self { spec, ..Self::default() }
    }

    /// The core builder these options describe, over `storage` and `runtime`, with the
    /// spec resolved (`resolved`, from [`DatasetSpec::resolve`]): the native parts convert
    /// (the cache directory, whose readability natively is checked here); core decides.
    ///
    /// # Errors
    /// [`NativeError::Core`] for cache options the native tier refuses.
    pub fn builder(
        self,
        resolved: ResolvedSpec,
        storage: Arc<dyn Storage>,
        runtime: insitubatch_core::Runtime,
    ) -> Result<DatasetBuilder> {
        let tier = match (self.tier, &resolved.cache) {
            (Some(tier), _) => Some(tier),
            (None, Some(flags)) => Some(Arc::new(CacheOptions::from_flags(flags)?) as Arc<dyn TierOpener>),
            (None, None) => None,
        };
        let mut builder = Dataset::builder(storage, runtime)
            .resolved(resolved)
            .chunk_transforms(self.chunk_transforms)
            .batch_transforms(self.batch_transforms);
        for observer in self.observers {
            builder = builder.observer(observer);
        }
        if let Some(tier) = tier {
            builder = builder.tier(tier);
        }
        if let Some(vars) = self.labelled {
            builder = builder.variables(vars);
        }
        if let Some(manifest) = self.manifest {
            builder = builder.manifest(manifest);
        }
        Ok(builder)
    }
}

/// A dataset with its own tokio runtime and decode pool. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NativeDataset {
    dataset: Dataset,
    /// The builder the dataset came from, its metadata read: what-ifs build from it with no
    /// I/O ([`Self::quality_curve`]).
    builder: Arc<DatasetBuilder>,
    runtime: NativeRuntime,
    storage: Arc<dyn Storage>,
    url: String,
    /// Where the Prometheus endpoint listens, when asked for.
    metrics: Option<std::net::SocketAddr>,
}

/// Open `url` and build a dataset over its arrays.
///
/// # Errors
/// [`NativeError::Url`]/[`NativeError::Open`] for bad URLs, options or a missing local
/// store; [`NativeError::Core`] for metadata, geometry or configuration problems.
pub fn open(url: &str, options: OpenOptions) -> Result<NativeDataset> {
    let resolved = options.spec.resolve()?;
    let storage = open_url_storage(url, &resolved.storage_options)?;
    build_dataset(storage, url, options, resolved)
}

/// Build a dataset over a storage the caller already built (a store object handed over by
/// the Python package, say); `location` names it in messages. Storage options configure a
/// store opened by URL, so here they are refused rather than silently ignored.
///
/// # Errors
/// A configuration error when `options.storage_options` is not empty; otherwise as [`open`].
pub fn open_storage_with(storage: Arc<dyn Storage>, location: &str, options: OpenOptions) -> Result<NativeDataset> {
    let resolved = options.spec.resolve()?;
    refuse_storage_options(&resolved.storage_options, location)?;
    build_dataset(storage, location, options, resolved)
}

/// The storage [`open`] reads for `url`: [`open_storage`], then a missing local store is
/// refused (for callers that read metadata without building a dataset).
///
/// # Errors
/// As [`open_storage`], and [`NativeError::Open`] for a `file://` store that does not exist.
pub fn open_url_storage(url: &str, options: &[(String, String)]) -> Result<Arc<dyn Storage>> {
    let storage = open_storage(url, options)?;
    refuse_missing_local_store(url)?;
    Ok(storage)
}

/// One store of a join ([`open_joined_storage`]).
pub enum JoinPart {
    /// Opened as [`open_url_storage`] opens it, with the join's storage options.
    Url(String),
    /// A storage the caller already built (a store object handed over by the Python package).
    Built(Arc<dyn Storage>),
}

/// Several stores read as one (core's [`insitubatch_core::JoinedStorage`]): store `name`'s
/// arrays are `name/path`. The storage options apply to every store given by URL; a built
/// store carries its own configuration.
///
/// # Errors
/// As [`open_url_storage`] for each URL; a configuration error for a bad or repeated name,
/// or for no stores.
pub fn open_joined_storage(parts: Vec<(String, JoinPart)>, options: &[(String, String)]) -> Result<Arc<dyn Storage>> {
    let mut mounts = Vec::with_capacity(parts.len());
    for (name, part) in parts {
        let storage = match part {
            JoinPart::Url(url) => open_url_storage(&url, options)?,
            JoinPart::Built(storage) => storage,
        };
        mounts.push((name, storage));
    }
    Ok(Arc::new(insitubatch_core::JoinedStorage::new(mounts)?))
}

/// Open stores joined by name ([`open_joined_storage`], the storage options going to each
/// URL) and build a dataset over them, named by the join's location.
///
/// # Errors
/// As [`open_joined_storage`], then as [`open`].
pub fn open_joined(parts: Vec<(String, JoinPart)>, options: OpenOptions) -> Result<NativeDataset> {
    let resolved = options.spec.resolve()?;
    let storage = open_joined_storage(parts, &resolved.storage_options)?;
    let location = storage.location();
    build_dataset(storage, &location, options, resolved)
}

/// Several stores read as one along the sample axis (core's
/// [`insitubatch_core::ConcatStorage`]): every array with a dimension named `dim` (for
/// arrays without names, physical axis `axis`) is the stores' arrays end to end; the others
/// come from the first store. The storage options apply to every store given by URL; the
/// metadata reads of the concatenation follow `policy` (core's
/// [`insitubatch_core::ConcatStorage::open_under_policy`]).
///
/// # Errors
/// As [`open_url_storage`] for each URL; a configuration error for fewer than two stores,
/// or stores whose arrays cannot be concatenated (core's message names array and store).
pub fn open_concat_storage(
    parts: Vec<JoinPart>,
    (dim, axis): (&str, usize),
    options: &[(String, String)],
    policy: &ReadPolicy,
) -> Result<Arc<dyn Storage>> {
    let parts = parts
        .into_iter()
        .map(|part| match part {
            JoinPart::Url(url) => open_url_storage(&url, options),
            JoinPart::Built(storage) => Ok(storage),
        })
        .collect::<Result<Vec<_>>>()?;
    // The metadata of every part is read once here, before any dataset exists.
    let runtime = NativeRuntime::new(Some(1))?;
    let executor = Arc::clone(&runtime.runtime.executor);
    let opening = insitubatch_core::ConcatStorage::open_under_policy(parts, dim, axis, executor, policy.clone());
    Ok(Arc::new(runtime.block_on(opening)?))
}

/// Open stores concatenated along the sample axis ([`open_concat_storage`], along the spec's
/// `concat_dim` and `sample_axis`) and build a dataset over them, named by the concatenation.
///
/// # Errors
/// As [`open_concat_storage`], then as [`open`].
pub fn open_concat(parts: Vec<JoinPart>, options: OpenOptions) -> Result<NativeDataset> {
    let resolved = options.spec.resolve()?;
    let concat = (resolved.concat_dim.as_str(), resolved.sample_axis);
    let policy = &resolved.dataset.read_policy;
    let storage = open_concat_storage(parts, concat, &resolved.storage_options, policy)?;
    let location = storage.location();
    build_dataset(storage, &location, options, resolved)
}

/// Storage options are for stores opened by URL; a store built elsewhere carries its own
/// configuration.
///
/// # Errors
/// A configuration error ([`insitubatch_core::Error::Config`]) naming the options, when
/// there are any.
pub fn refuse_storage_options(options: &[(String, String)], location: &str) -> Result<()> {
    if options.is_empty() {
        return Ok(());
    }
    let keys: Vec<&str> = options.iter().map(|(k, _)| k.as_str()).collect();
    Err(NativeError::Core(insitubatch_core::Error::option(
        "storage_options",
        format!(
            "`storage_options` {keys:?} apply only to a store opened by URL; configure the store object itself \
             instead: {location}"
        ),
    )))
}

/// The body [`open`] and [`open_storage_with`] share: `resolved` is `options.spec` resolved.
fn build_dataset(
    storage: Arc<dyn Storage>,
    location: &str,
    mut options: OpenOptions,
    resolved: ResolvedSpec,
) -> Result<NativeDataset> {
    let runtime = NativeRuntime::new(resolved.threads)?;
    let metrics = match &resolved.metrics_address {
        None => None,
        Some(address) => {
            let exporter = Arc::new(metrics::PrometheusExporter::default());
            let bound = exporter.serve(address, resolved.metrics_cors_origin.as_deref(), &runtime.handle())?;
            options.observers.push(exporter);
            Some(bound)
        }
    };
    let builder = options.builder(resolved, Arc::clone(&storage), runtime.runtime.clone())?;
    let builder = runtime.block_on(async { builder.read_metadata().await?.read_coordinate().await })?;
    let dataset = builder.clone().build()?;
    let builder = Arc::new(builder);
    Ok(NativeDataset { dataset, builder, runtime, storage, url: location.to_string(), metrics })
}

/// A `file://` URL whose directory does not exist: said before any metadata read, so the
/// message names the path rather than a missing `zarr.json`.
fn refuse_missing_local_store(url: &str) -> Result<()> {
    if refs::reference_url(url).is_some() || storage::icechunk::icechunk_url(url).is_some() {
        return Ok(()); // opening it read it
    }
    let parsed = storage::parse_location(url)?;
    if parsed.scheme() == "file"
        && let Ok(p) = parsed.to_file_path()
        && !p.exists()
    {
        return Err(NativeError::Open { message: "no Zarr store exists at this path".into(), url: url.to_string() });
    }
    Ok(())
}

impl NativeDataset {
    /// One epoch of the train view (shuffled unless `shuffle = false`).
    ///
    /// # Errors
    /// When an explicit budget cannot hold this pass next to the live ones.
    pub fn train(&self) -> Result<BatchIter> {
        self.iter(Split::Train)
    }
    /// One epoch of the validation view, in order.
    ///
    /// # Errors
    /// As [`Self::train`].
    pub fn val(&self) -> Result<BatchIter> {
        self.iter(Split::Val)
    }
    /// One epoch of the test view, in order.
    ///
    /// # Errors
    /// As [`Self::train`].
    pub fn test(&self) -> Result<BatchIter> {
        self.iter(Split::Test)
    }
    /// One epoch over every split, in order.
    ///
    /// # Errors
    /// As [`Self::train`].
    pub fn all(&self) -> Result<BatchIter> {
        self.iter(Split::All)
    }

    /// One epoch of `split` at the current epoch.
    ///
    /// # Errors
    /// As [`Self::train`].
    pub fn iter(&self, split: Split) -> Result<BatchIter> {
        let _guard = self.runtime.handle().enter();
        let stream = self.dataset.iter(split)?;
        Ok(BatchIter { stream: Some(stream), ended: None, _runtime: self.runtime.clone() })
    }

    /// The pass a checkpoint was taken in, from where it stopped (any world size; see
    /// [`Dataset::resume`]).
    ///
    /// # Errors
    /// [`NativeError::Core`] for a checkpoint that does not fit this dataset.
    pub fn resume(&self, checkpoint: &Checkpoint) -> Result<BatchIter> {
        let _guard = self.runtime.handle().enter();
        let stream = self.dataset.resume(checkpoint)?;
        Ok(BatchIter { stream: Some(stream), ended: None, _runtime: self.runtime.clone() })
    }

    /// One epoch of `split` as a `futures::Stream`, for async callers (a tokio application
    /// awaits batches instead of blocking a thread). Dropping the stream ends the pass.
    ///
    /// # Errors
    /// As [`Self::train`]; each item carries the pass's own errors.
    pub fn stream(&self, split: Split) -> Result<impl futures::Stream<Item = Result<Batch>> + Unpin + use<>> {
        use futures::StreamExt;
        let _guard = self.runtime.handle().enter();
        let stream = self.dataset.iter(split)?;
        // The stream owns a handle on the runtime its pass runs on.
        let runtime = self.runtime.clone();
        Ok(stream.into_stream().map(move |item| {
            let _ = &runtime;
            item.map_err(NativeError::from)
        }))
    }

    /// Reshuffle deterministically for `epoch`.
    pub fn set_epoch(&self, epoch: u64) {
        self.dataset.set_epoch(epoch);
    }

    /// The static report for `iterations` concurrent iterations.
    ///
    /// # Errors
    /// [`NativeError::Core`] when the configuration cannot be evaluated.
    pub fn describe(&self, iterations: usize) -> Result<DatasetReport> {
        Ok(self.dataset.describe(iterations)?)
    }

    /// Shuffle quality and memory for each `block_chunks` in `values` at the current epoch,
    /// the rest of this dataset's options kept (core's `DatasetBuilder::quality_curve`; no I/O). The disk tier
    /// is left out of these builds: one dataset at a time holds a cache directory.
    ///
    /// # Errors
    /// [`NativeError::Core`] for a point the engine refuses.
    pub fn quality_curve(&self, values: &[usize]) -> Result<Vec<QualityPoint>> {
        Ok(self.builder.quality_curve(values, self.dataset.epoch())?)
    }

    /// Time a few real reads and decodes of the store, and predict an epoch of `split`
    /// ([`Dataset::probe`]): `chunks` chunks at once after the first.
    ///
    /// # Errors
    /// [`NativeError::Core`] for the probe's storage and decode errors, or a split that draws
    /// nothing.
    pub fn probe(&self, split: Split, chunks: usize) -> Result<insitubatch_core::ProbeReport> {
        Ok(self.runtime.block_on(self.dataset.probe(split, chunks))?)
    }

    /// Stats of the last pass that ended.
    pub fn last_pass(&self) -> Option<PassStats> {
        self.dataset.last_pass()
    }

    /// The core dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// The runtime (tokio + rayon) this dataset runs on.
    pub fn runtime(&self) -> &NativeRuntime {
        &self.runtime
    }

    /// The storage it reads.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The URL as given (or the location a storage handed to [`open_storage_with`] was given).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the Prometheus endpoint listens (`OpenOptions::metrics_address`), if asked for.
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics
    }
}

/// A running digest of a pass: the sample order and every byte of every batch, in order.
/// Equal digests mean bit-identical epochs (used by the CLI's `--digest`, the cross-target
/// parity tests and the disk-tier tests).
#[derive(Debug, Clone, Default)]
pub struct BatchDigest(sha2::Sha256);

impl BatchDigest {
    /// Fold one batch in.
    pub fn update(&mut self, batch: &Batch) {
        use sha2::Digest;
        for t in &batch.sample_indices {
            self.0.update(t.to_le_bytes());
        }
        for (label, a) in &batch.arrays {
            self.0.update(label.as_bytes());
            self.0.update(&a.data[..]);
        }
    }

    /// The hex digest.
    pub fn finish(self) -> String {
        use sha2::Digest;
        format!("{:x}", self.0.finalize())
    }
}

/// A blocking iterator over one pass; the driver runs on tokio in the background.
/// Dropping it ends the pass.
#[derive(Debug)]
pub struct BatchIter {
    stream: Option<BatchStream>,
    /// The checkpoint at the end of the pass, once the stream is gone.
    ended: Option<Checkpoint>,
    _runtime: NativeRuntime,
}

impl BatchIter {
    /// Batches this pass yields in all.
    pub fn n_batches(&self) -> usize {
        self.stream.as_ref().map_or(0, BatchStream::len)
    }

    /// Stats of this pass so far.
    pub fn stats(&self) -> Option<PassStats> {
        self.stream.as_ref().map(BatchStream::stats)
    }

    /// Where this pass stands between batches ([`BatchStream::checkpoint`]); after the last
    /// batch, the checkpoint of the finished pass.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.stream.as_ref().map(BatchStream::checkpoint).or_else(|| self.ended.clone())
    }

    fn end(&mut self) {
        if let Some(s) = self.stream.take() {
            self.ended = Some(s.checkpoint());
        }
    }
}

impl Iterator for BatchIter {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        let stream = self.stream.as_mut()?;
        match futures::executor::block_on(stream.next_batch()) {
            Some(Ok(b)) => Some(Ok(b)),
            Some(Err(e)) => {
                self.end();
                Some(Err(e.into()))
            }
            None => {
                self.end();
                None
            }
        }
    }
}
