//! One pass for Python: [`NativeStream`], its batches as tuples of numpy arrays over the
//! engine's buffers, and a pass's stats as JSON.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use insitubatch_core::coords::CoordValues;
use insitubatch_core::{Batch, BatchPatches, BatchStream, Checkpoint, Error as CoreError, PassStats};
use insitubatch_native::NativeRuntime;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyTuple};

use crate::buffer::{Buffer, i64_numpy};
use crate::errors::{ErrSlot, core_err};

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
    checkpoint: Mutex<Checkpoint>,
}

impl NativeStream {
    /// A started pass on `runtime`; `errors` holds a Python transform's own exception.
    pub(crate) fn new(stream: BatchStream, runtime: NativeRuntime, errors: ErrSlot) -> Self {
        Self {
            n_batches: stream.len(),
            checkpoint: Mutex::new(stream.checkpoint()),
            stream: Mutex::new(Some(stream)),
            runtime,
            errors,
        }
    }

    /// Wait for `stream`'s next batch with Python detached, waking every 100 ms to check for
    /// Ctrl-C (`Err`). The future lives across the timeouts, so no wake-up is lost.
    fn wait(&self, py: Python<'_>, stream: &mut BatchStream) -> PyResult<Option<insitubatch_core::Result<Batch>>> {
        let handle = self.runtime.handle();
        let mut fut = std::pin::pin!(stream.next_batch());
        loop {
            let polled = py
                .detach(|| handle.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut fut).await }));
            match polled {
                Ok(item) => return Ok(item),
                Err(_) => py.check_signals()?,
            }
        }
    }

    /// A pass's error for Python: a Python transform's own exception is re-raised with its
    /// type and traceback.
    fn error(&self, e: CoreError) -> PyErr {
        let own = matches!(e, CoreError::Transform { .. })
            .then(|| self.errors.lock().unwrap_or_else(PoisonError::into_inner).take())
            .flatten();
        own.unwrap_or_else(|| core_err(e))
    }
}

#[pymethods]
impl NativeStream {
    /// The next batch as `(arrays, sample_indices, offsets, index, epoch, patch_origins,
    /// patch_dims, part, coords)`, or `None` at the end of the pass. An interrupt (Ctrl-C) or
    /// an error ends the pass.
    ///
    /// Threads may share one pass: each `next()` holds the stream until its batch is out, so
    /// a second caller waits (detached from Python, so neither the GIL nor a free-threaded
    /// stop-the-world can deadlock with it) and gets the following batch; every batch goes to
    /// exactly one caller.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut slot = self.stream.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner);
        let Some(stream) = slot.as_mut() else { return Ok(None) };
        // Dropping the stream (on an interrupt, an error or the end) ends the pass.
        let item = match self.wait(py, stream) {
            Ok(item) => item,
            Err(interrupt) => {
                *slot = None;
                return Err(interrupt);
            }
        };
        *self.checkpoint.lock().unwrap_or_else(PoisonError::into_inner) = stream.checkpoint();
        if !matches!(item, Some(Ok(_))) {
            *slot = None;
        }
        drop(slot);
        match item {
            Some(Ok(batch)) => batch_to_py(py, batch).map(Some),
            Some(Err(e)) => Err(self.error(e)),
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

/// A batch as the tuple `next()` returns, its arrays numpy views over the engine's buffers.
fn batch_to_py(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyTuple>> {
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
    let index = batch.index.into_pyobject(py)?.into_any();
    let epoch = batch.epoch.into_pyobject(py)?.into_any();
    PyTuple::new(py, [arrays.into_any(), idx, offsets.into_any(), index, epoch, origins, dims, part, coords])
}

/// A batch's coordinates for Python: name → numpy array (`datetime64[ns]` for CF time); a
/// patched axis's values shaped `(rows, patch extent)`, as core lays them out row by row.
pub(crate) fn coords_to_py<'py>(
    py: Python<'py>,
    coords: &BTreeMap<String, CoordValues>,
    patches: Option<&BatchPatches>,
) -> PyResult<Bound<'py, PyAny>> {
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

/// A batch's patches for Python: the `(rows, axes)` int64 origins and the axis names, or
/// `(None, ())` for whole samples.
pub(crate) fn patches_to_py<'py>(
    py: Python<'py>,
    patches: Option<&BatchPatches>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let Some(p) = patches else {
        return Ok((py.None().into_bound(py), PyTuple::empty(py).into_any()));
    };
    let flat = i64_numpy(py, p.origins.iter().copied())?;
    let origins = flat.call_method1("reshape", ((-1i64, p.dims.len()),))?;
    Ok((origins, PyTuple::new(py, &p.dims)?.into_any()))
}

/// A pass's stats as JSON, with the engine's one-line `summary` (what the `insitubatch`
/// logger prints) so Python formats nothing itself.
pub(crate) fn stats_to_json(stats: &PassStats) -> PyResult<String> {
    let to_err = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    let mut v = serde_json::to_value(stats).map_err(to_err)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("summary".into(), stats.summary().into());
    }
    serde_json::to_string(&v).map_err(to_err)
}
