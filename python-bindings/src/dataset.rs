//! [`NativeDataset`]: the engine's dataset for Python, opened through
//! `insitubatch_native` (so through core's `DatasetBuilder`) with its arguments converted in
//! [`options`]; each pass it starts is a [`NativeStream`].

use std::sync::{Arc, Mutex, PoisonError};

use insitubatch_core::{BatchStream, Checkpoint, Dataset, DatasetOptions, Variable};
use insitubatch_native::{CacheOptions, NativeError, OpenOptions};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::i64_numpy;
use crate::conversion::SplitArg;
use crate::errors::{core_err, native_err};
use crate::geometry::{PyGeometry, PyManifest};
use crate::pystore::{self, StoreArg};
use crate::stream::{NativeStream, stats_to_json};
use crate::transforms::ErrSlot;

mod options;

use options::{AxisSizes, KnobsArg};

struct Open {
    opened: insitubatch_native::NativeDataset,
    errors: ErrSlot,
}

impl Open {
    fn dataset(&self) -> &Dataset {
        self.opened.dataset()
    }
}

/// The engine's dataset with its own tokio runtime and decode pool. `frozen`: shared by
/// threads through `&self` (the engine's `Dataset` is `Sync`; `close` swaps under a mutex).
#[pyclass(frozen, module = "insitubatch_rs._native")]
pub struct NativeDataset {
    open: Mutex<Option<Arc<Open>>>,
    url: String,
}

impl NativeDataset {
    /// A pass started by `begin` on the engine's runtime, wrapped for Python.
    fn start(&self, begin: impl FnOnce(&Dataset) -> insitubatch_core::Result<BatchStream>) -> PyResult<NativeStream> {
        let open = self.get()?;
        // A transform error left by an abandoned pass must not be re-raised by this one.
        open.errors.lock().unwrap_or_else(PoisonError::into_inner).take();
        let stream = {
            let _guard = open.opened.runtime().handle().enter();
            begin(open.dataset()).map_err(core_err)?
        };
        Ok(NativeStream::new(stream, open.opened.runtime().clone(), Arc::clone(&open.errors)))
    }

    fn get(&self) -> PyResult<Arc<Open>> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err(format!("the dataset is closed: {}", self.url)))
    }
}

/// Open `store` with `options`: a URL, a built store, a join or a concatenation along
/// `concat_dim` (default [`pystore::DEFAULT_CONCAT_DIM`]).
fn open_store(
    store: StoreArg,
    options: OpenOptions,
    concat_dim: Option<&str>,
) -> Result<insitubatch_native::NativeDataset, NativeError> {
    let dim = concat_dim.unwrap_or(pystore::DEFAULT_CONCAT_DIM);
    match store {
        StoreArg::Url(url) => insitubatch_native::open(&url, options),
        StoreArg::Built { storage, location } => insitubatch_native::open_storage_with(storage, &location, options),
        StoreArg::Joined(parts) => {
            let concat = (dim, options.sample_axis);
            let parts = StoreArg::join_parts(parts, concat, &options.storage_options, &options.dataset.read_policy)?;
            insitubatch_native::open_joined(parts, options)
        }
        StoreArg::Concat(parts) => insitubatch_native::open_concat(StoreArg::concat_parts(parts)?, dim, options),
    }
}

