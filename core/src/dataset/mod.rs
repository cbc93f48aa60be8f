//! The public engine API: a dataset over one store, with train/val/test/all views that
//! share one chunk pool.

mod build;
mod probe;
mod report;
mod spec;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use build::DatasetBuilder;
pub use probe::{EpochPrediction, PROBE_CHUNKS, ProbeReport};
pub use spec::{
    CacheFlags, DatasetSpec, HedgeFields, HedgeSpec, ReadPolicySpec, ResolvedSpec, TargetAbilities, VariableSpec,
    VariablesSpec,
};

use crate::coords::{Coordinate, LabelSel};
use crate::draws::Draws;
use crate::engine::{BadChunk, Engine};
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::mesh::ModelParallel;
use crate::pass::{BatchStream, GatherVar, PassSpec, Patching, ShardInfo, StatsSink, drive, plan_tiles};
use crate::patch::{PatchOptions, Patcher};
use crate::plan::{FloorArray, PassPlan, PlanVar, residency_floor};
use crate::pool::PoolCounters;
use crate::ranks::{Checkpoint, RankPass, Sharding, rank_pass};
use crate::retry::{OnBadChunk, ReadPolicy};
use crate::shuffle::{DrawOrder, DrawRows, OrderSpec, Split, draw_order, shuffle_quality};
use crate::split::SplitManifest;
use crate::stats::{PassObserver, PassRecorder, PassStats};
use crate::tier::TierOpener;
use crate::transform::BatchTransform;

/// Shuffle blocks past the next admission whose inner chunks a pass marks wanted for
/// read-ahead: far enough that a shard's neighbouring chunks are usually among them, near
/// enough that the marks stay a small multiple of a block's tiles.
const AHEAD_BLOCKS: usize = 4;

/// Gathers a pass runs at once, at most: enough to keep the queue fed on a few cores
/// without holding more batch buffers than the memory model counts.
const MAX_GATHERS: usize = 4;

/// Gathers in flight for a pool of `parallelism` threads (the pass and `describe` agree).
fn max_gathers(parallelism: usize) -> usize {
    parallelism.clamp(1, MAX_GATHERS)
}

/// Batches a pass holds at once, gathered or being gathered (the pass and `describe` agree):
/// the queue (`prefetch_depth`), one waiting to enter it (its pending send is what wakes the
/// pass when the caller takes one), and at least `max_gathers` so that a fast caller keeps
/// every gather busy. A slow caller leaves gathered batches waiting, never more than this.
fn max_batches_ahead(prefetch_depth: usize, parallelism: usize) -> usize {
    (prefetch_depth + 1).max(max_gathers(parallelism))
}

/// What a dataset is built with, resolved: a [`DatasetSpec`]'s options as core's types
/// ([`DatasetSpec::resolve`] makes them), beside what only a program can pass (a tier,
/// observers). Callers describe a dataset with the spec; this is what the engine reads.
#[derive(Debug, Clone, Default)]
pub struct DatasetOptions {
    /// Batch size, blocks, in-flight reads, seed, shuffle, prefetch, budget, `on_bad_chunk`,
    /// rank and world size, coordinates.
    pub knobs: Knobs,
    /// Retries, timeouts, coalescing and hedging.
    pub read_policy: ReadPolicy,
    /// A disk tier for decoded chunks (`cache_dir`; native only), opened at construction.
    pub tier: Option<Arc<dyn TierOpener>>,
    /// Node affinity: ranks per node (the launcher's local world size; nodes are runs of
    /// consecutive ranks). Each node then draws the same chunks in every epoch, reshuffled, so
    /// ranks sharing a node's `cache_dir` read epoch 2 from it (`ranks.rs`, step 2). `None`:
    /// the specified partition.
    pub node_ranks: Option<usize>,
    /// Spatial patches: each sample cut into patches on some inner axes (`patch.rs`); `None`:
    /// whole samples.
    pub patch: Option<PatchOptions>,
    /// Per sample: drawn at all (`draws.rs`); `None`: every sample.
    pub sample_mask: Option<Arc<[bool]>>,
    /// Per sample: expected draws per epoch (`draws.rs`); `None`: each sample once.
    pub sample_weights: Option<Arc<[f64]>>,
    /// A rank mesh (`mesh.rs`): groups of ranks that draw the same rows, each taking its part
    /// of every row along an axis; `None`: every rank its own rows, whole.
    pub model_parallel: Option<ModelParallel>,
    /// Told of every pass's report when it ends (exporters, callbacks).
    pub observers: Vec<Arc<dyn PassObserver>>,
    /// Select by label, one range per dimension: on the sample axis's coordinate, samples
    /// (applied as the split's sample range); on an inner axis's, a region every row is cut
    /// to (patches then lie inside it).
    pub sel: Vec<LabelSel>,
}

