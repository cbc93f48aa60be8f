//! The engine's rules behind the Python package's free functions and `ArrayGeometry`
//! methods: the draw order and its score (`core/src/shuffle.rs`), the tile arithmetic of
//! one array (`core/src/geometry.rs`, `core/src/assemble.rs`), the verdict and the derived
//! figures (`producer_s`, the queue shares) of hand-built stats, the knob defaults, and the rules the Python package applies to its own arguments
//! (a count's range, a split's word). Each function converts its arguments, lets core check
//! and compute, and converts the result; a bad value is core's
//! [`insitubatch_core::Error::Config`] (or `Geometry`), a `ValueError` naming the argument.

use insitubatch_core::geometry::{placement, slot_shape as core_slot_shape};
use insitubatch_core::shuffle::{self, OrderArgs, checked_chunk_ids};
use insitubatch_core::{DatasetSpec, Depths, SplitOptions, StageTimes};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::i64_numpy;
use crate::conversion::{SplitArg, count};
use crate::errors::core_err;
use crate::geometry::PyGeometry;

/// Register this module's functions on `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(chunk_permutation, m)?)?;
    m.add_function(wrap_pyfunction!(draw_order_rows, m)?)?;
    m.add_function(wrap_pyfunction!(shuffle_quality, m)?)?;
    m.add_function(wrap_pyfunction!(fleet_summary_json, m)?)?;
    m.add_function(wrap_pyfunction!(chunk_of, m)?)?;
    m.add_function(wrap_pyfunction!(samples_in_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(inner_shape, m)?)?;
    m.add_function(wrap_pyfunction!(inner_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(inner_grid, m)?)?;
    m.add_function(wrap_pyfunction!(n_inner_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(inner_coord, m)?)?;
    m.add_function(wrap_pyfunction!(inner_index, m)?)?;
    m.add_function(wrap_pyfunction!(physical_chunk_coord, m)?)?;
    m.add_function(wrap_pyfunction!(slot_shape, m)?)?;
    m.add_function(wrap_pyfunction!(tile_placement, m)?)?;
    m.add_function(wrap_pyfunction!(verdict, m)?)?;
    m.add_function(wrap_pyfunction!(producer_s, m)?)?;
    m.add_function(wrap_pyfunction!(queue_share, m)?)?;
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    m.add_function(wrap_pyfunction!(count_arg, m)?)?;
    m.add_function(wrap_pyfunction!(parse_split, m)?)?;
    m.add_function(wrap_pyfunction!(camel_case, m)?)?;
    Ok(())
}

/// An option's name as the JS package spells it (core's `camel_case`: `batch_size` →
/// `batchSize`), for the notebook widget, which hands Python's options to the JS explorer.
#[pyfunction]
fn camel_case(name: &str) -> String {
    insitubatch_core::camel_case(name)
}

/// `value` of the argument `name` checked by core's count rule: at least `minimum`, at most
/// 2**64 - 1. The Python package's integer arguments go through it before the extension's
/// unsigned types see them.
#[pyfunction]
#[pyo3(name = "checked_count")]
fn count_arg(name: &str, value: i128, minimum: u64) -> PyResult<u64> {
    count(name, value, minimum)
}

/// A split's word as core reads it (`Split: FromStr`), for the Python code that picks by name
/// (`InSituDataset.view`, `SplitManifest.chunks_of`); an unknown one is core's `ValueError`.
#[pyfunction]
fn parse_split(split: SplitArg) -> &'static str {
    split.0.name()
}

/// The epoch's permutation of the set of `chunk_ids` for `(seed, epoch, split)`:
/// `shuffle::chunk_permutation`, an int64 array.
#[pyfunction]
#[pyo3(signature = (chunk_ids, *, seed, epoch, split))]
fn chunk_permutation<'py>(
    py: Python<'py>,
    chunk_ids: Vec<i64>,
    seed: i128,
    epoch: i128,
    split: SplitArg,
) -> PyResult<Bound<'py, PyAny>> {
    let ids = checked_chunk_ids(&chunk_ids).map_err(core_err)?;
    let (seed, epoch) = (count("seed", seed, 0)?, count("epoch", epoch, 0)?);
    i64_numpy(py, shuffle::chunk_permutation(&ids, seed, epoch, split.0))
}

