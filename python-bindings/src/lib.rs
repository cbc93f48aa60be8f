//! `insitubatch_rs._native`: a thin pyo3 shim over insitubatch-native/core.
//!
//! The pure-Python package (`python/insitubatch_rs`) wraps these classes into the public
//! API (`InSituDataset`, `Batch`, views, adapters). Batch arrays cross into Python without
//! a copy: each engine [`NdArray`] is moved into a [`Buffer`] object that exposes
//! `__array_interface__`, and `numpy.asarray(buffer)` keeps the buffer alive as the
//! array's `base`. Dropping the last numpy view drops the `NdArray`, which hands its
//! memory back to the engine's recycler.

#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Same settings as the CLI (see native/src/main.rs): reuse freed pages, one arena, huge pages
/// left to the system.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[allow(non_upper_case_globals, reason = "jemalloc reads this exact symbol name")]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static _rjem_malloc_conf: &[u8] = b"dirty_decay_ms:-1,muzzy_decay_ms:-1,narenas:1,thp:default\0";

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use insitubatch_core::HedgePolicy;
use insitubatch_core::ReadPolicy;
use insitubatch_core::coords::{Label, LabelSel};
use insitubatch_core::geometry::ArrayGeometry as CoreGeometry;
use insitubatch_core::transform::{BatchTransform, Scoped};
use insitubatch_core::{
    BatchStream, DType, Error as CoreError, ModelParallel, NdArray, PatchAxis, PatchOptions, Split,
};
use insitubatch_core::{Dataset, DatasetOptions, Variable};
use insitubatch_core::{SplitManifest as CoreManifest, SplitOptions};
use insitubatch_native::{CacheOptions, NativeError, NativeRuntime, OpenOptions};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyList, PyTuple};

mod observe;
mod pystore;
mod reader;
mod rules;
mod transforms;
use pystore::StoreArg;
use transforms::ErrSlot;

create_exception!(
    insitubatch_rs,
    InsitubatchIOError,
    PyOSError,
    "A store could not be read: missing array, malformed metadata, failed request, corrupt chunk."
);

