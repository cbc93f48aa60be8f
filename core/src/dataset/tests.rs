//! The builder's defaults and refusals: which arrays, which labels, which split, and what it
//! reads (counted in the store, so "no I/O" is checked, not assumed).

use crate::Knobs;
use std::sync::Arc;
use std::time::Duration;

use crate::dataset::{Dataset, DatasetOptions, Variable};
use crate::error::Error;
use crate::runtime::{InlinePool, Runtime, Storage};
use crate::shuffle::Split;
use crate::split::{SplitOptions, split_by_chunk};
use crate::testing::{Fault, MemoryStorage, SimExecutor, write_f32_array};
use crate::zarr::open_array;
// On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
// takes the place of libtest's `#[test]`.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(60);

fn store() -> (SimExecutor, MemoryStorage, Runtime) {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &[40, 2], &[4, 2], None, None, |i| i as f32);
    write_f32_array(&storage, "u10", &[40, 2], &[8, 2], None, None, |i| i as f32);
    (sim, storage, runtime)
}

fn shared(storage: &MemoryStorage) -> Arc<dyn Storage> {
    Arc::new(storage.clone())
}

#[test]
fn discovers_every_array_and_labels_it_by_path() {
    let (sim, storage, runtime) = store();
    let ds = sim.run(Dataset::builder(shared(&storage), runtime).open(), LIMIT).unwrap().unwrap();
    let labels: Vec<&str> = ds.variables().iter().map(|v| v.label.as_str()).collect();
    assert_eq!(labels, ["t2m", "u10"]);
}

/// The figures `describe()` derives for the bindings (which show them, computing nothing):
/// each label's chunks, the first chunk's bytes, the geometry batches hold, the budget in force
/// and a shuffle quality only where there is an order to score.
#[test]
fn the_report_derives_what_the_bindings_show() {
    let (sim, storage, runtime) = store();
    let open = |fractions| {
        let b = Dataset::builder(shared(&storage), runtime.clone())
            .split(SplitOptions { fractions, ..Default::default() })
            .options(DatasetOptions { knobs: Knobs { batch_size: 1, ..Default::default() }, ..Default::default() });
        sim.run(b.open(), LIMIT).unwrap().unwrap()
    };
    let r = open((0.8, 0.1, 0.1)).describe(2).unwrap();
    assert_eq!(r.config.variable_chunks, vec![("t2m".into(), 10), ("u10".into(), 5)]);
    let bytes: Vec<u64> = r.variables.iter().map(|v| v.logical_chunk_bytes).collect();
    assert_eq!(bytes, [4 * 2 * 4, 8 * 2 * 4], "rows of the first chunk x one sample's bytes");
    for v in &r.variables {
        assert_eq!((&v.output_shape, &v.output_chunks), (&v.shape, &v.chunks), "no transform, same geometry");
    }
    assert_eq!(r.config.cache_budget_bytes, None);
    assert_eq!(r.config.budget_bytes, r.memory.automatic_budget_bytes, "one iteration's, though two were asked");
    assert!(r.memory.residency_bytes > r.config.budget_bytes, "{:?}", r.memory);
    assert!(r.config.shuffle_quality.is_some_and(|q| q > 0.0), "{:?}", r.config.shuffle_quality);
    // One train chunk of four samples has an order; none has no order to score.
    assert!(open((0.1, 0.0, 0.9)).describe(1).unwrap().config.shuffle_quality.is_some());
    let none = open((0.0, 0.5, 0.5)).describe(1).unwrap();
    assert_eq!((none.config.shuffle_quality, none.render().contains("shuffle quality n/a")), (None, true));
}