#[pymethods]
impl NativeDataset {
    /// `store`: a URL, an obstore store or a zarr store ([`StoreArg`]). `variables`:
    /// `(label, geometry)` pairs, or `None` to discover every data array. `knobs`: the
    /// plain-data knobs as one dict, read into core's `Knobs` ([`KnobsArg`]). Each argument is
    /// converted ([`options`]) and checked by core, in this order; the store is opened with
    /// Python detached.
    #[new]
    #[allow(
        clippy::too_many_arguments,
        clippy::fn_params_excessive_bools,
        reason = "the Python constructor's keyword arguments, converted here one to one"
    )]
    #[pyo3(signature = (store, manifest, variables, knobs, *, storage_options, threads = None,
                        chunk_transforms = Vec::new(), batch_transforms = Vec::new(), cache_dir = None,
                        persist = false, readonly_cache = false, reset_stale_cache = false, shared_cache = false,
                        node_ranks = None, read_policy = None, patch = None, patch_mode = None,
                        patch_stride = None, patches_per_sample = None, sample_mask = None, sample_weights = None,
                        model_parallel = None, callbacks = Vec::new(), metrics_address = None,
                        metrics_cors_origin = None, sel_time = None, sel_number = None, concat_dim = None))]
    fn new(
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        manifest: Option<PyRef<'_, PyManifest>>,
        variables: Option<Vec<(String, PyRef<'_, PyGeometry>)>>,
        knobs: KnobsArg,
        storage_options: Vec<(String, String)>,
        threads: Option<usize>,
        chunk_transforms: Vec<(Option<Vec<String>>, Bound<'_, PyAny>)>,
        batch_transforms: Vec<Bound<'_, PyAny>>,
        cache_dir: Option<std::path::PathBuf>,
        persist: bool,
        readonly_cache: bool,
        reset_stale_cache: bool,
        shared_cache: bool,
        node_ranks: Option<usize>,
        read_policy: Option<Bound<'_, PyDict>>,
        patch: Option<AxisSizes<'_>>,
        patch_mode: Option<&str>,
        patch_stride: Option<AxisSizes<'_>>,
        patches_per_sample: Option<u64>,
        sample_mask: Option<Vec<bool>>,
        sample_weights: Option<Vec<f64>>,
        model_parallel: Option<(usize, Bound<'_, PyAny>)>,
        callbacks: Vec<Bound<'_, PyAny>>,
        metrics_address: Option<String>,
        metrics_cors_origin: Option<String>,
        sel_time: Option<Vec<(String, bool, Vec<i64>)>>,
        sel_number: Option<Vec<(String, bool, Vec<f64>)>>,
        concat_dim: Option<String>,
    ) -> PyResult<Self> {
        let store = StoreArg::from_py(store)?;
        let patch = options::patch_options(patch, patch_mode, patch_stride, patches_per_sample)?;
        let KnobsArg(knobs) = knobs;
        let read_policy = options::read_policy_from(read_policy.as_ref())?;
        let errors: ErrSlot = Arc::default();
        let chunk_transforms = options::chunk_transforms(py, &chunk_transforms, &errors)?;
        let batch_transforms = options::batch_transforms(py, &batch_transforms, &errors)?;
        let dataset = DatasetOptions {
            read_policy,
            node_ranks,
            patch,
            sample_mask: sample_mask.map(Into::into),
            sample_weights: sample_weights.map(Into::into),
            sel: options::label_sels(sel_time, sel_number),
            observers: options::observers(&callbacks)?,
            model_parallel: options::model_parallel(model_parallel)?,
            ..DatasetOptions::from(knobs)
        };
        let flags = CacheOptions {
            persist,
            readonly: readonly_cache,
            reset_stale: reset_stale_cache,
            shared: shared_cache,
            ..CacheOptions::default()
        };
        let options = OpenOptions {
            labelled: variables
                .map(|vs| vs.into_iter().map(|(label, g)| Variable { label, geometry: g.inner.clone() }).collect()),
            manifest: manifest.map(|m| m.inner.clone()),
            dataset,
            threads,
            storage_options,
            cache: CacheOptions::from_flags(cache_dir, flags).map_err(core_err)?,
            chunk_transforms,
            batch_transforms,
            metrics_address,
            metrics_cors_origin,
            ..OpenOptions::default()
        };
        let opened = py.detach(|| open_store(store, options, concat_dim.as_deref())).map_err(native_err)?;
        let url = opened.url().to_string();
        Ok(Self { open: Mutex::new(Some(Arc::new(Open { opened, errors }))), url })
    }

    /// Start one pass over `split` at the current epoch.
    fn iter(&self, split: SplitArg) -> PyResult<NativeStream> {
        self.start(|ds| ds.iter(split.0))
    }

    /// Start the pass a checkpoint (`Checkpoint` JSON) was taken in, where it stopped.
    fn resume(&self, checkpoint_json: &str) -> PyResult<NativeStream> {
        let checkpoint = Checkpoint::from_json(checkpoint_json).map_err(core_err)?;
        self.start(|ds| ds.resume(&checkpoint))
    }

    /// Refuse a checkpoint `resume` would refuse, without starting a pass.
    fn check_resume(&self, checkpoint_json: &str) -> PyResult<()> {
        let checkpoint = Checkpoint::from_json(checkpoint_json).map_err(core_err)?;
        self.get()?.dataset().check_resume(&checkpoint).map_err(core_err)
    }

    /// The checkpoint of a pass over `split` at `epoch` that has not started (position 0),
    /// as JSON: what `state_dict()` says before any pass.
    fn fresh_checkpoint_json(&self, split: SplitArg, epoch: u64) -> PyResult<String> {
        Ok(self.get()?.dataset().fresh_checkpoint(split.0, epoch).to_json())
    }

    fn set_epoch(&self, epoch: u64) -> PyResult<()> {
        self.get()?.dataset().set_epoch(epoch);
        Ok(())
    }

    #[getter]
    fn epoch(&self) -> PyResult<u64> {
        Ok(self.get()?.dataset().epoch())
    }

    #[getter]
    fn manifest(&self) -> PyResult<PyManifest> {
        Ok(PyManifest { inner: self.get()?.dataset().manifest().clone() })
    }

    /// `(label, geometry)` of each variable, in order.
    #[getter]
    fn variables(&self) -> PyResult<Vec<(String, PyGeometry)>> {
        Ok(self
            .get()?
            .dataset()
            .variables()
            .iter()
            .map(|v| (v.label.clone(), PyGeometry { inner: v.geometry.clone() }))
            .collect())
    }

    /// `(label, geometry)` of each variable after its chunk transforms (core's
    /// `Dataset::output_geometries`): what its batches hold.
    #[getter]
    fn output_geometries(&self) -> PyResult<Vec<(String, PyGeometry)>> {
        let out = self.get()?.dataset().output_geometries().map_err(core_err)?;
        Ok(out.into_iter().map(|(label, inner)| (label, PyGeometry { inner })).collect())
    }

    #[getter]
    fn block_chunks(&self) -> PyResult<usize> {
        Ok(self.get()?.dataset().block_chunks())
    }

    /// The anchors one epoch of `split` will draw, in order.
    fn draw_order<'py>(&self, py: Python<'py>, split: SplitArg, epoch: u64) -> PyResult<Bound<'py, PyAny>> {
        let order = self.get()?.dataset().draw_order(split.0, epoch);
        i64_numpy(py, order)
    }

    /// The static report as JSON (geometry and configuration only; no store access).
    fn describe_json(&self, iterations: usize) -> PyResult<String> {
        let r = self.get()?.dataset().describe(iterations).map_err(core_err)?;
        serde_json::to_string(&r).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Time a few real reads and decodes, and predict an epoch of `split` (core's
    /// `Dataset::probe`): `(report as JSON, report rendered for people)`. The GIL is released
    /// while it reads.
    fn probe(&self, py: Python<'_>, split: SplitArg, chunks: usize) -> PyResult<(String, String)> {
        let open = self.get()?;
        let report = py.detach(|| open.opened.probe(split.0, chunks)).map_err(native_err)?;
        let json = serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok((json, report.render()))
    }

    /// Shuffle quality and memory for each `block_chunks` in `values` at the current epoch
    /// (core's `DatasetBuilder::quality_curve`: a build and a describe per value, no reads),
    /// as JSON.
    fn quality_curve_json(&self, values: Vec<usize>) -> PyResult<String> {
        let curve = self.get()?.opened.quality_curve(&values).map_err(native_err)?;
        serde_json::to_string(&curve).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The static report, rendered for people.
    fn render_summary(&self, iterations: usize) -> PyResult<String> {
        Ok(self.get()?.dataset().describe(iterations).map_err(core_err)?.render())
    }

    /// Where the Prometheus endpoint listens (`HOST:PORT`), if one was asked for.
    fn metrics_address(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.opened.metrics_address().map(|a| a.to_string()))
    }

    /// Stats of the last pass that ended, as JSON, or `None`.
    fn last_pass_json(&self) -> PyResult<Option<String>> {
        self.get()?.dataset().last_pass().map(|s| stats_to_json(&s)).transpose()
    }

    /// What the disk tier warns about (a `cache_dir` on a network filesystem).
    fn cache_warnings(&self) -> PyResult<Vec<String>> {
        Ok(self.get()?.dataset().tier_warnings())
    }

    /// Chunks filled under `on_bad_chunk="nan"`, as JSON.
    fn bad_chunks_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.get()?.dataset().bad_chunks()).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Drop the engine (live passes keep what they need until they end).
    fn close(&self) {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).take();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }
}
