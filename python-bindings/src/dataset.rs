//! [`NativeDataset`]: the engine's dataset for Python, opened through
//! `insitubatch_native` (so through core's `DatasetBuilder`) with its arguments converted in
//! [`options`]; each pass it starts is a [`NativeStream`].

use std::sync::{Arc, Mutex, PoisonError};

use insitubatch_core::{BatchStream, Checkpoint, Dataset, Variable};
use insitubatch_native::{NativeError, OpenOptions};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::buffer::i64_numpy;
use crate::conversion::SplitArg;
use crate::errors::{ErrSlot, core_err, native_err};
use crate::geometry::{PyGeometry, PyManifest};
use crate::pystore::StoreArg;
use crate::stream::{NativeStream, stats_to_json};

mod options;

use options::SpecArg;

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

/// Open `store` with `options`: a URL, a built store, a join or a concatenation (along the
/// spec's `concat_dim`).
fn open_store(store: StoreArg, options: OpenOptions) -> Result<insitubatch_native::NativeDataset, NativeError> {
    match store {
        StoreArg::Url(url) => insitubatch_native::open(&url, options),
        StoreArg::Built { storage, location } => insitubatch_native::open_storage_with(storage, &location, options),
        StoreArg::Joined(parts) => {
            let resolved = options.spec.resolve()?;
            let concat = (resolved.concat_dim.as_str(), resolved.sample_axis);
            let policy = &resolved.dataset.read_policy;
            let parts = StoreArg::join_parts(parts, concat, &resolved.storage_options, policy)?;
            insitubatch_native::open_joined(parts, options)
        }
        StoreArg::Concat(parts) => insitubatch_native::open_concat(StoreArg::concat_parts(parts)?, options),
    }
}

#[pymethods]
impl NativeDataset {
    /// `store`: a URL, an obstore store or a zarr store ([`StoreArg`]). `variables`:
    /// `(label, geometry)` pairs, or `None` for the spec's. `spec`: every plain-data option as
    /// one dict (the generated `_options.DatasetSpec`), read into core's `DatasetSpec` by its
    /// serde derive ([`SpecArg`]); core resolves and checks it. Transforms and callbacks are
    /// Python objects, converted here. The store is opened with Python detached.
    #[new]
    #[pyo3(signature = (store, manifest, variables, spec, *, chunk_transforms = Vec::new(),
                        batch_transforms = Vec::new(), callbacks = Vec::new()))]
    fn new(
        store: &Bound<'_, PyAny>,
        manifest: Option<PyRef<'_, PyManifest>>,
        variables: Option<Vec<(String, PyRef<'_, PyGeometry>)>>,
        spec: SpecArg,
        chunk_transforms: Vec<(Option<Vec<String>>, Bound<'_, PyAny>)>,
        batch_transforms: Vec<Bound<'_, PyAny>>,
        callbacks: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let py = store.py();
        let store = StoreArg::from_py(store)?;
        let errors: ErrSlot = Arc::default();
        let options = OpenOptions {
            spec: spec.0,
            labelled: variables
                .map(|vs| vs.into_iter().map(|(label, g)| Variable { label, geometry: g.inner.clone() }).collect()),
            manifest: manifest.map(|m| m.inner.clone()),
            chunk_transforms: options::chunk_transforms(py, &chunk_transforms, &errors)?,
            batch_transforms: options::batch_transforms(py, &batch_transforms, &errors)?,
            observers: options::observers(&callbacks)?,
            tier: None,
        };
        let opened = py.detach(|| open_store(store, options)).map_err(native_err)?;
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

    /// Batches queued ahead, as the engine resolved it (at least 1).
    #[getter]
    fn prefetch_depth(&self) -> PyResult<usize> {
        Ok(self.get()?.dataset().options().knobs.prefetch_depth)
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