#[test]
fn named_arrays_keep_their_order_and_the_split_uses_the_dataset_seed() {
    let (sim, storage, runtime) = store();
    let split = SplitOptions { contiguous: false, ..SplitOptions::default() };
    let ds = Dataset::builder(shared(&storage), runtime)
        .arrays(["u10", "t2m"])
        .options(DatasetOptions { knobs: Knobs { seed: 7, ..Default::default() }, ..Default::default() })
        .split(SplitOptions { seed: 7, ..split.clone() });
    let ds = sim.run(ds.open(), LIMIT).unwrap().unwrap();
    assert_eq!(ds.variables()[0].label, "u10");
    let want = split_by_chunk(&ds.variables()[0].geometry, &SplitOptions { seed: 7, ..split }).unwrap();
    assert_eq!(ds.manifest().chunks_of(Split::Train), want.chunks_of(Split::Train));

    // Without an explicit split, the split is the default one seeded with the dataset's seed.
    let (sim, storage, runtime) = store();
    let ds = Dataset::builder(shared(&storage), runtime)
        .options(DatasetOptions { knobs: Knobs { seed: 7, ..Default::default() }, ..Default::default() });
    let ds = sim.run(ds.open(), LIMIT).unwrap().unwrap();
    let want = split_by_chunk(&ds.variables()[0].geometry, &SplitOptions { seed: 7, ..SplitOptions::default() });
    assert_eq!(ds.manifest().chunks_of(Split::Val), want.unwrap().chunks_of(Split::Val));
}

