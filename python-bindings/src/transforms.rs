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
use std::sync::{Arc, Mutex, PoisonError};

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
pub(crate) fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> insitubatch_core::Result<R> {
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

/// The Python classes a chunk transform sees: `insitubatch_rs.ChunkRead` and
/// `insitubatch_rs.DecodedChunk` (dataclasses, as in the anchor, so `dataclasses.replace`
/// works), looked up once.
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
    /// the anchor.
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

/// The engine's scaler plus the identity Python declared for it (`cache_key`).
///
/// Its cache token is what a persisted cache fingerprints: the declared key when there is
/// one, else a SHA-256 of every statistic's exact bits, so a re-fit scaler never reopens
/// a cache written with the old numbers, however large its statistics.
#[derive(Debug, Clone)]
pub struct KeyedScaler {
    pub scaler: StandardScaler,
    pub cache_key: Option<String>,
    /// Computed once at construction (statistics never change afterwards).
    token: String,
}

impl KeyedScaler {
    fn new(py: Python<'_>, scaler: StandardScaler, cache_key: Option<String>) -> PyResult<Self> {
        let token = match &cache_key {
            Some(k) => format!("standard_scaler:key:{k}"),
            None => {
                // Length-prefixed fields, so no two scalers serialize to the same stream.
                let mut stream = Vec::new();
                let mut field = |b: &[u8]| {
                    stream.extend_from_slice(&(b.len() as u64).to_le_bytes());
                    stream.extend_from_slice(b);
                };
                let bits = |v: &[f32]| v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect::<Vec<u8>>();
                field(b"standard_scaler v1");
                field(&scaler.eps.to_bits().to_le_bytes());
                for (name, mean) in &scaler.mean {
                    field(name.as_bytes());
                    field(&bits(mean));
                    field(&bits(scaler.std.get(name).map(Vec::as_slice).unwrap_or_default()));
                }
                let hex: String = py
                    .import("hashlib")?
                    .getattr("sha256")?
                    .call1((pyo3::types::PyBytes::new(py, &stream),))?
                    .call_method0("hexdigest")?
                    .extract()?;
                format!("standard_scaler:sha256:{hex}")
            }
        };
        Ok(Self { scaler, cache_key, token })
    }
}

impl ChunkTransform for KeyedScaler {
    fn name(&self) -> String {
        self.scaler.name()
    }
    fn apply(&self, chunk: DecodedChunk) -> insitubatch_core::Result<DecodedChunk> {
        self.scaler.apply(chunk)
    }
    fn output(
        &self,
        geom: &CoreGeometry,
        dtype: DType,
        inner: &[usize],
    ) -> insitubatch_core::Result<(DType, Vec<usize>)> {
        self.scaler.output(geom, dtype, inner)
    }
    fn validate_scope(&self, arrays: &[String]) -> insitubatch_core::Result<()> {
        self.scaler.validate_scope(arrays)
    }
    /// The declared key when there is one; else only this array's statistics, so re-fitting
    /// one variable leaves the other variables' cached chunks valid.
    fn cache_token(&self, array: &str) -> String {
        match &self.cache_key {
            Some(_) => self.token.clone(),
            None => self.scaler.cache_token(array),
        }
    }
}

/// `(x - mean) / (std + eps)` per array with fixed statistics (the engine's scaler: no
/// Python runs per chunk). Statistics broadcast over a sample: a scalar per array, or one
/// value per element of the leading inner axes (shape `(level, 1, 1)` and the like).
#[pyclass(frozen, name = "StandardScaler", module = "insitubatch_rs")]
pub struct PyStandardScaler {
    pub inner: KeyedScaler,
    /// The statistics' shapes as given (the engine keeps them flat); `mean` and `std` of an
    /// array share one shape.
    shapes: BTreeMap<String, Vec<usize>>,
}

/// What `StandardScaler.save` writes as `"format"`, so `load` can tell its files from others.
const SCALER_FORMAT: &str = "insitubatch_rs.StandardScaler";
const SCALER_VERSION: u64 = 1;

/// One statistic as float32: its values (flat, C order) and its shape.
fn stat(py: Python<'_>, name: &str, which: &str, v: &Bound<'_, PyAny>) -> PyResult<(Vec<f32>, Vec<usize>)> {
    let arr = py.import("numpy")?.getattr("asarray")?.call1((v, "float32"))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let values: Vec<f32> = arr.call_method1("reshape", (-1,))?.call_method0("tolist")?.extract()?;
    if values.is_empty() {
        return Err(PyValueError::new_err(format!("StandardScaler {which} for {name:?} is empty")));
    }
    if values.iter().any(|x| !x.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "StandardScaler {which} for {name:?} holds NaN or infinity, which would turn every value into NaN; fit it on finite data"
        )));
    }
    Ok((values, shape))
}

