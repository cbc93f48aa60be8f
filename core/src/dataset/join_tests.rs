//! Variables joined from several stores (`join.rs`): one plan over all of them, each chunk
//! read once per epoch, samples paired by index, and joins whose sample axes disagree refused.

use crate::Knobs;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::JoinedStorage;
use crate::dataset::patch_tests::drain;
use crate::dataset::{Dataset, DatasetOptions};
use crate::runtime::{InlinePool, Runtime, Storage};
use crate::shuffle::Split;
use crate::split::SplitOptions;
use crate::testing::{MemoryStorage, SimExecutor, write_f32_array};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(60);
const N: u64 = 40;

/// `era5/x` (N samples of 3, 4 per chunk, value = flat index) and `static/y` (N samples of
/// 2, 8 per chunk, value = 1000 + flat index), each with a `time` coordinate whose values
/// `time_b` gives for the second store.
fn stores(n_b: u64, time_b: impl Fn(u64) -> f32) -> (MemoryStorage, MemoryStorage) {
    let a = MemoryStorage::new();
    write_f32_array(&a, "x", &[N, 3], &[4, 3], None, Some(&["time", "c"]), |i| i as f32);
    write_f32_array(&a, "time", &[N], &[N], None, Some(&["time"]), |i| i as f32);
    let b = MemoryStorage::new();
    write_f32_array(&b, "y", &[n_b, 2], &[8, 2], None, Some(&["time", "d"]), |i| 1000.0 + i as f32);
    write_f32_array(&b, "time", &[n_b], &[n_b], None, Some(&["time"]), time_b);
    (a, b)
}

/// `era5/x` and `static/y` of `a` and `b` joined, all in train.
fn open(a: &MemoryStorage, b: &MemoryStorage, options: DatasetOptions) -> (SimExecutor, crate::Result<Dataset>) {
    open_join(
        a,
        b,
        Some(&["era5/x", "static/y"]),
        DatasetOptions { knobs: Knobs { batch_size: 6, block_chunks: 2, seed: 3, ..options.knobs }, ..options },
    )
}

/// `a` as `era5` and `b` as `static`, joined: the arrays named, or discovered (`None`).
fn open_join(
    a: &MemoryStorage,
    b: &MemoryStorage,
    arrays: Option<&[&str]>,
    options: DatasetOptions,
) -> (SimExecutor, crate::Result<Dataset>) {
    let joined = JoinedStorage::new(vec![
        ("era5".into(), Arc::new(a.clone()) as Arc<dyn Storage>),
        ("static".into(), Arc::new(b.clone())),
    ])
    .unwrap();
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let mut builder = Dataset::builder(Arc::new(joined), runtime)
        .options(options)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    if let Some(arrays) = arrays {
        builder = builder.arrays(arrays.iter().copied());
    }
    let ds = sim.run(builder.open(), LIMIT).unwrap();
    (sim, ds)
}

/// Reads of every chunk object (metadata and coordinates left out).
fn chunk_reads(s: &MemoryStorage) -> BTreeMap<String, u64> {
    s.keys()
        .into_iter()
        .filter(|k| k.contains("/c/") && !k.starts_with("time/"))
        .map(|k| (k.clone(), s.reads_of(&k)))
        .collect()
}

#[test]
fn joined_variables_pair_by_sample_and_each_chunk_is_read_once_per_epoch() {
    let (a, b) = stores(N, |i| i as f32);
    let (sim, ds) = open(&a, &b, DatasetOptions::default());
    let ds = ds.unwrap();
    for epoch in 0..2 {
        let before_a = chunk_reads(&a);
        let before_b = chunk_reads(&b);
        ds.set_epoch(epoch);
        let (batches, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
        let mut seen = Vec::new();
        for batch in &batches {
            let x = batch.arrays["era5/x"].as_slice::<f32>().unwrap();
            let y = batch.arrays["static/y"].as_slice::<f32>().unwrap();
            for (i, &t) in batch.sample_indices.iter().enumerate() {
                assert_eq!(&x[i * 3..i * 3 + 3], &[(3 * t) as f32, (3 * t + 1) as f32, (3 * t + 2) as f32]);
                assert_eq!(&y[i * 2..i * 2 + 2], &[1000.0 + (2 * t) as f32, 1000.0 + (2 * t + 1) as f32]);
            }
            seen.extend(batch.sample_indices.iter().copied());
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..N).collect::<Vec<_>>(), "epoch {epoch}: every sample once");
        for (s, before) in [(&a, before_a), (&b, before_b)] {
            for (k, n) in chunk_reads(s) {
                // Read in the first epoch; later ones may be served by what stayed resident.
                let reads = n - before[&k];
                assert!(reads == 1 || (epoch > 0 && reads == 0), "epoch {epoch}: {k} read {reads} times");
            }
        }
    }
    assert!(batches_carry_no_coords(&sim, &ds), "the coordinates were only checked, not asked for");
}

