//! Stores concatenated along the sample axis (`concat.rs`): one array of the summed length,
//! every sample once per epoch with the values of the store it comes from, each chunk of
//! every store read once, the coordinate concatenated too, arrays without the dimension from
//! the first store, and parts that cannot be concatenated refused naming the array and store.

use crate::Knobs;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ConcatStorage;
use crate::coords::CoordValues;
use crate::dataset::patch_tests::drain;
use crate::dataset::{Dataset, DatasetOptions};
use crate::runtime::{InlinePool, Runtime, Storage};
use crate::shuffle::Split;
use crate::split::SplitOptions;
use crate::testing::{Fault, MemoryStorage, SimExecutor, write_f32_array};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(60);

/// A store of `n` samples from `t0`: `x` (n, 3) in chunks of `chunk` samples, value
/// `base + 3 t + c` (t local to the store); `time` (n,) in chunks of 4, value `t0 + t`; and a
/// static `s` (3,) whose values are `base`.
fn part(n: u64, chunk: u64, base: f32, t0: f32) -> MemoryStorage {
    part_with_time_chunk(n, chunk, base, t0, 4)
}

/// [`part`] with `time` in chunks of `time_chunk`.
fn part_with_time_chunk(n: u64, chunk: u64, base: f32, t0: f32, time_chunk: u64) -> MemoryStorage {
    let s = MemoryStorage::new();
    write_f32_array(&s, "x", &[n, 3], &[chunk, 3], None, Some(&["time", "c"]), |i| base + i as f32);
    write_f32_array(&s, "time", &[n], &[time_chunk], None, Some(&["time"]), |i| t0 + i as f32);
    write_f32_array(&s, "s", &[3], &[3], None, Some(&["c"]), |_| base);
    s
}

fn concat(parts: &[&MemoryStorage]) -> (SimExecutor, crate::Result<ConcatStorage>) {
    let sim = SimExecutor::new();
    let parts: Vec<Arc<dyn Storage>> = parts.iter().map(|p| Arc::new((*p).clone()) as Arc<dyn Storage>).collect();
    let storage = sim.run(ConcatStorage::open(parts, "time", 0), LIMIT).unwrap();
    (sim, storage)
}

fn open(storage: ConcatStorage, sim: &SimExecutor, arrays: &[&str], coords: bool) -> crate::Result<Dataset> {
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let options = DatasetOptions {
        knobs: Knobs { batch_size: 5, block_chunks: 2, seed: 3, coords, ..Default::default() },
        ..Default::default()
    };
    let builder = Dataset::builder(Arc::new(storage), runtime)
        .arrays(arrays.iter().copied())
        .options(options)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    sim.run(builder.open(), LIMIT).unwrap()
}

fn chunk_reads(s: &MemoryStorage) -> BTreeMap<String, u64> {
    s.keys().into_iter().filter(|k| k.starts_with("x/c/")).map(|k| (k.clone(), s.reads_of(&k))).collect()
}

#[test]
fn concatenated_stores_read_as_one_array_each_chunk_once_per_epoch() {
    // 12 + 10 samples; the last store may end inside a chunk (10 = 4 + 4 + 2).
    let (a, b) = (part(12, 4, 0.0, 0.0), part(10, 4, 1000.0, 12.0));
    let (sim, storage) = concat(&[&a, &b]);
    let ds = open(storage.unwrap(), &sim, &["x"], true).unwrap();
    for epoch in 0..2 {
        ds.set_epoch(epoch);
        let before = (chunk_reads(&a), chunk_reads(&b));
        let (batches, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
        let mut seen = Vec::new();
        for batch in &batches {
            let x = batch.arrays["x"].as_slice::<f32>().unwrap();
            let CoordValues::Number(time) = &batch.coords["time"] else { panic!("time is a number here") };
            for (i, &t) in batch.sample_indices.iter().enumerate() {
                let (base, local) = if t < 12 { (0.0, t) } else { (1000.0, t - 12) };
                let want: Vec<f32> = (0..3).map(|c| base + (3 * local + c) as f32).collect();
                assert_eq!(&x[i * 3..i * 3 + 3], want.as_slice(), "sample {t}");
                assert_eq!(time[i], t as f64, "the coordinate is concatenated too");
            }
            seen.extend(batch.sample_indices.iter().copied());
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..22).collect::<Vec<_>>(), "epoch {epoch}: every sample once");
        for (s, before) in [(&a, before.0), (&b, before.1)] {
            for (k, n) in chunk_reads(s) {
                let reads = n - before[&k];
                assert!(reads == 1 || (epoch > 0 && reads == 0), "epoch {epoch}: {k} read {reads} times");
            }
        }
    }
}

