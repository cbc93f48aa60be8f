//! Geometry and splits: the engine's `ArrayGeometry` and `SplitManifest` as Python classes
//! (the pure-Python `ArrayGeometry` and `SplitManifest` wrap them), `split_by_chunk`,
//! `valid_anchor_range`, and the geometries read from a store's metadata.

use insitubatch_core::geometry::ArrayGeometry as CoreGeometry;
use insitubatch_core::{DType, ReadPolicy, Split};
use insitubatch_core::{SplitManifest as CoreManifest, SplitOptions};
use insitubatch_native::NativeRuntime;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::buffer::i64_numpy;
use crate::conversion::{SplitArg, count};
use crate::errors::{core_err, native_err};
use crate::pystore::StoreArg;

/// The geometry of one array (or a windowed view of it).
#[pyclass(frozen, eq, name = "ArrayGeometry", module = "insitubatch_rs")]
#[derive(Clone, PartialEq)]
pub struct PyGeometry {
    pub(crate) inner: CoreGeometry,
}

#[pymethods]
impl PyGeometry {
    #[new]
    #[pyo3(signature = (path, shape, chunks, dtype, *, sample_axis = 0, offset = 0))]
    fn new(
        path: String,
        shape: Vec<u64>,
        chunks: Vec<u64>,
        dtype: &str,
        sample_axis: usize,
        offset: i64,
    ) -> PyResult<Self> {
        let dt = DType::from_zarr_name(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {dtype:?}")))?;
        let mut g = CoreGeometry::new(path, shape, chunks, dt, sample_axis).map_err(core_err)?;
        g.offset = offset;
        Ok(Self { inner: g })
    }
    #[getter]
    fn path(&self) -> &str {
        &self.inner.path
    }
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.inner.shape)
    }
    /// The fetch unit: the stored chunk, or the inner chunk of a sharded array.
    #[getter]
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.inner.tile)
    }
    #[getter]
    fn shard<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.inner.shard.as_ref().map(|s| PyTuple::new(py, s)).transpose()
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype.name()
    }
    #[getter]
    fn sample_axis(&self) -> usize {
        self.inner.sample_axis
    }
    #[getter]
    fn offset(&self) -> i64 {
        self.inner.offset
    }
    #[getter]
    fn n_samples(&self) -> u64 {
        self.inner.n_samples()
    }
    #[getter]
    fn sample_chunk_size(&self) -> u64 {
        self.inner.sample_chunk_size()
    }
    #[getter]
    fn n_chunks(&self) -> u64 {
        self.inner.n_chunks()
    }
    /// Bytes the stored tiles of one sample-axis chunk occupy (insitubatch 0.2.0's `chunk_bytes`).
    #[getter]
    fn chunk_bytes(&self) -> u64 {
        self.inner.stored_chunk_bytes()
    }
    /// Bytes of one sample (all inner axes).
    #[getter]
    fn sample_bytes(&self) -> u64 {
        self.inner.sample_bytes()
    }
    /// A view of the same array read `k` samples later (shifts compose).
    fn shift(&self, k: i64) -> Self {
        Self { inner: self.inner.shift(k) }
    }
    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.inner.path, &self.inner.shape, &self.inner.tile, self.inner.sample_axis, self.inner.offset).hash(&mut h);
        h.finish()
    }
    fn __repr__(&self) -> String {
        let g = &self.inner;
        format!(
            "ArrayGeometry(path={:?}, shape={:?}, chunks={:?}, dtype={:?}, sample_axis={}, offset={})",
            g.path,
            g.shape,
            g.tile,
            g.dtype.name(),
            g.sample_axis,
            g.offset
        )
    }
}

/// Which sample-axis chunks belong to train, val and test.
#[pyclass(frozen, eq, name = "SplitManifest", module = "insitubatch_rs")]
#[derive(Clone, PartialEq)]
pub struct PyManifest {
    pub(crate) inner: CoreManifest,
}