/// Core error → Python exception (the message is the engine's).
pub(crate) fn core_err(e: CoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        CoreError::Config(_) | CoreError::Geometry(_) => PyValueError::new_err(msg),
        CoreError::Storage { .. }
        | CoreError::NotFound { .. }
        | CoreError::Metadata { .. }
        | CoreError::Decode { .. } => InsitubatchIOError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

pub(crate) fn native_err(e: NativeError) -> PyErr {
    match e {
        NativeError::Core(e) => core_err(e),
        NativeError::Url { .. } => PyValueError::new_err(e.to_string()),
        NativeError::Open { .. } | NativeError::Demo { .. } => InsitubatchIOError::new_err(e.to_string()),
        NativeError::Runtime(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

fn parse_split(s: &str) -> PyResult<Split> {
    s.parse().map_err(|e: insitubatch_core::UnknownSplit| PyValueError::new_err(e.to_string()))
}

fn typestr(d: DType) -> PyResult<&'static str> {
    Ok(match d {
        DType::Bool => "|b1",
        DType::Int8 => "|i1",
        DType::Uint8 => "|u1",
        DType::Int16 => "<i2",
        DType::Uint16 => "<u2",
        DType::Int32 => "<i4",
        DType::Uint32 => "<u4",
        DType::Int64 => "<i8",
        DType::Uint64 => "<u8",
        DType::Float16 => "<f2",
        DType::Float32 => "<f4",
        DType::Float64 => "<f8",
        // numpy has no bfloat16: the raw 2-byte words (`into_numpy` views them as
        // ml_dtypes.bfloat16 when it can).
        DType::Bfloat16 => "<u2",
    })
}

enum Owned {
    Nd(NdArray),
    I64(Vec<i64>),
}

/// Memory owned by Rust, seen by numpy through `__array_interface__` (no copy).
#[pyclass(frozen, module = "insitubatch_rs._native")]
pub struct Buffer {
    owned: Owned,
    shape: Vec<usize>,
    typestr: &'static str,
}

impl Buffer {
    pub(crate) fn from_nd(a: NdArray) -> PyResult<Self> {
        Ok(Self { shape: a.shape.clone(), typestr: typestr(a.dtype)?, owned: Owned::Nd(a) })
    }
    fn from_i64(v: Vec<i64>) -> Self {
        Self { shape: vec![v.len()], typestr: "<i8", owned: Owned::I64(v) }
    }
    fn ptr(&self) -> usize {
        match &self.owned {
            Owned::Nd(a) => a.data.as_ptr() as usize,
            Owned::I64(v) => v.as_ptr() as usize,
        }
    }
    /// `numpy.asarray(self)`: a numpy view whose `base` keeps this buffer alive.
    pub(crate) fn into_numpy(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let bf16 = matches!(&self.owned, Owned::Nd(a) if a.dtype == DType::Bfloat16);
        let obj = Bound::new(py, self)?;
        let arr = py.import("numpy")?.getattr("asarray")?.call1((obj,))?;
        // The same bytes seen as ml_dtypes.bfloat16 (a view: still no copy).
        match bf16.then(|| bfloat16_dtype(py)).flatten() {
            Some(dt) => arr.call_method1("view", (dt,)),
            None => Ok(arr),
        }
    }
}

/// `ml_dtypes.bfloat16` when ml_dtypes is importable (JAX brings it), else `None` and
/// bfloat16 arrays stay raw `uint16` words. Looked up once.
fn bfloat16_dtype(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    static BF16: pyo3::sync::PyOnceLock<Option<Py<PyAny>>> = pyo3::sync::PyOnceLock::new();
    let dt =
        BF16.get_or_init(py, || py.import("ml_dtypes").and_then(|m| m.getattr("bfloat16")).ok().map(Bound::unbind));
    dt.as_ref().map(|d| d.bind(py).clone())
}

#[pymethods]
impl Buffer {
    #[getter(__array_interface__)]
    fn array_interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.typestr)?;
        d.set_item("data", (self.ptr(), false))?;
        Ok(d)
    }

    /// Address of the first byte (for zero-copy checks).
    #[getter]
    fn address(&self) -> usize {
        self.ptr()
    }
}

pub(crate) fn i64_numpy(py: Python<'_>, v: impl IntoIterator<Item = u64>) -> PyResult<Bound<'_, PyAny>> {
    Buffer::from_i64(v.into_iter().map(|x| x as i64).collect()).into_numpy(py)
}

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
    /// Bytes the stored tiles of one sample-axis chunk occupy (the anchor's `chunk_bytes`).
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
    inner: CoreManifest,
}

#[pymethods]
impl PyManifest {
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
    fn chunks_of(&self, split: &str) -> PyResult<Vec<u64>> {
        Ok(self.inner.chunks_of(parse_split(split)?))
    }
    /// Global sample indices of a split's chunks, in chunk order (int64 array).
    fn sample_indices<'py>(&self, py: Python<'py>, split: &str) -> PyResult<Bound<'py, PyAny>> {
        i64_numpy(py, self.inner.sample_indices(parse_split(split)?))
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

#[pyfunction]
#[pyo3(signature = (geom, *, fractions = (0.8, 0.1, 0.1), seed = 0, contiguous = true, sample_range = None))]
fn split_by_chunk(
    geom: &PyGeometry,
    fractions: (f64, f64, f64),
    seed: u64,
    contiguous: bool,
    sample_range: Option<(u64, u64)>,
) -> PyResult<PyManifest> {
    let opts = SplitOptions { fractions, seed, contiguous, sample_range };
    Ok(PyManifest { inner: insitubatch_core::split_by_chunk(&geom.inner, &opts).map_err(core_err)? })
}

#[pyfunction]
fn valid_anchor_range(offsets: Vec<i64>, n_samples: u64) -> (u64, u64) {
    insitubatch_core::valid_anchor_range(&offsets, n_samples)
}

/// Open `store` (a URL, an obstore store or a zarr store: [`StoreArg`]) and read the geometry
/// of each array (no chunk reads).
#[pyfunction]
#[pyo3(signature = (store, variables, sample_axis, storage_options, concat_dim = None))]
fn open_geometries(
    py: Python<'_>,
    store: &Bound<'_, PyAny>,
    variables: Option<Vec<String>>,
    sample_axis: usize,
    storage_options: Vec<(String, String)>,
    concat_dim: Option<String>,
) -> PyResult<Vec<PyGeometry>> {
    let concat = (concat_dim.as_deref().unwrap_or(pystore::DEFAULT_CONCAT_DIM), sample_axis);
    let storage = StoreArg::from_py(store)?.storage(&storage_options, concat).map_err(native_err)?;
    let runtime = NativeRuntime::new(Some(1)).map_err(native_err)?;
    let arrays = py
        .detach(|| runtime.block_on(insitubatch_core::internals::open_arrays(storage.as_ref(), variables.as_deref())))
        .map_err(core_err)?;
    arrays.iter().map(|a| Ok(PyGeometry { inner: a.geometry(sample_axis).map_err(core_err)? })).collect()
}

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
        let n_batches = stream.len();
        let checkpoint = Mutex::new(stream.checkpoint());
        Ok(NativeStream {
            stream: Mutex::new(Some(stream)),
            runtime: open.opened.runtime().clone(),
            n_batches,
            errors: Arc::clone(&open.errors),
            checkpoint,
        })
    }

    fn get(&self) -> PyResult<Arc<Open>> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err(format!("the dataset is closed: {}", self.url)))
    }
}