impl PyStandardScaler {
    fn build(
        py: Python<'_>,
        mean: &Bound<'_, PyDict>,
        std: &Bound<'_, PyDict>,
        eps: f32,
        cache_key: Option<String>,
    ) -> PyResult<Self> {
        if !eps.is_finite() || eps < 0.0 {
            return Err(PyValueError::new_err(format!("StandardScaler eps must be finite and >= 0, got {eps}")));
        }
        let (mut means, mut stds, mut shapes) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (k, v) in mean.iter() {
            let k: String = k.extract()?;
            let (m, shape) = stat(py, &k, "mean", &v)?;
            let Some(sv) = std.get_item(&k)? else {
                return Err(PyValueError::new_err(format!("StandardScaler has a mean but no std for {k:?}")));
            };
            let (s, _) = stat(py, &k, "std", &sv)?;
            if s.len() != m.len() {
                return Err(PyValueError::new_err(format!(
                    "StandardScaler: mean and std for {k:?} differ in size ({} and {} values)",
                    m.len(),
                    s.len()
                )));
            }
            means.insert(k.clone(), m);
            stds.insert(k.clone(), s);
            shapes.insert(k, shape);
        }
        for k in std.keys() {
            let k: String = k.extract()?;
            if !means.contains_key(&k) {
                return Err(PyValueError::new_err(format!("StandardScaler has a std but no mean for {k:?}")));
            }
        }
        let scaler = StandardScaler { mean: means, std: stds, eps };
        Ok(Self { inner: KeyedScaler::new(py, scaler, cache_key)?, shapes })
    }