#[pymethods]
impl PyManifest {
    /// A manifest from its fields, as the Python package's `SplitManifest` holds them (built
    /// by hand, unchecked: `check` checks it); `chunks` maps split words to chunk ids.
    #[new]
    #[pyo3(signature = (n_chunks, sample_chunk_size, n_samples, chunks, seed = 0))]
    fn new(
        n_chunks: u64,
        sample_chunk_size: u64,
        n_samples: u64,
        chunks: &Bound<'_, PyDict>,
        seed: u64,
    ) -> PyResult<Self> {
        let chunks = chunks
            .iter()
            .map(|(split, ids)| Ok((split.extract::<SplitArg>()?.0, ids.extract::<Vec<u64>>()?)))
            .collect::<PyResult<_>>()?;
        Ok(Self { inner: CoreManifest { n_chunks, sample_chunk_size, n_samples, chunks, seed } })
    }
    /// Core's checks of a manifest (counts that agree, chunk ids in range and once per split).
    fn check(&self) -> PyResult<()> {
        self.inner.check().map_err(core_err)
    }
    #[getter]
    fn n_chunks(&self) -> u64 {
        self.inner.n_chunks
    }
    #[getter]
    fn sample_chunk_size(&self) -> u64 {
        self.inner.sample_chunk_size
    }
    #[getter]
    fn n_samples(&self) -> u64 {
        self.inner.n_samples
    }
    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed
    }
    /// `{"train": [...], "val": [...], "test": [...]}` chunk ids.
    #[getter]
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for s in [Split::Train, Split::Val, Split::Test] {
            d.set_item(s.name(), PyList::new(py, self.inner.chunks_of(s))?)?;
        }
        Ok(d)
    }
    /// The chunk ids of a view (`all` is the union).
    fn chunks_of(&self, split: SplitArg) -> Vec<u64> {
        self.inner.chunks_of(split.0)
    }
    /// Global sample indices of a split's chunks, in chunk order (int64 array), on the
    /// manifest's grid or on `geom`'s.
    #[pyo3(signature = (split, geom = None))]
    fn sample_indices<'py>(
        &self,
        py: Python<'py>,
        split: SplitArg,
        geom: Option<&Bound<'py, PyGeometry>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let indices = match geom {
            Some(g) => {
                let g = &g.get().inner;
                self.inner.sample_indices_on(split.0, g.sample_chunk_size(), g.n_samples())
            }
            None => self.inner.sample_indices(split.0),
        };
        i64_numpy(py, indices)
    }
    /// The manifest as JSON; also written to `path` when given.
    #[pyo3(signature = (path = None))]
    fn to_json(&self, path: Option<std::path::PathBuf>) -> PyResult<String> {
        let s = self.inner.to_json();
        if let Some(p) = path {
            std::fs::write(&p, &s).map_err(|e| PyOSError::new_err(format!("cannot write {}: {e}", p.display())))?;
        }
        Ok(s)
    }
    /// Read a manifest written by `to_json` from `path`.
    #[staticmethod]
    fn from_json(path: std::path::PathBuf) -> PyResult<Self> {
        let s = std::fs::read_to_string(&path)
            .map_err(|e| PyOSError::new_err(format!("cannot read {}: {e}", path.display())))?;
        Self::from_json_str(&s)
    }
    /// Parse a manifest from a JSON string.
    #[staticmethod]
    fn from_json_str(json: &str) -> PyResult<Self> {
        Ok(Self { inner: CoreManifest::from_json(json).map_err(core_err)? })
    }
    fn __repr__(&self) -> String {
        let n = |s| self.inner.chunks_of(s).len();
        format!(
            "SplitManifest(n_chunks={}, sample_chunk_size={}, train={} chunks, val={} chunks, test={} chunks)",
            self.inner.n_chunks,
            self.inner.sample_chunk_size,
            n(Split::Train),
            n(Split::Val),
            n(Split::Test)
        )
    }
}

/// Core's `split_by_chunk`. Every option is given: the Python function's defaults are core's
/// (`SplitOptions::default()`, through `defaults()`), and the seed is checked by core's count rule.
#[pyfunction]
#[pyo3(signature = (geom, *, fractions, seed, contiguous, sample_range = None))]
pub(crate) fn split_by_chunk(
    geom: &PyGeometry,
    fractions: (f64, f64, f64),
    seed: i128,
    contiguous: bool,
    sample_range: Option<(u64, u64)>,
) -> PyResult<PyManifest> {
    let opts = SplitOptions { fractions, seed: count("seed", seed, 0)?, contiguous, sample_range };
    Ok(PyManifest { inner: insitubatch_core::split_by_chunk(&geom.inner, &opts).map_err(core_err)? })
}

/// Core's `valid_anchor_range`: the anchors whose whole window lies in the array.
#[pyfunction]
pub(crate) fn valid_anchor_range(offsets: Vec<i64>, n_samples: u64) -> (u64, u64) {
    insitubatch_core::valid_anchor_range(&offsets, n_samples)
}

/// Open `store` (a URL, an obstore store or a zarr store: [`StoreArg`]) and read the geometry
/// of each array (no chunk reads).
#[pyfunction]
#[pyo3(signature = (store, variables, sample_axis, storage_options, concat_dim = None))]
pub(crate) fn open_geometries(
    py: Python<'_>,
    store: &Bound<'_, PyAny>,
    variables: Option<Vec<String>>,
    sample_axis: usize,
    storage_options: Vec<(String, String)>,
    concat_dim: Option<String>,
) -> PyResult<Vec<PyGeometry>> {
    let dim = concat_dim.unwrap_or_else(|| insitubatch_core::DatasetSpec::default().concat_dim);
    let concat = (dim.as_str(), sample_axis);
    let storage =
        StoreArg::from_py(store)?.storage(&storage_options, concat, &ReadPolicy::default()).map_err(native_err)?;
    let runtime = NativeRuntime::new(Some(1)).map_err(native_err)?;
    let arrays = py
        .detach(|| runtime.block_on(insitubatch_core::internals::open_arrays(storage.as_ref(), variables.as_deref())))
        .map_err(core_err)?;
    arrays.iter().map(|a| Ok(PyGeometry { inner: a.geometry(sample_axis).map_err(core_err)? })).collect()
}