/// `read_policy={...}` (seconds and bytes) over core's `ReadPolicy::default()`, with
/// `on_bad_chunk` parsed by core. Unknown keys are refused, naming the known ones.
fn read_policy_from(given: Option<&Bound<'_, PyDict>>, on_bad_chunk: &str) -> PyResult<ReadPolicy> {
    let mut p = ReadPolicy { on_bad_chunk: on_bad_chunk.parse().map_err(core_err)?, ..ReadPolicy::default() };
    let Some(given) = given else { return Ok(p) };
    let secs = |key: &str, v: &Bound<'_, PyAny>| -> PyResult<std::time::Duration> {
        let s: f64 = policy_value(key, v, "seconds >= 0")?;
        std::time::Duration::try_from_secs_f64(s)
            .map_err(|_| PyValueError::new_err(format!("read_policy[{key:?}] must be seconds >= 0, got {s}")))
    };
    let count = "a whole number >= 0";
    for (k, v) in given.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "retries" => p.retries = policy_value(&key, &v, count)?,
            "backoff_s" => p.backoff = secs(&key, &v)?,
            "request_timeout_s" => p.request_timeout = secs(&key, &v)?,
            "coalesce_gap_bytes" => p.coalesce_gap_bytes = policy_value(&key, &v, count)?,
            "coalesce_max_bytes" => p.coalesce_max_bytes = policy_value(&key, &v, count)?,
            "hedge" => p.hedge = hedge_from(&v)?,
            "read_ahead_bytes" => p.read_ahead_bytes = Some(policy_value(&key, &v, count)?),
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown read_policy key {other:?}; use retries, backoff_s, request_timeout_s, coalesce_gap_bytes, \
                     coalesce_max_bytes, read_ahead_bytes or hedge"
                )));
            }
        }
    }
    Ok(p)
}

/// One `read_policy` value, converted; a wrong type or a value out of the type's range (a
/// negative count) is a `ValueError` naming the key and what it takes.
fn policy_value<'py, T: FromPyObjectOwned<'py>>(key: &str, v: &Bound<'py, PyAny>, takes: &str) -> PyResult<T> {
    v.extract().map_err(|_| {
        let got = v.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string());
        PyValueError::new_err(format!("read_policy[{key:?}] must be {takes}, got {got}"))
    })
}

/// `read_policy["hedge"]`: `False` (off), `True` (core's default), or a dict of its fields.
fn hedge_from(v: &Bound<'_, PyAny>) -> PyResult<Option<HedgePolicy>> {
    if let Ok(on) = v.extract::<bool>() {
        return Ok(on.then(HedgePolicy::default));
    }
    let fields = v.cast::<PyDict>().map_err(|_| {
        PyValueError::new_err(
            "read_policy[\"hedge\"] must be True, False or a dict of quantile, multiple, max_share, min_samples",
        )
    })?;
    let mut h = HedgePolicy::default();
    for (k, v) in fields.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "quantile" => h.quantile = policy_value("hedge.quantile", &v, "a number in (0, 1]")?,
            "multiple" => h.multiple = policy_value("hedge.multiple", &v, "a number >= 1")?,
            "max_share" => h.max_share = policy_value("hedge.max_share", &v, "a number in [0, 1]")?,
            "min_samples" => h.min_samples = policy_value("hedge.min_samples", &v, "a whole number >= 0")?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown read_policy[\"hedge\"] key {other:?}; use quantile, multiple, max_share or min_samples"
                )));
            }
        }
    }
    Ok(Some(h))
}

