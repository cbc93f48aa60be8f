//! The dataset's Python arguments as core's: the spec (one dict, read by core's serde derive)
//! and the program-side objects (callbacks and transforms). Each converts; core checks and
//! decides (`DatasetSpec::resolve`, the builder).

use std::sync::Arc;

use insitubatch_core::transform::{BatchTransform, Scoped};
use insitubatch_core::{DatasetSpec, PassObserver};
use pyo3::prelude::*;

use crate::errors::ErrSlot;
use crate::errors::core_err;
use crate::observe::PyPassCallback;
use crate::transforms::{self, PyBatchFn};

/// The dataset's spec, one dict (the generated `_options.DatasetSpec`), read into core's
/// [`DatasetSpec`] by its serde derive (pythonize) through core's one reader of it: the keys
/// are core's field names, a missing one takes core's default, an unknown one is refused
/// naming the known ones, a wrong value names its key (a `ValueError` with `kind` and
/// `option`). Nothing here restates an option.
pub(super) struct SpecArg(pub(super) DatasetSpec);

impl<'a, 'py> FromPyObject<'a, 'py> for SpecArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let mut from = pythonize::Depythonizer::from_object(&obj);
        DatasetSpec::from_deserializer(&mut from).map(Self).map_err(core_err)
    }
}

/// Python callables told of every pass's report.
pub(super) fn observers(callbacks: &[Bound<'_, PyAny>]) -> PyResult<Vec<Arc<dyn PassObserver>>> {
    callbacks.iter().map(|f| Ok(Arc::new(PyPassCallback::new(f)?) as Arc<dyn PassObserver>)).collect()
}

/// `(scope, callable)` chunk transforms as engine transforms; their exceptions go to `errors`.
pub(super) fn chunk_transforms(
    py: Python<'_>,
    given: &[(Option<Vec<String>>, Bound<'_, PyAny>)],
    errors: &ErrSlot,
) -> PyResult<Vec<Scoped>> {
    given
        .iter()
        .map(|(scope, obj)| {
            Ok(Scoped { arrays: scope.clone(), transform: transforms::chunk_transform(py, obj, errors)? })
        })
        .collect()
}

/// Batch transforms as engine transforms; their exceptions go to `errors`.
pub(super) fn batch_transforms(
    py: Python<'_>,
    given: &[Bound<'_, PyAny>],
    errors: &ErrSlot,
) -> PyResult<Vec<Arc<dyn BatchTransform>>> {
    given.iter().map(|f| Ok(Arc::new(PyBatchFn::new(py, f, Arc::clone(errors))?) as Arc<dyn BatchTransform>)).collect()
}
