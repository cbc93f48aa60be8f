//! The resolved parts of a dataset, checked and wired into one by [`Assembly::assemble`]:
//! the variables' readers, the draws, the disk tier and the engine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use async_lock::Semaphore;

use super::budget::{ChunkRows, read_ahead_budget, recycle_cap_bytes};
use super::coordinates::Region;
use crate::ahead::ReadAhead;
use crate::array::Recycler;
use crate::coords::Coordinate;
use crate::dataset::{Dataset, DatasetOptions, Inner, Variable};
use crate::draws::Draws;
use crate::engine::{ArrayReader, CpuQueue, Engine};
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::hedge::Hedger;
use crate::pass::GatherVar;
use crate::plan::PlanVar;
use crate::pool::Pool;
use crate::ranks::unit_chunks;
use crate::reads::{Coalescer, ReadPath};
use crate::runtime::{Runtime, Storage};
use crate::split::{SplitManifest, valid_anchor_range};
use crate::tier::{ArrayIdentity, ChunkTier, array_fingerprint};
use crate::transform::{BatchTransform, Scoped};
use crate::window::ReadWindow;
use crate::zarr::ZarrArray;

/// The resolved parts of a dataset, checked and wired by [`Assembly::assemble`].
pub(super) struct Assembly {
    pub(super) coordinate: Option<Arc<Coordinate>>,
    pub(super) regions: Vec<Region>,
    pub(super) patch_coordinates: Vec<Arc<Coordinate>>,
    pub(super) storage: Arc<dyn Storage>,
    pub(super) runtime: Runtime,
    pub(super) arrays: Vec<ZarrArray>,
    pub(super) variables: Vec<Variable>,
    pub(super) manifest: SplitManifest,
    pub(super) options: DatasetOptions,
    pub(super) chunk_transforms: Vec<Scoped>,
    pub(super) batch_transforms: Vec<Arc<dyn BatchTransform>>,
}

/// One reader per distinct array path, and what the plan and the gather need per label.
struct Readers {
    readers: Vec<ArrayReader>,
    plan_vars: Vec<PlanVar>,
    gather_vars: Vec<GatherVar>,
}

impl Assembly {
    pub(super) fn assemble(mut self) -> Result<Dataset> {
        self.options = checked_options(self.options)?;
        let n_samples = self.common_length()?;
        self.check_manifest(n_samples)?;
        self.check_transform_scopes()?;
        self.check_unique_labels()?;
        let Readers { readers, plan_vars, mut gather_vars } = self.readers()?;
        let patcher = self.patcher(&readers, &mut gather_vars)?;
        self.cut_to_regions(&readers, &mut gather_vars)?;
        self.parts(&readers, &mut gather_vars, patcher.as_deref())?;
        let offsets: Vec<i64> = self.variables.iter().map(|v| v.geometry.offset).collect();
        let anchor_range = valid_anchor_range(&offsets, n_samples);
        let draws = self.draws(n_samples)?;
        let patches = patcher.as_ref().map_or(1, |p| p.per_sample());
        let rows = ChunkRows { anchor_range, patches, draws: draws.as_deref() };
        let residency = self.residency(&readers, (&plan_vars, &gather_vars, patcher.as_deref()), &rows);
        let rows_per_sample = patches * draws.as_ref().map_or(1, |d| d.copies());
        let tier = self.open_tier(&readers)?;
        let read_once_bytes = self.read_once_bytes(&residency, tier.as_ref());
        self.check_budget(residency.floor_max)?;
        let auto_residency_bytes = self.auto_residency(read_once_bytes, residency.floor_max);
        let unit_chunks = unit_chunks(self.manifest.sample_chunk_size, plan_vars.iter().map(|v| (v.spc, v.offset)));
        let recycle_cap = recycle_cap_bytes(&residency.floor_arrays, &gather_vars, &self.options);
        let recycler =
            Recycler::with_prefault(usize::try_from(recycle_cap).unwrap_or(usize::MAX), self.runtime.prefault);
        let o = &self.options;
        let local = self.storage.reads_are_local();
        let readers_sharded = readers.iter().any(|r| r.geom.shard.is_some());
        let first_reads = first_batch_reads(&readers, residency.first_block_chunks, o.knobs.batch_size);
        let window = ReadWindow::new(self.runtime.pool.parallelism().get(), o.knobs.max_inflight, local, first_reads);
        let policy = &o.read_policy;
        // A local store has no slow tail worth a second request.
        let hedger = policy.hedge.clone().filter(|_| !local).map(Hedger::new);
        let reads = Arc::new(ReadPath {
            storage: Arc::clone(&self.storage),
            executor: Arc::clone(&self.runtime.executor),
            inflight: Arc::new(Semaphore::new(o.knobs.max_inflight)),
            window,
            inflight_now: Arc::new(AtomicUsize::new(0)),
            coalescer: Coalescer::new(policy.coalesce_gap_bytes, policy.coalesce_max_bytes),
            hedger,
            ahead: ReadAhead::new(read_ahead_budget(policy, readers_sharded, residency.floor_max)),
            policy: policy.clone(),
        });
        let engine = Arc::new(Engine {
            storage: self.storage,
            pool: Arc::new(Pool::new(o.knobs.cache_budget_bytes, auto_residency_bytes)),
            cpu: CpuQueue::new(Arc::clone(&self.runtime.pool)),
            runtime: self.runtime,
            arrays: readers,
            reads,
            max_inflight: o.knobs.max_inflight,
            on_bad_chunk: o.knobs.on_bad_chunk,
            bad_chunks: Mutex::new(Vec::new()),
            recycler,
            admissions: AtomicU64::new(0),
            tier,
        });
        Ok(Dataset {
            inner: Arc::new(Inner {
                engine,
                chunk_transform_labels: self.chunk_transforms.iter().map(Scoped::label).collect(),
                vars: self.variables,
                gather_vars: gather_vars.into(),
                plan_vars,
                floor_arrays: residency.floor_arrays,
                manifest: self.manifest,
                options: self.options,
                block_chunks: residency.block_chunks,
                first_block_chunks: residency.first_block_chunks,
                anchor_range,
                patcher,
                regions: self.regions,
                draws,
                rows_per_sample,
                coordinate: self.coordinate,
                unit_chunks,
                epoch: AtomicU64::new(0),
                last_pass: Arc::new(Mutex::new(None)),
                batch_transforms: self.batch_transforms.into(),
                read_once_bytes,
                auto_residency_bytes,
                live_streams: AtomicUsize::new(0),
            }),
        })
    }