/// A batch's coordinates for Python: name → numpy array (`datetime64[ns]` for CF time); a
/// patched axis's values shaped `(rows, patch extent)`, as core lays them out row by row.
pub(crate) fn coords_to_py<'py>(
    py: Python<'py>,
    coords: &std::collections::BTreeMap<String, insitubatch_core::coords::CoordValues>,
    patches: Option<&insitubatch_core::BatchPatches>,
) -> PyResult<Bound<'py, PyAny>> {
    use insitubatch_core::coords::CoordValues;
    let d = PyDict::new(py);
    for (name, values) in coords {
        let mut array = match values {
            CoordValues::Time(ns) => {
                Buffer::from_i64(ns.clone()).into_numpy(py)?.call_method1("view", ("datetime64[ns]",))?
            }
            CoordValues::Number(v) => py.import("numpy")?.getattr("asarray")?.call1((v.clone(), "float64"))?,
        };
        if let Some(p) = patches
            && let Some(k) = p.dims.iter().position(|dim| dim == name)
        {
            array = array.call_method1("reshape", ((-1i64, p.size[k]),))?;
        }
        d.set_item(name, array)?;
    }
    Ok(d.into_any())
}

/// Python's patch keys (a dimension name, or an axis index) as core's axes.
fn patch_axes(pairs: &[(Bound<'_, PyAny>, u64)]) -> PyResult<Vec<(PatchAxis, u64)>> {
    pairs
        .iter()
        .map(|(k, n)| {
            let axis = if let Ok(a) = k.extract::<usize>() {
                PatchAxis::Axis(a)
            } else if let Ok(name) = k.extract::<String>() {
                PatchAxis::Name(name)
            } else {
                return Err(PyTypeError::new_err(format!(
                    "a patch axis is a dimension name or an axis index, got {}",
                    k.repr()?
                )));
            };
            Ok((axis, *n))
        })
        .collect()
}

/// A batch's patches for Python: the `(rows, axes)` int64 origins and the axis names, or
/// `(None, ())` for whole samples.
pub(crate) fn patches_to_py<'py>(
    py: Python<'py>,
    patches: Option<&insitubatch_core::BatchPatches>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let Some(p) = patches else {
        return Ok((py.None().into_bound(py), PyTuple::empty(py).into_any()));
    };
    let flat = i64_numpy(py, p.origins.iter().copied())?;
    let origins = flat.call_method1("reshape", ((-1i64, p.dims.len()),))?;
    Ok((origins, PyTuple::new(py, &p.dims)?.into_any()))
}

#[pymethods]
impl NativeDataset {
    /// `store`: a URL, an obstore store or a zarr store ([`StoreArg`]). `variables`:
    /// `(label, geometry)` pairs, or `None` to discover every data array.
    #[new]
    #[allow(
        clippy::too_many_arguments,
        clippy::fn_params_excessive_bools,
        reason = "the Python constructor's keyword arguments, converted here one to one"
    )]
    #[pyo3(signature = (store, manifest, variables, *, batch_size, block_chunks, max_inflight, seed, shuffle,
                        prefetch_depth, cache_budget_bytes, on_bad_chunk, storage_options, threads = None,
                        chunk_transforms = Vec::new(), batch_transforms = Vec::new(), cache_dir = None,
                        persist = false, readonly_cache = false, reset_stale_cache = false, shared_cache = false,
                        rank = 0, world_size = 1, node_ranks = None, first_block_chunks = None,
                        read_policy = None, patch = None, patch_mode = None, patch_stride = None,
                        patches_per_sample = None, sample_mask = None, sample_weights = None,
                        model_parallel = None, callbacks = Vec::new(), metrics_address = None, coords = false,
                        sel_time = None, sel_number = None, concat_dim = None))]
    fn new(
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        manifest: Option<PyRef<'_, PyManifest>>,
        variables: Option<Vec<(String, PyRef<'_, PyGeometry>)>>,
        batch_size: usize,
        block_chunks: usize,
        max_inflight: usize,
        seed: u64,
        shuffle: bool,
        prefetch_depth: usize,
        cache_budget_bytes: Option<u64>,
        on_bad_chunk: &str,
        storage_options: Vec<(String, String)>,
        threads: Option<usize>,
        chunk_transforms: Vec<(Option<Vec<String>>, Bound<'_, PyAny>)>,
        batch_transforms: Vec<Bound<'_, PyAny>>,
        cache_dir: Option<std::path::PathBuf>,
        persist: bool,
        readonly_cache: bool,
        reset_stale_cache: bool,
        shared_cache: bool,
        rank: usize,
        world_size: usize,
        node_ranks: Option<usize>,
        first_block_chunks: Option<usize>,
        read_policy: Option<Bound<'_, PyDict>>,
        patch: Option<Vec<(Bound<'_, PyAny>, u64)>>,
        patch_mode: Option<&str>,
        patch_stride: Option<Vec<(Bound<'_, PyAny>, u64)>>,
        patches_per_sample: Option<u64>,
        sample_mask: Option<Vec<bool>>,
        sample_weights: Option<Vec<f64>>,
        model_parallel: Option<(usize, Bound<'_, PyAny>)>,
        callbacks: Vec<Bound<'_, PyAny>>,
        metrics_address: Option<String>,
        coords: bool,
        sel_time: Option<Vec<(String, bool, Vec<i64>)>>,
        sel_number: Option<Vec<(String, bool, Vec<f64>)>>,
        concat_dim: Option<String>,
    ) -> PyResult<Self> {
        let store = StoreArg::from_py(store)?;
        let patch = PatchOptions::from_words(
            patch.as_deref().map(patch_axes).transpose()?,
            patch_mode,
            patch_stride.as_deref().map(patch_axes).transpose()?,
            patches_per_sample,
        )
        .map_err(core_err)?;
        let read_policy = read_policy_from(read_policy.as_ref(), on_bad_chunk)?;
        let errors: ErrSlot = Arc::default();
        let chunk_transforms: Vec<Scoped> = chunk_transforms
            .iter()
            .map(|(scope, obj)| {
                Ok(Scoped { arrays: scope.clone(), transform: transforms::chunk_transform(py, obj, &errors)? })
            })
            .collect::<PyResult<_>>()?;
        let batch_transforms: Vec<Arc<dyn BatchTransform>> = batch_transforms
            .iter()
            .map(|f| Ok(Arc::new(transforms::PyBatchFn::new(py, f, Arc::clone(&errors))?) as Arc<dyn BatchTransform>))
            .collect::<PyResult<_>>()?;
        let options = OpenOptions {
            labelled: variables
                .map(|vs| vs.into_iter().map(|(label, g)| Variable { label, geometry: g.inner.clone() }).collect()),
            manifest: manifest.map(|m| m.inner.clone()),
            dataset: DatasetOptions {
                batch_size,
                block_chunks,
                first_block_chunks,
                max_inflight,
                seed,
                shuffle,
                prefetch_depth,
                cache_budget_bytes,
                read_policy,
                tier: None,
                rank,
                world_size,
                node_ranks,
                patch,
                sample_mask: sample_mask.map(Into::into),
                sample_weights: sample_weights.map(Into::into),
                coords,
                sel: label_sels(sel_time, sel_number),
                observers: callbacks
                    .iter()
                    .map(|f| Ok(Arc::new(observe::PyPassCallback::new(f)?) as Arc<dyn insitubatch_core::PassObserver>))
                    .collect::<PyResult<_>>()?,
                model_parallel: match model_parallel {
                    None => None,
                    Some((size, axis)) => Some(ModelParallel { size, axis: patch_axes(&[(axis, 0)])?.remove(0).0 }),
                },
            },
            threads,
            storage_options,
            cache: CacheOptions::from_flags(
                cache_dir,
                CacheOptions {
                    persist,
                    readonly: readonly_cache,
                    reset_stale: reset_stale_cache,
                    shared: shared_cache,
                    ..CacheOptions::default()
                },
            )
            .map_err(core_err)?,
            chunk_transforms,
            batch_transforms,
            metrics_address,
            ..OpenOptions::default()
        };
        let dim = concat_dim.as_deref().unwrap_or(pystore::DEFAULT_CONCAT_DIM);
        let opened = py
            .detach(|| match store {
                StoreArg::Url(url) => insitubatch_native::open(&url, options),
                StoreArg::Built { storage, location } => {
                    insitubatch_native::open_storage_with(storage, &location, options)
                }
                StoreArg::Joined(parts) => {
                    let concat = (dim, options.sample_axis);
                    insitubatch_native::open_joined(
                        StoreArg::join_parts(parts, concat, &options.storage_options)?,
                        options,
                    )
                }
                StoreArg::Concat(parts) => {
                    insitubatch_native::open_concat(StoreArg::concat_parts(parts)?, dim, options)
                }
            })
            .map_err(native_err)?;
        let url = opened.url().to_string();
        Ok(Self { open: Mutex::new(Some(Arc::new(Open { opened, errors }))), url })
    }

    /// Start one pass over `split` at the current epoch.
    fn iter(&self, split: &str) -> PyResult<NativeStream> {
        let split = parse_split(split)?;
        self.start(|ds| ds.iter(split))
    }

    /// Start the pass a checkpoint (`Checkpoint` JSON) was taken in, where it stopped.
    fn resume(&self, checkpoint_json: &str) -> PyResult<NativeStream> {
        let checkpoint = insitubatch_core::Checkpoint::from_json(checkpoint_json).map_err(core_err)?;
        self.start(|ds| ds.resume(&checkpoint))
    }

    /// Refuse a checkpoint `resume` would refuse, without starting a pass.
    fn check_resume(&self, checkpoint_json: &str) -> PyResult<()> {
        let checkpoint = insitubatch_core::Checkpoint::from_json(checkpoint_json).map_err(core_err)?;
        self.get()?.dataset().check_resume(&checkpoint).map_err(core_err)
    }

    /// The checkpoint of a pass over `split` at `epoch` that has not started (position 0),
    /// as JSON: what `state_dict()` says before any pass.
    fn fresh_checkpoint_json(&self, split: &str, epoch: u64) -> PyResult<String> {
        Ok(self.get()?.dataset().fresh_checkpoint(parse_split(split)?, epoch).to_json())
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

    #[getter]
    fn block_chunks(&self) -> PyResult<usize> {
        Ok(self.get()?.dataset().block_chunks())
    }

    /// The anchors one epoch of `split` will draw, in order.
    fn draw_order<'py>(&self, py: Python<'py>, split: &str, epoch: u64) -> PyResult<Bound<'py, PyAny>> {
        let order = self.get()?.dataset().draw_order(parse_split(split)?, epoch);
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
    fn probe(&self, py: Python<'_>, split: &str, chunks: usize) -> PyResult<(String, String)> {
        let split = parse_split(split)?;
        let open = self.get()?;
        let report = py.detach(|| open.opened.probe(split, chunks)).map_err(native_err)?;
        let json = serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok((json, report.render()))
    }

    /// The static report, rendered for people.
    fn render_summary(&self, iterations: usize) -> PyResult<String> {
        Ok(self.get()?.dataset().describe(iterations).map_err(core_err)?.render())
    }

    /// Stats of the last pass that ended, as JSON, or `None`.
    /// Where the Prometheus endpoint listens (`HOST:PORT`), if one was asked for.
    fn metrics_address(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.opened.metrics_address().map(|a| a.to_string()))
    }

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

/// One pass; `next()` blocks with the GIL released and wakes every 100 ms for Ctrl-C.
/// `frozen`: every method takes `&self` and the state is behind mutexes, so threads share it
/// (free-threaded Python included) without pyo3's runtime borrow flag.
#[pyclass(frozen, module = "insitubatch_rs._native")]
pub struct NativeStream {
    stream: Mutex<Option<BatchStream>>,
    runtime: NativeRuntime,
    n_batches: usize,
    errors: ErrSlot,
    /// Where the pass stands after the last batch returned (kept after the pass ends).
    checkpoint: Mutex<insitubatch_core::Checkpoint>,
}

#[pymethods]
impl NativeStream {
    /// The next batch as `(arrays, sample_indices, offsets, index, epoch)`, or `None` at the
    /// end of the pass. An interrupt (Ctrl-C) or an error ends the pass.
    ///
    /// Threads may share one pass: each `next()` holds the stream until its batch is out, so
    /// a second caller waits (detached from Python, so neither the GIL nor a free-threaded
    /// stop-the-world can deadlock with it) and gets the following batch; every batch goes to
    /// exactly one caller.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut slot = self.stream.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner);
        let Some(stream) = slot.as_mut() else { return Ok(None) };
        let handle = self.runtime.handle();
        let item = {
            // The future lives across timeouts, so no wake-up is lost.
            let mut fut = std::pin::pin!(stream.next_batch());
            loop {
                let polled = py.detach(|| {
                    handle.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut fut).await })
                });
                match polled {
                    Ok(item) => break Ok(item),
                    Err(_) => {
                        if let Err(interrupt) = py.check_signals() {
                            break Err(interrupt);
                        }
                    }
                }
            }
        };
        // Dropping the stream (on an interrupt, an error or the end) ends the pass.
        let item = match item {
            Ok(item) => item,
            Err(interrupt) => {
                *slot = None;
                return Err(interrupt);
            }
        };
        let stream = slot.as_ref().expect("the stream is only taken out above");
        *self.checkpoint.lock().unwrap_or_else(PoisonError::into_inner) = stream.checkpoint();
        if !matches!(item, Some(Ok(_))) {
            *slot = None;
        }
        drop(slot);
        match item {
            Some(Ok(batch)) => {
                let arrays = PyDict::new(py);
                for (label, a) in batch.arrays {
                    arrays.set_item(label, Buffer::from_nd(a)?.into_numpy(py)?)?;
                }
                let idx = i64_numpy(py, batch.sample_indices)?;
                let offsets = PyDict::new(py);
                for (label, o) in &batch.offsets {
                    offsets.set_item(label, o)?;
                }
                let (origins, dims) = patches_to_py(py, batch.patches.as_ref())?;
                let coords = coords_to_py(py, &batch.coords, batch.patches.as_ref())?;
                let part = match &batch.part {
                    Some(p) => (p.dim.as_str(), p.start, p.start + p.len).into_pyobject(py)?.into_any(),
                    None => py.None().into_bound(py),
                };
                Ok(Some(PyTuple::new(
                    py,
                    [
                        arrays.into_any(),
                        idx,
                        offsets.into_any(),
                        batch.index.into_pyobject(py)?.into_any(),
                        batch.epoch.into_pyobject(py)?.into_any(),
                        origins,
                        dims,
                        part,
                        coords,
                    ],
                )?))
            }
            // A Python transform's own exception is re-raised with its type and traceback.
            Some(Err(e @ CoreError::Transform { .. })) => {
                match self.errors.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    Some(py_err) => Err(py_err),
                    None => Err(core_err(e)),
                }
            }
            Some(Err(e)) => Err(core_err(e)),
            None => Ok(None),
        }
    }

    /// Batches this pass yields in all.
    fn __len__(&self) -> usize {
        self.n_batches
    }

    /// Stats of this pass so far, as JSON (`None` once it ended: see `last_pass`).
    fn stats_json(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let g = self.stream.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner);
        g.as_ref().map(|s| stats_to_json(&s.stats())).transpose()
    }

    /// Where the pass stands after the last batch it returned, as `Checkpoint` JSON.
    fn checkpoint_json(&self) -> String {
        self.checkpoint.lock().unwrap_or_else(PoisonError::into_inner).to_json()
    }

    /// End the pass now (what dropping the iterator does too); waits for a `next()` that
    /// another thread is in.
    fn close(&self, py: Python<'_>) {
        self.stream.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner).take();
    }
}

