//! Python callables as engine transforms.
//!
//! A chunk transform `(DecodedChunk) -> DecodedChunk` and a batch transform
//! `(Batch) -> Batch` run on the engine's decode pool; each call acquires the GIL only for
//! the call itself (`Python::attach`). Arrays go to Python without a copy (a [`Buffer`]
//! moved into numpy) and come back by one copy into an aligned [`NdArray`]. A Python
//! exception fails the chunk or batch; the original exception is kept in the dataset's
//! [`ErrSlot`] so the pass re-raises it with its type and traceback.
//!
//! The engine's references to the callables are not shown to Python's garbage collector
//! (no `__traverse__`): engine threads may still call a transform after the collector
//! would have cleared it, which crashes. A transform that refers back to its dataset
//! therefore keeps the pair alive until `close()` breaks the cycle.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use insitubatch_core::Batch;
use insitubatch_core::geometry::ArrayGeometry as CoreGeometry;
use insitubatch_core::internals::zeroed_bytes;
use insitubatch_core::scaler::{StandardScaler, Stat, StatDType};
use insitubatch_core::transform::{BatchTransform, ChunkTransform, DecodedChunk};
use insitubatch_core::{DType, Error as CoreError, NdArray};
use insitubatch_native::scaler_file::ScalerFileError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::attach::with_python;
use crate::buffer::{Buffer, i64_numpy};
use crate::errors::{ErrSlot, core_err};
use crate::geometry::PyGeometry;
use crate::stream::{coords_to_py, patches_to_py};

/// The Python classes a chunk transform sees: `insitubatch_rs.ChunkRead` and
/// `insitubatch_rs.DecodedChunk` (dataclasses, as in insitubatch 0.2.0, so
/// `dataclasses.replace` works), looked up once.
fn chunk_classes(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    static CLASSES: pyo3::sync::PyOnceLock<(Py<PyAny>, Py<PyAny>)> = pyo3::sync::PyOnceLock::new();
    CLASSES.get_or_try_init(py, || {
        let m = py.import("insitubatch_rs")?;
        Ok((m.getattr("ChunkRead")?.unbind(), m.getattr("DecodedChunk")?.unbind()))
    })
}

/// Copy a numpy-convertible object into an aligned engine array.
pub fn numpy_to_nd(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<NdArray> {
    let np = py.import("numpy")?;
    let mut arr = np.getattr("ascontiguousarray")?.call1((obj,))?;
    let dt = arr.getattr("dtype")?;
    if !dt.getattr("isnative")?.extract::<bool>()? {
        arr = arr.call_method1("astype", (dt.call_method1("newbyteorder", ("=",))?,))?;
    }
    let name: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    let dtype = DType::from_zarr_name(&name)
        .ok_or_else(|| PyTypeError::new_err(format!("a transform returned an array of unsupported dtype {name}")))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let nbytes: usize = arr.getattr("nbytes")?.extract()?;
    let mut data = zeroed_bytes(nbytes);
    if nbytes > 0 {
        let (ptr, _readonly): (usize, bool) = arr.getattr("__array_interface__")?.get_item("data")?.extract()?;
        // SAFETY: `arr` is a live C-contiguous array of `nbytes` bytes at `ptr`, and we hold
        // a reference to it for the duration of the copy, so numpy cannot free or resize its
        // buffer (resize refuses a referenced array). A thread writing into it meanwhile (only
        // possible if the transform shared its output) can tear values, as with numpy itself.
        unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, data.as_mut_ptr(), nbytes) };
    }
    NdArray::new(dtype, shape, data).map_err(PyValueError::new_err)
}

fn callable_name(py: Python<'_>, f: &Py<PyAny>) -> String {
    let f = f.bind(py);
    f.getattr("__name__")
        .or_else(|_| f.get_type().getattr("__name__"))
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| "python".into())
}

/// Record `e` (the first one wins) and turn it into the engine's transform error.
fn fail(py: Python<'_>, slot: &ErrSlot, name: &str, e: PyErr) -> CoreError {
    let message = e.to_string();
    let mut g = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if g.is_none() {
        *g = Some(e.clone_ref(py));
    }
    CoreError::Transform { name: name.to_string(), message }
}