/// One epoch's order over any chunk ids (`OrderArgs::draw_order`, the dataset's builder):
/// `(rows, bounds)`, rows an `(N, 2)` int64 array of `[chunk_id, within]`, bounds the
/// `n_blocks + 1` row offsets. `shuffle` is `(seed, epoch, split)`, or `None` for in order.
#[pyfunction]
#[pyo3(signature = (chunk_ids, samples_per_chunk, n_samples, *, block_chunks, first_block_chunks, anchor_range, shuffle))]
#[allow(clippy::too_many_arguments, reason = "the Python function's arguments, one for one")]
fn draw_order_rows<'py>(
    py: Python<'py>,
    chunk_ids: Vec<i64>,
    samples_per_chunk: i128,
    n_samples: i128,
    block_chunks: i128,
    first_block_chunks: Option<i128>,
    anchor_range: Option<(i128, i128)>,
    shuffle: Option<(i128, i128, SplitArg)>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let shuffle = shuffle.map(|(seed, epoch, split)| (seed, epoch, split.0));
    let args = OrderArgs {
        chunk_ids: &chunk_ids,
        samples_per_chunk,
        n_samples,
        block_chunks,
        first_block_chunks,
        anchor_range,
        shuffle,
    };
    let order = args.draw_order().map_err(core_err)?;
    let spc = count("samples_per_chunk", samples_per_chunk, 1)?;
    let rows = i64_numpy(py, order.anchors.iter().flat_map(|&a| [a / spc, a % spc]))?;
    let rows = rows.call_method1("reshape", (order.anchors.len(), 2))?;
    Ok((rows, i64_numpy(py, order.bounds.iter().map(|&b| b as u64))?))
}

/// `shuffle::shuffle_quality` of anchors in draw order.
#[pyfunction]
fn shuffle_quality(anchors: Vec<i64>) -> f64 {
    shuffle::shuffle_quality(&anchors)
}

/// `fleet_summary` over ranks' reports (a JSON list of `RankReport`s), as JSON.
#[pyfunction]
fn fleet_summary_json(reports: &str) -> PyResult<String> {
    let reports: Vec<insitubatch_core::RankReport> = serde_json::from_str(reports)
        .map_err(|e| PyValueError::new_err(format!("fleet_summary needs one pass report per rank: {e}")))?;
    serde_json::to_string(&insitubatch_core::fleet_summary(&reports))
        .map_err(|e| PyValueError::new_err(format!("cannot write the fleet summary: {e}")))
}

/// The sample-axis chunk holding `sample_index`.
#[pyfunction]
fn chunk_of(geom: &Bound<'_, PyGeometry>, sample_index: i128) -> PyResult<u64> {
    Ok(geom.get().inner.chunk_of(count("sample_index", sample_index, 0)?))
}

/// `(start, stop)` of chunk `chunk_index`'s samples, clipped at `n_samples`.
#[pyfunction]
fn samples_in_chunk(geom: &Bound<'_, PyGeometry>, chunk_index: i128) -> PyResult<(u64, u64)> {
    let r = geom.get().inner.samples_in_chunk(count("chunk_index", chunk_index, 0)?);
    Ok((r.start, r.end))
}

/// One sample's shape: every axis but the sample axis, physical order.
#[pyfunction]
fn inner_shape(geom: &Bound<'_, PyGeometry>) -> Vec<u64> {
    geom.get().inner.inner_shape()
}

/// The fetch unit's extent on the inner axes, physical order.
#[pyfunction]
fn inner_chunks(geom: &Bound<'_, PyGeometry>) -> Vec<u64> {
    geom.get().inner.inner_tile()
}

/// Tiles per inner axis.
#[pyfunction]
fn inner_grid(geom: &Bound<'_, PyGeometry>) -> Vec<u64> {
    geom.get().inner.inner_grid()
}

/// Tiles per sample-axis chunk.
#[pyfunction]
fn n_inner_chunks(geom: &Bound<'_, PyGeometry>) -> u64 {
    geom.get().inner.n_tiles()
}

/// The inner tile coordinate of tile number `index` (row-major).
#[pyfunction]
fn inner_coord(geom: &Bound<'_, PyGeometry>, index: i128) -> PyResult<Vec<u64>> {
    Ok(geom.get().inner.inner_coord(count("index", index, 0)?))
}

fn coord(inner_coord: &[i128]) -> PyResult<Vec<u64>> {
    inner_coord.iter().map(|&i| count("inner_coord", i, 0)).collect()
}

/// The tile number of `inner_coord` (row-major): the inverse of `inner_coord`.
#[pyfunction]
fn inner_index(geom: &Bound<'_, PyGeometry>, inner_coord: Vec<i128>) -> PyResult<u64> {
    geom.get().inner.inner_index(&coord(&inner_coord)?).map_err(core_err)
}

/// The full physical tile coordinate: `chunk_index` at the sample axis.
#[pyfunction]
fn physical_chunk_coord(geom: &Bound<'_, PyGeometry>, chunk_index: i128, inner_coord: Vec<i128>) -> PyResult<Vec<u64>> {
    let g = &geom.get().inner;
    let inner = coord(&inner_coord)?;
    g.check_inner_coord(&inner).map_err(core_err)?;
    Ok(g.physical_tile_coord(count("chunk_index", chunk_index, 0)?, &inner))
}