/// `_sel`'s `(dim, is_range, values)` lists as core's selections: a range's values are its
/// two bounds, a list's its labels (dates as ns since 1970, or numbers).
fn label_sels(
    times: Option<Vec<(String, bool, Vec<i64>)>>,
    numbers: Option<Vec<(String, bool, Vec<f64>)>>,
) -> Vec<LabelSel> {
    fn one(dim: &str, range: bool, labels: Vec<Label>) -> LabelSel {
        match (range, labels.as_slice()) {
            (true, &[lo, hi]) => LabelSel::range(dim, lo, hi),
            _ => LabelSel::labels(dim, labels),
        }
    }
    let times = times.into_iter().flatten().map(|(d, r, v)| one(&d, r, v.into_iter().map(Label::Time).collect()));
    let numbers = numbers.into_iter().flatten().map(|(d, r, v)| one(&d, r, v.into_iter().map(Label::Number).collect()));
    times.chain(numbers).collect()
}

/// A pass's stats as JSON, with the engine's one-line `summary` (what the `insitubatch`
/// logger prints) so Python formats nothing itself.
pub(crate) fn stats_to_json(stats: &insitubatch_core::PassStats) -> PyResult<String> {
    let to_err = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    let mut v = serde_json::to_value(stats).map_err(to_err)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("summary".into(), stats.summary().into());
    }
    serde_json::to_string(&v).map_err(to_err)
}

