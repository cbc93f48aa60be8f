//! The one way to build a [`Dataset`]: [`DatasetBuilder`].
//!
//! Every caller (the native backend, the Python and wasm bindings and
//! the tests) says what it wants with the builder's setters and gets a dataset from
//! [`DatasetBuilder::open`] (reads metadata it does not have yet) or
//! [`DatasetBuilder::build`] (no I/O). The defaults (which arrays, their labels, the split)
//! are decided here and nowhere else; [`Assembly`] then checks and wires the parts in named
//! steps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use async_lock::Semaphore;

use super::{Dataset, DatasetOptions, DatasetSpec, Inner, Variable, VariableSpec, VariablesSpec};
use crate::ahead::ReadAhead;
use crate::array::Recycler;
use crate::coords::{Coordinate, LabelSel, group_of, read_agreed_coordinate};
use crate::draws::Draws;
use crate::engine::{ArrayReader, CpuQueue, Engine};
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::hedge::Hedger;
use crate::pass::{GatherVar, VarPart, part_charge_max};
use crate::patch::{AxisPicks, PatchAxis, PatchOptions, PatchedDims, Patcher};
use crate::plan::{FloorArray, PlanVar, block_bytes, residency_floor, widen_block_chunks_over};
use crate::pool::Pool;
use crate::reads::{Coalescer, ReadPath};
use crate::retry::PolicyStorage;
use crate::runtime::{Runtime, Storage};
use crate::shard::unit_chunks;
use crate::shuffle::Split;
use crate::shuffle::chunk_anchors;
use crate::split::{SplitManifest, SplitOptions, split_by_chunk, valid_anchor_range};
use crate::tier::{ArrayIdentity, ChunkTier, array_fingerprint};
use crate::transform::{BatchTransform, Scoped};
use crate::units::human_bytes;
use crate::window::ReadWindow;
use crate::zarr::{ZarrArray, open_array, open_arrays};

/// Which arrays a dataset reads, before they are opened.
#[derive(Debug, Clone, Default)]
enum Selection {
    /// Every data array of the store (CF coordinates skipped), labelled by path.
    #[default]
    Discover,
    /// These array paths, labelled by path, in this order.
    Paths(Vec<String>),
    /// Labelled geometries: windows (`shift`), several labels over one array.
    Variables(Vec<Variable>),
    /// Labelled variables as data (a spec's `variables`), resolved against the arrays'
    /// metadata once it is read.
    Labelled(Vec<(String, VariableSpec)>),
}

/// Everything a dataset is made of, set piece by piece; see the module docs.
///
/// ```
/// # // The simulated store and clock are behind core's `testing` feature (on in the test command).
/// # #[cfg(feature = "testing")] {
/// # use std::sync::Arc;
/// # use insitubatch_core::{Dataset, Knobs, Runtime, runtime::InlinePool};
/// # use insitubatch_core::testing::{MemoryStorage, SimExecutor, write_f32_array};
/// let storage = MemoryStorage::new();
/// write_f32_array(&storage, "t2m", &[8, 2], &[4, 2], None, None, |i| i as f32);
/// let sim = SimExecutor::new();
/// let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
/// let builder = Dataset::builder(Arc::new(storage), runtime)
///     .arrays(["t2m"])
///     .options(Knobs { batch_size: 2, ..Default::default() }.into());
/// let ds = sim.run(builder.open(), std::time::Duration::from_secs(5)).unwrap().unwrap();
/// assert_eq!(ds.variables()[0].label, "t2m");
/// # }
/// ```
#[derive(Clone)]
pub struct DatasetBuilder {
    storage: Arc<dyn Storage>,
    runtime: Runtime,
    selection: Selection,
    sample_axis: usize,
    opened: Vec<ZarrArray>,
    manifest: Option<SplitManifest>,
    split: Option<SplitOptions>,
    options: DatasetOptions,
    chunk_transforms: Vec<Scoped>,
    batch_transforms: Vec<Arc<dyn BatchTransform>>,
    /// The sample axis's coordinate, once read ([`Self::read_coordinate`]).
    coordinate: Option<Arc<Coordinate>>,
    /// With `coords` and patches: the coordinates of the patched axes the store has.
    patch_coordinates: Vec<Arc<Coordinate>>,
    /// Regions `sel` picked on inner axes (`read_coordinate`).
    regions: Vec<Region>,
}

impl std::fmt::Debug for DatasetBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetBuilder")
            .field("location", &self.storage.location())
            .field("selection", &self.selection)
            .field("sample_axis", &self.sample_axis)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Dataset {
    /// Start describing a dataset over `storage`, run on `runtime`.
    pub fn builder(storage: Arc<dyn Storage>, runtime: Runtime) -> DatasetBuilder {
        DatasetBuilder {
            storage,
            runtime,
            selection: Selection::Discover,
            sample_axis: 0,
            opened: Vec::new(),
            manifest: None,
            split: None,
            options: DatasetOptions::default(),
            chunk_transforms: Vec::new(),
            batch_transforms: Vec::new(),
            coordinate: None,
            patch_coordinates: Vec::new(),
            regions: Vec::new(),
        }
    }
}