    /// The sample-axis length every variable shares.
    fn common_length(&self) -> Result<u64> {
        let lengths: BTreeSet<u64> = self.variables.iter().map(|v| v.geometry.n_samples()).collect();
        match lengths.len() {
            1 => Ok(lengths.into_iter().next().unwrap_or(0)),
            _ => Err(Error::Config(format!(
                "All variables must share the same sample-axis length; got n_samples={:?} for {:?} (arrays {:?}): {}",
                self.variables.iter().map(|v| v.geometry.n_samples()).collect::<Vec<_>>(),
                self.variables.iter().map(|v| v.label.as_str()).collect::<Vec<_>>(),
                self.variables.iter().map(|v| v.geometry.path.as_str()).collect::<Vec<_>>(),
                self.storage.location()
            ))),
        }
    }

    fn check_manifest(&self, n_samples: u64) -> Result<()> {
        if self.manifest.n_samples != n_samples || self.manifest.sample_chunk_size == 0 {
            return Err(Error::Config(format!(
                "the split manifest is for {} samples but the variables have {n_samples}; build the manifest from \
                 one of these variables' geometry",
                self.manifest.n_samples
            )));
        }
        Ok(())
    }

    fn check_transform_scopes(&self) -> Result<()> {
        let known: Vec<&str> = self.arrays.iter().map(ZarrArray::path).collect();
        for t in &self.chunk_transforms {
            let Some(scope) = &t.arrays else { continue };
            let unknown: Vec<&String> = scope.iter().filter(|a| !known.contains(&a.as_str())).collect();
            if !unknown.is_empty() {
                return Err(Error::Config(format!(
                    "applies({scope:?}, {}) names {unknown:?}, which are not arrays in this dataset. Known arrays: \
                     {known:?}",
                    t.transform.name()
                )));
            }
        }
        Ok(())
    }

    fn check_unique_labels(&self) -> Result<()> {
        let mut labels = BTreeSet::new();
        match self.variables.iter().find(|v| !labels.insert(v.label.as_str())) {
            Some(dup) => Err(Error::Config(format!("label {:?} is used twice; give each variable its own", dup.label))),
            None => Ok(()),
        }
    }

