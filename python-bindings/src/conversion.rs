//! Python words as core's types, parsed by core's `FromStr` (the one parser the CLI and the JS
//! package use too), core's refusal becoming the `ValueError` Python callers get. The Python
//! package keeps no list of the words; its signatures keep `str` (polars' `conversion` module
//! is the pattern: Rust parses, Python types).

use insitubatch_core::{OnBadChunk, Split, UnknownSplit};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

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

/// `on_bad_chunk` (`raise` or `nan`), parsed by `OnBadChunk: FromStr`. Anything but a `str`
/// is refused by core too, shown with its type: a float nan is not the word `nan`.
pub(crate) struct OnBadChunkArg(pub(crate) OnBadChunk);

impl<'a, 'py> FromPyObject<'a, 'py> for OnBadChunkArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let word = match obj.cast::<PyString>() {
            Ok(s) => s.to_str()?.to_owned(),
            Err(_) => format!("{} ({})", obj.repr()?, obj.get_type().name()?),
        };
        word.parse().map(Self).map_err(core_err)
    }
}