impl DatasetBuilder {
    /// Read these arrays, each labelled by its path (default: every data array).
    #[must_use]
    pub fn arrays<S: Into<String>>(mut self, paths: impl IntoIterator<Item = S>) -> Self {
        self.selection = Selection::Paths(paths.into_iter().map(Into::into).collect());
        self
    }

    /// Read these labelled geometries (windows, several labels per array). Overrides
    /// [`Self::arrays`] and [`Self::sample_axis`]: each geometry carries its own axis.
    #[must_use]
    pub fn variables(mut self, variables: Vec<Variable>) -> Self {
        self.selection = Selection::Variables(variables);
        self
    }

    /// The sample axis of arrays labelled by path (default 0).
    #[must_use]
    pub fn sample_axis(mut self, axis: usize) -> Self {
        self.sample_axis = axis;
        self
    }

    /// Arrays whose metadata the caller already read: they are not read again, and with
    /// no [`Self::arrays`] or [`Self::variables`] they are the ones the dataset reads.
    #[must_use]
    pub fn opened(mut self, arrays: Vec<ZarrArray>) -> Self {
        self.opened = arrays;
        self
    }

    /// Use this split manifest (default: [`Self::split`] applied to the first variable).
    #[must_use]
    pub fn manifest(mut self, manifest: SplitManifest) -> Self {
        self.manifest = Some(manifest);
        self
    }

    /// How to split when no manifest is given (default: [`SplitOptions::default`] with the
    /// dataset's seed).
    #[must_use]
    pub fn split(mut self, split: SplitOptions) -> Self {
        self.split = Some(split);
        self
    }

    /// Everything the spec says (resolved by [`DatasetSpec::resolve`]): the options, the
    /// split, the variables and their sample axis. What is program-side (a tier, observers,
    /// labelled geometries, transforms) is set by the other methods and kept. The spec's
    /// storage, cache-directory, thread and metrics options are the target's to apply (the
    /// native `OpenOptions`, the wasm `open()`), from [`DatasetSpec::resolve`]'s result.
    ///
    /// # Errors
    /// What [`DatasetSpec::resolve`] refuses.
    pub fn spec(self, spec: &DatasetSpec) -> Result<Self> {
        Ok(self.resolved(spec.resolve()?))
    }

    /// [`Self::spec`] from a spec already resolved.
    #[must_use]
    pub fn resolved(mut self, r: super::ResolvedSpec) -> Self {
        let DatasetOptions { tier, observers, .. } = std::mem::take(&mut self.options);
        self.options = DatasetOptions { tier, observers, ..r.dataset };
        self.split = Some(r.split);
        self.sample_axis = r.sample_axis;
        match r.variables {
            None => {}
            Some(VariablesSpec::Paths(paths)) => self.selection = Selection::Paths(paths),
            Some(VariablesSpec::Labelled(labelled)) => self.selection = Selection::Labelled(labelled),
        }
        self
    }

    /// Resolved options, as [`DatasetSpec::resolve`] makes them (checked again at build).
    /// Most callers pass a spec ([`Self::spec`]); this replaces the options' tier and
    /// observers too.
    #[must_use]
    pub fn options(mut self, options: DatasetOptions) -> Self {
        self.options = options;
        self
    }

    /// A disk tier for decoded chunks, opened at build with each array's identity.
    #[must_use]
    pub fn tier(mut self, tier: Arc<dyn crate::TierOpener>) -> Self {
        self.options.tier = Some(tier);
        self
    }