#[test]
fn build_reads_nothing_and_refuses_an_array_it_was_not_given() {
    let (sim, storage, runtime) = store();
    let st = shared(&storage);
    let t2m = sim.run(async move { open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
    let reads = storage.total_reads();
    let ds = Dataset::builder(shared(&storage), runtime.clone()).opened(vec![t2m.clone()]).build().unwrap();
    assert_eq!(ds.variables().len(), 1);
    assert_eq!(storage.total_reads(), reads, "build() must not touch the store");

    let err = Dataset::builder(shared(&storage), runtime).opened(vec![t2m]).arrays(["u10"]).build().unwrap_err();
    assert!(matches!(&err, Error::NotFound { message, .. } if message.contains("\"u10\"")), "{err}");
}

#[test]
fn windows_open_each_array_once_and_refuse_a_repeated_label() {
    let (sim, storage, runtime) = store();
    let st = shared(&storage);
    let t2m = sim.run(async move { open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
    let g = t2m.geometry(0).unwrap();
    let window =
        vec![Variable { label: "x".into(), geometry: g.clone() }, Variable { label: "y".into(), geometry: g.shift(2) }];
    let reads = storage.total_reads();
    let ds = Dataset::builder(shared(&storage), runtime.clone()).variables(window);
    let ds = sim.run(ds.open(), LIMIT).unwrap().unwrap();
    assert_eq!(storage.total_reads() - reads, 1, "one metadata read for the one array both labels read");
    assert_eq!(ds.describe(1).unwrap().config.offsets, vec![("x".into(), 0), ("y".into(), 2)]);

    let twice = vec![Variable { label: "x".into(), geometry: g.clone() }, Variable { label: "x".into(), geometry: g }];
    let err = Dataset::builder(shared(&storage), runtime).variables(twice);
    let err = sim.run(err.open(), LIMIT).unwrap().unwrap_err();
    assert!(matches!(&err, Error::Config(m) if m.contains("label \"x\" is used twice")), "{err}");
}

#[test]
fn an_empty_selection_is_refused_with_the_store_named() {
    let (_, storage, runtime) = store();
    let err = Dataset::builder(shared(&storage), runtime).arrays(Vec::<String>::new()).build().unwrap_err();
    assert!(matches!(&err, Error::Config(m) if m.contains("at least one variable")), "{err}");
}

#[test]
fn a_pass_as_a_futures_stream_yields_the_same_batches_as_next_batch() {
    use futures::StreamExt;
    let (sim, storage, runtime) = store();
    let ds = Dataset::builder(shared(&storage), runtime)
        .arrays(["t2m"])
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    let ds = sim.run(ds.open(), LIMIT).unwrap().unwrap();
    let (a, b) = (ds.clone(), ds.clone());
    let by_next = sim
        .run(
            async move {
                let mut s = a.iter(Split::Train).unwrap();
                let mut out = Vec::new();
                while let Some(batch) = s.next_batch().await {
                    out.push(batch.unwrap().sample_indices);
                }
                out
            },
            LIMIT,
        )
        .unwrap();
    let by_stream = sim
        .run(
            async move {
                let s = b.iter(Split::Train).unwrap().into_stream();
                s.map(|batch| batch.unwrap().sample_indices).collect::<Vec<_>>().await
            },
            LIMIT,
        )
        .unwrap();
    assert_eq!(by_stream, by_next);
    assert_eq!(by_stream.iter().map(Vec::len).sum::<usize>(), 40);
}

/// A pass closed while a shard index read is under way, with its dataset dropped, leaves
/// nothing holding the engine once that read ends. The read's future, kept in the engine's
/// index cache, held the engine itself and was never polled again: the engine and its storage
/// were never freed, and in Node the read's request-timeout timer kept the process up 120 s.
#[test]
fn a_pass_closed_during_a_shard_index_read_frees_the_engine_when_the_read_ends() {
    let sim = SimExecutor::new();
    let exec: Arc<dyn crate::Executor> = Arc::new(sim.clone());
    let storage = MemoryStorage::new().with_latency(Arc::clone(&exec), Duration::from_millis(5));
    write_f32_array(&storage, "t2m", &[40, 2], &[8, 2], Some(&[4, 2]), None, |i| i as f32);
    storage.set_fault("t2m/c/0/0", Fault::Slow { reads: 1, delay: Duration::from_secs(10) });
    let runtime = Runtime::new(Arc::clone(&exec), Arc::new(InlinePool));
    let ds = sim.run(Dataset::builder(shared(&storage), runtime).open(), LIMIT).unwrap().unwrap();
    let engine = Arc::downgrade(&ds.inner.engine);
    sim.run(
        async move {
            let pass = ds.iter(Split::All).unwrap();
            // The first shard's index read starts; its answer is 10 s away.
            exec.sleep(Duration::from_millis(50)).await;
            drop(pass);
            drop(ds);
            exec.sleep(Duration::from_secs(20)).await;
        },
        LIMIT,
    )
    .unwrap();
    assert_eq!(storage.reads_of("t2m/c/0/0"), 1, "the first shard's index was being read at the close");
    assert!(engine.upgrade().is_none(), "the engine is freed once its last read has ended");
}

/// Every train sample of one epoch, in draw order.
fn train_epoch(sim: &SimExecutor, ds: &Dataset) -> Vec<u64> {
    let ds = ds.clone();
    let drawn = async move {
        let mut s = ds.iter(Split::Train)?;
        let mut out = Vec::new();
        while let Some(b) = s.next_batch().await {
            out.extend(b?.sample_indices);
        }
        crate::Result::<Vec<u64>>::Ok(out)
    };
    sim.run(drawn, LIMIT).unwrap().unwrap()
}

#[test]
fn the_automatic_budget_stays_within_the_memory_the_runtime_has() {
    // Two chunkings under shuffle: reading every chunk once means holding the whole split.
    let (sim, _, runtime) = store();
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "fine", &[800, 2], &[4, 2], None, None, |i| i as f32);
    write_f32_array(&storage, "coarse", &[800, 2], &[40, 2], None, None, |i| i as f32);
    let open = |runtime: Runtime| {
        let b = Dataset::builder(shared(&storage), runtime).arrays(["fine", "coarse"]).options(DatasetOptions {
            knobs: Knobs { batch_size: 4, block_chunks: 1, ..Default::default() },
            ..Default::default()
        });
        sim.run(b.open(), LIMIT).unwrap().unwrap()
    };
    let unbounded = open(runtime.clone()).describe(1).unwrap().memory;
    assert!(unbounded.read_once_bytes > unbounded.floor_bytes, "{unbounded:?}");
    assert_eq!(unbounded.residency_bytes, unbounded.read_once_bytes);
    assert_eq!(unbounded.reread_bytes_max, 0);

    // Half of this is below read-once but above the floor: the plan re-reads instead.
    let available = unbounded.read_once_bytes;
    let ds = open(runtime.clone().with_memory_available(Some(available)));
    let report = ds.describe(1).unwrap();
    let m = &report.memory;
    assert_eq!(m.residency_bytes, (available / 2).max(m.floor_bytes));
    assert_eq!(m.automatic_budget_bytes, m.residency_bytes);
    assert!(m.residency_bytes < m.read_once_bytes, "{m:?}");
    assert!(m.reread_bytes_max > 0, "{m:?}");
    assert_eq!(m.memory_available_bytes, Some(available));
    let codes: Vec<&str> = report.notes.iter().map(|n| n.code.as_str()).collect();
    assert!(codes.contains(&"budget-below-read-once"), "{codes:?}");
    // The 64 MiB process baseline alone is more than this runtime has.
    assert!(codes.contains(&"peak-above-memory"), "{codes:?}");

    // Re-reading never loses or repeats a sample.
    let mut drawn = train_epoch(&sim, &ds);
    drawn.sort_unstable();
    assert_eq!(drawn, ds.manifest().sample_indices(Split::Train));
}

/// A budget beyond the store is room the pool cannot fill: the estimate counts the store
/// (every chunk of the selected arrays), not the budget, and a warm epoch under it really
/// does hold no more than that.
#[test]
fn a_budget_beyond_the_store_is_counted_as_the_store() {
    let (sim, _, runtime) = store();
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &[64, 2], &[4, 2], None, None, |i| i as f32);
    let open = |budget: Option<u64>| {
        let b = Dataset::builder(shared(&storage), runtime.clone())
            .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() })
            .options(DatasetOptions {
                knobs: Knobs { batch_size: 4, block_chunks: 1, cache_budget_bytes: budget, ..Default::default() },
                ..Default::default()
            });
        sim.run(b.open(), LIMIT).unwrap().unwrap()
    };
    let store_bytes = 64 * 2 * 4;
    let ds = open(Some(1 << 30));
    let m = ds.describe(1).unwrap().memory;
    assert_eq!(m.residency_bytes, 1 << 30, "the budget in force is the budget given");
    assert_eq!(ds.describe(2).unwrap().config.budget_bytes, 1 << 30);
    assert_eq!(m.resident_max_bytes, store_bytes, "{m:?}");
    assert_eq!(
        m.accounted_bytes,
        m.resident_max_bytes + m.inflight_bytes + m.queue_bytes + m.scratch_bytes + m.recycled_bytes
    );
    assert!(
        ds.describe(1).unwrap().render().contains("of which the store fills 512 B"),
        "{}",
        ds.describe(1).unwrap().render()
    );
    train_epoch(&sim, &ds);
    assert!(ds.pool_counters().resident_peak_bytes <= m.resident_max_bytes, "{:?}", ds.pool_counters());

    // A budget within the store is counted whole.
    let m = open(Some(256)).describe(1).unwrap().memory;
    assert_eq!((m.residency_bytes, m.resident_max_bytes), (256, 256));
}

