//! The engine's errors as Python exceptions (ARCHITECTURE.md, "Errors"), picked by the
//! error's kind (core's `ErrorKind`), never by its text: an option or configuration is a
//! `ValueError`, storage and data an [`InsitubatchIOError`] (an `OSError`), the rest a
//! `RuntimeError`. The message is the engine's, option names in Python's spelling (core's);
//! every exception carries the kind as `kind` and an option error its option as `option`,
//! which `_store.reference_errors` reads to raise insitubatch 0.2.0's classes.

use std::sync::{Arc, Mutex};

use insitubatch_core::{Error as CoreError, ErrorKind};
use insitubatch_native::NativeError;
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    insitubatch_rs,
    InsitubatchIOError,
    PyOSError,
    "A store could not be read: missing array, malformed metadata, failed request, corrupt chunk."
);

/// Core error → Python exception, its class from the kind, with `kind` and `option` set.
pub(crate) fn core_err(e: CoreError) -> PyErr {
    let msg = e.to_string();
    let err = match e.kind() {
        ErrorKind::InvalidOption | ErrorKind::Config | ErrorKind::Geometry | ErrorKind::NotAnArray => {
            PyValueError::new_err(msg)
        }
        ErrorKind::Storage
        | ErrorKind::NotFound
        | ErrorKind::ArrayNotFound
        | ErrorKind::Metadata
        | ErrorKind::Decode => InsitubatchIOError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    };
    tagged(err, e.kind().name(), e.option_name())
}

/// `err` with `kind` and `option` attributes (what Python code branches on).
fn tagged(err: PyErr, kind: &str, option: Option<&str>) -> PyErr {
    Python::attach(|py| {
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail but for memory.
        let _ = value.setattr("kind", kind);
        let _ = value.setattr("option", option);
    });
    err
}

/// Native error → Python exception: core's as [`core_err`], a bad URL a `ValueError`, a store
/// that cannot be opened an [`InsitubatchIOError`] (kind `storage`).
pub(crate) fn native_err(e: NativeError) -> PyErr {
    match e {
        NativeError::Core(e) => core_err(e),
        NativeError::Url { .. } => tagged(PyValueError::new_err(e.to_string()), ErrorKind::Config.name(), None),
        NativeError::Open { .. } | NativeError::Demo { .. } => {
            tagged(InsitubatchIOError::new_err(e.to_string()), ErrorKind::Storage.name(), None)
        }
        NativeError::Runtime(_) => tagged(PyRuntimeError::new_err(e.to_string()), ErrorKind::Internal.name(), None),
    }
}

/// The first Python exception a dataset's transforms raised (re-raised by the pass).
pub type ErrSlot = Arc<Mutex<Option<PyErr>>>;
