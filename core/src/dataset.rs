//! The public engine API: a dataset over one store, with train/val/test/all views that
//! share one chunk pool.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_lock::Semaphore;

use crate::describe::{ConfigReport, DatasetReport, MemoryReport, Note, VariableReport, human_bytes};
use crate::engine::{ArrayReader, BadChunk, Engine, OnBadChunk, ReadPolicy};
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::pass::{BatchStream, GatherVar, PassSpec, StatsSink, drive};
use crate::plan::{FloorArray, PassPlan, PlanVar, block_bytes, residency_floor, widen_block_chunks};
use crate::pool::{Pool, PoolCounters};
use crate::runtime::{Runtime, Storage};
use crate::shuffle::{OrderSpec, Split, chunk_anchors, draw_order, shuffle_quality};
use crate::split::{SplitManifest, valid_anchor_range};
use crate::stats::{PassRecorder, PassStats};
use crate::tier::{ArrayIdentity, ChunkTier, TierOpener, array_fingerprint};
use crate::transform::{BatchTransform, Scoped};
use crate::zarr::ZarrArray;

/// Knobs of a dataset.
#[derive(Debug, Clone)]
pub struct DatasetOptions {
    /// Rows per batch.
    pub batch_size: usize,
    /// Chunks per shuffle block (raised so a block always holds a batch).
    pub block_chunks: usize,
    /// Storage reads in flight, across every view.
    pub max_inflight: usize,
    /// Shuffle seed.
    pub seed: u64,
    /// Shuffle the train view.
    pub shuffle: bool,
    /// Batches queued ahead of the caller.
    pub prefetch_depth: usize,
    /// Byte budget of the pool; `None` sizes it automatically.
    pub cache_budget_bytes: Option<u64>,
    /// Retries, timeouts, and what to do with a bad chunk.
    pub read_policy: ReadPolicy,
    /// A disk tier for decoded chunks (`cache_dir`; native only), opened at construction.
    pub tier: Option<Arc<dyn TierOpener>>,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        Self {
            batch_size: 32,
            block_chunks: 16,
            max_inflight: 32,
            seed: 0,
            shuffle: true,
            prefetch_depth: 2,
            cache_budget_bytes: None,
            read_policy: ReadPolicy::default(),
            tier: None,
        }
    }
}

/// A labelled variable: a label and the geometry (path, sample axis, offset) it reads.
#[derive(Debug, Clone)]
pub struct Variable {
    /// The key in every batch.
    pub label: String,
    /// What it reads.
    pub geometry: ArrayGeometry,
}

struct Inner {
    engine: Arc<Engine>,
    vars: Vec<Variable>,
    gather_vars: Arc<[GatherVar]>,
    plan_vars: Vec<PlanVar>,
    floor_arrays: Vec<FloorArray>,
    manifest: SplitManifest,
    options: DatasetOptions,
    block_chunks: usize,
    anchor_range: (u64, u64),
    epoch: AtomicU64,
    last_pass: StatsSink,
    batch_transforms: Arc<[Arc<dyn BatchTransform>]>,
    chunk_transform_labels: Vec<String>,
    read_once_bytes: u64,
    live_streams: AtomicUsize,
}

/// A dataset: geometry, splits, knobs and one shared pool. Cheap to clone.
#[derive(Clone)]
pub struct Dataset {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("variables", &self.inner.vars.iter().map(|v| &v.label).collect::<Vec<_>>())
            .finish()
    }
}