#[test]
fn a_coordinate_each_store_keeps_in_one_chunk_is_concatenated_in_memory() {
    // Yearly stores keep their time axis in one chunk of the year's length: 12 and 10 here.
    let a = part_with_time_chunk(12, 4, 0.0, 0.0, 12);
    let b = part_with_time_chunk(10, 2, 1000.0, 12.0, 10);
    let b_x_chunks_differ = concat(&[&a, &b]).1.unwrap_err().to_string();
    assert!(b_x_chunks_differ.contains("\"x\"") && b_x_chunks_differ.contains("differs"), "{b_x_chunks_differ}");
    let b = part_with_time_chunk(10, 4, 1000.0, 12.0, 10);
    let (sim, storage) = concat(&[&a, &b]);
    let ds = open(storage.unwrap(), &sim, &["x"], true).unwrap();
    let (batches, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
    let mut n = 0;
    for batch in &batches {
        let CoordValues::Number(time) = &batch.coords["time"] else { panic!("time is a number here") };
        for (i, &t) in batch.sample_indices.iter().enumerate() {
            assert_eq!(time[i], t as f64, "sample {t}");
            n += 1;
        }
    }
    assert_eq!(n, 22);
}

#[test]
fn an_array_without_the_dimension_comes_from_the_first_store() {
    let (a, b) = (part(8, 4, 0.0, 0.0), part(8, 4, 1000.0, 8.0));
    let (sim, storage) = concat(&[&a, &b]);
    let storage = storage.unwrap();
    let meta = sim.run(async move { storage.get("s/zarr.json").await.unwrap().unwrap() }, LIMIT).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(doc["shape"], serde_json::json!([3]), "not concatenated");
    let (sim, storage) = concat(&[&a, &b]);
    let storage = storage.unwrap();
    let x = sim.run(async move { storage.get("x/zarr.json").await.unwrap().unwrap() }, LIMIT).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&x).unwrap();
    assert_eq!(doc["shape"], serde_json::json!([16, 3]));
}

#[test]
fn parts_that_cannot_be_concatenated_are_refused_naming_array_and_store() {
    let refused = |parts: &[&MemoryStorage]| concat(parts).1.unwrap_err().to_string();
    // A first store ending inside a chunk.
    let e = refused(&[&part(10, 4, 0.0, 0.0), &part(8, 4, 0.0, 10.0)]);
    assert!(e.contains("\"time\"") || e.contains("\"x\""), "{e}");
    assert!(e.contains("straddle") && e.contains("memory://"), "{e}");
    // Other chunks.
    let e = refused(&[&part(8, 4, 0.0, 0.0), &part(8, 2, 0.0, 8.0)]);
    assert!(e.contains("\"x\"") && e.contains("differs") && e.contains("chunks"), "{e}");
    // An array one store lacks.
    let lacking = MemoryStorage::new();
    write_f32_array(&lacking, "x", &[8, 3], &[4, 3], None, Some(&["time", "c"]), |i| i as f32);
    let e = refused(&[&part(8, 4, 0.0, 0.0), &lacking]);
    assert!(e.contains("is missing from"), "{e}");
    assert!(concat(&[&part(8, 4, 0.0, 0.0)]).1.is_err(), "one store is not a concatenation");
    // No array with the dimension: the names found are given.
    let sim = SimExecutor::new();
    let parts: Vec<Arc<dyn Storage>> = vec![Arc::new(part(8, 4, 0.0, 0.0)), Arc::new(part(8, 4, 0.0, 8.0))];
    let e = sim.run(ConcatStorage::open(parts, "valid_time", 0), LIMIT).unwrap().unwrap_err().to_string();
    assert!(e.contains("\"valid_time\"") && e.contains("[\"c\", \"time\"]"), "{e}");
}

#[test]
fn a_concatenations_metadata_reads_follow_the_read_policy_and_its_chunk_reads_are_retried_once() {
    let (a, b) = (part(8, 4, 0.0, 0.0), part(8, 4, 100.0, 8.0));
    let open_under = |retries: u32| {
        let sim = SimExecutor::new();
        let parts: Vec<Arc<dyn Storage>> = vec![Arc::new(a.clone()), Arc::new(b.clone())];
        let policy = crate::ReadPolicy { retries, ..Default::default() };
        let executor: Arc<dyn crate::Executor> = Arc::new(sim.clone());
        let opened = sim.run(ConcatStorage::open_under_policy(parts, "time", 0, executor, policy), LIMIT).unwrap();
        (sim, opened)
    };
    b.set_fault("x/zarr.json", Fault::TransientFailures(2));
    let (sim, storage) = open_under(2);
    let storage = storage.expect("two transient failures are within two retries");
    assert_eq!(b.reads_of("x/zarr.json"), 3);
    b.set_fault("x/zarr.json", Fault::TransientFailures(3));
    let err = open_under(1).1.expect_err("three transient failures are past one retry").to_string();
    assert!(err.contains("gave up after 2 attempts"), "{err}");

    // Opened, the parts are read straight (the engine's fetch applies its own policy to chunk
    // reads, once): a transient failure reaches the caller.
    b.set_fault("x/c/0/0", Fault::TransientFailures(1));
    let storage = Arc::new(storage);
    let direct = Arc::clone(&storage);
    let got = sim.run(async move { direct.get("x/c/2/0").await }, LIMIT).unwrap();
    assert!(got.is_err(), "b's first chunk, read straight, fails once");
    let ds = open(Arc::into_inner(storage).unwrap(), &sim, &["x"], false).unwrap();
    let (batches, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
    assert_eq!(batches.iter().map(|b| b.sample_indices.len()).sum::<usize>(), 16);
}