/// The memory model's reads (`inflight_bytes`): a running decode holds its encoded input
/// beside its slot; reads the window lets ahead count only when slots can wait idle in the
/// recycler (the budget evicts), no more than the budget's chunks and the recycler's cap.
#[test]
fn reads_ahead_are_counted_only_beside_slots_that_can_wait_idle() {
    const TILE: u64 = 4 * 4096 * 4;
    let (sim, _, runtime) = store();
    let inflight = |latency: Option<Duration>, budget_chunks: u64, batch_size: usize| {
        let storage = match latency {
            Some(d) => MemoryStorage::new().with_latency(Arc::new(sim.clone()), d),
            None => MemoryStorage::new(),
        };
        write_f32_array(&storage, "t2m", &[64, 4096], &[4, 4096], None, None, |i| i as f32);
        let b = Dataset::builder(shared(&storage), runtime.clone())
            .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() })
            .options(DatasetOptions {
                knobs: Knobs {
                    batch_size,
                    block_chunks: 1,
                    cache_budget_bytes: Some(budget_chunks * TILE),
                    ..Default::default()
                },
                ..Default::default()
            });
        sim.run(b.open(), LIMIT).unwrap().unwrap().describe(1).unwrap().memory.inflight_bytes
    };
    // One decode thread (InlinePool); a local window starts at 2, a remote one at 32.
    assert_eq!(inflight(None, 16, 4), TILE, "the budget holds the store: nothing is evicted");
    assert_eq!(inflight(None, 8, 4), 3 * TILE, "a local store: the decode and 2 reads ahead");
    assert_eq!(inflight(Some(Duration::from_millis(5)), 4, 4), 4 * TILE, "no more reads than the budget's chunks");
    // Recycler cap: 4 chunks and 4 batches of 1 sample (16 KiB): 5 tiles.
    assert_eq!(inflight(Some(Duration::from_millis(5)), 12, 1), TILE + 5 * TILE, "no more than the recycler holds");
}