impl Dataset {
    /// Build a dataset from opened arrays and labelled geometries.
    ///
    /// `arrays` are the zarr arrays the variables read (by path); several labels may read
    /// one path with different offsets (windows), and are decoded once.
    ///
    /// # Errors
    /// [`Error::Config`] for unequal sample-axis lengths, a manifest that does not match,
    /// transforms scoped to unknown arrays, zero knobs, or a budget below the floor;
    /// [`Error::Geometry`] for geometries that disagree with the arrays' metadata.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        storage: Arc<dyn Storage>,
        runtime: Runtime,
        arrays: Vec<ZarrArray>,
        variables: Vec<Variable>,
        manifest: SplitManifest,
        options: DatasetOptions,
        chunk_transforms: Vec<Scoped>,
        batch_transforms: Vec<Arc<dyn BatchTransform>>,
    ) -> Result<Self> {
        if variables.is_empty() {
            return Err(Error::Config("a dataset needs at least one variable".into()));
        }
        if options.batch_size == 0 || options.max_inflight == 0 {
            return Err(Error::Config(format!(
                "batch_size and max_inflight must be at least 1, got batch_size={} max_inflight={}",
                options.batch_size, options.max_inflight
            )));
        }
        let mut options = options;
        options.prefetch_depth = options.prefetch_depth.max(1);
        options.block_chunks = options.block_chunks.max(1);
        let lengths: BTreeSet<u64> = variables.iter().map(|v| v.geometry.n_samples()).collect();
        if lengths.len() > 1 {
            return Err(Error::Config(format!(
                "All variables must share the same sample-axis length; got n_samples={:?} for {:?}",
                variables.iter().map(|v| v.geometry.n_samples()).collect::<Vec<_>>(),
                variables.iter().map(|v| v.label.as_str()).collect::<Vec<_>>()
            )));
        }
        let n_samples = *lengths.iter().next().expect("non-empty");
        if manifest.n_samples != n_samples || manifest.sample_chunk_size == 0 {
            return Err(Error::Config(format!(
                "the split manifest is for {} samples but the variables have {n_samples}",
                manifest.n_samples
            )));
        }
        // One reader per array path.
        let by_path: BTreeMap<String, ZarrArray> = arrays.into_iter().map(|a| (a.path().to_string(), a)).collect();
        let known: Vec<String> = by_path.keys().cloned().collect();
        for t in &chunk_transforms {
            if let Some(scope) = &t.arrays {
                let unknown: Vec<&String> = scope.iter().filter(|a| !by_path.contains_key(*a)).collect();
                if !unknown.is_empty() {
                    return Err(Error::Config(format!(
                        "applies({scope:?}, {}) names {unknown:?}, which are not arrays in this dataset. Known arrays: {known:?}",
                        t.transform.name()
                    )));
                }
            }
        }
        let mut paths: Vec<String> = Vec::new();
        let mut readers: Vec<ArrayReader> = Vec::new();
        let mut plan_vars = Vec::new();
        let mut gather_vars = Vec::new();
        for v in &variables {
            v.geometry.validate()?;
            let path_id = match paths.iter().position(|p| *p == v.geometry.path) {
                Some(i) => i,
                None => {
                    let zarr = by_path.get(&v.geometry.path).ok_or_else(|| Error::NotFound {
                        message: format!(
                            "variable {:?} reads array {:?}, which was not opened",
                            v.label, v.geometry.path
                        ),
                        key: storage.location(),
                    })?;
                    if zarr.shape() != v.geometry.shape.as_slice() || zarr.tile_shape() != v.geometry.tile.as_slice() {
                        return Err(Error::Geometry(format!(
                            "variable {:?} declares shape {:?} chunks {:?} but the array has shape {:?} chunks {:?}",
                            v.label,
                            v.geometry.shape,
                            v.geometry.tile,
                            zarr.shape(),
                            zarr.tile_shape()
                        )));
                    }
                    let transforms = chunk_transforms
                        .iter()
                        .filter(|t| t.covers(&v.geometry.path))
                        .map(|t| Arc::clone(&t.transform))
                        .collect();
                    let base = ArrayGeometry { offset: 0, ..v.geometry.clone() };
                    readers.push(ArrayReader::new(Arc::new(zarr.clone()), base, transforms)?);
                    paths.push(v.geometry.path.clone());
                    paths.len() - 1
                }
            };
            let reader = &readers[path_id];
            if reader.geom.sample_axis != v.geometry.sample_axis {
                return Err(Error::Config(format!(
                    "labels reading array {:?} disagree on the sample axis; use one axis per array",
                    v.geometry.path
                )));
            }
            let plan_var =
                PlanVar { path: path_id as u32, offset: v.geometry.offset, spc: v.geometry.sample_chunk_size() };
            plan_vars.push(plan_var);
            gather_vars.push(GatherVar {
                label: v.label.clone(),
                path: path_id as u32,
                offset: v.geometry.offset,
                spc: v.geometry.sample_chunk_size(),
                dtype: reader.out_dtype,
                inner: reader.out_inner.clone(),
                sample_bytes: reader.out_sample_bytes() as usize,
            });
        }
        let mut labels = BTreeSet::new();
        if let Some(dup) = variables.iter().find(|v| !labels.insert(v.label.clone())) {
            return Err(Error::Config(format!("label {:?} is used twice", dup.label)));
        }
        let offsets: Vec<i64> = variables.iter().map(|v| v.geometry.offset).collect();
        let anchor_range = valid_anchor_range(&offsets, n_samples);
        let ref_spc = manifest.sample_chunk_size;
        let all_chunks = manifest.chunks_of(Split::All);
        let block_chunks =
            widen_block_chunks(options.block_chunks, options.batch_size, &all_chunks, ref_spc, n_samples, anchor_range);
        if block_chunks > options.block_chunks {
            tracing::info!(
                requested = options.block_chunks,
                block_chunks,
                "block_chunks widened so a block holds a batch"
            );
        }
        let floor_arrays: Vec<FloorArray> = readers
            .iter()
            .enumerate()
            .map(|(i, r)| FloorArray {
                n_chunks: r.geom.n_chunks(),
                max_slot_bytes: r.max_charge(),
                vars: plan_vars.iter().filter(|v| v.path == i as u32).cloned().collect(),
            })
            .collect();
        let shares = plan_vars.iter().any(|v| v.shares_chunks(ref_spc));
        let floor_max = [Split::Train, Split::Val, Split::Test, Split::All]
            .iter()
            .map(|&s| residency_floor(&floor_arrays, block_chunks as u64, manifest.chunks_of(s).len() as u64, ref_spc))
            .max()
            .unwrap_or(0);
        let tier: Option<Arc<dyn ChunkTier>> = match &options.tier {
            None => None,
            Some(opener) => {
                let location = storage.location();
                let identities: Vec<ArrayIdentity> = readers
                    .iter()
                    .map(|r| ArrayIdentity {
                        path: r.geom.path.clone(),
                        fingerprint: array_fingerprint(
                            &location,
                            &r.geom.path,
                            r.geom.sample_axis,
                            &r.zarr.metadata_document(),
                            &r.transforms,
                        ),
                        dtype: r.out_dtype,
                        inner: r.out_inner.clone(),
                    })
                    .collect();
                Some(opener.open(&identities)?)
            }
        };
        let train_chunks = manifest.chunks_of(Split::Train).len() as u64;
        // Windows under shuffle read a chunk from several blocks. Holding it from first use
        // to last costs about the whole split; with a persisting tier a block's chunks are
        // let go as it drains and revived locally, so the floor is enough.
        let revivable = tier.as_ref().is_some_and(|t| t.persists());
        let read_once_bytes = if shares && options.shuffle && !revivable {
            block_bytes(&floor_arrays, train_chunks, ref_spc).max(floor_max)
        } else {
            floor_max
        };
        if let Some(budget) = options.cache_budget_bytes
            && budget < floor_max
        {
            return Err(Error::Config(format!(
                "cache_budget_bytes={budget} is below this run's residency floor of {floor_max} bytes ({}): two shuffle \
                     blocks of chunks must fit. Raise it, lower block_chunks or batch_size, or leave it unset to size it \
                     automatically",
                human_bytes(floor_max)
            )));
        }
        let pool = Arc::new(Pool::new(options.cache_budget_bytes, read_once_bytes));
        let runtime_pool = Arc::clone(&runtime.pool);
        let recycle_cap = recycle_cap_bytes(&floor_arrays, &gather_vars, &options);
        let engine = Arc::new(Engine {
            storage,
            runtime,
            pool,
            arrays: readers,
            inflight: Arc::new(Semaphore::new(options.max_inflight)),
            inflight_now: AtomicUsize::new(0),
            max_inflight: options.max_inflight,
            policy: options.read_policy.clone(),
            bad_chunks: Mutex::new(Vec::new()),
            cpu: crate::engine::CpuQueue::new(Arc::clone(&runtime_pool)),
            recycler: crate::array::Recycler::new(recycle_cap as usize),
            admissions: std::sync::atomic::AtomicU64::new(0),
            tier,
        });
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                vars: variables,
                gather_vars: gather_vars.into(),
                plan_vars,
                floor_arrays,
                manifest,
                options,
                block_chunks,
                anchor_range,
                epoch: AtomicU64::new(0),
                last_pass: Arc::new(Mutex::new(None)),
                batch_transforms: batch_transforms.into(),
                chunk_transform_labels: chunk_transforms.iter().map(Scoped::label).collect(),
                read_once_bytes,
                live_streams: AtomicUsize::new(0),
            }),
        })
    }

    /// Counters of the disk tier (`cache_dir`), if one is configured.
    pub fn tier_counters(&self) -> Option<crate::tier::TierCounters> {
        self.inner.engine.tier.as_ref().map(|t| t.counters())
    }

    /// What the disk tier warns about (a `cache_dir` on a network filesystem); empty without one.
    pub fn tier_warnings(&self) -> Vec<String> {
        self.inner.engine.tier.as_ref().map(|t| t.warnings()).unwrap_or_default()
    }

    /// Reshuffle deterministically for `epoch`.
    pub fn set_epoch(&self, epoch: u64) {
        self.inner.epoch.store(epoch, Ordering::SeqCst);
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.inner.epoch.load(Ordering::SeqCst)
    }

    /// The variables, in order.
    pub fn variables(&self) -> &[Variable] {
        &self.inner.vars
    }

    /// The split manifest.
    pub fn manifest(&self) -> &SplitManifest {
        &self.inner.manifest
    }

    /// Options as resolved (prefetch clamped, block_chunks as requested).
    pub fn options(&self) -> &DatasetOptions {
        &self.inner.options
    }

    /// Chunks per shuffle block after widening.
    pub fn block_chunks(&self) -> usize {
        self.inner.block_chunks
    }

    /// The stats of the last pass that ended (finished, failed or dropped).
    pub fn last_pass(&self) -> Option<PassStats> {
        self.inner.last_pass.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Chunks filled under `on_bad_chunk = "nan"` so far.
    pub fn bad_chunks(&self) -> Vec<BadChunk> {
        self.inner.engine.bad_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Pool counters (hits, misses, evictions, peaks) since construction.
    pub fn pool_counters(&self) -> PoolCounters {
        self.inner.engine.pool.counters()
    }

    /// Bytes resident in the pool now.
    pub fn resident_bytes(&self) -> u64 {
        self.inner.engine.pool.resident_bytes()
    }

    /// Live iterations on this dataset.
    pub fn live_iterations(&self) -> usize {
        self.inner.engine.pool.live_passes()
    }

    fn order(&self, split: Split, epoch: u64) -> crate::shuffle::DrawOrder {
        let i = &self.inner;
        let chunks = i.manifest.chunks_of(split);
        draw_order(&OrderSpec {
            chunk_ids: &chunks,
            ref_spc: i.manifest.sample_chunk_size,
            n_samples: i.manifest.n_samples,
            anchor_range: i.anchor_range,
            block_chunks: i.block_chunks,
            shuffle: i.options.shuffle && split == Split::Train,
            seed: i.options.seed,
            epoch,
            split,
        })
    }

    fn floor(&self, split: Split) -> u64 {
        let i = &self.inner;
        residency_floor(
            &i.floor_arrays,
            i.block_chunks as u64,
            i.manifest.chunks_of(split).len() as u64,
            i.manifest.sample_chunk_size,
        )
    }

    /// The anchors of one epoch of a view, in draw order (what the batches will carry).
    pub fn draw_order(&self, split: Split, epoch: u64) -> Vec<u64> {
        self.order(split, epoch).anchors
    }

    /// Start one pass over a view at the current epoch.
    ///
    /// # Errors
    /// [`Error::Config`] when an explicit budget cannot hold this pass next to the live ones.
    pub fn iter(&self, split: Split) -> Result<BatchStream> {
        let i = &self.inner;
        let epoch = self.epoch();
        let order = self.order(split, epoch);
        let plan = Arc::new(PassPlan::build(&order, &i.plan_vars, i.options.batch_size));
        let reservation = self.floor(split);
        let need = plan.peak_bytes(|k| i.engine.arrays[k.path as usize].charge(k.chunk));
        if need > reservation {
            return Err(Error::Stall(format!(
                "internal: epoch {epoch} of {split} needs {need} resident bytes but its residency floor is {reservation}; \
                 please report this. Workaround: cache_budget_bytes >= {need} with block_chunks raised"
            )));
        }
        let pass = i.engine.pool.open_pass(reservation.max(need))?;
        let recorder = Arc::new(PassRecorder::default());
        let (tx, rx) = async_channel::bounded(i.options.prefetch_depth);
        let n_batches = plan.n_batches();
        let spec = PassSpec {
            engine: Arc::clone(&i.engine),
            plan,
            vars: Arc::clone(&i.gather_vars),
            batch_transforms: Arc::clone(&i.batch_transforms),
            pass,
            epoch,
            recorder: Arc::clone(&recorder),
            max_gathers: i.engine.cpu.parallelism().clamp(1, 4),
        };
        let (task, abort) = futures::future::abortable(drive(spec, tx));
        i.engine.runtime.executor.spawn(Box::pin(async move {
            let _ = task.await;
        }));
        i.live_streams.fetch_add(1, Ordering::Relaxed);
        Ok(BatchStream {
            rx,
            engine: Arc::clone(&i.engine),
            pass,
            abort,
            recorder,
            started: i.engine.now(),
            last_returned: None,
            split: split.name().to_string(),
            epoch,
            prefetch_depth: i.options.prefetch_depth,
            sink: Arc::clone(&i.last_pass),
            finished: false,
            n_batches,
        })
    }

    /// What this dataset will do, from geometry and configuration only (no store access).
    /// `iterations` is how many passes will run at once (`zip(train, val)` is two).
    ///
    /// # Errors
    /// [`Error::Config`] when `iterations` is 0.
    pub fn describe(&self, iterations: usize) -> Result<DatasetReport> {
        if iterations == 0 {
            return Err(Error::Config("iterations must be >= 1".into()));
        }
        let i = &self.inner;
        let o = &i.options;
        let mut notes_var = Vec::new();
        let mut notes = Vec::new();
        let variables: Vec<VariableReport> = i
            .vars
            .iter()
            .map(|v| {
                let g = &v.geometry;
                let r = i.engine.arrays.iter().find(|r| r.geom.path == g.path).expect("every variable has a reader");
                let vr = VariableReport {
                    label: v.label.clone(),
                    path: g.path.clone(),
                    dtype: g.dtype.to_string(),
                    shape: g.shape.clone(),
                    chunks: g.tile.clone(),
                    shard: g.shard.clone(),
                    codecs: r.zarr.codec_names(),
                    sample_axis: g.sample_axis,
                    sample_chunk_size: g.sample_chunk_size(),
                    n_samples: g.n_samples(),
                    n_chunks: g.n_chunks(),
                    offset: g.offset,
                    inner_shape: g.inner_shape(),
                    inner_chunks: g.inner_tile(),
                    stored_chunks_per_chunk: g.n_tiles(),
                    stored_chunk_bytes: g.tile_bytes(),
                    slot_bytes: r.max_charge(),
                    ragged_multiplier: g.ragged_multiplier(),
                    gather_run_bytes: r.out_sample_bytes(),
                    output_inner_shape: r.out_inner.clone(),
                    output_dtype: r.out_dtype.to_string(),
                };
                if vr.ragged_multiplier > 1.001 {
                    notes_var.push(Note {
                        code: "ragged-grid".into(),
                        severity: "note".into(),
                        subject: v.label.clone(),
                        message: format!(
                            "the chunk grid does not divide the array: {:.3}x of decoded bytes are edge padding (decode work only; the pool holds clipped chunks)",
                            vr.ragged_multiplier
                        ),
                    });
                }
                if vr.gather_run_bytes < 1024 {
                    notes_var.push(Note {
                        code: "short-gather-run".into(),
                        severity: "warn".into(),
                        subject: v.label.clone(),
                        message: format!("one sample is only {} bytes; per-row overhead will dominate the gather", vr.gather_run_bytes),
                    });
                }
                if vr.stored_chunks_per_chunk == 1 && vr.stored_chunk_bytes > 64 << 20 {
                    notes_var.push(Note {
                        code: "single-inner-fat-chunk".into(),
                        severity: "note".into(),
                        subject: v.label.clone(),
                        message: format!(
                            "each chunk is one stored object of {}: concurrency costs whole chunks; chunking the inner axes makes max_inflight cheap",
                            human_bytes(vr.stored_chunk_bytes)
                        ),
                    });
                }
                vr
            })
            .collect();
        let splits = [Split::Train, Split::Val, Split::Test];
        let ref_spc = i.manifest.sample_chunk_size;
        let drawable = |s: Split| -> u64 {
            i.manifest
                .chunks_of(s)
                .iter()
                .map(|&c| {
                    let r = chunk_anchors(c, ref_spc, i.manifest.n_samples, i.anchor_range);
                    r.end - r.start
                })
                .sum()
        };
        for s in splits {
            let n = i.manifest.chunks_of(s).len();
            if n > 0 && drawable(s) == 0 {
                notes.push(Note {
                    code: "split-yields-nothing".into(),
                    severity: "warn".into(),
                    subject: s.name().into(),
                    message: format!("{s} has {n} chunks but no anchor whose window stays inside the array"),
                });
            }
        }
        for w in self.tier_warnings() {
            notes.push(Note {
                code: "cache-dir-network-fs".into(),
                severity: "warning".into(),
                subject: "cache_dir".into(),
                message: w,
            });
        }
        if i.block_chunks > o.block_chunks {
            notes.push(Note {
                code: "block-chunks-widened".into(),
                severity: "note".into(),
                subject: "dataset".into(),
                message: format!(
                    "block_chunks raised from {} to {} so any block holds a batch of {}",
                    o.block_chunks, i.block_chunks, o.batch_size
                ),
            });
        }
        let floor =
            [Split::Train, Split::Val, Split::Test, Split::All].iter().map(|&s| self.floor(s)).max().unwrap_or(0);
        let needed = floor.saturating_mul(iterations as u64);
        let residency = match o.cache_budget_bytes {
            Some(b) => b,
            None => i.read_once_bytes.max(needed),
        };
        if let Some(b) = o.cache_budget_bytes {
            if b < needed {
                notes.push(Note {
                    code: "budget-below-iterations".into(),
                    severity: "warn".into(),
                    subject: "dataset".into(),
                    message: format!("{iterations} concurrent iterations need cache_budget_bytes >= {needed}; the second will be refused at start"),
                });
            }
            if b < i.read_once_bytes {
                notes.push(Note {
                    code: "budget-below-read-once".into(),
                    severity: "note".into(),
                    subject: "dataset".into(),
                    message: format!(
                        "chunks shared between shuffle blocks (windows or coarser chunking) may be evicted and re-read; {} keeps every chunk read once",
                        human_bytes(i.read_once_bytes)
                    ),
                });
            }
        }
        let batch_bytes: u64 = i.gather_vars.iter().map(|v| v.sample_bytes as u64).sum::<u64>() * o.batch_size as u64;
        let max_gathers = i.engine.runtime.pool.parallelism().get().clamp(1, 4) as u64;
        let queue_bytes = (o.prefetch_depth as u64 + max_gathers + 1) * batch_bytes;
        let inflight_bytes: u64 = {
            let per_tile = i
                .engine
                .arrays
                .iter()
                .map(|r| r.geom.tile_bytes() * if r.geom.n_tiles() > 1 { 2 } else { 1 })
                .max()
                .unwrap_or(0);
            (o.max_inflight as u64 * per_tile).min(floor * 2)
        };
        let parallelism = i.engine.runtime.pool.parallelism().get() as u64;
        let scratch_bytes = if i.chunk_transform_labels.is_empty() {
            0
        } else {
            parallelism * i.engine.arrays.iter().map(ArrayReader::max_charge).max().unwrap_or(0)
        };
        // Idle batch buffers are buffers the queue term already counts at their peak (a new one
        // is allocated only when none is idle); idle chunk buffers can outlast a size change,
        // so count two chunks of slack.
        let recycled_bytes = 2 * i.floor_arrays.iter().map(|a| a.max_slot_bytes).max().unwrap_or(0);
        let accounted = residency + inflight_bytes + queue_bytes + scratch_bytes + recycled_bytes;
        let order = self.order(Split::Train, self.epoch());
        let config = ConfigReport {
            batch_size: o.batch_size,
            block_chunks: i.block_chunks,
            block_chunks_requested: o.block_chunks,
            max_inflight: o.max_inflight,
            prefetch_depth: o.prefetch_depth,
            shuffle: o.shuffle,
            seed: o.seed,
            epoch: self.epoch(),
            cache_budget_bytes: o.cache_budget_bytes,
            disk_tier: i.engine.tier.as_ref().map(|t| t.describe()),
            on_bad_chunk: match o.read_policy.on_bad_chunk {
                OnBadChunk::Raise => "raise".into(),
                OnBadChunk::Nan => "nan".into(),
            },
            chunk_transforms: i.chunk_transform_labels.clone(),
            batch_transforms: i.batch_transforms.iter().map(|t| t.name()).collect(),
            windowed: i.vars.iter().any(|v| v.geometry.offset != 0),
            offsets: i.vars.iter().map(|v| (v.label.clone(), v.geometry.offset)).collect(),
            samples_per_chunk: ref_spc,
            n_chunks: i.manifest.n_chunks,
            split_chunks: splits.iter().map(|&s| (s.name().to_string(), i.manifest.chunks_of(s).len())).collect(),
            drawable_samples: splits.iter().map(|&s| (s.name().to_string(), drawable(s))).collect(),
            batches_per_epoch: splits
                .iter()
                .map(|&s| (s.name().to_string(), drawable(s).div_ceil(o.batch_size as u64) as usize))
                .collect(),
            shuffle_quality: shuffle_quality(&order.anchors),
        };
        notes_var.extend(notes);
        Ok(DatasetReport {
            variables,
            config,
            memory: MemoryReport {
                iterations,
                floor_bytes: floor,
                read_once_bytes: i.read_once_bytes,
                residency_bytes: residency,
                budget_is_automatic: o.cache_budget_bytes.is_none(),
                inflight_bytes,
                queue_bytes,
                scratch_bytes,
                recycled_bytes,
                accounted_bytes: accounted,
                estimated_peak_bytes: accounted + accounted / 4 + (64 << 20),
            },
            notes: notes_var,
        })
    }
}

/// Free buffers kept for reuse: a few chunks and a few batches (see [`crate::array::Recycler`]).
fn recycle_cap_bytes(arrays: &[FloorArray], vars: &[GatherVar], o: &DatasetOptions) -> u64 {
    let chunk = arrays.iter().map(|a| a.max_slot_bytes).max().unwrap_or(0);
    let batch: u64 = vars.iter().map(|v| v.sample_bytes as u64).sum::<u64>() * o.batch_size as u64;
    4 * chunk + (o.prefetch_depth as u64 + 2) * batch
}

/// What [`open`] needs besides the runtime and the store.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Array paths to read (labels = paths); `None` discovers them, skipping CF coordinates.
    pub variables: Option<Vec<String>>,
    /// The sample axis of every variable.
    pub sample_axis: usize,
    /// How to split the reference (first) variable's chunks.
    pub split: crate::split::SplitOptions,
    /// The dataset knobs.
    pub dataset: DatasetOptions,
    /// Chunk transforms (cached with the chunk), each scoped to some arrays or to all.
    pub chunk_transforms: Vec<Scoped>,
}

/// Open the arrays of a store and build a dataset over them in one call.
///
/// # Errors
/// Whatever opening the arrays or building the dataset reports.
pub async fn open(storage: Arc<dyn Storage>, runtime: Runtime, options: OpenOptions) -> Result<Dataset> {
    let arrays = crate::zarr::open_arrays(storage.as_ref(), options.variables.as_deref()).await?;
    let variables: Vec<Variable> = arrays
        .iter()
        .map(|a| Ok(Variable { label: a.path().to_string(), geometry: a.geometry(options.sample_axis)? }))
        .collect::<Result<_>>()?;
    let manifest = crate::split::split_by_chunk(&variables[0].geometry, &options.split)?;
    Dataset::new(storage, runtime, arrays, variables, manifest, options.dataset, options.chunk_transforms, Vec::new())
}
