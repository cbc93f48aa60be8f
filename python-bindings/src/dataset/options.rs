//! The dataset's Python arguments as core's options: the knobs, the read policy, patches,
//! label selections, the rank mesh, callbacks and transforms. Each converts; core checks and
//! decides (`Knobs`' serde, `PatchOptions::from_words`, `ModelParallel::check`, the builder).

use std::sync::Arc;
use std::time::Duration;

use insitubatch_core::coords::{Label, LabelSel};
use insitubatch_core::transform::{BatchTransform, Scoped};
use insitubatch_core::{HedgePolicy, Knobs, ModelParallel, PassObserver, PatchAxis, PatchOptions, ReadPolicy};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::core_err;
use crate::observe::PyPassCallback;
use crate::transforms::{self, ErrSlot, PyBatchFn};

/// The dataset's knobs, one dict (the generated `_options.Knobs`), read into core's [`Knobs`]
/// by its serde derive (pythonize): the keys are core's field names, a missing one takes core's
/// default, an unknown one is refused naming the known ones, and `on_bad_chunk` is read by
/// core's `FromStr`. Nothing here restates a knob.
pub(super) struct KnobsArg(pub(super) Knobs);

impl<'a, 'py> FromPyObject<'a, 'py> for KnobsArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let mut from = pythonize::Depythonizer::from_object(&obj);
        serde_path_to_error::deserialize(&mut from).map(Self).map_err(|e| {
            // `on_bad_chunk: on_bad_chunk must be ...`: core's message names the key already.
            let inner = e.inner().to_string();
            let key = if e.path().iter().next().is_none() { "knobs".to_owned() } else { e.path().to_string() };
            PyValueError::new_err(if inner.starts_with(&key) { inner } else { format!("{key}: {inner}") })
        })
    }
}

/// `read_policy={...}` (seconds and bytes) over core's `ReadPolicy::default()`. Unknown keys
/// are refused, naming the known ones.
pub(super) fn read_policy_from(given: Option<&Bound<'_, PyDict>>) -> PyResult<ReadPolicy> {
    let mut p = ReadPolicy::default();
    let Some(given) = given else { return Ok(p) };
    let secs = |key: &str, v: &Bound<'_, PyAny>| -> PyResult<Duration> {
        let s: f64 = policy_value(key, v, "seconds >= 0")?;
        Duration::try_from_secs_f64(s)
            .map_err(|_| PyValueError::new_err(format!("read_policy[{key:?}] must be seconds >= 0, got {s}")))
    };
    let count = "a whole number >= 0";
    for (k, v) in given.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "retries" => p.retries = policy_value(&key, &v, count)?,
            "backoff_s" => p.backoff = secs(&key, &v)?,
            "request_timeout_s" => p.request_timeout = secs(&key, &v)?,
            "coalesce_gap_bytes" => p.coalesce_gap_bytes = policy_value(&key, &v, count)?,
            "coalesce_max_bytes" => p.coalesce_max_bytes = policy_value(&key, &v, count)?,
            "hedge" => p.hedge = hedge_from(&v)?,
            "read_ahead_bytes" => p.read_ahead_bytes = Some(policy_value(&key, &v, count)?),
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown read_policy key {other:?}; use retries, backoff_s, request_timeout_s, coalesce_gap_bytes, \
                     coalesce_max_bytes, read_ahead_bytes or hedge"
                )));
            }
        }
    }
    Ok(p)
}

/// One `read_policy` value, converted; a wrong type or a value out of the type's range (a
/// negative count) is a `ValueError` naming the key and what it takes.
fn policy_value<'py, T: FromPyObjectOwned<'py>>(key: &str, v: &Bound<'py, PyAny>, takes: &str) -> PyResult<T> {
    v.extract().map_err(|_| {
        let got = v.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string());
        PyValueError::new_err(format!("read_policy[{key:?}] must be {takes}, got {got}"))
    })
}