/// Fat chunks (40 samples each, 8 in one block): the specified order mixes the whole block,
/// so the first batch needs every chunk; a first block of one chunk (widened to hold a
/// batch) serves the first batch from one chunk, still draws every sample once, and
/// `describe()` says what it costs in mixing.
#[test]
fn a_smaller_first_block_serves_the_first_batch_from_fewer_chunks() {
    let (sim, _, runtime) = store();
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &[320, 2], &[40, 2], None, None, |i| i as f32);
    let open = |first_block_chunks: Option<usize>| {
        let b = Dataset::builder(shared(&storage), runtime.clone())
            .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() })
            .options(DatasetOptions {
                knobs: Knobs { batch_size: 32, block_chunks: 16, first_block_chunks, ..Default::default() },
                ..Default::default()
            });
        sim.run(b.open(), LIMIT).unwrap()
    };
    let chunks_of_first_batch = |ds: &Dataset| {
        let first: std::collections::BTreeSet<u64> = train_epoch(&sim, ds)[..32].iter().map(|s| s / 40).collect();
        first.len()
    };
    let specified = open(None).unwrap();
    assert!(chunks_of_first_batch(&specified) > 4, "the specified order mixes the first batch across the block");
    assert!(!specified.describe(1).unwrap().notes.iter().any(|n| n.code == "first-block-smaller"));

    let fast = open(Some(1)).unwrap();
    assert_eq!(fast.first_block_chunks(), 1);
    assert_eq!(chunks_of_first_batch(&fast), 1);
    let mut drawn = train_epoch(&sim, &fast);
    drawn.sort_unstable();
    assert_eq!(drawn, (0..320).collect::<Vec<_>>(), "every sample once");
    let report = fast.describe(1).unwrap();
    assert_eq!(report.config.first_block_chunks, 1);
    let note = report.notes.iter().find(|n| n.code == "first-block-smaller").expect("the cost is reported");
    assert!(note.message.contains("first 40 samples are drawn from 1 chunk(s) instead of 8"), "{}", note.message);

    // Asked for fewer chunks than a batch needs, the first block is widened to hold one.
    let storage_small = MemoryStorage::new();
    write_f32_array(&storage_small, "t2m", &[64, 2], &[4, 2], None, None, |i| i as f32);
    let b = Dataset::builder(shared(&storage_small), runtime.clone())
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() })
        .options(DatasetOptions {
            knobs: Knobs { batch_size: 8, block_chunks: 8, first_block_chunks: Some(1), ..Default::default() },
            ..Default::default()
        });
    assert_eq!(sim.run(b.open(), LIMIT).unwrap().unwrap().first_block_chunks(), 2);

    let err = open(Some(0)).unwrap_err().to_string();
    assert!(err.contains("first_block_chunks must be >= 1"), "{err}");
}