    /// Told of every pass's report when it ends (exporters, callbacks), beside any already set.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn crate::PassObserver>) -> Self {
        self.options.observers.push(observer);
        self
    }

    /// Chunk transforms, run on the pool and cached with the chunk.
    #[must_use]
    pub fn chunk_transforms(mut self, transforms: Vec<Scoped>) -> Self {
        self.chunk_transforms = transforms;
        self
    }

    /// Batch transforms, run after the gather.
    #[must_use]
    pub fn batch_transforms(mut self, transforms: Vec<Arc<dyn BatchTransform>>) -> Self {
        self.batch_transforms = transforms;
        self
    }

    /// Read the metadata of the arrays not yet [`Self::opened`], then [`Self::build`].
    ///
    /// # Errors
    /// Whatever opening an array reports ([`Error::NotFound`], [`Error::Metadata`]), and
    /// whatever [`Self::build`] refuses.
    pub async fn open(self) -> Result<Dataset> {
        self.read_metadata().await?.read_coordinate().await?.build()
    }

    /// With `coords` or `sel` in the options: read the sample axis's coordinate (`coords.rs`)
    /// and apply `sel` as the split's sample range. With variables in several groups (or
    /// joined stores, `join.rs`), check that the coordinates they have agree. Nothing to do
    /// otherwise.
    ///
    /// # Errors
    /// [`Error::Config`] for a `sel` on another dimension, on a store without the coordinate,
    /// or next to an explicit manifest, and for groups whose coordinates disagree; what
    /// reading the coordinate reports.
    pub async fn read_coordinate(mut self) -> Result<Self> {
        let variables = self.resolve_variables()?;
        let storage = PolicyStorage::new(
            Arc::clone(&self.storage),
            Arc::clone(&self.runtime.executor),
            self.options.read_policy.clone(),
        );
        let on_samples = self.read_regions(&storage, &variables).await?;
        let paths: Vec<&str> = variables.iter().map(|v| v.geometry.path.as_str()).collect();
        let several_groups = paths.iter().any(|p| group_of(p) != group_of(paths[0]));
        let wanted = self.options.knobs.coords || on_samples.is_some();
        let one_length = variables.iter().all(|v| v.geometry.n_samples() == variables[0].geometry.n_samples());
        // Unequal lengths are refused by `build`, naming every variable and store.
        if !one_length || (!wanted && !several_groups) {
            return Ok(self);
        }
        let g = &variables[0].geometry;
        let dim = self.find_opened(&g.path)?.dimension_names().and_then(|d| d.get(g.sample_axis).cloned().flatten());
        let coordinate = match &dim {
            Some(d) => read_agreed_coordinate(&storage, &paths, d, g.n_samples(), wanted).await?,
            None => None,
        };
        if let Some(sel) = on_samples {
            let Some(c) = coordinate.as_ref().filter(|c| c.name == sel.dim) else {
                return Err(Error::option(
                    "sel",
                    format!(
                        "`sel` on {:?} needs the sample axis's coordinate of that name; the sample axis is {} and the \
                         store has {}",
                        sel.dim,
                        dim.as_deref().map_or("unnamed".to_string(), |d| format!("{d:?}")),
                        coordinate
                            .as_ref()
                            .map_or("no coordinate array for it".to_string(), |c| format!("{:?}", c.name))
                    ),
                ));
            };
            if self.manifest.is_some() {
                return Err(Error::option(
                    "sel",
                    "`sel` on the sample axis with a manifest: the manifest already fixes the samples; pass one",
                ));
            }
            let picked = sel.positions(c).map_err(|e| e.for_option("sel"))?;
            let (start, stop) = (picked.iter().min().copied().unwrap_or(0), picked.iter().max().map_or(0, |m| m + 1));
            let split =
                self.split.take().unwrap_or(SplitOptions { seed: self.options.knobs.seed, ..SplitOptions::default() });
            let range = match split.sample_range {
                Some((a, b)) => (a.max(start), b.min(stop)),
                None => (start, stop),
            };
            self.split = Some(SplitOptions { sample_range: Some(range), ..split });
            // The range snaps outward to whole chunks; the mask keeps exactly the selection (a
            // user's mask of the wrong length is left for `Draws` to refuse).
            let n = g.n_samples();
            let mut keep = vec![false; n as usize];
            for &t in &picked {
                keep[t as usize] = true;
            }
            let mask = self.options.sample_mask.take();
            self.options.sample_mask = Some(match mask {
                Some(m) if m.len() as u64 != n => m,
                m => keep.iter().enumerate().map(|(t, &k)| k && m.as_ref().is_none_or(|m| m[t])).collect(),
            });
        }
        self.coordinate = coordinate.filter(|_| wanted).map(Arc::new);
        self.patch_coordinates = self.read_patch_coordinates(&storage, &variables).await;
        Ok(self)
    }

    /// The regions `sel` picks on inner axes (a dimension some variable has off its sample
    /// axis), each read from that dimension's coordinate into [`Self::regions`]; returns the
    /// selection left for the sample axis, if any.
    ///
    /// # Errors
    /// [`Error::Config`] for two selections left for the sample axis, an inner dimension
    /// without a coordinate array, or bounds that select nothing; what reading reports.
    async fn read_regions(&mut self, storage: &dyn Storage, variables: &[Variable]) -> Result<Option<LabelSel>> {
        let mut on_samples = Vec::new();
        for sel in self.options.sel.clone() {
            let found = variables.iter().find_map(|v| {
                let names = self.find_opened(&v.geometry.path).ok()?.dimension_names()?;
                let a = names.iter().position(|n| n.as_deref() == Some(sel.dim.as_str()))?;
                (a != v.geometry.sample_axis).then(|| (v, v.geometry.shape[a]))
            });
            let Some((v, extent)) = found else {
                on_samples.push(sel);
                continue;
            };
            let Some(c) = crate::coords::read_coordinate(storage, &v.geometry.path, &sel.dim, extent).await? else {
                return Err(Error::option(
                    "sel",
                    format!(
                        "`sel` on {:?} needs its coordinate: a 1-d array {:?} of {extent} values beside {:?}; select \
                         by index with a patch, or add the coordinate to the store",
                        sel.dim, sel.dim, v.geometry.path
                    ),
                ));
            };
            let positions = sel.positions(&c).map_err(|e| e.for_option("sel"))?;
            self.regions.push(Region::new(sel.dim, positions, extent));
        }
        if on_samples.len() > 1 {
            let dims: Vec<&str> = on_samples.iter().map(|s| s.dim.as_str()).collect();
            return Err(Error::option(
                "sel",
                format!(
                    "`sel` names {dims:?}, which are not inner dimensions of the variables, and only one can be the \
                     sample axis; name the sample axis's coordinate and inner dimensions"
                ),
            ));
        }
        Ok(on_samples.pop())
    }

    /// With `coords` and patches: each patched axis's coordinate (a 1-d array named after
    /// its dimension beside the first variable that has the axis), for the values of each
    /// patch. One the store lacks, or cannot be read as numbers, is left out: patches work
    /// without it, as before coordinates were asked for.
    async fn read_patch_coordinates(&self, storage: &dyn Storage, variables: &[Variable]) -> Vec<Arc<Coordinate>> {
        let Some(patch) =
            self.options.patch.as_ref().filter(|_| self.options.knobs.coords || !self.options.sel.is_empty())
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (axis, _) in &patch.size {
            let found = variables.iter().find_map(|v| {
                let names = self.find_opened(&v.geometry.path).ok()?.dimension_names()?;
                let a = match axis {
                    PatchAxis::Name(n) => names.iter().position(|x| x.as_deref() == Some(n.as_str()))?,
                    PatchAxis::Axis(a) => *a,
                };
                Some((v, names.get(a)?.clone()?, *v.geometry.shape.get(a)?))
            });
            let Some((v, name, extent)) = found else { continue };
            if let Ok(Some(c)) = crate::coords::read_coordinate(storage, &v.geometry.path, &name, extent).await {
                out.push(Arc::new(c));
            }
        }
        out
    }

    /// Read the metadata of the selected arrays not yet [`Self::opened`] (all data arrays,
    /// discovered, when none is selected), under the options' read policy: a 503 on
    /// `zarr.json` is retried like a 503 on a chunk. For a caller that labels variables
    /// from the arrays' metadata ([`Self::opened_arrays`]) before [`Self::build`].
    ///
    /// # Errors
    /// Whatever opening an array reports ([`Error::NotFound`], [`Error::Metadata`],
    /// [`Error::Storage`] once the retries are spent).
    pub async fn read_metadata(mut self) -> Result<Self> {
        let missing: Option<Vec<String>> = match &self.selection {
            Selection::Discover if self.opened.is_empty() => None,
            Selection::Discover => Some(Vec::new()),
            Selection::Paths(paths) => Some(paths.clone()),
            Selection::Variables(vars) => Some(distinct(vars.iter().map(|v| v.geometry.path.clone()))),
            Selection::Labelled(labelled) => Some(VariablesSpec::Labelled(labelled.clone()).paths()),
        };
        let storage = PolicyStorage::new(
            Arc::clone(&self.storage),
            Arc::clone(&self.runtime.executor),
            self.options.read_policy.clone(),
        );
        match missing {
            None => self.opened = open_arrays(&storage, None).await?,
            Some(paths) => {
                for path in paths {
                    if !self.opened.iter().any(|a| a.path() == path) {
                        let array = open_array(&storage, &path).await?;
                        self.opened.push(array);
                    }
                }
            }
        }
        Ok(self)
    }

    /// The dataset knobs as set so far ([`Self::options`]).
    pub(crate) fn dataset_options(&self) -> &DatasetOptions {
        &self.options
    }

    /// The arrays whose metadata has been read ([`Self::opened`], [`Self::read_metadata`]).
    pub fn opened_arrays(&self) -> &[ZarrArray] {
        &self.opened
    }

    /// Build the dataset from arrays already [`Self::opened`]; no I/O.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a variable whose array was not opened; [`Error::Config`] for
    /// unequal sample-axis lengths, a manifest that does not match, transforms scoped to
    /// unknown arrays, zero knobs, or a budget below the floor; [`Error::Geometry`] for
    /// geometries that disagree with the arrays' metadata.
    pub fn build(self) -> Result<Dataset> {
        let variables = self.resolve_variables()?;
        let manifest = match self.manifest {
            Some(m) => m,
            None => {
                let split =
                    self.split.unwrap_or(SplitOptions { seed: self.options.knobs.seed, ..SplitOptions::default() });
                split_by_chunk(&variables[0].geometry, &split)?
            }
        };
        Assembly {
            coordinate: self.coordinate,
            patch_coordinates: self.patch_coordinates,
            regions: self.regions,
            storage: self.storage,
            runtime: self.runtime,
            arrays: self.opened,
            variables,
            manifest,
            options: self.options,
            chunk_transforms: self.chunk_transforms,
            batch_transforms: self.batch_transforms,
        }
        .assemble()
    }

    /// The variables the dataset will read, labelled, over the arrays opened so far: as
    /// given, resolved from the spec's labelled variables, or one per selected (or
    /// discovered) array labelled by its path. For a caller that adds variables of its own
    /// (JS's windows, `shift`) before [`Self::variables`].
    ///
    /// # Errors
    /// As [`Self::build`] for a variable whose array was not opened or has no such axis.
    pub fn resolved_variables(&self) -> Result<Vec<Variable>> {
        self.resolve_variables()
    }

    /// The labelled geometries: as given, or one per selected array labelled by its path.
    fn resolve_variables(&self) -> Result<Vec<Variable>> {
        let by_path = |paths: &[String]| -> Result<Vec<Variable>> {
            paths
                .iter()
                .map(|p| {
                    let a = self.find_opened(p)?;
                    Ok(Variable { label: a.path().to_string(), geometry: a.geometry(self.sample_axis)? })
                })
                .collect()
        };
        let variables = match &self.selection {
            Selection::Variables(v) => v.clone(),
            Selection::Labelled(labelled) => labelled
                .iter()
                .map(|(label, v)| {
                    let geometry = self.find_opened(&v.path)?.geometry(v.sample_axis.unwrap_or(self.sample_axis))?;
                    Ok(Variable { label: label.clone(), geometry: geometry.shift(v.shift) })
                })
                .collect::<Result<_>>()?,
            Selection::Paths(paths) => by_path(paths)?,
            Selection::Discover => by_path(&self.opened.iter().map(|a| a.path().to_string()).collect::<Vec<_>>())?,
        };
        if variables.is_empty() {
            return Err(Error::Config(format!(
                "a dataset needs at least one variable; name the arrays to read: {}",
                self.storage.location()
            )));
        }
        Ok(variables)
    }

    fn find_opened(&self, path: &str) -> Result<&ZarrArray> {
        let path = path.trim_matches('/');
        self.opened.iter().find(|a| a.path() == path).ok_or_else(|| Error::NotFound {
            message: format!(
                "array {path:?} was not opened; opened: {:?}",
                self.opened.iter().map(ZarrArray::path).collect::<Vec<_>>()
            ),
            key: self.storage.location(),
        })
    }
}

