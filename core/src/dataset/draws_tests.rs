//! Masks and weights (`draws.rs`) through whole passes: masked samples never drawn, weighted
//! draw frequencies, each chunk read at most once per epoch, resume, ranks, with patches.

use crate::Knobs;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::dataset::patch_tests::drain;
use crate::dataset::{Dataset, DatasetOptions};
use crate::patch::{PatchAxis, PatchOptions};
use crate::runtime::{InlinePool, Runtime};
use crate::shuffle::Split;
use crate::split::SplitOptions;
use crate::testing::{MemoryStorage, SimExecutor, write_f32_array};
use crate::{Batch, Checkpoint, Error};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(60);
const N: u64 = 40;

/// `x` (40 samples of 3, 4 per chunk), element value = flat index.
fn store() -> MemoryStorage {
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "x", &[N, 3], &[4, 3], None, Some(&["time", "c"]), |i| i as f32);
    storage
}

fn open(storage: &MemoryStorage, options: DatasetOptions) -> (SimExecutor, Dataset) {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let options =
        DatasetOptions { knobs: Knobs { batch_size: 6, block_chunks: 2, seed: 11, ..options.knobs }, ..options };
    let builder = Dataset::builder(Arc::new(storage.clone()), runtime)
        .arrays(["x"])
        .options(options)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    let ds = sim.run(builder.open(), LIMIT).unwrap().unwrap();
    (sim, ds)
}

fn weighted(weights: Vec<f64>) -> DatasetOptions {
    DatasetOptions { sample_weights: Some(weights.into()), ..Default::default() }
}

/// One train epoch: its batches (values checked against their samples) and the reads of each
/// chunk object during it.
fn epoch(storage: &MemoryStorage, sim: &SimExecutor, ds: &Dataset, e: u64) -> (Vec<u64>, BTreeMap<String, u64>) {
    let before: BTreeMap<String, u64> = storage.keys().iter().map(|k| (k.clone(), storage.reads_of(k))).collect();
    ds.set_epoch(e);
    let (batches, _) = drain(sim, ds.iter(Split::Train).unwrap(), None);
    let mut drawn = Vec::new();
    for b in &batches {
        let x = b.view::<f32>("x").unwrap();
        for (i, &t) in b.sample_indices.iter().enumerate() {
            assert_eq!(x[[i, 1]], (t * 3 + 1) as f32, "row {i} is sample {t}");
            drawn.push(t);
        }
    }
    let reads = before
        .into_iter()
        .filter(|(k, _)| !k.ends_with("zarr.json"))
        .map(|(k, n)| (k.clone(), storage.reads_of(&k) - n))
        .collect();
    (drawn, reads)
}

#[test]
fn masked_samples_are_never_drawn_and_chunks_are_read_once() {
    let storage = store();
    let mask: Vec<bool> = (0..N).map(|t| t % 3 != 0 && !(8..12).contains(&t)).collect();
    let (sim, ds) = open(&storage, DatasetOptions { sample_mask: Some(mask.clone().into()), ..Default::default() });
    for e in 0..3 {
        let (drawn, reads) = epoch(&storage, &sim, &ds, e);
        let want: Vec<u64> = (0..N).filter(|&t| mask[t as usize]).collect();
        let mut got = drawn.clone();
        got.sort_unstable();
        assert_eq!(got, want, "epoch {e}: each kept sample once, no masked one");
        assert!(reads.values().all(|&n| n <= 1), "{reads:?}");
        assert_eq!(reads["x/c/2/0"], 0, "a chunk with every sample masked is never read");
    }
    let notes = ds.describe(1).unwrap().notes;
    assert!(notes.iter().any(|n| n.code == "sample-draws" && n.message.contains("57.5%")), "{notes:?}");
}