#[test]
fn an_explicit_budget_beyond_the_memory_available_is_refused_with_the_most_that_fits() {
    let (sim, storage, runtime) = store();
    let runtime = runtime.with_memory_available(Some(1 << 20));
    let b = Dataset::builder(shared(&storage), runtime).options(DatasetOptions {
        knobs: Knobs { cache_budget_bytes: Some(2 << 20), ..Default::default() },
        ..Default::default()
    });
    let err = sim.run(b.open(), LIMIT).unwrap().unwrap_err();
    assert_eq!(err.option_name(), Some("cache_budget_bytes"), "{err}");
    assert!(err.to_string().contains("pass at most 1048576"), "{err}");
}

/// Every batch of one pass: (index, sample indices, each label's bytes).
type Seen = Vec<(usize, Vec<u64>, Vec<(String, Vec<u8>)>)>;

fn drain(sim: &SimExecutor, mut s: crate::BatchStream, take: Option<usize>) -> (Seen, crate::Checkpoint) {
    sim.run(
        async move {
            let mut out = Vec::new();
            while take.is_none_or(|k| out.len() < k) {
                let Some(b) = s.next_batch().await else { break };
                let b = b.unwrap();
                let arrays = b.arrays.iter().map(|(k, a)| (k.clone(), a.data.to_vec())).collect();
                out.push((b.index, b.sample_indices.clone(), arrays));
            }
            (out, s.checkpoint())
        },
        LIMIT,
    )
    .unwrap()
}

/// Ranks over a store where `u10` is chunked twice as coarsely as the reference `t2m`.
fn ranked(rank: usize, world_size: usize) -> (SimExecutor, MemoryStorage, Dataset) {
    let (sim, storage, runtime) = store();
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 3, block_chunks: 1, seed: 5, rank, world_size, ..Default::default() },
        ..Default::default()
    };
    let ds = Dataset::builder(shared(&storage), runtime)
        .arrays(["t2m", "u10"])
        .options(opts)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    let ds = sim.run(ds.open(), LIMIT).unwrap().unwrap();
    (sim, storage, ds)
}