/// What a chunk holds in rows: its drawable samples, their patches and weighted copies.
struct ChunkRows<'a> {
    anchor_range: (u64, u64),
    patches: u64,
    draws: Option<&'a Draws>,
}

impl ChunkRows<'_> {
    /// The rows chunk `c` draws in every epoch (`None`: it can never draw one, so no block
    /// holds it).
    fn guaranteed(&self, c: u64, ref_spc: u64, n_samples: u64) -> Option<u64> {
        let samples = chunk_anchors(c, ref_spc, n_samples, self.anchor_range);
        let n = match self.draws {
            None if samples.is_empty() => return None,
            None => samples.end - samples.start,
            Some(d) if !samples.clone().any(|t| d.keeps(t)) => return None,
            Some(d) => samples.map(|t| d.guaranteed(t)).sum(),
        };
        Some(n * self.patches)
    }
}

/// Where `options`' axes lie in the variable `label` read by `reader`: the patch dimensions
/// (positions among its inner dimensions), their names and lengths; `None` when it has none
/// of them. `what` says what the axes are for, in a refusal ("cut patches from").
///
/// # Errors
/// [`Error::Config`] when it has some of them only, a patched axis is its sample axis, or a
/// chunk transform changes its inner shape (the patch would not be where the names say).
fn patched_axes(options: &PatchOptions, label: &str, reader: &ArrayReader, what: &str) -> Result<Option<PatchedVar>> {
    let g = &reader.geom;
    let names = reader.zarr.dimension_names().unwrap_or_default();
    let physical: Vec<Option<usize>> = options
        .size
        .iter()
        .map(|(axis, _)| match axis {
            PatchAxis::Axis(a) => (*a < g.shape.len()).then_some(*a),
            PatchAxis::Name(n) => names.iter().position(|d| d.as_deref() == Some(n.as_str())),
        })
        .collect();
    if physical.iter().all(Option::is_none) {
        return Ok(None);
    }
    let refuse = |why: String| Err(Error::Config(format!("cannot {what} {label:?}: {why}")));
    let Some(physical) = physical.into_iter().collect::<Option<Vec<usize>>>() else {
        return refuse(format!("it has some of the patched axes only ({:?} of {names:?})", options.size));
    };
    if let Some(a) = physical.iter().find(|&&a| a == g.sample_axis) {
        return refuse(format!("axis {a} is its sample axis; name an inner axis"));
    }
    let inner: Vec<usize> = g.inner_shape().iter().map(|&d| d as usize).collect();
    if reader.out_inner != inner {
        return refuse(format!(
            "a chunk transform changes its sample shape from {inner:?} to {:?}; scope the transform to other \
             arrays",
            reader.out_inner
        ));
    }
    let inner_axes: Vec<usize> = g.inner_axes().collect();
    let dims = physical.iter().map(|a| inner_axes.iter().position(|x| x == a).unwrap_or(0)).collect();
    let labels =
        physical.iter().map(|&a| names.get(a).cloned().flatten().unwrap_or_else(|| format!("axis{a}"))).collect();
    Ok(Some(PatchedVar {
        dims: PatchedDims(dims),
        names: labels,
        extent: physical.iter().map(|&a| g.shape[a]).collect(),
    }))
}