#[test]
fn weighted_draw_frequencies_follow_the_weights_and_read_once_holds() {
    let storage = store();
    // Samples 0..10 weight 2, 10..20 weight 0.5, 20..30 weight 1, 30..40 weight 0.
    let w: Vec<f64> = (0..N).map(|t| [2.0, 0.5, 1.0, 0.0][(t / 10) as usize]).collect();
    let (sim, ds) = open(&storage, weighted(w.clone()));
    assert_eq!(ds.rows_per_sample(), 2);
    let mut counts = vec![0u64; N as usize];
    let epochs = 60;
    for e in 0..epochs {
        let (drawn, reads) = epoch(&storage, &sim, &ds, e);
        assert!(reads.values().all(|&n| n <= 1), "epoch {e}: a chunk read twice: {reads:?}");
        let mut per_epoch = vec![0u64; N as usize];
        for t in drawn {
            counts[t as usize] += 1;
            per_epoch[t as usize] += 1;
        }
        for t in 0..N as usize {
            match w[t] {
                2.0 => assert_eq!(per_epoch[t], 2),
                1.0 => assert_eq!(per_epoch[t], 1),
                0.0 => assert_eq!(per_epoch[t], 0),
                _ => assert!(per_epoch[t] <= 1),
            }
        }
    }
    // The half-weighted samples: 600 coin flips in all, within 4 standard deviations of 300
    // (a fixed seed makes this exact, not a flaky statistic).
    let halves: u64 = counts[10..20].iter().sum();
    assert!((halves as f64 - 300.0).abs() < 4.0 * 150f64.sqrt(), "{halves}");
    let notes = ds.describe(1).unwrap().notes;
    let note = notes.iter().find(|n| n.code == "sample-draws").unwrap();
    assert!(note.message.contains("about 35 train rows") && note.message.contains("at most 2 draws"), "{note:?}");
}

#[test]
fn a_weighted_pass_resumes_bit_for_bit_and_refuses_other_weights() {
    let storage = store();
    let w: Vec<f64> = (0..N).map(|t| 0.25 + (t % 5) as f64 * 0.5).collect();
    let (sim, ds) = open(&storage, weighted(w.clone()));
    ds.set_epoch(2);
    let (whole, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
    let (head, cp) = drain(&sim, ds.iter(Split::Train).unwrap(), Some(2));
    let cp = Checkpoint::from_json(&cp.to_json()).unwrap();
    assert!(cp.draws.is_some());
    let (sim, fresh) = open(&storage, weighted(w.clone()));
    let (tail, _) = drain(&sim, fresh.resume(&cp).unwrap(), None);
    let key = |b: &Batch| (b.index, b.sample_indices.clone(), b.arrays["x"].data.to_vec());
    assert_eq!(head.iter().chain(&tail).map(key).collect::<Vec<_>>(), whole.iter().map(key).collect::<Vec<_>>());

    let mut other = w;
    other[0] = 3.0;
    let (_, changed) = open(&storage, weighted(other));
    let err = changed.resume(&cp).unwrap_err();
    assert!(matches!(&err, Error::Config(m) if m.contains("sample_weights")), "{err}");
}

#[test]
fn ranks_draw_disjoint_samples_under_weights() {
    let storage = store();
    let w: Vec<f64> = (0..N).map(|t| if t % 2 == 0 { 1.5 } else { 1.0 }).collect();
    let mut seen: Vec<BTreeSet<u64>> = Vec::new();
    let mut lens = Vec::new();
    for rank in 0..2 {
        let base = weighted(w.clone());
        let (sim, ds) = open(&storage, DatasetOptions { knobs: Knobs { rank, world_size: 2, ..base.knobs }, ..base });
        let (drawn, _) = epoch(&storage, &sim, &ds, 1);
        lens.push(drawn.len());
        seen.push(drawn.into_iter().collect());
    }
    assert!(seen[0].is_disjoint(&seen[1]), "a sample drawn by both ranks");
    assert_eq!(lens[0], lens[1], "equal shares");
}

#[test]
fn weights_and_patches_multiply_the_rows_of_a_sample() {
    let storage = store();
    let options = DatasetOptions {
        patch: Some(PatchOptions::grid(vec![(PatchAxis::Name("c".into()), 1)])),
        ..weighted((0..N).map(|t| if t < 4 { 2.0 } else { 1.0 }).collect())
    };
    let (sim, ds) = open(&storage, options);
    assert_eq!(ds.rows_per_sample(), 6);
    ds.set_epoch(0);
    let (batches, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
    let mut rows: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for b in &batches {
        let p = b.patches.as_ref().unwrap();
        for (i, &t) in b.sample_indices.iter().enumerate() {
            assert_eq!(b.view::<f32>("x").unwrap()[[i, 0]], (t * 3 + p.origin(i)[0]) as f32);
            *rows.entry((t, p.origin(i)[0])).or_default() += 1;
        }
    }
    assert_eq!(rows.len(), 40 * 3);
    assert!(rows.iter().all(|(&(t, _), &n)| n == if t < 4 { 2 } else { 1 }), "{rows:?}");
}

#[test]
fn a_mask_of_the_wrong_length_is_refused() {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let options = DatasetOptions { sample_mask: Some(vec![true; 3].into()), ..Default::default() };
    let b = Dataset::builder(Arc::new(store()), runtime).arrays(["x"]).options(options);
    let err = sim.run(b.open(), LIMIT).unwrap().unwrap_err().to_string();
    assert!(err.contains("sample_mask has 3 entries") && err.contains("40"), "{err}");
}