/// The engine's view of the spec's knobs, as [`DatasetSpec::resolve`] resolved them (counts
/// checked, `prefetch_depth` at least 1): what the dataset reads at run time. Not an input
/// of its own: callers pass a [`DatasetSpec`], whose fields and defaults these are
/// (`Knobs::default()` is `DatasetSpec::default()` resolved).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knobs {
    /// Rows per batch.
    pub batch_size: usize,
    /// Chunks per shuffle block, as asked (the dataset widens it so a block holds a batch).
    pub block_chunks: usize,
    /// Chunks in each epoch's first shuffle block, as asked (`None`: the block size).
    pub first_block_chunks: Option<usize>,
    /// Storage reads in flight, across every view.
    pub max_inflight: usize,
    /// Shuffle seed.
    pub seed: u64,
    /// Shuffle the train view.
    pub shuffle: bool,
    /// Batches queued ahead of the caller (at least 1).
    pub prefetch_depth: usize,
    /// Byte budget of the chunk pool (`None`: automatic).
    pub cache_budget_bytes: Option<u64>,
    /// What a chunk that cannot be read or decoded does.
    pub on_bad_chunk: OnBadChunk,
    /// This process's rank.
    pub rank: usize,
    /// Processes sharing each epoch.
    pub world_size: usize,
    /// Read the sample axis's coordinate and carry it in every batch.
    pub coords: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        let d = DatasetSpec::default();
        Self {
            batch_size: d.batch_size,
            block_chunks: d.block_chunks,
            first_block_chunks: d.first_block_chunks,
            max_inflight: d.max_inflight,
            seed: d.seed,
            shuffle: d.shuffle,
            prefetch_depth: d.prefetch_depth,
            cache_budget_bytes: d.cache_budget_bytes,
            on_bad_chunk: d.on_bad_chunk,
            rank: d.rank,
            world_size: d.world_size,
            coords: d.coords,
        }
    }
}

impl Knobs {
    /// The knobs with their counts checked and `prefetch_depth` raised to at least 1 (as
    /// insitubatch 0.2.0 does): the rule [`DatasetSpec::resolve`] applies, and the builder
    /// again to options it is handed.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a count below 1 or a rank outside the world.
    pub fn checked(mut self) -> Result<Self> {
        use spec::at_least;
        at_least("batch_size", self.batch_size as u64, 1)?;
        at_least("block_chunks", self.block_chunks as u64, 1)?;
        at_least("max_inflight", self.max_inflight as u64, 1)?;
        at_least("world_size", self.world_size as u64, 1)?;
        if let Some(first) = self.first_block_chunks {
            at_least("first_block_chunks", first as u64, 1)?;
        }
        if self.rank >= self.world_size {
            return Err(Error::option(
                "rank",
                format!(
                    "`rank` must be in 0..`world_size`, got rank={} world_size={}; ranks count from 0",
                    self.rank, self.world_size
                ),
            ));
        }
        self.prefetch_depth = self.prefetch_depth.max(1);
        Ok(self)
    }
}

/// The knobs, with every other member at its default (no tier, observers, patches, ...).
impl From<Knobs> for DatasetOptions {
    fn from(knobs: Knobs) -> Self {
        Self { knobs, ..Self::default() }
    }
}

/// What a smaller first block costs: its samples are drawn from fewer chunks (neighbours in
/// the source, for time series) than the specified order's first block mixes.
struct FirstBlockCost {
    /// Samples in the first block.
    samples: usize,
    /// Chunks they come from.
    chunks: usize,
    /// Chunks the specified order's first block mixes.
    specified_chunks: usize,
    /// Shuffle quality of the epoch's order.
    quality: f64,
    /// The same for the specified order.
    specified_quality: f64,
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
    first_block_chunks: usize,
    anchor_range: (u64, u64),
    /// The patch arithmetic (`None`: whole samples).
    patcher: Option<Arc<Patcher>>,
    /// The regions `sel` cut every row to on inner axes.
    regions: Vec<build::Region>,
    /// The mask and weights (`None`: every sample once per epoch).
    draws: Option<Arc<Draws>>,
    /// Rows per sample (patches times weighted copies).
    rows_per_sample: u64,
    /// The sample axis's coordinate, when read.
    coordinate: Option<Arc<Coordinate>>,
    unit_chunks: u64,
    epoch: AtomicU64,
    last_pass: StatsSink,
    batch_transforms: Arc<[Arc<dyn BatchTransform>]>,
    chunk_transform_labels: Vec<String>,
    /// What reading every chunk once per epoch needs.
    read_once_bytes: u64,
    /// What the automatic budget holds: read-once, capped by the runtime's memory.
    auto_residency_bytes: u64,
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