    /// `{array: float32 array}` of one statistic, in the shapes given.
    fn stats_dict<'py>(&self, py: Python<'py>, mean: bool) -> PyResult<Bound<'py, PyDict>> {
        let np = py.import("numpy")?;
        let d = PyDict::new(py);
        let src = if mean { &self.inner.scaler.mean } else { &self.inner.scaler.std };
        for (k, v) in src {
            let shape = self.shapes.get(k).cloned().unwrap_or_else(|| vec![v.len()]);
            let a = np.getattr("asarray")?.call1((v.clone(), "float32"))?.call_method1("reshape", (shape,))?;
            d.set_item(k, a)?;
        }
        Ok(d)
    }

    /// The `save` document: every float32 statistic written as the float64 it is exactly,
    /// so `load` gets back the same bits.
    fn to_json_value(&self) -> serde_json::Value {
        let s = &self.inner.scaler;
        let arrays: serde_json::Map<String, serde_json::Value> = s
            .mean
            .iter()
            .map(|(k, m)| {
                let sd = s.std.get(k).map(Vec::as_slice).unwrap_or_default();
                let f = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
                (k.clone(), serde_json::json!({"shape": self.shapes.get(k), "mean": f(m), "std": f(sd)}))
            })
            .collect();
        serde_json::json!({
            "format": SCALER_FORMAT,
            "version": SCALER_VERSION,
            "eps": f64::from(s.eps),
            "cache_key": self.inner.cache_key,
            "arrays": arrays,
        })
    }

    /// Parse a `save` document; every refusal names what is wrong, then the file.
    fn from_json_value(py: Python<'_>, v: &serde_json::Value, path: &str) -> PyResult<Self> {
        let bad = |what: String| {
            PyValueError::new_err(format!(
                "{what}; write it with StandardScaler.save (or pass an .npz of \"<array>.mean\"/\"<array>.std\"): {path}"
            ))
        };
        let obj = v.as_object().ok_or_else(|| bad("the file is JSON but not an object".into()))?;
        if obj.get("format").and_then(|f| f.as_str()) != Some(SCALER_FORMAT) {
            return Err(bad(format!("the file is not a saved StandardScaler (no \"format\": {SCALER_FORMAT:?})")));
        }
        match obj.get("version").and_then(serde_json::Value::as_u64) {
            Some(SCALER_VERSION) => {}
            Some(n) => {
                return Err(PyValueError::new_err(format!(
                    "the file is StandardScaler format version {n}; this insitubatch_rs reads version {SCALER_VERSION}, upgrade it to read the file: {path}"
                )));
            }
            None => return Err(bad("the file has no integer \"version\"".into())),
        }
        let eps = obj
            .get("eps")
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| bad("\"eps\" is missing or not a number".into()))?;
        let cache_key = match obj.get("cache_key") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(k)) => Some(k.clone()),
            Some(_) => return Err(bad("\"cache_key\" is neither null nor a string".into())),
        };
        let arrays = obj
            .get("arrays")
            .and_then(|a| a.as_object())
            .ok_or_else(|| bad("\"arrays\" is missing or not an object".into()))?;
        let np = py.import("numpy")?;
        let (mean, std) = (PyDict::new(py), PyDict::new(py));
        for (name, entry) in arrays {
            let field = |key: &str| -> PyResult<Vec<f64>> {
                entry
                    .get(key)
                    .and_then(|x| x.as_array())
                    .and_then(|xs| xs.iter().map(serde_json::Value::as_f64).collect::<Option<Vec<f64>>>())
                    .ok_or_else(|| bad(format!("array {name:?}: \"{key}\" is missing or not a list of numbers")))
            };
            let shape: Vec<usize> = entry
                .get("shape")
                .and_then(|x| x.as_array())
                .and_then(|xs| xs.iter().map(|d| d.as_u64().map(|d| d as usize)).collect::<Option<Vec<usize>>>())
                .ok_or_else(|| bad(format!("array {name:?}: \"shape\" is missing or not a list of sizes")))?;
            let (m, s) = (field("mean")?, field("std")?);
            let n: usize = shape.iter().product();
            if m.len() != n || s.len() != n {
                return Err(bad(format!(
                    "array {name:?}: shape {shape:?} holds {n} values but mean has {} and std {}",
                    m.len(),
                    s.len()
                )));
            }
            let arr = |v: Vec<f64>| -> PyResult<Bound<'_, PyAny>> {
                np.getattr("asarray")?.call1((v, "float32"))?.call_method1("reshape", (shape.clone(),))
            };
            mean.set_item(name, arr(m)?)?;
            std.set_item(name, arr(s)?)?;
        }
        Self::build(py, &mean, &std, eps as f32, cache_key).map_err(|e| bad(e.value(py).to_string()))
    }
}

fn os_err(what: &str, path: &std::path::Path, e: &std::io::Error) -> PyErr {
    let msg = format!("cannot {what} the StandardScaler file ({e}): {}", path.display());
    match e.kind() {
        std::io::ErrorKind::NotFound => pyo3::exceptions::PyFileNotFoundError::new_err(msg),
        _ => pyo3::exceptions::PyOSError::new_err(msg),
    }
}

fn is_npz(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"))
}