/// A Python chunk transform.
pub struct PyChunkFn {
    func: Py<PyAny>,
    output_inner: Option<Py<PyAny>>,
    name: String,
    errors: ErrSlot,
}

impl std::fmt::Debug for PyChunkFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyChunkFn({})", self.name)
    }
}

impl PyChunkFn {
    pub fn new(py: Python<'_>, func: &Bound<'_, PyAny>, errors: ErrSlot) -> PyResult<Self> {
        if !func.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "a chunk transform must be callable (DecodedChunk) -> DecodedChunk, got {}",
                func.get_type().name()?
            )));
        }
        let output_inner = match func.getattr_opt("output_inner")? {
            Some(o) if !o.is_none() => Some(o.unbind()),
            _ => None,
        };
        let func = func.clone().unbind();
        let name = callable_name(py, &func);
        Ok(Self { func, output_inner, name, errors })
    }
}

impl ChunkTransform for PyChunkFn {
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The identity a persisted cache fingerprints: `cache_key` if the callable declares one,
    /// else a hash of its pickle (cloudpickle) or of its source, closure values and repr
    /// (`insitubatch_rs._cache_token`).
    fn cache_token(&self, _array: &str) -> String {
        Python::attach(|py| {
            let token = || -> PyResult<String> {
                py.import("insitubatch_rs")?.getattr("_cache_token")?.call1((self.func.bind(py),))?.extract()
            };
            token().unwrap_or_else(|e| {
                let msg = format!(
                    "cannot fingerprint chunk transform {} for the persisted cache ({e}); it is identified by its name \
                     only, so give it a cache_key attribute",
                    self.name
                );
                let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
                let _ = PyErr::warn(py, &category, &std::ffi::CString::new(msg).unwrap_or_default(), 1);
                format!("name:{}", self.name)
            })
        })
    }

    /// `output_inner(geom)` sees the array's real geometry (sample axis, chunking), as in
    /// insitubatch 0.2.0.
    fn output(
        &self,
        geom: &CoreGeometry,
        dtype: DType,
        inner: &[usize],
    ) -> insitubatch_core::Result<(DType, Vec<usize>)> {
        let Some(oi) = &self.output_inner else { return Ok((dtype, inner.to_vec())) };
        Python::attach(|py| -> PyResult<(DType, Vec<usize>)> {
            let out = oi.bind(py).call1((PyGeometry { inner: geom.clone() },))?;
            let (shape, dt): (Vec<usize>, Bound<'_, PyAny>) = out.extract()?;
            let name: String = py.import("numpy")?.getattr("dtype")?.call1((dt,))?.getattr("name")?.extract()?;
            let dtype = DType::from_zarr_name(&name)
                .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {name}")))?;
            Ok((dtype, shape))
        })
        .map_err(|e| CoreError::Config(format!("{}.output_inner failed for array {:?}: {e}", self.name, geom.path)))
    }

    fn apply(&self, chunk: DecodedChunk) -> insitubatch_core::Result<DecodedChunk> {
        let DecodedChunk { array, chunk_index, sample_offset, data } = chunk;
        with_python(|py| {
            let run = || -> PyResult<NdArray> {
                let data = Buffer::from_nd(data)?.into_numpy(py)?.unbind();
                let (read_cls, chunk_cls) = chunk_classes(py)?;
                let read = read_cls.bind(py).call1((array.clone(), chunk_index))?;
                let arg = chunk_cls.bind(py).call1((read, data, sample_offset))?;
                let out = self.func.bind(py).call1((arg,))?;
                // A DecodedChunk back (the usual), or just its new data.
                let out_data = if out.is_instance(chunk_cls.bind(py))? { out.getattr("data")? } else { out };
                numpy_to_nd(py, &out_data)
            };
            match run() {
                Ok(data) => Ok(DecodedChunk { array: array.clone(), chunk_index, sample_offset, data }),
                Err(e) => Err(fail(py, &self.errors, &self.name, e)),
            }
        })?
    }
}

/// A Python batch transform.
pub struct PyBatchFn {
    func: Py<PyAny>,
    name: String,
    errors: ErrSlot,
}

impl std::fmt::Debug for PyBatchFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyBatchFn({})", self.name)
    }
}