    /// Chunks in each epoch's first shuffle block, as resolved (widened, at most
    /// [`Self::block_chunks`]).
    pub fn first_block_chunks(&self) -> usize {
        self.inner.first_block_chunks
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

    /// What `epoch`'s train order with this dataset's first block costs in mixing, against
    /// the specified order (a first block of `block_chunks`).
    fn first_block_cost(&self, epoch: u64) -> FirstBlockCost {
        let chunks = self.inner.manifest.chunks_of(Split::Train);
        let spec = self.order_spec(Split::Train, epoch, &chunks);
        let ours = draw_order(&spec);
        let specified = draw_order(&OrderSpec { first_block_chunks: spec.block_chunks, ..spec.clone() });
        let first_chunks = |o: &crate::shuffle::DrawOrder| o.block_chunks.first().map_or(0, Vec::len);
        FirstBlockCost {
            samples: ours.bounds.get(1).copied().unwrap_or(0),
            chunks: first_chunks(&ours),
            specified_chunks: first_chunks(&specified),
            quality: shuffle_quality(&ours.anchors),
            specified_quality: shuffle_quality(&specified.anchors),
        }
    }

    /// A sample-axis count in rows: times the rows per sample.
    fn rows(&self, samples: u64) -> u64 {
        samples.saturating_mul(self.inner.rows_per_sample)
    }

    /// Rows per sample: the patches per sample (`patch.rs`) times the copies of the most
    /// weighted sample (`draws.rs`); 1 without either.
    pub fn rows_per_sample(&self) -> u64 {
        self.inner.rows_per_sample
    }

    /// The mask and weights, when given.
    pub fn draws(&self) -> Option<&Draws> {
        self.inner.draws.as_deref()
    }

    /// The sample axis's coordinate, when the dataset reads it.
    pub fn coordinate(&self) -> Option<&Coordinate> {
        self.inner.coordinate.as_deref()
    }

    /// The patch arithmetic, when the dataset cuts patches.
    pub fn patcher(&self) -> Option<&Patcher> {
        self.inner.patcher.as_deref()
    }

    /// The order's inputs. Over rows: with patches, a sample axis `per_sample` times longer
    /// under the same chunk ids (`patch.rs`).
    fn order_spec<'a>(&'a self, split: Split, epoch: u64, chunks: &'a [u64]) -> OrderSpec<'a> {
        let i = &self.inner;
        let (lo, hi) = i.anchor_range;
        OrderSpec {
            chunk_ids: chunks,
            ref_spc: self.rows(i.manifest.sample_chunk_size),
            n_samples: self.rows(i.manifest.n_samples),
            anchor_range: (self.rows(lo), self.rows(hi)),
            draws: i
                .draws
                .as_deref()
                .map(|draws| DrawRows { draws, patches: i.patcher.as_ref().map_or(1, |p| p.per_sample()) }),
            block_chunks: i.block_chunks,
            first_block_chunks: i.first_block_chunks,
            shuffle: i.options.knobs.shuffle && split == Split::Train,
            seed: i.options.knobs.seed,
            epoch,
            split,
        }
    }

    /// How this dataset's ranks share an epoch.
    /// How this dataset's ranks share an epoch: under a rank mesh, the data-parallel groups
    /// share it as ranks do, and the ranks of a group draw alike (`mesh.rs`).
    pub(crate) fn sharding(&self) -> Sharding {
        let o = &self.inner.options;
        let k = o.model_parallel.as_ref().map_or(1, |m| m.size);
        Sharding {
            rank: o.knobs.rank / k,
            world_size: o.knobs.world_size / k,
            unit_chunks: self.inner.unit_chunks,
            batch_size: o.knobs.batch_size,
            node_ranks: o.node_ranks.map(|n| n / k),
        }
    }

    /// This rank's pass over `split` at `epoch`, resumed from `resume` when given.
    fn rank_pass(&self, split: Split, epoch: u64, resume: Option<&Checkpoint>) -> Result<RankPass> {
        let per_sample = self.rows_per_sample();
        if let Some(c) = resume
            && c.rows_per_sample.unwrap_or(1) != per_sample
        {
            return Err(Error::Config(format!(
                "the checkpoint counts {} rows per sample but this dataset makes {per_sample} (its patches times the \
                 copies of its most weighted sample); resume with the checkpoint's patch options and sample_weights",
                c.rows_per_sample.unwrap_or(1)
            )));
        }
        let draws = self.draws_fingerprint();
        if let Some(c) = resume
            && c.draws != draws
        {
            return Err(Error::Config(format!(
                "the checkpoint was taken with {} but this dataset has {}; resume with the checkpoint's sample_mask \
                 and sample_weights",
                c.draws.as_ref().map_or("no sample mask or weights".into(), |f| format!("draws {f}")),
                draws.as_ref().map_or("none".into(), |f| format!("draws {f}")),
            )));
        }
        let chunks = self.inner.manifest.chunks_of(split);
        let mut pass = rank_pass(&self.order_spec(split, epoch, &chunks), &self.sharding(), resume)?;
        pass.start.rows_per_sample = (per_sample > 1).then_some(per_sample);
        pass.start.draws = draws;
        Ok(pass)
    }

    /// The mask and weights' fingerprint as checkpoints record it.
    fn draws_fingerprint(&self) -> Option<String> {
        self.draws().map(|d| format!("{:016x}", d.fingerprint()))
    }

    /// Reference chunks per rank-assignment unit (`ranks.rs`): 1 unless a variable is chunked
    /// more coarsely than the reference grid.
    pub fn unit_chunks(&self) -> u64 {
        self.inner.unit_chunks
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

    /// The anchors this rank draws in one epoch of a view, in order (what the batches will
    /// carry): with one rank, the whole epoch. With patches or weights, a sample once per row.
    pub fn draw_order(&self, split: Split, epoch: u64) -> Vec<u64> {
        self.epoch_order(split, epoch).map(|o| o.anchors).unwrap_or_default()
    }

    /// This rank's order of one epoch of a view with its shuffle blocks, each row as the
    /// sample it reads (what the dashboard draws).
    ///
    /// # Errors
    /// As [`Self::iter`] for the rank and world size.
    pub fn epoch_order(&self, split: Split, epoch: u64) -> Result<DrawOrder> {
        let mut order = self.rank_pass(split, epoch, None)?.order;
        let per = self.rows_per_sample();
        if per > 1 {
            order.anchors.iter_mut().for_each(|r| *r /= per);
        }
        Ok(order)
    }

    /// The rows this rank draws in one epoch of a view, in order: [`Self::draw_order`] without
    /// patches; with them, row `r` is patch `r % per_sample` of sample `r / per_sample`.
    pub fn draw_rows(&self, split: Split, epoch: u64) -> Vec<u64> {
        self.rank_pass(split, epoch, None).map(|p| p.order.anchors).unwrap_or_default()
    }

    /// Samples of one epoch of a view that no rank draws, so that every rank draws the same
    /// number (0 with one rank).
    pub fn dropped_samples(&self, split: Split, epoch: u64) -> u64 {
        self.rank_pass(split, epoch, None).map_or(0, |p| p.dropped)
    }

    /// Start one pass over a view at the current epoch.
    ///
    /// # Errors
    /// [`Error::Config`] when an explicit budget cannot hold this pass next to the live ones.
    pub fn iter(&self, split: Split) -> Result<BatchStream> {
        let pass = self.rank_pass(split, self.epoch(), None)?;
        self.start(split, pass)
    }

    /// Start the pass a checkpoint was taken in, where it stopped: with the world size it was
    /// saved with, exactly the batches the uninterrupted pass would have yielded next; with
    /// another, this rank's share of the samples no rank had consumed (`ranks.rs`). Sets the
    /// dataset's epoch to the checkpoint's.
    ///
    /// # Errors
    /// [`Error::Config`] for a checkpoint of another seed or batch size, one whose positions do
    /// not fit this dataset's split, or an explicit budget that cannot hold the pass.
    pub fn resume(&self, checkpoint: &Checkpoint) -> Result<BatchStream> {
        let pass = self.rank_pass(checkpoint.split, checkpoint.epoch, Some(checkpoint))?;
        self.set_epoch(checkpoint.epoch);
        self.start(checkpoint.split, pass)
    }

    /// Would [`Self::resume`] accept this checkpoint? (Checked with no pass started and no
    /// read, so a state can be refused where it is loaded.)
    ///
    /// # Errors
    /// As [`Self::resume`].
    pub fn check_resume(&self, checkpoint: &Checkpoint) -> Result<()> {
        self.rank_pass(checkpoint.split, checkpoint.epoch, Some(checkpoint)).map(|_| ())
    }

    /// The checkpoint of a pass over `split` at `epoch` that has not started: resuming it
    /// is a fresh pass (what a training script saves before its first step).
    pub fn fresh_checkpoint(&self, split: Split, epoch: u64) -> Checkpoint {
        let o = &self.inner.options;
        Checkpoint {
            version: crate::ranks::CHECKPOINT_VERSION,
            seed: o.knobs.seed,
            epoch,
            split,
            batch_size: o.knobs.batch_size,
            world_size: self.sharding().world_size,
            position: 0,
            batches: 0,
            history: Vec::new(),
            node_ranks: self.sharding().node_ranks,
            rows_per_sample: (self.rows_per_sample() > 1).then(|| self.rows_per_sample()),
            draws: self.draws_fingerprint(),
        }
    }

    /// How a pass over `split` cuts its rows into patches (`None` without patches).
    fn patching(&self, split: Split) -> Option<Patching> {
        let i = &self.inner;
        i.patcher.as_ref().map(|p| Patching { patcher: Arc::clone(p), seed: i.options.knobs.seed, split })
    }

    /// The read plan of a pass over `order`: its uses, and the tiles each reads.
    pub(crate) fn pass_plan(&self, order: &DrawOrder, patching: Option<&Patching>, epoch: u64) -> PassPlan {
        let i = &self.inner;
        let mut plan = PassPlan::build(order, &i.plan_vars, i.options.knobs.batch_size, self.rows_per_sample());
        plan_tiles(&mut plan, &i.gather_vars, &i.engine, patching, epoch);
        plan
    }

    fn start(&self, split: Split, rank: RankPass) -> Result<BatchStream> {
        let i = &self.inner;
        let epoch = rank.start.epoch;
        let patching = self.patching(split);
        let plan = Arc::new(self.pass_plan(&rank.order, patching.as_ref(), epoch));
        let floor = self.floor(split);
        let need = plan.peak_bytes(|u| {
            let key = plan.uses[u].key;
            i.engine.arrays[key.path as usize].charge_part(key.chunk, plan.tiles_of(u).map(|t| &t[..]))
        });
        // A re-partitioned (elastic) segment is blocked greedily over partly consumed chunks, so
        // the floor's two-block bound is not proved for it: it reserves its exact peak instead.
        if need > floor && rank.start.history.is_empty() {
            return Err(Error::Internal(format!(
                "epoch {epoch} of {split} needs {need} resident bytes but its residency floor is {floor}. \
                 Workaround: cache_budget_bytes >= {need} with block_chunks raised"
            )));
        }
        // A pass reading chunks in part (patches) holds their tiles, not whole chunks: it
        // reserves its exact peak, which is all it ever charges (`PassPlan::peak_bytes`), so
        // the rest of the budget stays free for other iterations and the cache.
        let reserve = if plan.tiles.iter().any(Option::is_some) { need } else { floor.max(need) };
        let pass = i.engine.pool.open_pass(reserve)?;
        let recorder = Arc::new(PassRecorder::default());
        let (tx, rx) = async_channel::bounded(i.options.knobs.prefetch_depth);
        let n_batches = plan.n_batches();
        let spec = PassSpec {
            engine: Arc::clone(&i.engine),
            plan,
            vars: Arc::clone(&i.gather_vars),
            batch_transforms: Arc::clone(&i.batch_transforms),
            pass,
            epoch,
            first_index: usize::try_from(rank.start.batches).unwrap_or(usize::MAX),
            recorder: Arc::clone(&recorder),
            max_gathers: max_gathers(i.engine.cpu.parallelism()),
            max_ahead: max_batches_ahead(i.options.knobs.prefetch_depth, i.engine.cpu.parallelism()),
            ahead_uses: AHEAD_BLOCKS * i.block_chunks * i.plan_vars.len(),
            patching,
            mesh: i.options.model_parallel.as_ref().map(|m| (m.place(i.options.knobs.rank).1, m.size)),
            coordinate: i.coordinate.clone(),
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
            prefetch_depth: i.options.knobs.prefetch_depth,
            sink: Arc::clone(&i.last_pass),
            observers: i.options.observers.clone().into(),
            finished: false,
            n_batches,
            shard: ShardInfo {
                rank: i.options.knobs.rank,
                dropped: rank.dropped,
                skipped: rank.skipped,
                start: rank.start,
            },
        })
    }
}

#[cfg(test)]
mod concat_tests;
#[cfg(test)]
mod draws_tests;
#[cfg(test)]
mod join_tests;
#[cfg(test)]
mod mesh_tests;
#[cfg(test)]
mod patch_tests;
#[cfg(test)]
mod tests;
