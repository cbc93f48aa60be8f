//! The engine's errors as Python exceptions (ARCHITECTURE.md, "Errors"): configuration is a
//! `ValueError`, storage and data an [`InsitubatchIOError`] (an `OSError`), the rest a
//! `RuntimeError`. The message is always the engine's.

use insitubatch_core::Error as CoreError;
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

/// Native error → Python exception: core's as [`core_err`], a bad URL a `ValueError`, a store
/// that cannot be opened an [`InsitubatchIOError`].
pub(crate) fn native_err(e: NativeError) -> PyErr {
    match e {
        NativeError::Core(e) => core_err(e),
        NativeError::Url { .. } => PyValueError::new_err(e.to_string()),
        NativeError::Open { .. } | NativeError::Demo { .. } => InsitubatchIOError::new_err(e.to_string()),
        NativeError::Runtime(_) => PyRuntimeError::new_err(e.to_string()),
    }
}