/// The engine's verdict rule (`core::stats::verdict`) for stats built by hand in Python:
/// `(stage, advice, consumer_idle)`. `blocked` is the consumer wait per stage, in
/// `core::stats::Stage::ALL` order.
#[pyfunction]
#[pyo3(signature = (*, queue_samples, consumer_s, consumer_wait_s, blocked, inflight_peak, max_inflight))]
fn verdict(
    queue_samples: u64,
    consumer_s: f64,
    consumer_wait_s: f64,
    blocked: [f64; 5],
    inflight_peak: usize,
    max_inflight: usize,
) -> (String, String, bool) {
    let mut r = insitubatch_core::internals::Recorded { queue_samples, inflight_peak, blocked, ..Default::default() };
    r.times.consumer_s = consumer_s;
    r.times.consumer_wait_s = consumer_wait_s;
    let (stage, advice, idle) = insitubatch_core::internals::verdict(&r, max_inflight);
    (stage.to_string(), advice, idle)
}

/// The engine's knob defaults (`DatasetOptions` and `SplitOptions`), so the Python
/// signatures restate nothing.
#[pyfunction]
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = DatasetOptions::default();
    let s = SplitOptions::default();
    let out = PyDict::new(py);
    out.set_item("batch_size", d.batch_size)?;
    out.set_item("block_chunks", d.block_chunks)?;
    out.set_item("max_inflight", d.max_inflight)?;
    out.set_item("seed", d.seed)?;
    out.set_item("shuffle", d.shuffle)?;
    out.set_item("prefetch_depth", d.prefetch_depth)?;
    out.set_item("cache_budget_bytes", d.cache_budget_bytes)?;
    out.set_item("on_bad_chunk", d.read_policy.on_bad_chunk.name())?;
    out.set_item("fractions", s.fractions)?;
    out.set_item("contiguous", s.contiguous)?;
    out.set_item("probe_chunks", insitubatch_core::PROBE_CHUNKS)?;
    Ok(out)
}