    /// One reader per array path (labels over one array share its decode), in first-use order.
    fn readers(&self) -> Result<Readers> {
        let by_path: BTreeMap<&str, &ZarrArray> = self.arrays.iter().map(|a| (a.path(), a)).collect();
        let mut out = Readers { readers: Vec::new(), plan_vars: Vec::new(), gather_vars: Vec::new() };
        for v in &self.variables {
            v.geometry.validate()?;
            let path_id = match out.readers.iter().position(|r| r.geom.path == v.geometry.path) {
                Some(i) => i,
                None => {
                    out.readers.push(self.reader(v, &by_path)?);
                    out.readers.len() - 1
                }
            };
            let reader = &out.readers[path_id];
            if reader.geom.sample_axis != v.geometry.sample_axis {
                return Err(Error::Config(format!(
                    "labels reading array {:?} disagree on the sample axis; use one axis per array",
                    v.geometry.path
                )));
            }
            let path = u32::try_from(path_id).map_err(|_| Error::Config("too many arrays in one dataset".into()))?;
            let spc = v.geometry.sample_chunk_size();
            out.plan_vars.push(PlanVar { path, offset: v.geometry.offset, spc });
            out.gather_vars.push(GatherVar {
                label: v.label.clone(),
                path,
                offset: v.geometry.offset,
                spc,
                dtype: reader.out_dtype,
                inner: reader.out_inner.clone(),
                sample_bytes: usize::try_from(reader.out_sample_bytes())
                    .map_err(|_| Error::Geometry(format!("one sample of {:?} does not fit in memory", v.label)))?,
                patch: None,
                region: Vec::new(),
                picks: Vec::new(),
                part: None,
            });
        }
        Ok(out)
    }

    /// The reader of the array `v` reads, checked against the array's metadata.
    fn reader(&self, v: &Variable, by_path: &BTreeMap<&str, &ZarrArray>) -> Result<ArrayReader> {
        let zarr = by_path.get(v.geometry.path.as_str()).ok_or_else(|| Error::NotFound {
            message: format!("variable {:?} reads array {:?}, which was not opened", v.label, v.geometry.path),
            key: self.storage.location(),
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
        let transforms = self
            .chunk_transforms
            .iter()
            .filter(|t| t.covers(&v.geometry.path))
            .map(|t| Arc::clone(&t.transform))
            .collect();
        let base = ArrayGeometry { offset: 0, ..v.geometry.clone() };
        ArrayReader::new(Arc::new((*zarr).clone()), base, transforms)
    }

    /// The sample mask and weights, checked (`None` when neither is given).
    fn draws(&self, n_samples: u64) -> Result<Option<Arc<Draws>>> {
        let o = &self.options;
        if o.sample_mask.is_none() && o.sample_weights.is_none() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Draws::new(n_samples, o.sample_mask.as_deref(), o.sample_weights.as_deref())?)))
    }

    /// The disk tier, opened with each array's identity (so a changed pipeline is stale).
    fn open_tier(&self, readers: &[ArrayReader]) -> Result<Option<Arc<dyn ChunkTier>>> {
        let Some(opener) = &self.options.tier else { return Ok(None) };
        let location = self.storage.location();
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
        Ok(Some(opener.open(&identities)?))
    }
}

/// The options' rules, as [`DatasetSpec::resolve`](crate::dataset::DatasetSpec::resolve) applies
/// them (options handed to the builder directly, by a caller in Rust or a what-if, get the
/// same checks): the knobs ([`Knobs::checked`](crate::dataset::Knobs::checked)), node affinity, the
/// mesh, the read policy.
fn checked_options(mut o: DatasetOptions) -> Result<DatasetOptions> {
    o.knobs = o.knobs.checked()?;
    if let Some(k) = o.node_ranks {
        crate::ranks::check_node_ranks(k, o.knobs.world_size)?;
    }
    if let Some(m) = &o.model_parallel {
        m.check(o.knobs.world_size, o.node_ranks)?;
    }
    o.read_policy.check()?;
    Ok(o)
}

/// Requests the first batch needs: its chunks (a batch's worth at most, and at most the
/// first block's) times the requests one chunk takes: its tiles, or the shards they lie in
/// (the inner chunks of one shard are read together).
fn first_batch_reads(readers: &[ArrayReader], first_block_chunks: usize, batch_size: usize) -> usize {
    let chunks = first_block_chunks.min(batch_size).max(1);
    readers.iter().map(|r| chunks.saturating_mul(requests_per_chunk(&r.geom))).sum()
}

fn requests_per_chunk(g: &ArrayGeometry) -> usize {
    let count = |unit: &[u64]| -> u64 { g.inner_axes().map(|a| g.shape[a].div_ceil(unit[a]).max(1)).product() };
    let n = match &g.shard {
        None => count(&g.tile),
        Some(shard) => count(shard),
    };
    usize::try_from(n).unwrap_or(usize::MAX)
}
