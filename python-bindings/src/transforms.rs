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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use insitubatch_core::array::zeroed_bytes;
use insitubatch_core::batch::Batch;
use insitubatch_core::geometry::ArrayGeometry as CoreGeometry;
use insitubatch_core::transform::{BatchTransform, ChunkTransform, DecodedChunk, StandardScaler};
use insitubatch_core::{DType, Error as CoreError, NdArray};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{Buffer, PyGeometry, core_err, i64_numpy};

static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
static IN_CALL: AtomicUsize = AtomicUsize::new(0);

/// Run `f` with the GIL, unless the interpreter is shutting down: engine threads may still
/// be running transforms when Python exits, and attaching during finalization crashes.
/// Callers are counted so [`shutdown`] can wait for those already inside.
fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> insitubatch_core::Result<R> {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_CALL.fetch_sub(1, Ordering::SeqCst);
        }
    }
    IN_CALL.fetch_add(1, Ordering::SeqCst);
    let _leave = Leave;
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        return Err(CoreError::Cancelled("the Python interpreter is shutting down".into()));
    }
    Ok(Python::attach(f))
}

/// Registered with `atexit`: stop starting Python transforms and wait (GIL released, at
/// most 5 s) for the calls already under way.
#[pyfunction]
pub fn _shutdown(py: Python<'_>) {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while IN_CALL.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}

/// The first Python exception a dataset's transforms raised (re-raised by the pass).
pub type ErrSlot = Arc<Mutex<Option<PyErr>>>;

/// Array path → `(n_samples, sample_chunk_size)`, for the geometry `output_inner` sees.
pub type GeomMap = Arc<OnceLock<BTreeMap<String, (u64, u64)>>>;

/// A decoded chunk as a Python chunk transform sees it: `data` is `(rows, *inner)`,
/// sample axis first, logical (no edge padding).
#[pyclass(name = "DecodedChunk", module = "insitubatch_rs", get_all, set_all)]
pub struct PyDecodedChunk {
    array: String,
    chunk_index: u64,
    sample_offset: u64,
    data: Py<PyAny>,
}

#[pymethods]
impl PyDecodedChunk {
    #[new]
    fn new(array: String, chunk_index: u64, sample_offset: u64, data: Py<PyAny>) -> Self {
        Self { array, chunk_index, sample_offset, data }
    }
    /// The same chunk with other data (what a transform usually returns).
    fn replace(&self, py: Python<'_>, data: Py<PyAny>) -> Self {
        let _ = py;
        Self { array: self.array.clone(), chunk_index: self.chunk_index, sample_offset: self.sample_offset, data }
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        let shape = self.data.bind(py).getattr("shape").map(|s| s.to_string()).unwrap_or_default();
        format!(
            "DecodedChunk(array={:?}, chunk_index={}, sample_offset={}, data.shape={shape})",
            self.array, self.chunk_index, self.sample_offset
        )
    }
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
        // a reference to it (and the GIL) for the duration of the copy.
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
    geoms: GeomMap,
    errors: ErrSlot,
}

impl std::fmt::Debug for PyChunkFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyChunkFn({})", self.name)
    }
}

impl PyChunkFn {
    pub fn new(py: Python<'_>, func: &Bound<'_, PyAny>, geoms: GeomMap, errors: ErrSlot) -> PyResult<Self> {
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
        Ok(Self { func, output_inner, name, geoms, errors })
    }
}

impl ChunkTransform for PyChunkFn {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn output(&self, array: &str, dtype: DType, inner: &[usize]) -> insitubatch_core::Result<(DType, Vec<usize>)> {
        let Some(oi) = &self.output_inner else { return Ok((dtype, inner.to_vec())) };
        let (n, spc) = self.geoms.get().and_then(|m| m.get(array)).copied().unwrap_or((1, 1));
        let shape: Vec<u64> = std::iter::once(n).chain(inner.iter().map(|&x| x as u64)).collect();
        let chunks: Vec<u64> = std::iter::once(spc.max(1)).chain(inner.iter().map(|&x| (x as u64).max(1))).collect();
        let geom = CoreGeometry::new(array.to_string(), shape, chunks, dtype, 0)?;
        Python::attach(|py| -> PyResult<(DType, Vec<usize>)> {
            let out = oi.bind(py).call1((PyGeometry { inner: geom },))?;
            let (shape, dt): (Vec<usize>, Bound<'_, PyAny>) = out.extract()?;
            let name: String = py.import("numpy")?.getattr("dtype")?.call1((dt,))?.getattr("name")?.extract()?;
            let dtype = DType::from_zarr_name(&name)
                .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {name}")))?;
            Ok((dtype, shape))
        })
        .map_err(|e| CoreError::Config(format!("{}.output_inner failed for array {array:?}: {e}", self.name)))
    }