/// Address of a numpy-visible buffer by label, for zero-copy tests.
#[pyfunction]
fn buffer_address(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(obj.cast::<Buffer>()?.get().ptr())
}

/// `gil_used = false` (pyo3's default since 0.28, stated because it was checked): every
/// class is `Sync` (pyo3 requires it of a non-`unsendable` pyclass), the mutable ones keep
/// their state behind mutexes, statics are atomics or `PyOnceLock`s, and Python callbacks
/// run attached from engine threads; so free-threaded CPython keeps its GIL off on import.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InsitubatchIOError", m.py().get_type::<InsitubatchIOError>())?;
    m.add_class::<Buffer>()?;
    m.add_class::<PyGeometry>()?;
    m.add_class::<PyManifest>()?;
    m.add_class::<NativeDataset>()?;
    m.add_class::<NativeStream>()?;
    m.add_class::<transforms::PyStandardScaler>()?;
    m.add_class::<reader::StoreReader>()?;
    m.add_function(wrap_pyfunction!(open_geometries, m)?)?;
    m.add_function(wrap_pyfunction!(split_by_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(valid_anchor_range, m)?)?;
    m.add_function(wrap_pyfunction!(buffer_address, m)?)?;
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    m.add_function(wrap_pyfunction!(verdict, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(pystore::_storage_conformance, m)?)?;
    m.add_function(wrap_pyfunction!(pystore::_storage_conformance_fixture, m)?)?;
    rules::register(m)?;
    Ok(())
}
