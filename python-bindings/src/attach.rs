//! Calls into Python from the engine's threads (Python transforms, a zarr Store's methods):
//! one gate, so the interpreter's exit can stop new calls and wait for those under way.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use insitubatch_core::Error as CoreError;
use pyo3::prelude::*;

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
