//! Python callbacks on the engine's stream of pass reports: each callable is a core
//! [`PassObserver`], called with the pass's `PassStats` when a pass ends. Converted here; the
//! engine decides when a pass ends.

use insitubatch_core::{PassObserver, PassStats};
use pyo3::prelude::*;

/// A Python callable told of every pass's report.
#[derive(Debug)]
pub(crate) struct PyPassCallback {
    func: Py<PyAny>,
}

impl PyPassCallback {
    pub(crate) fn new(func: &Bound<'_, PyAny>) -> PyResult<Self> {
        if !func.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "a pass callback must be callable (PassStats) -> None, got {}",
                func.repr()?
            )));
        }
        Ok(Self { func: func.clone().unbind() })
    }
}

impl PassObserver for PyPassCallback {
    fn pass_ended(&self, stats: &PassStats) {
        Python::attach(|py| {
            let call = || -> PyResult<()> {
                let raw = py.import("json")?.getattr("loads")?.call1((crate::stream::stats_to_json(stats)?,))?;
                let cls = py.import("insitubatch_rs")?.getattr("PassStats")?;
                self.func.bind(py).call1((cls.call_method1("_from_engine", (raw,))?,))?;
                Ok(())
            };
            // A pass can end in a drop, where nothing can raise: an error of the callback goes
            // to sys.unraisablehook, as Python does for an error in a __del__.
            if let Err(e) = call() {
                e.write_unraisable(py, Some(self.func.bind(py)));
            }
        });
    }
}