/// Shape of chunk `chunk_index` once assembled: `(rows, *inner_shape)`.
#[pyfunction]
fn slot_shape(geom: &Bound<'_, PyGeometry>, chunk_index: i128) -> PyResult<Vec<usize>> {
    Ok(core_slot_shape(&geom.get().inner, count("chunk_index", chunk_index, 0)?))
}

/// Where tile `inner_coord` of chunk `chunk_index` lands (`geometry::placement`), sample-first:
/// `(chunk_coords, chunk_selection, out_selection, is_complete_chunk)`, the selections as
/// `(start, stop)` per axis: into the padded tile and into the assembled chunk.
#[pyfunction]
#[allow(clippy::type_complexity, reason = "the four fields of the Python ChunkProjection")]
fn tile_placement(
    geom: &Bound<'_, PyGeometry>,
    chunk_index: i128,
    inner_coord: Vec<i128>,
) -> PyResult<(Vec<u64>, Vec<(usize, usize)>, Vec<(usize, usize)>, bool)> {
    let g = &geom.get().inner;
    let c = count("chunk_index", chunk_index, 0)?;
    let inner = coord(&inner_coord)?;
    g.check_inner_coord(&inner).map_err(core_err)?;
    let p = placement(g, c, &inner);
    let axes: Vec<usize> = std::iter::once(g.sample_axis).chain(g.inner_axes()).collect();
    let chunk_selection = axes.iter().map(|&a| (0, p.extent[a])).collect();
    let out_selection = axes.iter().map(|&a| (p.slot_origin[a], p.slot_origin[a] + p.extent[a])).collect();
    let complete = axes.iter().all(|&a| p.extent[a] as u64 == g.tile[a]);
    Ok((std::iter::once(c).chain(inner).collect(), chunk_selection, out_selection, complete))
}

/// The engine's verdict rule (`core::stats::verdict`) for stats built by hand in Python:
/// `(stage, advice, consumer_idle)`. `blocked` is the consumer wait per stage, in
/// `core::stats::Stage::ALL` order.
#[pyfunction]
#[pyo3(signature = (*, queue_samples, consumer_s, consumer_wait_s, blocked, inflight_peak, max_inflight))]
fn verdict(
    queue_samples: u64,
    consumer_s: f64,
    consumer_wait_s: f64,
    blocked: [f64; 5],
    inflight_peak: usize,
    max_inflight: usize,
) -> (String, String, bool) {
    let mut r = insitubatch_core::internals::Recorded { queue_samples, inflight_peak, blocked, ..Default::default() };
    r.times.consumer_s = consumer_s;
    r.times.consumer_wait_s = consumer_wait_s;
    let (stage, advice, idle) = insitubatch_core::internals::verdict(&r, max_inflight);
    (stage.to_string(), advice, idle)
}

/// The engine's `producer_s` rule (`core::StageTimes::producer_seconds`) for times built by
/// hand in Python: every stage's seconds but the caller's own.
#[pyfunction]
#[pyo3(signature = (*, fetch_wait_s, admission_parked_s, decode_s, assemble_s, gather_s, batch_transform_s))]
fn producer_s(
    fetch_wait_s: f64,
    admission_parked_s: f64,
    decode_s: f64,
    assemble_s: f64,
    gather_s: f64,
    batch_transform_s: f64,
) -> f64 {
    let times = StageTimes {
        fetch_wait_s,
        admission_parked_s,
        decode_s,
        assemble_s,
        gather_s,
        batch_transform_s,
        ..StageTimes::default()
    };
    times.producer_seconds()
}

/// The engine's rule of `starved_frac` and `fed_frac` (`core::Depths::share`) for depths built
/// by hand in Python: `count` of the caller's `asked` requests, as a share.
#[pyfunction]
fn queue_share(count: f64, asked: f64) -> f64 {
    Depths::share(count, asked)
}

/// The engine's option defaults (core's `DatasetSpec::default()`, written by its serde
/// derive; `split_by_chunk`'s `contiguous` from `SplitOptions`), so the Python signatures
/// restate nothing.
#[pyfunction]
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = pythonize::pythonize(py, &DatasetSpec::default())
        .map_err(|e| PyValueError::new_err(e.to_string()))?
        .cast_into::<PyDict>()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    out.set_item("contiguous", SplitOptions::default().contiguous)?;
    out.set_item("probe_chunks", insitubatch_core::PROBE_CHUNKS)?;
    Ok(out)
}