fn batches_carry_no_coords(sim: &SimExecutor, ds: &Dataset) -> bool {
    let (batches, _) = drain(sim, ds.iter(Split::Train).unwrap(), Some(1));
    batches[0].coords.is_empty()
}

#[test]
fn a_join_of_unequal_lengths_is_refused_naming_both_stores() {
    let (a, b) = stores(32, |i| i as f32);
    let e = open(&a, &b, DatasetOptions::default()).1.unwrap_err().to_string();
    assert!(e.contains("share the same sample-axis length"), "{e}");
    assert!(e.contains("era5/x") && e.contains("static/y"), "{e}");
    assert!(e.ends_with("join(era5=memory://, static=memory://)"), "{e}");
}

#[test]
fn a_join_whose_coordinates_disagree_is_refused_saying_where() {
    let (a, b) = stores(N, |i| if i < 20 { i as f32 } else { i as f32 + 0.5 });
    let e = open(&a, &b, DatasetOptions::default()).1.unwrap_err().to_string();
    assert!(e.contains("\"era5/time\" and \"static/time\" differ first at sample 20 (20 against 20.5)"), "{e}");
    assert!(e.ends_with("join(era5=memory://, static=memory://)"), "{e}");
    // Asked for, the coordinates come with each batch from the first variable's store.
    let (a, b) = stores(N, |i| i as f32);
    let (sim, ds) =
        open(&a, &b, DatasetOptions { knobs: Knobs { coords: true, ..Default::default() }, ..Default::default() });
    let (batches, _) = drain(&sim, ds.unwrap().iter(Split::Train).unwrap(), Some(1));
    let want: Vec<f64> = batches[0].sample_indices.iter().map(|&t| t as f64).collect();
    assert_eq!(batches[0].coords["time"], crate::coords::CoordValues::Number(want));
}

#[test]
fn discovery_finds_every_stores_arrays_by_listing_or_by_consolidated_metadata() {
    let (_, b) = stores(N, |i| i as f32);
    // `a` as a plain HTTP server is: no listing, but consolidated metadata naming its arrays.
    let a = MemoryStorage::new().unlistable();
    write_f32_array(&a, "x", &[N, 3], &[4, 3], None, Some(&["time", "c"]), |i| i as f32);
    write_f32_array(&a, "time", &[N], &[N], None, Some(&["time"]), |i| i as f32);
    let consolidated = r#"{"zarr_format": 3, "node_type": "group", "consolidated_metadata": {"kind": "inline",
        "must_understand": false, "metadata": {"x": {"node_type": "array"}, "time": {"node_type": "array"}}}}"#;
    a.insert("zarr.json", consolidated);
    let discover = |a: &MemoryStorage| {
        open_join(
            a,
            &b,
            None,
            DatasetOptions { knobs: Knobs { batch_size: 4, ..Default::default() }, ..Default::default() },
        )
        .1
    };
    let ds = discover(&a).unwrap();
    let labels: Vec<String> = ds.variables().iter().map(|v| v.label.clone()).collect();
    assert_eq!(labels, ["era5/x", "static/y"], "coordinates are skipped, as for one store");
    // Without consolidated metadata the unlistable store cannot be discovered: said so.
    a.remove("zarr.json");
    let e = discover(&a).unwrap_err().to_string();
    assert!(e.contains("cannot be listed") && e.ends_with("join(era5=memory://, static=memory://)"), "{e}");
}