impl PyBatchFn {
    pub fn new(py: Python<'_>, func: &Bound<'_, PyAny>, errors: ErrSlot) -> PyResult<Self> {
        if !func.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "a batch transform must be callable (Batch) -> Batch, got {}",
                func.get_type().name()?
            )));
        }
        let func = func.clone().unbind();
        let name = callable_name(py, &func);
        Ok(Self { func, name, errors })
    }
}

impl BatchTransform for PyBatchFn {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn apply(&self, batch: Batch) -> insitubatch_core::Result<Batch> {
        let Batch { arrays, sample_indices, offsets, index, epoch, patches, part, coords } = batch;
        with_python(|py| {
            let run = || -> PyResult<Batch> {
                let d = PyDict::new(py);
                for (label, a) in arrays {
                    d.set_item(label, Buffer::from_nd(a)?.into_numpy(py)?)?;
                }
                let idx = i64_numpy(py, sample_indices.iter().copied())?;
                let offs = PyDict::new(py);
                for (label, o) in &offsets {
                    offs.set_item(label, o)?;
                }
                let cls = py.import("insitubatch_rs")?.getattr("Batch")?;
                let (origins, dims) = patches_to_py(py, patches.as_ref())?;
                let model_part = match &part {
                    Some(p) => (p.dim.as_str(), p.start, p.start + p.len).into_pyobject(py)?.into_any(),
                    None => py.None().into_bound(py),
                };
                let py_coords = coords_to_py(py, &coords, patches.as_ref())?;
                let arg = cls.call1((d, idx, offs, index, epoch, origins, dims, model_part, py_coords))?;
                let out = self.func.bind(py).call1((arg,))?;
                let mut new_arrays = BTreeMap::new();
                for item in out.call_method0("items")?.try_iter()? {
                    let (k, v): (String, Bound<'_, PyAny>) = item?.extract()?;
                    new_arrays.insert(k, numpy_to_nd(py, &v)?);
                }
                let new_idx: Vec<u64> = match out.getattr_opt("sample_indices")? {
                    Some(s) => py
                        .import("numpy")?
                        .getattr("asarray")?
                        .call1((s, "int64"))?
                        .call_method0("tolist")?
                        .extract::<Vec<i64>>()?
                        .into_iter()
                        .map(|x| x as u64)
                        .collect(),
                    None => sample_indices.clone(),
                };
                let new_offsets: BTreeMap<String, i64> = match out.getattr_opt("offsets")? {
                    Some(o) => o.extract()?,
                    None => offsets.clone(),
                };
                for (k, a) in &new_arrays {
                    if a.shape.first().copied() != Some(new_idx.len()) {
                        return Err(PyValueError::new_err(format!(
                            "batch transform {} returned {k:?} with shape {:?} for a batch of {} rows",
                            self.name,
                            a.shape,
                            new_idx.len()
                        )));
                    }
                }
                // Patches follow their rows: a transform that changes the rows drops them.
                let patches = patches.filter(|p| p.origins.len() == new_idx.len() * p.dims.len());
                // Coordinates follow their rows: a transform that changes the rows drops them.
                let kept_coords = if new_idx == sample_indices { coords.clone() } else { BTreeMap::new() };
                Ok(Batch {
                    arrays: new_arrays,
                    sample_indices: new_idx,
                    offsets: new_offsets,
                    index,
                    epoch,
                    patches,
                    part: part.clone(),
                    coords: kept_coords,
                })
            };
            run().map_err(|e| fail(py, &self.errors, &self.name, e))
        })?
    }
}

/// `(x - mean) / (std + eps)` per array with fixed statistics: a chunk transform the engine
/// runs itself, without the GIL.
///
/// `mean` and `std` map array paths to a Python float or a float16, bfloat16, float32 or
/// float64 array; `cache_key` names the statistics for a persisted cache (bump it on every
/// re-fit). A thin wrapper over the engine's [`StandardScaler`] (core/src/scaler.rs), which
/// decides everything: broadcasting, numpy's dtype promotion, refusals, the cache token. This
/// class only converts Python values to statistics (a Python number stays a Python number,
/// numpy's weak scalar; an array keeps its dtype and shape) and back; `save`/`load` go to
/// `insitubatch_native::scaler_file`.
///
/// Raises:
///     TypeError: `mean` or `std` is not a dict, or a statistic is neither a Python number
///         nor a float array (an int array, a string).
///     ValueError: an array with a mean but no std (or the reverse), no statistics at all,
///         an empty statistic or one holding NaN or infinity, or an `eps` that is not finite
///         and `>= 0`.
#[pyclass(frozen, name = "StandardScaler", module = "insitubatch_rs")]
pub struct PyStandardScaler {
    pub inner: Arc<StandardScaler>,
}

/// One statistic as the engine takes it: a Python `float`/`int` as a Python number, anything
/// else through `numpy.asarray` with its dtype, shape and values (exact, widened to float64).
fn stat(py: Python<'_>, name: &str, which: &str, v: &Bound<'_, PyAny>) -> PyResult<Stat> {
    let bad = |e: String| PyValueError::new_err(format!("StandardScaler {which} for {name:?}: {e}"));
    let is_bool = v.is_instance_of::<pyo3::types::PyBool>();
    if !is_bool && (v.is_exact_instance_of::<pyo3::types::PyFloat>() || v.is_exact_instance_of::<pyo3::types::PyInt>())
    {
        return Stat::python(v.extract::<f64>()?).map_err(bad);
    }
    let np = py.import("numpy")?;
    let arr = np.getattr("asarray")?.call1((v,))?;
    let dtype: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    let Some(dt) = StatDType::from_name(&dtype).filter(|d| *d != StatDType::Python) else {
        return Err(PyTypeError::new_err(format!(
            "StandardScaler {which} for {name:?} is {dtype}; give a Python float or a float16, bfloat16, float32 or \
             float64 array (cast it with .astype)"
        )));
    };
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let values: Vec<f64> =
        arr.call_method1("astype", ("float64",))?.call_method1("reshape", (-1,))?.call_method0("tolist")?.extract()?;
    Stat::new(dt, shape, values).map_err(bad)
}

/// A statistic back as Python gave it: a Python float, or an array of its dtype and shape.
fn stat_to_py<'py>(py: Python<'py>, s: &Stat) -> PyResult<Bound<'py, PyAny>> {
    if s.dtype() == StatDType::Python {
        return Ok(pyo3::types::PyFloat::new(py, s.values()[0]).into_any());
    }
    let np = py.import("numpy")?;
    let dtype = match s.dtype() {
        StatDType::Bfloat16 => py.import("ml_dtypes")?.getattr("bfloat16")?,
        d => pyo3::types::PyString::new(py, d.name()).into_any(),
    };
    let a = np.getattr("asarray")?.call1((s.values().to_vec(), "float64"))?;
    a.call_method1("astype", (dtype,))?.call_method1("reshape", (s.shape().to_vec(),))
}

