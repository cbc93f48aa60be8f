//! `insitubatch_rs._native`: a thin pyo3 shim over insitubatch-native/core.
//!
//! The pure-Python package (`python/insitubatch_rs`) wraps these classes into the public
//! API (`InSituDataset`, `Batch`, views, adapters). Batch arrays cross into Python without
//! a copy: each engine `NdArray` is moved into a `Buffer` object that exposes
//! `__array_interface__`, and `numpy.asarray(buffer)` keeps the buffer alive as the array's
//! `base`. Dropping the last numpy view drops the `NdArray`, which hands its memory back to
//! the engine's recycler.
//!
//! One module per seam: `errors` (the engine's errors as Python exceptions), `buffer`
//! (engine memory seen by numpy), `conversion` (Python words parsed by core), `geometry`
//! (geometry, manifest and splits), `dataset` (the dataset and its option conversion),
//! `stream` (one pass and its batches), `rules` (the engine's rules behind the package's free
//! functions, the verdict and the defaults), `transforms` and `observe` (Python callables the
//! engine runs), `attach` (the one gate for calls into Python from the engine's threads,
//! drained at exit), `pystore` and `reader` (stores given as Python objects, and raw reads).

#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Same settings as the CLI (see native/src/main.rs): reuse freed pages, one arena, huge pages
/// left to the system.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[allow(non_upper_case_globals, reason = "jemalloc reads this exact symbol name")]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static _rjem_malloc_conf: &[u8] = b"dirty_decay_ms:-1,muzzy_decay_ms:-1,narenas:1,thp:default\0";

use pyo3::prelude::*;

mod attach;
mod buffer;
mod conversion;
mod dataset;
mod errors;
mod geometry;
mod observe;
mod pystore;
mod reader;
mod rules;
mod stream;
mod transforms;

/// `gil_used = false` (pyo3's default since 0.28, stated because it was checked): every
/// class is `Sync` (pyo3 requires it of a non-`unsendable` pyclass), the mutable ones keep
/// their state behind mutexes, statics are atomics or `PyOnceLock`s, and Python callbacks
/// run attached from engine threads; so free-threaded CPython keeps its GIL off on import.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InsitubatchIOError", m.py().get_type::<errors::InsitubatchIOError>())?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<geometry::PyGeometry>()?;
    m.add_class::<geometry::PyManifest>()?;
    m.add_class::<dataset::NativeDataset>()?;
    m.add_class::<stream::NativeStream>()?;
    m.add_class::<transforms::PyStandardScaler>()?;
    m.add_class::<reader::StoreReader>()?;
    m.add_class::<pystore::ReferenceStore>()?;
    m.add_function(wrap_pyfunction!(geometry::open_geometries, m)?)?;
    m.add_function(wrap_pyfunction!(geometry::split_by_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(geometry::valid_anchor_range, m)?)?;
    m.add_function(wrap_pyfunction!(buffer::buffer_address, m)?)?;
    m.add_function(wrap_pyfunction!(attach::_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(pystore::_storage_conformance, m)?)?;
    m.add_function(wrap_pyfunction!(pystore::_storage_conformance_fixture, m)?)?;
    rules::register(m)?;
    Ok(())
}