/// `read_policy["hedge"]`: `False` (off), `True` (core's default), or a dict of its fields.
fn hedge_from(v: &Bound<'_, PyAny>) -> PyResult<Option<HedgePolicy>> {
    if let Ok(on) = v.extract::<bool>() {
        return Ok(on.then(HedgePolicy::default));
    }
    let fields = v.cast::<PyDict>().map_err(|_| {
        PyValueError::new_err(
            "read_policy[\"hedge\"] must be True, False or a dict of quantile, multiple, max_share, min_samples",
        )
    })?;
    let mut h = HedgePolicy::default();
    for (k, v) in fields.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "quantile" => h.quantile = policy_value("hedge.quantile", &v, "a number in (0, 1]")?,
            "multiple" => h.multiple = policy_value("hedge.multiple", &v, "a number >= 1")?,
            "max_share" => h.max_share = policy_value("hedge.max_share", &v, "a number in [0, 1]")?,
            "min_samples" => h.min_samples = policy_value("hedge.min_samples", &v, "a whole number >= 0")?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown read_policy[\"hedge\"] key {other:?}; use quantile, multiple, max_share or min_samples"
                )));
            }
        }
    }
    Ok(Some(h))
}

/// A `(axis, size)` list of patch sizes or strides, as Python passes it.
pub(super) type AxisSizes<'py> = Vec<(Bound<'py, PyAny>, u64)>;

/// `patch`, `patch_mode`, `patch_stride` and `patches_per_sample` as core's patch options
/// (`PatchOptions::from_words` reads the mode and checks the rest).
pub(super) fn patch_options(
    patch: Option<AxisSizes<'_>>,
    patch_mode: Option<&str>,
    patch_stride: Option<AxisSizes<'_>>,
    patches_per_sample: Option<u64>,
) -> PyResult<Option<PatchOptions>> {
    PatchOptions::from_words(
        patch.as_deref().map(patch_axes).transpose()?,
        patch_mode,
        patch_stride.as_deref().map(patch_axes).transpose()?,
        patches_per_sample,
    )
    .map_err(core_err)
}

/// Python's patch keys (a dimension name, or an axis index) as core's axes.
fn patch_axes(pairs: &[(Bound<'_, PyAny>, u64)]) -> PyResult<Vec<(PatchAxis, u64)>> {
    pairs.iter().map(|(k, n)| Ok((patch_axis(k)?, *n))).collect()
}

/// One axis key: an axis index, or a dimension name.
fn patch_axis(k: &Bound<'_, PyAny>) -> PyResult<PatchAxis> {
    if let Ok(a) = k.extract::<usize>() {
        Ok(PatchAxis::Axis(a))
    } else if let Ok(name) = k.extract::<String>() {
        Ok(PatchAxis::Name(name))
    } else {
        Err(PyTypeError::new_err(format!("a patch axis is a dimension name or an axis index, got {}", k.repr()?)))
    }
}

/// `(size, axis)` of the rank mesh as core's (which checks it against the world).
pub(super) fn model_parallel(given: Option<(usize, Bound<'_, PyAny>)>) -> PyResult<Option<ModelParallel>> {
    given.map(|(size, axis)| Ok::<_, PyErr>(ModelParallel { size, axis: patch_axis(&axis)? })).transpose()
}

/// `_sel`'s `(dim, is_range, values)` lists as core's selections: a range's values are its
/// two bounds, a list's its labels (dates as ns since 1970, or numbers).
pub(super) fn label_sels(
    times: Option<Vec<(String, bool, Vec<i64>)>>,
    numbers: Option<Vec<(String, bool, Vec<f64>)>>,
) -> Vec<LabelSel> {
    fn one(dim: &str, range: bool, labels: Vec<Label>) -> LabelSel {
        match (range, labels.as_slice()) {
            (true, &[lo, hi]) => LabelSel::range(dim, lo, hi),
            _ => LabelSel::labels(dim, labels),
        }
    }
    let times = times.into_iter().flatten().map(|(d, r, v)| one(&d, r, v.into_iter().map(Label::Time).collect()));
    let numbers = numbers.into_iter().flatten().map(|(d, r, v)| one(&d, r, v.into_iter().map(Label::Number).collect()));
    times.chain(numbers).collect()
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