/// A region `sel` picked on an inner dimension of `extent` positions: `start .. start + len`,
/// or, for labels that are not one ascending run, the positions `picks` in their order.
/// Every row is cut to it; on a patched axis the patches lie inside it (a run only).
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub dim: String,
    pub start: u64,
    pub len: u64,
    pub extent: u64,
    pub picks: Option<Arc<[u64]>>,
}

impl Region {
    fn new(dim: String, positions: Vec<u64>, extent: u64) -> Self {
        let start = positions.first().copied().unwrap_or(0);
        let run = positions.iter().enumerate().all(|(i, &p)| p == start + i as u64);
        let len = positions.len() as u64;
        Self { dim, start, len, extent, picks: (!run).then(|| positions.into()) }
    }
}

/// One variable's patched axes: where they lie among its inner dimensions, their names and
/// lengths.
struct PatchedVar {
    dims: PatchedDims,
    names: Vec<String>,
    extent: Vec<u64>,
}

/// `items` without repeats, in first-seen order.
fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// The resolved parts of a dataset, checked and wired by [`Assembly::assemble`].
struct Assembly {
    coordinate: Option<Arc<Coordinate>>,
    regions: Vec<Region>,
    patch_coordinates: Vec<Arc<Coordinate>>,
    storage: Arc<dyn Storage>,
    runtime: Runtime,
    arrays: Vec<ZarrArray>,
    variables: Vec<Variable>,
    manifest: SplitManifest,
    options: DatasetOptions,
    chunk_transforms: Vec<Scoped>,
    batch_transforms: Vec<Arc<dyn BatchTransform>>,
}

