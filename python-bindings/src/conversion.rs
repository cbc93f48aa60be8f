//! Python words as core's types, parsed by core's `FromStr` (the one parser the CLI and the JS
//! package use too), core's refusal becoming the `ValueError` Python callers get. The Python
//! package keeps no list of the words; its signatures keep `str` (polars' `conversion` module
//! is the pattern: Rust parses, Python types). `on_bad_chunk` comes with the dataset's spec
//! (`dataset/options.rs` `SpecArg`), read by the same `FromStr` through serde.

use insitubatch_core::shuffle::checked_count;
use insitubatch_core::{Split, UnknownSplit};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::core_err;

/// A split's word (`train`, `val`, `test`, `all`; a `SplitName` is one), parsed by
/// `Split: FromStr`. Not a `str`: pyo3's `TypeError`, as for any `str` argument.
pub(crate) struct SplitArg(pub(crate) Split);

impl<'a, 'py> FromPyObject<'a, 'py> for SplitArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let word: String = obj.extract()?;
        word.parse().map(Self).map_err(|e: UnknownSplit| PyValueError::new_err(e.to_string()))
    }
}

/// Core's rule for a count argument (`shuffle::checked_count`), as a `ValueError` naming it.
pub(crate) fn count(name: &str, value: i128, min: u64) -> PyResult<u64> {
    checked_count(name, value, min).map_err(core_err)
}