    fn apply(&self, chunk: DecodedChunk) -> insitubatch_core::Result<DecodedChunk> {
        let DecodedChunk { array, chunk_index, sample_offset, data } = chunk;
        with_python(|py| {
            let run = || -> PyResult<NdArray> {
                let data = Buffer::from_nd(data)?.into_numpy(py)?.unbind();
                let arg = Bound::new(py, PyDecodedChunk { array: array.clone(), chunk_index, sample_offset, data })?;
                let out = self.func.bind(py).call1((arg,))?;
                let out_data = match out.cast::<PyDecodedChunk>() {
                    Ok(dc) => dc.borrow().data.clone_ref(py).into_bound(py),
                    Err(_) => out,
                };
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
        let Batch { arrays, sample_indices, offsets, index, epoch } = batch;
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
                let arg = cls.call1((d, idx, offs, index, epoch))?;
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
                Ok(Batch { arrays: new_arrays, sample_indices: new_idx, offsets: new_offsets, index, epoch })
            };
            run().map_err(|e| fail(py, &self.errors, &self.name, e))
        })?
    }
}

/// `(x - mean) / (std + eps)` per array with fixed statistics (the engine's scaler: no
/// Python runs per chunk). Statistics broadcast over a sample: a scalar per array, or one
/// value per element of the leading inner axes (shape `(level, 1, 1)` and the like).
#[pyclass(frozen, name = "StandardScaler", module = "insitubatch_rs")]
pub struct PyStandardScaler {
    pub inner: StandardScaler,
}

fn stats(py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<BTreeMap<String, Vec<f32>>> {
    let np = py.import("numpy")?;
    let mut out = BTreeMap::new();
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        let v: Vec<f32> = np
            .getattr("asarray")?
            .call1((v, "float32"))?
            .call_method1("reshape", (-1,))?
            .call_method0("tolist")?
            .extract()?;
        if v.is_empty() {
            return Err(PyValueError::new_err(format!("StandardScaler statistics for {k:?} are empty")));
        }
        out.insert(k, v);
    }
    Ok(out)
}

#[pymethods]
impl PyStandardScaler {
    #[new]
    #[pyo3(signature = (mean, std, eps = 1e-8))]
    fn new(py: Python<'_>, mean: &Bound<'_, PyDict>, std: &Bound<'_, PyDict>, eps: f32) -> PyResult<Self> {
        let (mean, std) = (stats(py, mean)?, stats(py, std)?);
        for (k, m) in &mean {
            match std.get(k) {
                Some(s) if s.len() == m.len() => {}
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "StandardScaler: mean and std for {k:?} differ in shape or std is missing"
                    )));
                }
            }
        }
        Ok(Self { inner: StandardScaler { mean, std, eps } })
    }
    /// Raise `ValueError` when some array of `scope` has no statistics.
    fn validate_scope(&self, scope: Vec<String>) -> PyResult<()> {
        self.inner.validate_scope(&scope).map_err(core_err)
    }
    #[getter]
    fn eps(&self) -> f32 {
        self.inner.eps
    }
    #[getter]
    fn __name__(&self) -> &'static str {
        "standard_scaler"
    }
    fn __repr__(&self) -> String {
        format!("StandardScaler(arrays={:?}, eps={})", self.inner.mean.keys().collect::<Vec<_>>(), self.inner.eps)
    }
}

/// Build the engine's transform for one Python chunk transform object.
pub fn chunk_transform(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    geoms: &GeomMap,
    errors: &ErrSlot,
) -> PyResult<Arc<dyn ChunkTransform>> {
    if let Ok(s) = obj.cast::<PyStandardScaler>() {
        return Ok(Arc::new(s.get().inner.clone()));
    }
    Ok(Arc::new(PyChunkFn::new(py, obj, Arc::clone(geoms), Arc::clone(errors))?))
}