fn file_err(e: ScalerFileError) -> PyErr {
    let msg = e.to_string();
    match e {
        _ if e.is_not_found() => pyo3::exceptions::PyFileNotFoundError::new_err(msg),
        ScalerFileError::Read { .. } | ScalerFileError::Write { .. } => pyo3::exceptions::PyOSError::new_err(msg),
        ScalerFileError::Invalid { .. } => PyValueError::new_err(msg),
    }
}

#[pymethods]
impl PyStandardScaler {
    #[new]
    #[pyo3(signature = (mean, std, eps = 1e-8, cache_key = None))]
    fn new(
        py: Python<'_>,
        mean: &Bound<'_, PyDict>,
        std: &Bound<'_, PyDict>,
        eps: f64,
        cache_key: Option<String>,
    ) -> PyResult<Self> {
        let stats = |d: &Bound<'_, PyDict>, which: &str| -> PyResult<BTreeMap<String, Stat>> {
            d.iter()
                .map(|(k, v)| {
                    let k: String = k.extract()?;
                    let s = stat(py, &k, which, &v)?;
                    Ok((k, s))
                })
                .collect()
        };
        let scaler = StandardScaler::from_maps(stats(mean, "mean")?, stats(std, "std")?, eps).map_err(core_err)?;
        Ok(Self { inner: Arc::new(scaler.with_cache_key(cache_key)) })
    }
    /// Check that every array of `scope` has statistics (`applies` calls it).
    ///
    /// Raises:
    ///     ValueError: some array of `scope` has no statistics.
    fn validate_scope(&self, scope: Vec<String>) -> PyResult<()> {
        self.inner.validate_scope(&scope).map_err(core_err)
    }
    /// Added to `std` before dividing.
    #[getter]
    fn eps(&self) -> f64 {
        self.inner.eps()
    }
    /// `{array: mean}` as given: Python floats, or arrays of their own dtype and shape.
    #[getter]
    fn mean<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.stats_dict(py, true)
    }
    /// `{array: std}` as given.
    #[getter]
    fn std<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.stats_dict(py, false)
    }
    /// The identity declared for a persisted cache (bump it on every re-fit), or `None`.
    #[getter]
    fn cache_key(&self) -> Option<String> {
        self.inner.cache_key().map(str::to_string)
    }
    /// What a persisted cache fingerprints for this scaler: `standard_scaler:key:<cache_key>`,
    /// or `standard_scaler:sha256:<hex>` of every statistic's dtype, shape and exact bits and
    /// of `eps`. The same in every process; any change to a statistic changes it.
    #[getter]
    fn cache_token(&self) -> String {
        self.inner.token()
    }
    /// Write the scaler to `path`: JSON (exact, with dtypes, `eps` and `cache_key`), or for a
    /// `.npz` path insitubatch 0.2.0's layout (`"<array>.mean"`, `"<array>.std"`; no
    /// eps/cache_key).
    ///
    /// Raises:
    ///     OSError: `path` cannot be written.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| insitubatch_native::scaler_file::save(&self.inner, &path)).map_err(file_err)
    }
    /// Read a scaler written by `save` (JSON), or a `.npz` in insitubatch 0.2.0's layout.
    ///
    /// Raises:
    ///     FileNotFoundError: `path` does not exist.
    ///     OSError: `path` cannot be read.
    ///     ValueError: the file is not a saved scaler.
    #[staticmethod]
    fn load(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        let scaler = py.detach(|| insitubatch_native::scaler_file::load(&path)).map_err(file_err)?;
        Ok(Self { inner: Arc::new(scaler) })
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyStandardScaler>().is_ok_and(|o| *self.inner == *o.get().inner)
    }
    #[getter]
    fn __name__(&self) -> &'static str {
        "standard_scaler"
    }
    fn __repr__(&self) -> String {
        let key = self.inner.cache_key().map(|k| format!(", cache_key={k:?}")).unwrap_or_default();
        format!(
            "StandardScaler(arrays={:?}, eps={:?}{key})",
            self.inner.stats().keys().collect::<Vec<_>>(),
            self.inner.eps()
        )
    }
}

impl PyStandardScaler {
    fn stats_dict<'py>(&self, py: Python<'py>, mean: bool) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, s) in self.inner.stats() {
            d.set_item(k, stat_to_py(py, if mean { &s.mean } else { &s.std })?)?;
        }
        Ok(d)
    }
}

/// Build the engine's transform for one Python chunk transform object.
pub fn chunk_transform(py: Python<'_>, obj: &Bound<'_, PyAny>, errors: &ErrSlot) -> PyResult<Arc<dyn ChunkTransform>> {
    if let Ok(s) = obj.cast::<PyStandardScaler>() {
        let scaler: Arc<StandardScaler> = Arc::clone(&s.get().inner);
        return Ok(scaler);
    }
    Ok(Arc::new(PyChunkFn::new(py, obj, Arc::clone(errors))?))
}