#[pymethods]
impl PyStandardScaler {
    #[new]
    #[pyo3(signature = (mean, std, eps = 1e-8, cache_key = None))]
    fn new(
        py: Python<'_>,
        mean: &Bound<'_, PyDict>,
        std: &Bound<'_, PyDict>,
        eps: f32,
        cache_key: Option<String>,
    ) -> PyResult<Self> {
        Self::build(py, mean, std, eps, cache_key)
    }
    /// Raise `ValueError` when some array of `scope` has no statistics.
    fn validate_scope(&self, scope: Vec<String>) -> PyResult<()> {
        self.inner.validate_scope(&scope).map_err(core_err)
    }
    #[getter]
    fn eps(&self) -> f32 {
        self.inner.scaler.eps
    }
    /// `{array: mean}` as float32 arrays in the shapes given.
    #[getter]
    fn mean<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.stats_dict(py, true)
    }
    /// `{array: std}` as float32 arrays in the shapes given.
    #[getter]
    fn std<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.stats_dict(py, false)
    }
    /// The identity declared for a persisted cache (bump it on every re-fit), or `None`.
    #[getter]
    fn cache_key(&self) -> Option<String> {
        self.inner.cache_key.clone()
    }
    /// What a persisted cache fingerprints for this scaler: `standard_scaler:key:<cache_key>`,
    /// or `standard_scaler:sha256:<hex>` of the exact statistics and `eps`. The same in every
    /// process; any change to a statistic changes it.
    #[getter]
    fn cache_token(&self) -> String {
        self.inner.token.clone()
    }
    /// Write the scaler to `path`: JSON (exact float32 values, `eps`, `cache_key`), or for a
    /// `.npz` path the anchor's layout (`"<array>.mean"`, `"<array>.std"`; no eps/cache_key).
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        if is_npz(&path) {
            let kw = PyDict::new(py);
            for (k, v) in self.stats_dict(py, true)?.iter() {
                kw.set_item(format!("{}.mean", k.extract::<String>()?), v)?;
            }
            for (k, v) in self.stats_dict(py, false)?.iter() {
                kw.set_item(format!("{}.std", k.extract::<String>()?), v)?;
            }
            py.import("numpy")?.getattr("savez")?.call((path,), Some(&kw))?;
            return Ok(());
        }
        let text = serde_json::to_string(&self.to_json_value()).map_err(|e| PyValueError::new_err(e.to_string()))?;
        // Written aside and renamed, so a reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| os_err("write", &tmp, &e))?;
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            os_err("write", &path, &e)
        })
    }
    /// Read a scaler written by `save` (JSON), or an anchor-style `.npz`.
    #[staticmethod]
    fn load(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        let bytes = std::fs::read(&path).map_err(|e| os_err("read", &path, &e))?;
        let shown = path.display().to_string();
        if bytes.starts_with(b"PK\x03\x04") {
            return Self::load_npz(py, &path, &shown);
        }
        let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            PyValueError::new_err(format!(
                "the file is not a saved StandardScaler (not JSON: {e}); write it with StandardScaler.save: {shown}"
            ))
        })?;
        Self::from_json_value(py, &v, &shown)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyStandardScaler>().is_ok_and(|o| {
            let (a, b) = (&self.inner, &o.get().inner);
            a.cache_key == b.cache_key
                && a.scaler.eps.to_bits() == b.scaler.eps.to_bits()
                && a.scaler.mean == b.scaler.mean
                && a.scaler.std == b.scaler.std
                && self.shapes == o.get().shapes
        })
    }
    #[getter]
    fn __name__(&self) -> &'static str {
        "standard_scaler"
    }
    fn __repr__(&self) -> String {
        let key = self.inner.cache_key.as_ref().map(|k| format!(", cache_key={k:?}")).unwrap_or_default();
        format!(
            "StandardScaler(arrays={:?}, eps={:?}{key})",
            self.inner.scaler.mean.keys().collect::<Vec<_>>(),
            self.inner.scaler.eps
        )
    }
}

impl PyStandardScaler {
    /// The anchor's `save` layout: an npz of `"<array>.mean"` and `"<array>.std"`.
    fn load_npz(py: Python<'_>, path: &std::path::Path, shown: &str) -> PyResult<Self> {
        let npz = py.import("numpy")?.getattr("load")?.call1((path,))?;
        let (mean, std) = (PyDict::new(py), PyDict::new(py));
        let files: Vec<String> = npz.getattr("files")?.extract()?;
        for f in &files {
            let (name, which) = match f.rsplit_once('.') {
                Some((n, "mean")) => (n, &mean),
                Some((n, "std")) => (n, &std),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "the npz holds {f:?}, which is not \"<array>.mean\" or \"<array>.std\"; it is not a saved StandardScaler: {shown}"
                    )));
                }
            };
            which.set_item(name, npz.get_item(f)?)?;
        }
        npz.call_method0("close")?;
        if files.is_empty() {
            return Err(PyValueError::new_err(format!("the npz holds no statistics: {shown}")));
        }
        Self::build(py, &mean, &std, 1e-8, None).map_err(|e| PyValueError::new_err(format!("{}: {shown}", e.value(py))))
    }
}

/// Build the engine's transform for one Python chunk transform object.
pub fn chunk_transform(py: Python<'_>, obj: &Bound<'_, PyAny>, errors: &ErrSlot) -> PyResult<Arc<dyn ChunkTransform>> {
    if let Ok(s) = obj.cast::<PyStandardScaler>() {
        return Ok(Arc::new(s.get().inner.clone()));
    }
    Ok(Arc::new(PyChunkFn::new(py, obj, Arc::clone(errors))?))
}