#[test]
fn ranks_draw_disjoint_equal_shares_and_read_each_chunk_once() {
    let world = 3;
    let mut all = std::collections::BTreeSet::new();
    let mut readers: std::collections::HashMap<String, usize> = Default::default();
    let mut lens = Vec::new();
    let mut dropped = Vec::new();
    for rank in 0..world {
        let (sim, storage, ds) = ranked(rank, world);
        assert_eq!(ds.unit_chunks(), 2, "u10's chunk spans two reference chunks");
        ds.set_epoch(1);
        let reads_before: Vec<(String, u64)> =
            storage.keys().iter().map(|k| (k.clone(), storage.reads_of(k))).collect();
        let (seen, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
        lens.push(seen.len());
        for (_, idx, _) in &seen {
            for &i in idx {
                assert!(all.insert(i), "sample {i} drawn by two ranks");
            }
        }
        for (k, before) in reads_before {
            if storage.reads_of(&k) > before && !k.ends_with("zarr.json") {
                assert!(readers.insert(k.clone(), rank).is_none(), "{k} read by two ranks");
                assert_eq!(storage.reads_of(&k) - before, 1, "{k} read twice by rank {rank}");
            }
        }
        let stats = ds.last_pass().unwrap();
        assert_eq!((stats.rank, stats.world_size), (rank, world));
        dropped.push(stats.dropped_samples);
        let report = ds.describe(1).unwrap().config;
        assert_eq!(report.dropped_samples[0], ("train".to_string(), stats.dropped_samples));
        assert_eq!(report.rank_samples[0].1, seen.iter().map(|s| s.1.len() as u64).sum::<u64>());
    }
    assert!(lens.iter().all(|&n| n == lens[0]), "unequal batch counts {lens:?}");
    assert!(dropped.iter().all(|&d| d == dropped[0]));
    // 5 units of 8 samples over 3 ranks: 2/2/1 units, so 8 samples per rank and 16 dropped.
    assert_eq!((all.len() as u64, dropped[0]), (24, 16));
}

#[test]
fn a_resumed_pass_yields_the_rest_of_the_epoch_bit_for_bit() {
    for (world, rank) in [(1, 0), (2, 1)] {
        let (sim, _, ds) = ranked(rank, world);
        ds.set_epoch(3);
        let (whole, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
        let (sim, _, ds) = ranked(rank, world);
        ds.set_epoch(3);
        let (head, cp) = drain(&sim, ds.iter(Split::Train).unwrap(), Some(2));
        assert_eq!(head[..], whole[..2]);
        assert_eq!((cp.position, cp.batches, cp.world_size), (6, 2, world));
        // A fresh process (a new dataset at epoch 0) loads the checkpoint.
        let (sim, _, ds) = ranked(rank, world);
        let cp = crate::Checkpoint::from_json(&cp.to_json()).unwrap();
        let (tail, end) = drain(&sim, ds.resume(&cp).unwrap(), None);
        assert_eq!(tail[..], whole[2..], "world {world}: resumed batches differ");
        assert_eq!(ds.epoch(), 3);
        assert_eq!(ds.last_pass().unwrap().resumed_at, 6);
        assert_eq!(end.position, whole.iter().map(|s| s.1.len() as u64).sum::<u64>());
    }
}

#[test]
fn an_elastic_resume_serves_the_rest_once_across_the_new_ranks() {
    let mut served = std::collections::BTreeSet::new();
    let mut cp = None;
    for rank in 0..2 {
        let (sim, _, ds) = ranked(rank, 2);
        let (head, c) = drain(&sim, ds.iter(Split::Train).unwrap(), Some(1));
        served.extend(head.iter().flat_map(|s| s.1.clone()));
        cp = Some(c);
    }
    let cp = cp.unwrap();
    let mut dropped = 0;
    for rank in 0..3 {
        let (sim, _, ds) = ranked(rank, 3);
        let (tail, end) = drain(&sim, ds.resume(&cp).unwrap(), None);
        for i in tail.iter().flat_map(|s| s.1.clone()) {
            assert!(served.insert(i), "sample {i} served twice");
        }
        assert_eq!(end.history, vec![crate::Cut { world_size: 2, position: 3 }]);
        dropped = ds.last_pass().unwrap().dropped_samples;
    }
    let (_, _, ds) = ranked(0, 2);
    assert_eq!(served.len() as u64 + dropped + ds.dropped_samples(Split::Train, 0), 40);
}

#[test]
fn a_rank_outside_the_world_is_refused() {
    let (sim, storage, runtime) = store();
    let opts = DatasetOptions { knobs: Knobs { rank: 2, world_size: 2, ..Default::default() }, ..Default::default() };
    let st = shared(&storage);
    let t2m = sim.run(async move { open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
    let err = Dataset::builder(shared(&storage), runtime).opened(vec![t2m]).options(opts).build().unwrap_err();
    assert_eq!(err.option_name(), Some("rank"), "{err}");
    assert!(err.to_string().contains("rank=2 world_size=2"), "{err}");
}

#[test]
fn knobs_are_the_plain_data_of_the_options_and_read_as_serde_data() {
    use crate::dataset::Knobs;
    use crate::retry::OnBadChunk;
    // The knobs' defaults are the options' defaults.
    assert_eq!(DatasetOptions::default().knobs, Knobs::default());
    let k = Knobs {
        batch_size: 7,
        first_block_chunks: Some(2),
        cache_budget_bytes: Some(1 << 20),
        on_bad_chunk: OnBadChunk::Nan,
        rank: 1,
        world_size: 3,
        coords: true,
        ..Knobs::default()
    };
    assert_eq!(DatasetOptions::from(k).knobs, k);
}
