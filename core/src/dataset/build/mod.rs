//! The one way to build a [`Dataset`]: [`DatasetBuilder`].
//!
//! Every caller (the native backend, the Python and wasm bindings and
//! the tests) says what it wants with the builder's setters and gets a dataset from
//! [`DatasetBuilder::open`] (reads metadata it does not have yet) or
//! [`DatasetBuilder::build`] (no I/O). The defaults (which arrays, their labels, the split)
//! are decided here and nowhere else; `Assembly` then checks and wires the parts in named
//! steps.
//!
//! - this file: the builder, its setters, reading metadata and resolving the variables;
//! - `coordinates.rs`: reading the coordinates `coords` and `sel` need, and the regions `sel`
//!   picks on inner axes;
//! - `assembly.rs`: the resolved parts, checked and wired into a dataset (readers, draws,
//!   the disk tier, the engine);
//! - `axes.rs`: where the options' axes lie in each variable: patches, the regions `sel`
//!   cuts rows to, a rank's part under `model_parallel`;
//! - `budget.rs`: the memory budget: block widening, the residency floor, the automatic
//!   budget, its checks, read-ahead and the buffer recycler's share.

mod assembly;
mod axes;
mod budget;
mod coordinates;

pub(crate) use coordinates::Region;

use std::sync::Arc;

use assembly::Assembly;

use super::{Dataset, DatasetOptions, DatasetSpec, Variable, VariableSpec, VariablesSpec};
use crate::coords::Coordinate;
use crate::error::{Error, Result};
use crate::retry::PolicyStorage;
use crate::runtime::{Runtime, Storage};
use crate::split::{SplitManifest, SplitOptions, split_by_chunk};
use crate::transform::{BatchTransform, Scoped};
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
