//! Engine memory seen by numpy without a copy: an [`NdArray`] (or a vector of indices) moved
//! into a [`Buffer`] that exposes `__array_interface__`; `numpy.asarray(buffer)` keeps the
//! buffer alive as the array's `base`, and dropping the last view hands the memory back to
//! the engine's recycler.

use insitubatch_core::{DType, NdArray};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// numpy's `__array_interface__` type string for an engine dtype.
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
    pub(crate) fn from_i64(v: Vec<i64>) -> Self {
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

/// Indices as an int64 numpy array over Rust memory.
pub(crate) fn i64_numpy(py: Python<'_>, v: impl IntoIterator<Item = u64>) -> PyResult<Bound<'_, PyAny>> {
    Buffer::from_i64(v.into_iter().map(|x| x as i64).collect()).into_numpy(py)
}

/// Address of a numpy-visible buffer by label, for zero-copy tests.
#[pyfunction]
pub(crate) fn buffer_address(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(obj.cast::<Buffer>()?.get().ptr())
}