/// One reader per distinct array path, and what the plan and the gather need per label.
struct Readers {
    readers: Vec<ArrayReader>,
    plan_vars: Vec<PlanVar>,
    gather_vars: Vec<GatherVar>,
}

/// The residency arithmetic fixed at construction.
struct Residency {
    block_chunks: usize,
    first_block_chunks: usize,
    floor_arrays: Vec<FloorArray>,
    floor_max: u64,
    shares_chunks: bool,
}

impl Assembly {
    fn assemble(mut self) -> Result<Dataset> {
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

    /// Under a rank mesh, this rank's part of each row of the variables with the split axis
    /// (`mesh.rs`); the others are read whole.
    ///
    /// # Errors
    /// [`Error::Config`] when no variable has the axis, it is a sample axis, or a row is
    /// shorter on it than the group has ranks (a rank would get nothing).
    fn parts(&self, readers: &[ArrayReader], gather_vars: &mut [GatherVar], patcher: Option<&Patcher>) -> Result<()> {
        let Some(mp) = &self.options.model_parallel else { return Ok(()) };
        let (_, p) = mp.place(self.options.knobs.rank);
        let axis = PatchOptions::grid(vec![(mp.axis.clone(), 1)]);
        let mut found = false;
        for gv in gather_vars.iter_mut() {
            let Some(PatchedVar { dims, names, extent }) =
                patched_axes(&axis, &gv.label, &readers[gv.path as usize], "split for model_parallel the rows of")
                    .map_err(|e| e.for_option("model_parallel_axis"))?
            else {
                continue;
            };
            let dim = dims.0[0];
            if gv.picks.iter().any(|p| p.dim == dim) {
                return Err(Error::option(
                    "model_parallel_axis",
                    format!(
                        "`model_parallel` splits rows along {}, on which `sel` lists labels; split another axis",
                        names[0]
                    ),
                ));
            }
            // The row's box on that axis: the patch, where the axis is patched, else the field.
            let patched = gv
                .patch
                .as_ref()
                .zip(patcher)
                .and_then(|(d, pt)| d.0.iter().position(|&x| x == dim).map(|i| pt.size[i]));
            let region = gv.region.iter().find(|r| r.dim == dim).map(|r| r.len);
            let len = patched.or(region).unwrap_or(extent[0]);
            if len < mp.size as u64 {
                return Err(Error::option(
                    "model_parallel",
                    format!(
                        "{:?} has {len} elements on {} for `model_parallel`={}: every rank of a group needs a part; \
                         split another axis or use a smaller group",
                        gv.label, names[0], mp.size
                    ),
                ));
            }
            let (start, part_len) = crate::mesh::part(p, mp.size, len);
            gv.part = Some(VarPart { dim, name: names[0].clone(), start, len: part_len });
            found = true;
        }
        if !found {
            return Err(Error::option(
                "model_parallel_axis",
                format!(
                    "`model_parallel` splits rows along {} but no variable has it; name a dimension from the arrays' \
                     dimension_names or a physical axis index (`model_parallel_axis`)",
                    mp.axis
                ),
            ));
        }
        Ok(())
    }

    /// The sample mask and weights, checked (`None` when neither is given).
    fn draws(&self, n_samples: u64) -> Result<Option<Arc<Draws>>> {
        let o = &self.options;
        if o.sample_mask.is_none() && o.sample_weights.is_none() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Draws::new(n_samples, o.sample_mask.as_deref(), o.sample_weights.as_deref())?)))
    }

    /// The patch arithmetic, with each patched variable's patch dimensions set in `gather_vars`
    /// (`None` without patches). A variable with every patched axis is patched, one with none
    /// is read whole; one with some, or patched axes of another length, is refused.
    fn patcher(&self, readers: &[ArrayReader], gather_vars: &mut [GatherVar]) -> Result<Option<Arc<Patcher>>> {
        let Some(options) = &self.options.patch else { return Ok(None) };
        if options.size.is_empty() {
            return Err(Error::option(
                "patch",
                "`patch` names no axis; give a size per patched axis, e.g. {\"lat\": 128}",
            ));
        }
        let mut field: Option<(String, Vec<String>, Vec<u64>)> = None;
        for gv in gather_vars.iter_mut() {
            let reader = &readers[gv.path as usize];
            let Some(PatchedVar { dims, names, extent }) =
                patched_axes(options, &gv.label, reader, "cut patches from").map_err(|e| e.for_option("patch"))?
            else {
                continue;
            };
            match &field {
                Some((first, _, e)) if *e != extent => {
                    return Err(Error::option(
                        "patch",
                        format!(
                            "patched axes have length {e:?} in {first:?} but {extent:?} in {:?}; patch variables of \
                             one grid, or name the arrays to read",
                            gv.label
                        ),
                    ));
                }
                Some(_) => {}
                None => field = Some((gv.label.clone(), names, extent)),
            }
            gv.patch = Some(dims);
        }
        let Some((_, names, extent)) = field else {
            let axes: Vec<String> = options.size.iter().map(|(a, _)| a.to_string()).collect();
            return Err(Error::option(
                "patch",
                format!(
                    "`patch` names {} but no variable has {}; name dimensions from the arrays' dimension_names or \
                     _ARRAY_DIMENSIONS, or physical axis indices",
                    axes.join(", "),
                    if axes.len() == 1 { "it" } else { "them all" }
                ),
            ));
        };
        if let Some(r) = self.regions.iter().find(|r| r.picks.is_some() && names.contains(&r.dim)) {
            return Err(Error::option(
                "sel",
                format!(
                    "`patch` cuts {:?} into runs of positions, and `sel` lists labels on it that are not one run; \
                     select a range on a patched axis",
                    r.dim
                ),
            ));
        }
        let region =
            |d: &String, e: u64| self.regions.iter().find(|r| r.dim == *d).map_or((0, e), |r| (r.start, r.len));
        let (offset, span): (Vec<u64>, Vec<u64>) = names.iter().zip(&extent).map(|(d, &e)| region(d, e)).unzip();
        let mut patcher = Patcher::new(options, names, span)?;
        patcher.offset = offset;
        patcher.coordinates = (patcher.dims.iter().zip(&extent))
            .map(|(d, &e)| self.patch_coordinates.iter().find(|c| c.name == *d && c.len() as u64 == e).cloned())
            .collect();
        Ok(Some(Arc::new(patcher)))
    }

    /// Cut each variable's rows to the regions `sel` picked on its inner axes that are not
    /// patched (on a patched axis the patcher keeps the patches inside the region).
    ///
    /// # Errors
    /// [`Error::Config`] for a variable whose axis has another length than the coordinate the
    /// region was read from, or one whose chunk transform changes its sample shape.
    fn cut_to_regions(&self, readers: &[ArrayReader], gather_vars: &mut [GatherVar]) -> Result<()> {
        for r in &self.regions {
            let axis = PatchOptions::grid(vec![(PatchAxis::Name(r.dim.clone()), 1)]);
            for gv in gather_vars.iter_mut() {
                let reader = &readers[gv.path as usize];
                let Some(PatchedVar { dims, names, extent }) =
                    patched_axes(&axis, &gv.label, reader, "select on").map_err(|e| e.for_option("sel"))?
                else {
                    continue;
                };
                if extent[0] != r.extent {
                    return Err(Error::option(
                        "sel",
                        format!(
                            "`sel` on {:?}: {:?} has {} positions on it but its coordinate {}; select on variables of \
                             one grid, or name the arrays to read",
                            r.dim, gv.label, extent[0], r.extent
                        ),
                    ));
                }
                let dim = dims.0[0];
                if gv.patch.as_ref().is_some_and(|p| p.0.contains(&dim)) {
                    continue;
                }
                match &r.picks {
                    Some(positions) => gv.picks.push(AxisPicks::new(dim, Arc::clone(positions))),
                    None => gv.region.push(VarPart { dim, name: names[0].clone(), start: r.start, len: r.len }),
                }
            }
        }
        Ok(())
    }

    /// Block size (widened so a block holds a batch of rows) and the residency floor over
    /// every view.
    fn residency(
        &self,
        readers: &[ArrayReader],
        (plan_vars, gather_vars, patcher): (&[PlanVar], &[GatherVar], Option<&Patcher>),
        rows: &ChunkRows<'_>,
    ) -> Residency {
        let m = &self.manifest;
        let o = &self.options;
        let ref_spc = m.sample_chunk_size;
        let all_chunks = m.chunks_of(Split::All);
        // Blocks are widened on the rows each chunk draws in every epoch.
        let guaranteed: Vec<u64> =
            all_chunks.iter().filter_map(|&c| rows.guaranteed(c, ref_spc, m.n_samples)).collect();
        let widen = |asked: usize| widen_block_chunks_over(asked, o.knobs.batch_size, guaranteed.clone());
        let block_chunks = widen(o.knobs.block_chunks);
        if block_chunks > o.knobs.block_chunks {
            tracing::info!(
                requested = o.knobs.block_chunks,
                block_chunks,
                "block_chunks widened so a block holds a batch"
            );
        }
        // A smaller first block must hold a batch too, or the first batch would reach into
        // the second block and wait for its chunks after all.
        let first_block_chunks =
            o.knobs.first_block_chunks.map_or(block_chunks, |asked| widen(asked).min(block_chunks));
        let floor_arrays: Vec<FloorArray> = (0u32..)
            .zip(readers)
            .map(|(i, r)| FloorArray {
                n_chunks: r.geom.n_chunks(),
                max_slot_bytes: self.slot_bytes_max((i, r), gather_vars, patcher, rows),
                vars: plan_vars.iter().filter(|v| v.path == i).cloned().collect(),
            })
            .collect();
        let floor_max = Split::ALL
            .iter()
            .map(|&s| residency_floor(&floor_arrays, block_chunks as u64, m.chunks_of(s).len() as u64, ref_spc))
            .max()
            .unwrap_or(0);
        let shares_chunks = plan_vars.iter().any(|v| v.shares_chunks(ref_spc));
        Residency { block_chunks, first_block_chunks, floor_arrays, floor_max, shares_chunks }
    }

    /// The most one chunk of array `i` holds: all of it, or, where passes read it in part
    /// (`pass::plan_tiles`), the tiles its rows can touch. Not under a disk tier (whole
    /// chunks) nor with weights (a sample drawn several times puts more rows in a block).
    fn slot_bytes_max(
        &self,
        (i, r): (u32, &ArrayReader),
        gather_vars: &[GatherVar],
        patcher: Option<&Patcher>,
        rows: &ChunkRows<'_>,
    ) -> u64 {
        let whole = r.max_charge();
        if self.options.tier.is_some() || rows.draws.is_some() {
            return whole;
        }
        let vars: Vec<&GatherVar> = gather_vars.iter().filter(|v| v.path == i).collect();
        if vars.is_empty() {
            return whole;
        }
        let chunk_rows = r.geom.sample_chunk_size().saturating_mul(rows.patches);
        part_charge_max(r, &vars, patcher, chunk_rows).map_or(whole, |part| part.min(whole))
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

    /// The automatic budget that keeps every chunk read once per epoch.
    ///
    /// Windows under shuffle read a chunk from several blocks. Holding it from first use to
    /// last costs about the whole split; with a persisting tier a block's chunks are let go
    /// as it drains and revived locally, so the floor is enough.
    fn read_once_bytes(&self, r: &Residency, tier: Option<&Arc<dyn ChunkTier>>) -> u64 {
        let revivable = tier.is_some_and(|t| t.persists());
        if r.shares_chunks && self.options.knobs.shuffle && !revivable {
            let train_chunks = self.manifest.chunks_of(Split::Train).len() as u64;
            block_bytes(&r.floor_arrays, train_chunks, self.manifest.sample_chunk_size).max(r.floor_max)
        } else {
            r.floor_max
        }
    }

    /// The automatic residency: read-once, but within [`auto_budget_cap`] of the memory the
    /// runtime has; never below the floor, which every pass needs. Below read-once the plan
    /// re-reads chunks shared between blocks, and `describe()` says how much.
    fn auto_residency(&self, read_once: u64, floor_max: u64) -> u64 {
        match auto_budget_cap(self.runtime.memory_available) {
            Some(cap) => read_once.min(cap).max(floor_max),
            None => read_once,
        }
    }

    fn check_budget(&self, floor_max: u64) -> Result<()> {
        let Some(budget) = self.options.knobs.cache_budget_bytes else { return Ok(()) };
        if budget < floor_max {
            return Err(Error::option(
                "cache_budget_bytes",
                format!(
                    "`cache_budget_bytes`={budget} is below this run's residency floor of {floor_max} bytes ({}): two \
                     shuffle blocks of chunks must fit. Raise it, lower `block_chunks` or `batch_size`, or leave it \
                     unset to size it automatically",
                    human_bytes(floor_max)
                ),
            ));
        }
        match self.runtime.memory_available {
            Some(available) if budget > available => Err(Error::option(
                "cache_budget_bytes",
                format!(
                    "`cache_budget_bytes`={budget} ({}) is more than the {available} bytes ({}) of memory available to \
                     this process: pass at most {available}, or leave it unset to size it automatically",
                    human_bytes(budget),
                    human_bytes(available)
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// The automatic budget plans within half the memory the runtime has: the other half is
/// for batches, reads in flight, the caller's model and framework.
const AUTO_BUDGET_SHARE_DIVISOR: u64 = 2;

/// The most an automatic budget may take of `memory_available` (`None`: no cap known).
pub(super) fn auto_budget_cap(memory_available: Option<u64>) -> Option<u64> {
    memory_available.map(|m| m / AUTO_BUDGET_SHARE_DIVISOR)
}

/// The options' rules, as [`DatasetSpec::resolve`](super::DatasetSpec::resolve) applies
/// them (options handed to the builder directly, by a caller in Rust or a what-if, get the
/// same checks): the knobs ([`Knobs::checked`](super::Knobs::checked)), node affinity, the
/// mesh, the read policy.
fn checked_options(mut o: DatasetOptions) -> Result<DatasetOptions> {
    o.knobs = o.knobs.checked()?;
    if let Some(k) = o.node_ranks {
        crate::shard::check_node_ranks(k, o.knobs.world_size)?;
    }
    if let Some(m) = &o.model_parallel {
        m.check(o.knobs.world_size, o.node_ranks)?;
    }
    o.read_policy.check()?;
    Ok(o)
}

/// What read-ahead may hold: the policy's figure, or a quarter of the residency floor for a
/// store with sharded arrays (none without: only inner chunks are read ahead).
pub(crate) fn read_ahead_budget(policy: &crate::retry::ReadPolicy, sharded: bool, floor: u64) -> u64 {
    match policy.read_ahead_bytes {
        Some(b) => b,
        None if sharded => floor / 4,
        None => 0,
    }
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

/// Free buffers kept for reuse: a few chunks and a few batches (see [`Recycler`]).
fn recycle_cap_bytes(arrays: &[FloorArray], vars: &[GatherVar], o: &DatasetOptions) -> u64 {
    let chunk = arrays.iter().map(|a| a.max_slot_bytes).max().unwrap_or(0);
    let batch: u64 = vars.iter().map(|v| v.sample_bytes as u64).sum::<u64>() * o.knobs.batch_size as u64;
    4 * chunk + (o.knobs.prefetch_depth as u64 + 2) * batch
}
