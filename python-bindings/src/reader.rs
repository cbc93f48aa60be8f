//! `StoreReader`: one key (or byte range of it) read through the engine's own storage, for
//! the notebook widget (`insitubatch_rs.widgets`), whose front end runs the wasm engine in
//! the browser and asks the kernel for what the browser cannot reach (local paths, private
//! buckets, stores behind the kernel's credentials). The reads are the storage's as the
//! engine makes them: same URL parsing, same credentials, same missing-key rule.

use std::sync::Arc;

use bytes::Bytes;
use insitubatch_core::ReadPolicy;
use insitubatch_core::runtime::{ByteRange, Storage};
use insitubatch_native::NativeRuntime;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{InsitubatchIOError, native_err};
use crate::pystore::StoreArg;

/// A store opened for raw reads: `get(key, start, end, suffix)` and `list(prefix)`.
#[pyclass(name = "StoreReader", module = "insitubatch_rs._native", frozen)]
pub struct StoreReader {
    storage: Arc<dyn Storage>,
    runtime: NativeRuntime,
}

/// The range `get` asks for: none (the whole object), `start..end`, or the last `suffix` bytes.
fn byte_range(start: Option<u64>, end: Option<u64>, suffix: Option<u64>) -> PyResult<Option<ByteRange>> {
    match (start, end, suffix) {
        (None, None, None) => Ok(None),
        (Some(start), Some(end), None) if start <= end => Ok(Some(ByteRange::Bounded { start, end })),
        (None, None, Some(n)) => Ok(Some(ByteRange::Suffix(n))),
        _ => {
            let show = |v: Option<u64>| v.map_or_else(|| "None".to_string(), |v| v.to_string());
            Err(PyValueError::new_err(format!(
                "a range is start and end (start <= end), or suffix alone; got start={}, end={}, suffix={}",
                show(start),
                show(end),
                show(suffix)
            )))
        }
    }
}

#[pymethods]
impl StoreReader {
    /// Open `store` (a URL or path, an obstore store or a zarr store) as the engine would.
    #[new]
    #[pyo3(signature = (store, storage_options = Vec::new()))]
    fn new(store: &Bound<'_, PyAny>, storage_options: Vec<(String, String)>) -> PyResult<Self> {
        // A list of stores is concatenated along the spec's default dimension.
        let dim = insitubatch_core::DatasetSpec::default().concat_dim;
        let concat = (dim.as_str(), 0);
        let storage =
            StoreArg::from_py(store)?.storage(&storage_options, concat, &ReadPolicy::default()).map_err(native_err)?;
        Ok(Self { storage, runtime: NativeRuntime::new(Some(1)).map_err(native_err)? })
    }

    /// The bytes of `key` (or of its range), or `None` when the key does not exist.
    #[pyo3(signature = (key, start = None, end = None, suffix = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        start: Option<u64>,
        end: Option<u64>,
        suffix: Option<u64>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let range = byte_range(start, end, suffix)?;
        let storage = self.storage.as_ref();
        let got: Option<Bytes> = py
            .detach(|| {
                self.runtime.block_on(async {
                    match range {
                        None => storage.get(key).await,
                        Some(r) => storage.get_range(key, r).await,
                    }
                })
            })
            .map_err(|e| InsitubatchIOError::new_err(format!("{}: {}/{key}", e.message, storage.location())))?;
        Ok(got.map(|b| PyBytes::new(py, &b)))
    }

    /// Every key under `prefix`, or `None` when the store cannot list (plain HTTP).
    fn list(&self, py: Python<'_>, prefix: &str) -> PyResult<Option<Vec<String>>> {
        let storage = self.storage.as_ref();
        py.detach(|| self.runtime.block_on(storage.list(prefix)))
            .map_err(|e| InsitubatchIOError::new_err(format!("{}: {}/{prefix}", e.message, storage.location())))
    }

    /// The store's location, for messages.
    #[getter]
    fn location(&self) -> String {
        self.storage.location()
    }
}
