//! Engine simulations: real arrays in a controllable store, a virtual clock, and an inline
//! thread pool. A hang is a deadlock report from the simulator, not a timeout.

use crate::Knobs;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use crate::dataset::{Dataset, DatasetOptions, Variable};
use crate::error::Error;
use crate::retry::OnBadChunk;
use crate::runtime::{InlinePool, Runtime};
use crate::shuffle::Split;
use crate::split::{SplitOptions, split_by_chunk};
use crate::testing::{Fault, MemoryStorage, SimError, SimExecutor, write_f32_array};
use crate::transform::{BatchTransform, everywhere};
use crate::zarr::open_array;
use crate::{Batch, NdArray};
// On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
// takes the place of libtest's `#[test]`.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(3600);

/// Element value encoding its physical index: distinct everywhere, exact in f32.
fn value_at(shape: &[u64]) -> impl Fn(u64) -> f32 + use<> {
    let _ = shape;
    move |i| (i % 16_000_000) as f32
}

struct Fixture {
    sim: SimExecutor,
    storage: MemoryStorage,
    runtime: Runtime,
}

impl Fixture {
    fn new(latency: Option<Duration>) -> Self {
        let sim = SimExecutor::new();
        let exec: Arc<dyn crate::Executor> = Arc::new(sim.clone());
        let storage = match latency {
            Some(l) => MemoryStorage::new().with_latency(exec.clone(), l),
            None => MemoryStorage::new(),
        };
        Self { sim, storage, runtime: Runtime::new(exec, Arc::new(InlinePool)) }
    }

    fn array(&self, path: &str, shape: &[u64], chunks: &[u64], inner: Option<&[u64]>) {
        write_f32_array(&self.storage, path, shape, chunks, inner, None, value_at(shape));
    }

    fn dataset(
        &self,
        labels: &[(&str, &str, i64)],
        sample_axis: usize,
        fractions: (f64, f64, f64),
        opts: DatasetOptions,
    ) -> crate::Result<Dataset> {
        let storage: Arc<dyn crate::Storage> = Arc::new(self.storage.clone());
        let st = storage.clone();
        let paths: Vec<String> = labels.iter().map(|l| l.1.to_string()).collect();
        let arrays = self
            .sim
            .run(
                async move {
                    let mut out = Vec::new();
                    for p in paths {
                        out.push(open_array(st.as_ref(), &p).await?);
                    }
                    Ok::<_, Error>(out)
                },
                LIMIT,
            )
            .expect("open finishes")?;
        let mut vars = Vec::new();
        for (label, path, offset) in labels {
            let a = arrays.iter().find(|a| a.path() == *path).unwrap();
            vars.push(Variable { label: (*label).into(), geometry: a.geometry(sample_axis)?.shift(*offset) });
        }
        let manifest = split_by_chunk(&vars[0].geometry, &SplitOptions { fractions, ..Default::default() })?;
        Dataset::builder(storage, self.runtime.clone())
            .opened(arrays)
            .variables(vars)
            .manifest(manifest)
            .options(opts)
            .build()
    }

    /// A dataset over array `t2m` (sample axis 0, all of it train), shaped further by `more`
    /// (transforms, ...) before it is built.
    fn custom(
        &self,
        opts: DatasetOptions,
        more: impl FnOnce(crate::dataset::DatasetBuilder) -> crate::dataset::DatasetBuilder,
    ) -> Dataset {
        let storage: Arc<dyn crate::Storage> = Arc::new(self.storage.clone());
        let st = storage.clone();
        let a = self.sim.run(async move { open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
        let g = a.geometry(0).unwrap();
        let manifest = split_by_chunk(&g, &SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() }).unwrap();
        let builder = Dataset::builder(storage, self.runtime.clone())
            .opened(vec![a])
            .variables(vec![Variable { label: "t2m".into(), geometry: g }])
            .manifest(manifest)
            .options(opts);
        more(builder).build().unwrap()
    }

    /// Collect one pass, or the first error.
    fn epoch(&self, ds: &Dataset, split: Split) -> Result<crate::Result<Vec<Batch>>, SimError> {
        let ds = ds.clone();
        self.sim.run(
            async move {
                let mut s = ds.iter(split)?;
                let mut out = Vec::new();
                while let Some(b) = s.next_batch().await {
                    out.push(b?);
                }
                Ok(out)
            },
            LIMIT,
        )
    }
}

/// The expected row of `label` for sample `s` (physical value formula, sample-first).
fn expected_row(shape: &[u64], sample_axis: usize, s: u64) -> Vec<f32> {
    let n: u64 = (0..shape.len()).filter(|&a| a != sample_axis).map(|a| shape[a]).product();
    (0..n).map(|e| (crate::geometry::sample_element_index(shape, sample_axis, s, e) % 16_000_000) as f32).collect()
}

fn rows(a: &NdArray) -> Vec<Vec<f32>> {
    let row = a.row_bytes() / 4;
    a.as_slice::<f32>().unwrap().chunks(row.max(1)).map(<[f32]>::to_vec).collect()
}

fn check_epoch(
    batches: &[Batch],
    shape: &[u64],
    sample_axis: usize,
    labels: &[(&str, i64)],
    expect: &[u64],
    bs: usize,
) {
    let mut seen: Vec<u64> = batches.iter().flat_map(|b| b.sample_indices.iter().copied()).collect();
    for (i, b) in batches.iter().enumerate() {
        if i + 1 < batches.len() {
            assert_eq!(b.len(), bs, "only the last batch may be short");
        }
        for (label, off) in labels {
            for (r, row) in rows(&b.arrays[*label]).iter().enumerate() {
                let s = (b.sample_indices[r] as i64 + off) as u64;
                assert_eq!(row, &expected_row(shape, sample_axis, s), "label {label} sample {s}");
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, expect, "every drawable sample exactly once");
}

#[test]
fn epoch_covers_values_and_is_deterministic() {
    let f = Fixture::new(Some(Duration::from_millis(5)));
    let shape = [77u64, 6, 7];
    f.array("t2m", &shape, &[8, 3, 4], None);
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 10, block_chunks: 2, max_inflight: 3, seed: 9, ..Default::default() },
        ..Default::default()
    };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let e0 = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&e0, &shape, 0, &[("t2m", 0)], &(0..77).collect::<Vec<_>>(), 10);
    let again = f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert_eq!(
        e0.iter().map(|b| b.sample_indices.clone()).collect::<Vec<_>>(),
        again.iter().map(|b| b.sample_indices.clone()).collect::<Vec<_>>()
    );
    ds.set_epoch(1);
    let e1 = f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert_ne!(e0[0].sample_indices, e1[0].sample_indices, "another epoch, another order");
    let st = ds.last_pass().unwrap();
    assert_eq!(st.batches, 8);
    assert!(st.depths.inflight_peak <= 3 && st.depths.inflight_peak >= 1, "{:?}", st.depths);
    assert!(st.ttfb_s.unwrap() < st.wall_s);
    // The derived figures every binding shows are the engine's, from its own counts.
    let (d, t) = (&st.depths, &st.times);
    assert!(d.queue_samples > 0 && d.queue_empty > 0, "{d:?}");
    assert_eq!(d.starved_frac, d.queue_empty as f64 / d.queue_samples as f64);
    assert_eq!(d.fed_frac, d.queue_full_enough as f64 / d.queue_samples as f64);
    let producer = t.fetch_wait_s + t.admission_parked_s + t.decode_s + t.assemble_s + t.gather_s + t.batch_transform_s;
    assert!(t.fetch_wait_s > 0.0 && t.producer_s == producer, "{t:?}");
    // A pass closed before its first batch has no time to first batch, and no shares.
    let d = ds.clone();
    f.sim.run(async move { drop(d.iter(Split::Train).unwrap()) }, LIMIT).unwrap();
    let none = ds.last_pass().unwrap();
    assert_eq!((none.batches, none.ttfb_s), (0, None));
    assert_eq!((none.depths.starved_frac, none.depths.fed_frac), (0.0, 0.0));
}

/// The read window (crate::window) in the engine: batches stay exact whether it is narrow
/// or wide, and the pass reports it. In memory, reads take no time, so a local store's window
/// stays at its floor (one read per decode thread plus one); reads with latency and decodes
/// that take none on the virtual clock open a remote store's window to `max_inflight`, and
/// its reads overlap. (The window's sizing, priority order and cancellation are unit-tested
/// in crate::window.)
#[test]
fn the_read_window_keeps_batches_exact_narrow_or_wide_and_is_reported() {
    let shape = [96u64, 6, 7];
    for (latency, window) in [(None, 2), (Some(Duration::from_millis(5)), 8)] {
        let f = Fixture::new(latency);
        f.array("t2m", &shape, &[4, 3, 4], None);
        let opts = DatasetOptions {
            knobs: Knobs { batch_size: 8, block_chunks: 4, max_inflight: 8, ..Default::default() },
            ..Default::default()
        };
        let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
        let e = f.epoch(&ds, Split::Train).unwrap().unwrap();
        check_epoch(&e, &shape, 0, &[("t2m", 0)], &(0..96).collect::<Vec<_>>(), 8);
        let d = ds.last_pass().unwrap().depths;
        assert_eq!((d.decode_threads, d.read_window), (1, window), "{d:?}");
        if latency.is_some() {
            assert!(d.inflight_peak > window / 2, "a remote store overlaps its reads: {d:?}");
        }
    }
}

#[test]
fn cold_epoch_reads_every_chunk_once_whatever_the_batch_size() {
    for bs in [1usize, 3, 8, 16, 64] {
        for shuffle in [true, false] {
            let f = Fixture::new(None);
            f.array("t2m", &[64, 5, 4], &[8, 5, 2], None);
            let opts = DatasetOptions {
                knobs: Knobs { batch_size: bs, block_chunks: 2, shuffle, ..Default::default() },
                ..Default::default()
            };
            let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
            let before = f.storage.total_reads();
            f.epoch(&ds, Split::Train).unwrap().unwrap();
            for c in 0..8 {
                for t in 0..2 {
                    assert_eq!(
                        f.storage.reads_of(&format!("t2m/c/{c}/0/{t}")),
                        1,
                        "bs {bs} shuffle {shuffle} chunk {c}/{t}"
                    );
                }
            }
            assert_eq!(f.storage.total_reads() - before, 16);
        }
    }
}

#[test]
fn windowed_pairs_are_exact_under_shuffle_and_read_once() {
    let f = Fixture::new(Some(Duration::from_millis(1)));
    let shape = [50u64, 3, 2];
    f.array("t2m", &shape, &[7, 3, 2], None);
    let opts =
        DatasetOptions { knobs: Knobs { batch_size: 6, block_chunks: 2, ..Default::default() }, ..Default::default() };
    let ds = f.dataset(&[("x", "t2m", 0), ("y", "t2m", 1), ("z", "t2m", -2)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&b, &shape, 0, &[("x", 0), ("y", 1), ("z", -2)], &(2..49).collect::<Vec<_>>(), 6);
    for c in 0..8 {
        assert_eq!(f.storage.reads_of(&format!("t2m/c/{c}/0/0")), 1, "chunk {c} read once with the automatic budget");
    }
    assert_eq!(b[0].read_indices("y")[0], b[0].sample_indices[0] as i64 + 1);
    let st = b[0].stack(&["x", "y"]).unwrap();
    assert_eq!(st.shape, vec![6, 2, 3, 2]);
}

#[test]
fn sample_axis_two_sharded_and_multi_spc() {
    let f = Fixture::new(None);
    let shape = [1u64, 2, 30, 5, 4];
    f.array("raw", &shape, &[1, 2, 10, 5, 4], Some(&[1, 1, 5, 5, 2]));
    let opts =
        DatasetOptions { knobs: Knobs { batch_size: 4, block_chunks: 1, ..Default::default() }, ..Default::default() };
    let ds = f.dataset(&[("raw", "raw", 0)], 2, (1.0, 0.0, 0.0), opts).unwrap();
    let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&b, &shape, 2, &[("raw", 0)], &(0..30).collect::<Vec<_>>(), 4);
    // Partial-shard reads: ranged index + inner chunk reads, never a whole shard.
    assert!(f.storage.reads_of("raw/c/0/0/0/0/0") > 1);

    let g = Fixture::new(None);
    g.array("a", &[48, 2, 2], &[8, 2, 2], None);
    g.array("b", &[48, 2, 2], &[4, 2, 2], None);
    g.array("c", &[48, 2, 2], &[16, 2, 2], None);
    let opts =
        DatasetOptions { knobs: Knobs { batch_size: 5, block_chunks: 2, ..Default::default() }, ..Default::default() };
    let ds = g.dataset(&[("a", "a", 0), ("b", "b", 0), ("c", "c", 3)], 0, (0.5, 0.25, 0.25), opts).unwrap();
    for split in [Split::Train, Split::Val, Split::Test, Split::All] {
        let b = g.epoch(&ds, split).unwrap().unwrap();
        let expect: Vec<u64> = ds.manifest().sample_indices(split).into_iter().filter(|&s| s + 3 < 48).collect();
        check_epoch(&b, &[48, 2, 2], 0, &[("a", 0), ("b", 0), ("c", 3)], &expect, 5);
    }
}

#[test]
fn early_break_then_next_epoch_and_two_live_iterations() {
    let f = Fixture::new(Some(Duration::from_millis(3)));
    f.array("t2m", &[96, 4, 4], &[4, 4, 4], None);
    let opts =
        DatasetOptions { knobs: Knobs { batch_size: 8, block_chunks: 2, ..Default::default() }, ..Default::default() };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (0.75, 0.25, 0.0), opts).unwrap();
    let d = ds.clone();
    f.sim
        .run(
            async move {
                let mut s = d.iter(Split::Train).unwrap();
                s.next_batch().await.unwrap().unwrap();
                drop(s);
                assert_eq!(d.live_iterations(), 0, "an early break releases everything at once");
                // zip(train, val) with an automatic budget.
                let mut t = d.iter(Split::Train).unwrap();
                let mut v = d.iter(Split::Val).unwrap();
                let (mut nt, mut nv) = (0, 0);
                loop {
                    let a = t.next_batch().await;
                    let b = v.next_batch().await;
                    nt += usize::from(a.is_some());
                    nv += usize::from(b.is_some());
                    if a.is_none() && b.is_none() {
                        break;
                    }
                }
                assert_eq!((nt, nv), (9, 3));
            },
            LIMIT,
        )
        .unwrap();
    let e = f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert_eq!(e.iter().map(Batch::len).sum::<usize>(), 72);
}

#[test]
fn budgets_below_the_floor_or_too_small_for_two_iterations_are_refused() {
    let f = Fixture::new(None);
    f.array("t2m", &[96, 4, 4], &[4, 4, 4], None);
    let chunk = 4 * 16 * 4;
    let err = f
        .dataset(
            &[("t2m", "t2m", 0)],
            0,
            (0.75, 0.25, 0.0),
            DatasetOptions {
                knobs: Knobs { batch_size: 8, block_chunks: 2, cache_budget_bytes: Some(chunk), ..Default::default() },
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("below this run's residency floor of 1024 bytes"), "{err}");
    let ds = f
        .dataset(
            &[("t2m", "t2m", 0)],
            0,
            (0.75, 0.25, 0.0),
            DatasetOptions {
                knobs: Knobs { batch_size: 8, block_chunks: 2, cache_budget_bytes: Some(1024), ..Default::default() },
                ..Default::default()
            },
        )
        .unwrap();
    f.epoch(&ds, Split::Train).unwrap().unwrap();
    let d = ds.clone();
    let msg = f
        .sim
        .run(
            async move {
                let _t = d.iter(Split::Train).unwrap();
                d.iter(Split::Val).unwrap_err().to_string()
            },
            LIMIT,
        )
        .unwrap();
    assert!(msg.contains("cache_budget_bytes >= 2048"), "{msg}");
}

#[test]
fn a_consumer_that_stops_does_not_hang_and_errors_name_the_key() {
    let f = Fixture::new(None);
    f.array("t2m", &[40, 2, 2], &[5, 2, 2], None);
    let ds = f
        .dataset(
            &[("t2m", "t2m", 0)],
            0,
            (1.0, 0.0, 0.0),
            DatasetOptions { knobs: Knobs { batch_size: 3, ..Default::default() }, ..Default::default() },
        )
        .unwrap();
    // Stop mid-epoch with batches queued: the simulation must still finish.
    let d = ds.clone();
    f.sim
        .run(
            async move {
                let mut s = d.iter(Split::Train).unwrap();
                let _ = s.next_batch().await;
            },
            LIMIT,
        )
        .unwrap();
    // Corrupt one chunk: raise names the key; nan fills and records it.
    f.storage.insert("t2m/c/3/0/0", vec![1u8, 2, 3, 4, 5]);
    // A fresh dataset (the first one may hold chunk 3 in its pool).
    let ds = f
        .dataset(
            &[("t2m", "t2m", 0)],
            0,
            (1.0, 0.0, 0.0),
            DatasetOptions { knobs: Knobs { batch_size: 3, ..Default::default() }, ..Default::default() },
        )
        .unwrap();
    let err = f.epoch(&ds, Split::Train).unwrap().unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
    assert!(err.to_string().ends_with("memory://t2m/c/3/0/0"), "{err}");
    assert_eq!(err.to_string().matches("on_bad_chunk").count(), 1, "the hint once: {err}");
    let mut opts = DatasetOptions { knobs: Knobs { batch_size: 3, ..Default::default() }, ..Default::default() };
    opts.knobs.on_bad_chunk = OnBadChunk::Nan;
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
    let nan_rows: usize =
        b.iter().map(|b| rows(&b.arrays["t2m"]).iter().filter(|r| r.iter().all(|x| x.is_nan())).count()).sum();
    assert_eq!(nan_rows, 5);
    assert_eq!(ds.bad_chunks().len(), 1);
    assert_eq!(ds.last_pass().unwrap().bad_chunks, 1, "the pass stats count the filled chunk");
}

/// A filled tile is reported where it is: its physical coordinate, and its inner coordinate
/// (the physical one without the sample axis), which the bindings show as they are.
#[test]
fn a_bad_tile_is_reported_with_its_physical_and_inner_coordinates() {
    let f = Fixture::new(None);
    f.array("x", &[4, 12, 6], &[2, 4, 3], None);
    f.storage.insert("x/c/1/2/1", vec![1u8, 2, 3]);
    let mut opts = DatasetOptions { knobs: Knobs { batch_size: 4, ..Default::default() }, ..Default::default() };
    opts.knobs.on_bad_chunk = OnBadChunk::Nan;
    let ds = f.dataset(&[("x", "x", 0)], 1, (1.0, 0.0, 0.0), opts).unwrap();
    f.epoch(&ds, Split::Train).unwrap().unwrap();
    let bad = ds.bad_chunks();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!((bad[0].chunk_index, &bad[0].tile[..], &bad[0].inner_coord[..]), (2, &[1, 2, 1][..], &[1, 1][..]));
}

#[test]
fn transient_failures_are_retried_and_permanent_ones_reported() {
    let f = Fixture::new(None);
    f.array("t2m", &[16, 2, 2], &[4, 2, 2], None);
    f.storage.set_fault("t2m/c/1/0/0", Fault::TransientFailures(2));
    let ds = f
        .dataset(
            &[("t2m", "t2m", 0)],
            0,
            (1.0, 0.0, 0.0),
            DatasetOptions { knobs: Knobs { batch_size: 4, ..Default::default() }, ..Default::default() },
        )
        .unwrap();
    let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&b, &[16, 2, 2], 0, &[("t2m", 0)], &(0..16).collect::<Vec<_>>(), 4);
    assert_eq!(f.storage.reads_of("t2m/c/1/0/0"), 3);
    f.storage.set_fault("t2m/c/2/0/0", Fault::Permanent("access denied".into()));
    ds.set_epoch(1);
    // Evict by making a new dataset (fresh pool) so the chunk is fetched again.
    let ds = f
        .dataset(
            &[("t2m", "t2m", 0)],
            0,
            (1.0, 0.0, 0.0),
            DatasetOptions { knobs: Knobs { batch_size: 4, ..Default::default() }, ..Default::default() },
        )
        .unwrap();
    let err = f.epoch(&ds, Split::Train).unwrap().unwrap_err();
    assert!(err.to_string().contains("access denied") && err.to_string().ends_with("t2m/c/2/0/0"), "{err}");
}

/// The metadata reads at open follow the read policy like chunk reads (`PolicyStorage`):
/// transient failures are retried, too many of them or a permanent one fail the open naming
/// the key, with the number of attempts.
#[test]
fn metadata_reads_at_open_are_retried_under_the_read_policy() {
    let f = Fixture::new(None);
    f.array("t2m", &[16, 2, 2], &[4, 2, 2], None);
    let open = |retries: u32| {
        let storage: Arc<dyn crate::Storage> = Arc::new(f.storage.clone());
        let read_policy = crate::ReadPolicy { retries, ..Default::default() };
        let builder = Dataset::builder(storage, f.runtime.clone())
            .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() })
            .options(DatasetOptions {
                knobs: Knobs { batch_size: 4, ..Default::default() },
                read_policy,
                ..Default::default()
            });
        f.sim.run(builder.open(), LIMIT).expect("open finishes")
    };
    f.storage.set_fault("t2m/zarr.json", Fault::TransientFailures(2));
    let ds = open(2).expect("two transient failures are within two retries");
    assert_eq!(f.storage.reads_of("t2m/zarr.json"), 3);
    check_epoch(
        &f.epoch(&ds, Split::Train).unwrap().unwrap(),
        &[16, 2, 2],
        0,
        &[("t2m", 0)],
        &(0..16).collect::<Vec<_>>(),
        4,
    );

    f.storage.set_fault("t2m/zarr.json", Fault::TransientFailures(3));
    let err = open(1).expect_err("three transient failures are past one retry").to_string();
    assert!(err.contains("gave up after 2 attempts") && err.ends_with("t2m/zarr.json"), "{err}");

    f.storage.set_fault("t2m/zarr.json", Fault::Permanent("access denied".into()));
    let before = f.storage.reads_of("t2m/zarr.json");
    let err = open(4).expect_err("a permanent failure fails the open").to_string();
    assert!(err.contains("access denied") && err.ends_with("t2m/zarr.json"), "{err}");
    assert_eq!(f.storage.reads_of("t2m/zarr.json"), before + 1, "a permanent failure is not retried");
}

#[test]
fn warm_epoch_reads_nothing_when_the_budget_holds_the_split() {
    let f = Fixture::new(None);
    f.array("t2m", &[32, 2, 2], &[4, 2, 2], None);
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 4, block_chunks: 1, cache_budget_bytes: Some(1 << 20), ..Default::default() },
        ..Default::default()
    };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    f.epoch(&ds, Split::Train).unwrap().unwrap();
    let cold = f.storage.total_reads();
    ds.set_epoch(1);
    f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert_eq!(f.storage.total_reads(), cold, "warm epoch served from the pool");
    assert_eq!(ds.last_pass().unwrap().cache_hits, 8);
}

#[derive(Debug)]
struct Slow;
impl BatchTransform for Slow {
    fn name(&self) -> String {
        "slow".into()
    }
    fn apply(&self, b: Batch) -> crate::Result<Batch> {
        Ok(b)
    }
}

#[test]
fn chunk_and_batch_transforms_run_and_describe_names_them() {
    let f = Fixture::new(None);
    f.array("t2m", &[16, 4, 4], &[4, 4, 4], None);
    let ds = f.custom(
        DatasetOptions { knobs: Knobs { batch_size: 4, shuffle: false, ..Default::default() }, ..Default::default() },
        |b| {
            b.chunk_transforms(vec![everywhere(Arc::new(crate::transform::Coarsen { factor: 2 }))])
                .batch_transforms(vec![Arc::new(Slow)])
        },
    );
    let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert_eq!(b[0].arrays["t2m"].shape, vec![4, 2, 2]);
    let row = expected_row(&[16, 4, 4], 0, 0);
    let want = (row[0] + row[1] + row[4] + row[5]) / 4.0;
    assert_eq!(rows(&b[0].arrays["t2m"])[0][0], want);
    let r = ds.describe(1).unwrap();
    assert_eq!(r.config.chunk_transforms, vec!["coarsen2".to_string()]);
    assert_eq!(r.config.batch_transforms, vec!["slow".to_string()]);
    assert_eq!(r.variables[0].output_inner_shape, vec![2, 2]);
    // What the batches hold, from the same geometry: one 4x2x2 tile per chunk of 4 samples.
    let v = &r.variables[0];
    assert_eq!(
        (&v.output_shape[..], &v.output_chunks[..], v.logical_chunk_bytes),
        (&[16, 2, 2][..], &[4, 2, 2][..], 64)
    );
    let out = ds.output_geometries().unwrap();
    assert_eq!((out[0].0.as_str(), &out[0].1.shape, &out[0].1.tile), ("t2m", &v.output_shape, &v.output_chunks));
    assert_eq!(out[0].1.dtype, ds.variables()[0].geometry.dtype);
    assert!(ds.describe(0).is_err());
    let _ = BTreeMap::<u8, u8>::new();
}

/// Declares a 3x3 output and returns its input unchanged.
#[derive(Debug)]
struct DeclaresWrongShape;
impl crate::transform::ChunkTransform for DeclaresWrongShape {
    fn name(&self) -> String {
        "declares_wrong_shape".into()
    }
    fn apply(&self, chunk: crate::transform::DecodedChunk) -> crate::Result<crate::transform::DecodedChunk> {
        Ok(chunk)
    }
    fn output(
        &self,
        _geom: &crate::ArrayGeometry,
        dtype: crate::DType,
        _inner: &[usize],
    ) -> crate::Result<(crate::DType, Vec<usize>)> {
        Ok((dtype, vec![3, 3]))
    }
}

#[test]
fn a_wrong_declared_output_fails_the_pass_naming_the_transform_and_both_shapes() {
    let f = Fixture::new(None);
    f.array("t2m", &[16, 4, 4], &[4, 4, 4], None);
    let storage: Arc<dyn crate::Storage> = Arc::new(f.storage.clone());
    let st = storage.clone();
    let a = f.sim.run(async move { open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
    let g = a.geometry(0).unwrap();
    let manifest = split_by_chunk(&g, &SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() }).unwrap();
    // An honest reshaping transform first: the check follows the declarations step by step,
    // so the liar after it is the one named.
    let ds = Dataset::builder(storage, f.runtime.clone())
        .opened(vec![a])
        .variables(vec![Variable { label: "t2m".into(), geometry: g }])
        .manifest(manifest)
        .options(DatasetOptions {
            knobs: Knobs { batch_size: 4, shuffle: false, ..Default::default() },
            ..Default::default()
        })
        .chunk_transforms(vec![
            everywhere(Arc::new(crate::transform::Coarsen { factor: 2 })),
            everywhere(Arc::new(DeclaresWrongShape)),
        ])
        .build()
        .unwrap();
    assert_eq!(ds.describe(1).unwrap().variables[0].output_inner_shape, vec![3, 3], "what the last one declared");
    match f.epoch(&ds, Split::Train).unwrap() {
        Err(Error::Transform { name, message }) => {
            assert_eq!(name, "declares_wrong_shape");
            assert!(message.contains("returned float32 [4, 2, 2] but declared float32 [4, 3, 3]"), "{message}");
            assert!(message.ends_with("chunk 0 of array \"t2m\""), "{message}");
        }
        other => panic!("expected the declared-vs-actual check to fail the pass, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, .. ProptestConfig::default() })]
    #[test]
    fn any_geometry_every_sample_once_values_exact_deterministic(
        n in 1u64..50,
        spc in 1u64..9,
        inner in proptest::collection::vec((1u64..5, 1u64..4), 1..3),
        axis_pick in 0usize..3,
        bs in 1usize..13,
        block in 1usize..5,
        offsets in proptest::sample::subsequence(vec![-3i64, -1, 1, 2, 9], 0..3),
        shuffle in any::<bool>(),
        sharded in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let sample_axis = axis_pick % (inner.len() + 1);
        let mut shape: Vec<u64> = inner.iter().map(|(d, _)| *d).collect();
        let mut chunks: Vec<u64> = inner.iter().map(|(d, t)| (*t).min(*d)).collect();
        shape.insert(sample_axis, n);
        chunks.insert(sample_axis, spc);
        let f = Fixture::new(Some(Duration::from_millis(2)));
        let outer: Vec<u64>;
        if sharded {
            outer = chunks.iter().enumerate().map(|(a, c)| if a == sample_axis { c * 2 } else { *c * 2 }).collect();
            f.array("v", &shape, &outer, Some(&chunks));
        } else {
            f.array("v", &shape, &chunks, None);
        }
        let mut labels: Vec<(String, i64)> = vec![("v0".into(), 0)];
        for o in &offsets { labels.push((format!("v{o}"), *o)); }
        let lrefs: Vec<(&str, &str, i64)> = labels.iter().map(|(l, o)| (l.as_str(), "v", *o)).collect();
        let opts = DatasetOptions { knobs: Knobs { batch_size: bs, block_chunks: block, shuffle, seed, max_inflight: 2, ..Default::default() }, ..Default::default() };
        let ds = f.dataset(&lrefs, sample_axis, (1.0, 0.0, 0.0), opts).unwrap();
        let lo = offsets.iter().copied().min().unwrap_or(0).min(0).unsigned_abs();
        let hi = (n as i64 - offsets.iter().copied().max().unwrap_or(0).max(0)).max(0) as u64;
        let expect: Vec<u64> = (lo..hi.max(lo)).collect();
        let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
        let lab: Vec<(&str, i64)> = labels.iter().map(|(l, o)| (l.as_str(), *o)).collect();
        check_epoch(&b, &shape, sample_axis, &lab, &expect, bs);
        let again = f.epoch(&ds, Split::Train).unwrap().unwrap();
        prop_assert_eq!(
            b.iter().map(|x| x.sample_indices.clone()).collect::<Vec<_>>(),
            again.iter().map(|x| x.sample_indices.clone()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn describe_reads_nothing_and_matches_the_engine_floor() {
    let f = Fixture::new(None);
    f.array("t2m", &[64, 6, 6], &[8, 3, 6], None);
    let ds = f
        .dataset(
            &[("x", "t2m", 0), ("y", "t2m", 1)],
            0,
            (0.75, 0.25, 0.0),
            DatasetOptions {
                knobs: Knobs { batch_size: 8, block_chunks: 1, ..Default::default() },
                ..Default::default()
            },
        )
        .unwrap();
    let before = f.storage.total_reads();
    let r = ds.describe(2).unwrap();
    assert_eq!(f.storage.total_reads(), before, "describe() touches no storage");
    assert_eq!(r.config.block_chunks, 2, "widened: the windowed last chunk holds 7 anchors");
    assert!(r.config.windowed);
    // Two labels on one path: one array, decoded once; two keys per reference chunk.
    assert_eq!(r.memory.floor_bytes, 2 * 2 * 2 * 8 * 36 * 4);
    assert!(r.memory.residency_bytes >= 2 * r.memory.floor_bytes);
    assert!(r.memory.estimated_peak_bytes > r.memory.accounted_bytes);
    assert!(r.render().contains("estimated peak"));
    let st = f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert!(!st.is_empty());
    let pass = ds.last_pass().unwrap();
    assert!(pass.depths.resident_peak_bytes <= r.memory.residency_bytes);
}

#[test]
fn unequal_sample_lengths_and_bad_knobs_are_refused() {
    let f = Fixture::new(None);
    f.array("a", &[40, 2, 2], &[8, 2, 2], None);
    f.array("b", &[41, 2, 2], &[8, 2, 2], None);
    let err = f.dataset(&[("a", "a", 0), ("b", "b", 0)], 0, (1.0, 0.0, 0.0), DatasetOptions::default()).unwrap_err();
    assert!(err.to_string().contains("same sample-axis length"), "{err}");
    let err = f
        .dataset(
            &[("a", "a", 0)],
            0,
            (1.0, 0.0, 0.0),
            DatasetOptions { knobs: Knobs { batch_size: 0, ..Default::default() }, ..Default::default() },
        )
        .unwrap_err();
    assert_eq!(err.option_name(), Some("batch_size"), "{err}");
    let err = f.dataset(&[("a", "a", 0), ("a", "a", 1)], 0, (1.0, 0.0, 0.0), DatasetOptions::default()).unwrap_err();
    assert!(err.to_string().contains("used twice"), "{err}");
    // An empty split yields nothing, repeatably, and leaves the others alone.
    let ds = f.dataset(&[("a", "a", 0)], 0, (1.0, 0.0, 0.0), DatasetOptions::default()).unwrap();
    assert!(f.epoch(&ds, Split::Val).unwrap().unwrap().is_empty());
    assert!(f.epoch(&ds, Split::Val).unwrap().unwrap().is_empty());
    assert_eq!(f.epoch(&ds, Split::Train).unwrap().unwrap().iter().map(Batch::len).sum::<usize>(), 40);
}

#[test]
fn two_passes_share_loads_and_one_abandons_midway() {
    let f = Fixture::new(Some(Duration::from_millis(7)));
    let shape = [64u64, 3, 3];
    f.array("t2m", &shape, &[4, 3, 3], None);
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 5, block_chunks: 2, max_inflight: 2, ..Default::default() },
        ..Default::default()
    };
    let ds = f.dataset(&[("x", "t2m", 0), ("y", "t2m", 2)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let d = ds.clone();
    let (full, partial) = f
        .sim
        .run(
            async move {
                // The same view twice at once: the second joins loads the first started.
                let mut a = d.iter(Split::Train).unwrap();
                let mut b = d.iter(Split::Train).unwrap();
                let mut full = Vec::new();
                let mut partial = 0;
                while let Some(x) = a.next_batch().await {
                    full.push(x.unwrap());
                    if partial < 3 {
                        b.next_batch().await.unwrap().unwrap();
                        partial += 1;
                        if partial == 3 {
                            // Abandon b while loads it shares with a are in flight.
                            drop(std::mem::replace(&mut b, d.iter(Split::Val).unwrap()));
                        }
                    }
                }
                (full, partial)
            },
            LIMIT,
        )
        .unwrap();
    assert_eq!(partial, 3);
    check_epoch(&full, &shape, 0, &[("x", 0), ("y", 2)], &(0..62).collect::<Vec<_>>(), 5);
    assert_eq!(ds.live_iterations(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, .. ProptestConfig::default() })]
    #[test]
    fn at_the_floor_budget_windows_still_give_exact_data(
        n in 8u64..60,
        spc in 1u64..6,
        bs in 1usize..9,
        block in 1usize..4,
        offset in 1i64..7,
        seed in 0u64..100,
    ) {
        let f = Fixture::new(Some(Duration::from_millis(1)));
        let shape = [n, 2, 3];
        f.array("v", &shape, &[spc, 1, 2], None); // 2x2 tiles: recycled slots must be fully overwritten
        let labels = [("x", "v", 0), ("y", "v", offset)];
        let opts = DatasetOptions { knobs: Knobs { batch_size: bs, block_chunks: block, seed, max_inflight: 3, ..Default::default() }, ..Default::default() };
        let auto = f.dataset(&labels, 0, (1.0, 0.0, 0.0), opts.clone()).unwrap();
        let floor = auto.describe(1).unwrap().memory.floor_bytes;
        let tight = f.dataset(&labels, 0, (1.0, 0.0, 0.0), DatasetOptions { knobs: Knobs { cache_budget_bytes: Some(floor), ..opts.knobs }, ..opts }).unwrap();
        let b = f.epoch(&tight, Split::Train).unwrap().unwrap();
        let hi = n.saturating_sub(offset as u64);
        check_epoch(&b, &shape, 0, &[("x", 0), ("y", offset)], &(0..hi).collect::<Vec<_>>(), bs);
        let st = tight.last_pass().unwrap();
        prop_assert!(st.depths.resident_peak_bytes <= floor, "{} > {}", st.depths.resident_peak_bytes, floor);
    }
}

#[test]
fn recycled_chunk_buffers_are_fully_overwritten() {
    // Chunks of 128 KiB (above the recycling threshold) in 2x2 tiles, at the floor budget,
    // over several epochs: every slot after the first few reuses an evicted chunk's buffer,
    // so a byte any tile failed to overwrite would show up as another chunk's value.
    let f = Fixture::new(None);
    let shape = [40u64, 64, 128];
    f.array("t", &shape, &[4, 32, 64], None);
    let opts =
        DatasetOptions { knobs: Knobs { batch_size: 4, block_chunks: 1, ..Default::default() }, ..Default::default() };
    let auto = f.dataset(&[("t", "t", 0)], 0, (1.0, 0.0, 0.0), opts.clone()).unwrap();
    let floor = auto.describe(1).unwrap().memory.floor_bytes;
    let ds = f
        .dataset(
            &[("t", "t", 0)],
            0,
            (1.0, 0.0, 0.0),
            DatasetOptions { knobs: Knobs { cache_budget_bytes: Some(floor), ..opts.knobs }, ..opts },
        )
        .unwrap();
    for epoch in 0..3 {
        ds.set_epoch(epoch);
        let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
        check_epoch(&b, &shape, 0, &[("t", 0)], &(0..40).collect::<Vec<_>>(), 4);
    }
    assert!(ds.pool_counters().evictions > 10, "{:?}", ds.pool_counters());
}

static PREFAULTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_prefault(buf: &mut crate::array::AlignedBytes) {
    assert!(buf.is_empty() && buf.capacity() >= 1 << 16, "a fresh large buffer");
    PREFAULTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn fresh_large_buffers_go_through_the_runtimes_prefault_and_batches_stay_exact() {
    let mut f = Fixture::new(None);
    f.runtime = f.runtime.clone().with_prefault(count_prefault);
    let shape = [40u64, 64, 128];
    f.array("t", &shape, &[4, 64, 128], None);
    let opts =
        DatasetOptions { knobs: Knobs { batch_size: 4, block_chunks: 1, ..Default::default() }, ..Default::default() };
    let ds = f.dataset(&[("t", "t", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    for epoch in 0..2 {
        ds.set_epoch(epoch);
        let b = f.epoch(&ds, Split::Train).unwrap().unwrap();
        check_epoch(&b, &shape, 0, &[("t", 0)], &(0..40).collect::<Vec<_>>(), 4);
    }
    assert!(PREFAULTED.load(std::sync::atomic::Ordering::SeqCst) > 0, "chunk slots and batches are fresh at first");
}

#[test]
fn a_persisting_tier_serves_later_epochs_with_no_reads_and_the_same_batches() {
    // Blocking (a native cache_dir) and asynchronous (the browser's), the same contract.
    for asynchronous in [false, true] {
        persisting_tier_epochs(asynchronous);
    }
}

fn persisting_tier_epochs(asynchronous: bool) {
    let f = Fixture::new(Some(Duration::from_millis(2)));
    let shape = [40u64, 3, 4];
    f.array("t2m", &shape, &[8, 3, 2], None);
    let tier = crate::testing::MemoryTier::persisting();
    tier.set_asynchronous(asynchronous);
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 6, block_chunks: 2, ..Default::default() },
        tier: Some(Arc::new(tier.clone())),
        ..Default::default()
    };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let ids = tier.opened_with();
    assert_eq!(ids.len(), 1);
    assert_eq!((ids[0].path.as_str(), ids[0].fingerprint.len()), ("t2m", 16));
    let cold = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&cold, &shape, 0, &[("t2m", 0)], &(0..40).collect::<Vec<_>>(), 6);
    assert_eq!(tier.counters().stored, 5, "each chunk stored once");
    tier.set_readonly(true); // any miss from here on fails the pass
    // A new dataset (a new process, as far as the pool knows) revives every chunk.
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 6, block_chunks: 2, ..Default::default() },
        tier: Some(Arc::new(tier.clone())),
        ..Default::default()
    };
    let fresh = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let reads = f.storage.total_reads();
    let warm = f.epoch(&fresh, Split::Train).unwrap().unwrap();
    assert_eq!(f.storage.total_reads(), reads, "a revived epoch read the store");
    let rows_of =
        |bs: &[Batch]| bs.iter().map(|b| (b.sample_indices.clone(), rows(&b.arrays["t2m"]))).collect::<Vec<_>>();
    assert_eq!(rows_of(&warm), rows_of(&cold));
    assert_eq!(fresh.last_pass().unwrap().revived_chunks, 5);
}

#[test]
fn tier_failures_end_the_pass_with_the_tiers_message_never_a_hang() {
    for (fail_store, asynchronous) in [(true, false), (false, false), (true, true), (false, true)] {
        let f = Fixture::new(Some(Duration::from_millis(1)));
        f.array("t2m", &[32, 2, 2], &[4, 2, 2], None);
        let tier = crate::testing::MemoryTier::persisting();
        tier.set_asynchronous(asynchronous);
        if fail_store {
            tier.set_fail_store(true);
        } else {
            tier.set_readonly(true);
        }
        let opts = DatasetOptions {
            knobs: Knobs { batch_size: 4, block_chunks: 2, max_inflight: 2, ..Default::default() },
            tier: Some(Arc::new(tier.clone())),
            ..Default::default()
        };
        let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
        let err = f.epoch(&ds, Split::Train).expect("no deadlock").unwrap_err().to_string();
        let want = if fail_store { "disk full" } else { "readonly miss" };
        assert!(err.contains(want), "{err}");
        // The next epoch starts cleanly and fails the same way (nothing stranded).
        let again = f.epoch(&ds, Split::Train).expect("no deadlock").unwrap_err().to_string();
        assert!(again.contains(want), "{again}");
    }
}

#[test]
fn queued_counts_the_batches_waiting_for_the_caller_up_to_prefetch_depth() {
    let f = Fixture::new(Some(Duration::from_millis(1)));
    f.array("t2m", &[64, 2, 2], &[4, 2, 2], None);
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 4, block_chunks: 2, prefetch_depth: 3, ..Default::default() },
        ..Default::default()
    };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let exec = Arc::clone(&f.runtime.executor);
    let (before, waited, after_take) = f
        .sim
        .run(
            async move {
                let mut s = ds.iter(Split::Train)?;
                let before = s.queued();
                exec.sleep(Duration::from_secs(5)).await;
                let waited = s.queued();
                assert_eq!(s.stats().depths.queue_now, waited, "the live stats carry the queue depth");
                s.next_batch().await.expect("a batch")?;
                Ok::<_, Error>((before, waited, s.queued()))
            },
            LIMIT,
        )
        .unwrap()
        .unwrap();
    assert_eq!((before, waited), (0, 3), "a stalled caller finds prefetch_depth batches waiting");
    assert!(after_take <= 3);
}

/// Counts the batches gathered (a batch transform runs once per gathered batch).
#[derive(Debug, Default)]
struct CountGathers(std::sync::atomic::AtomicUsize);

impl BatchTransform for CountGathers {
    fn name(&self) -> String {
        "count".into()
    }
    fn apply(&self, b: Batch) -> crate::Result<Batch> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(b)
    }
}

#[test]
fn a_stalled_caller_leaves_at_most_the_described_batches_in_memory() {
    let f = Fixture::new(Some(Duration::from_millis(1)));
    f.array("t2m", &[64, 2, 2], &[4, 2, 2], None);
    let count = Arc::new(CountGathers::default());
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 4, block_chunks: 2, prefetch_depth: 3, ..Default::default() },
        ..Default::default()
    };
    let ds = f.custom(opts, |b| b.batch_transforms(vec![Arc::clone(&count) as Arc<dyn BatchTransform>]));
    let exec = Arc::clone(&f.runtime.executor);
    let stalled = ds.clone();
    let gathered = f
        .sim
        .run(
            async move {
                let s = stalled.iter(Split::Train)?;
                exec.sleep(Duration::from_secs(5)).await;
                drop(s);
                Ok::<_, Error>(count.0.load(std::sync::atomic::Ordering::SeqCst))
            },
            LIMIT,
        )
        .unwrap()
        .unwrap();
    // The queue (3) and one waiting to enter it; the caller holds none yet.
    assert_eq!(gathered, 4, "batches gathered ahead of a caller that takes none");
    let batch_bytes = (4 * 2 * 2 * 4) as u64;
    assert_eq!(
        ds.describe(1).unwrap().memory.queue_bytes,
        (gathered as u64 + 2) * batch_bytes,
        "describe counts them and the caller's two"
    );
}

/// The verdict of one epoch whose loop body does nothing, on the virtual clock, over store
/// reads of `latency`. (A CPU-bound batch transform needs pool threads that really run side
/// by side, which the inline simulation does not model: native/tests/verdict.rs has it.)
fn verdict_of(latency: Duration, block_chunks: usize) -> crate::stats::LimitingStage {
    let f = Fixture::new(Some(latency));
    f.array("t2m", &[64, 32, 32], &[4, 32, 32], None);
    let storage: Arc<dyn crate::Storage> = Arc::new(f.storage.clone());
    let builder = Dataset::builder(storage, f.runtime.clone())
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() })
        .options(DatasetOptions {
            knobs: Knobs { batch_size: 4, block_chunks, max_inflight: 8, ..Default::default() },
            ..Default::default()
        });
    let ds = f.sim.run(builder.open(), LIMIT).unwrap().unwrap();
    f.epoch(&ds, Split::Train).unwrap().unwrap();
    let stats = ds.last_pass().unwrap();
    assert!(stats.consumer_idle, "{}", stats.summary());
    stats.limiting_stage
}

#[test]
fn a_slow_store_is_blamed_on_the_store() {
    assert_eq!(verdict_of(Duration::from_millis(60), 2), crate::stats::LimitingStage::Store);
}

/// Inner chunks of one shard that the admitted chunks need are read together: one request
/// per run of neighbouring ranges (within `coalesce_gap_bytes`, up to `coalesce_max_bytes`),
/// sliced back into tiles, with batches exact. Counted at the store: with no gap allowed the
/// bytes fetched are exactly the inner chunks' (plus the shard indexes); with coalescing
/// off, every tile is a request of its own.
#[test]
fn inner_chunks_of_a_shard_are_read_by_few_requests_and_batches_stay_exact() {
    let shape = [64u64, 8, 8];
    let mut requests = Vec::new();
    for max in [0, 1 << 30] {
        let f = Fixture::new(Some(Duration::from_millis(5)));
        f.array("t2m", &shape, &[16, 8, 8], Some(&[4, 4, 4]));
        let shards: Vec<String> = (0..4).map(|s| format!("t2m/c/{s}/0/0")).collect();
        let index_bytes = 16 * 16 + 4;
        let data_bytes: u64 = shards.iter().map(|k| f.storage.object_len(k) - index_bytes).sum();
        let mut opts = DatasetOptions {
            knobs: Knobs { batch_size: 8, block_chunks: 4, ..Default::default() },
            ..Default::default()
        };
        opts.read_policy.coalesce_gap_bytes = 0;
        opts.read_policy.coalesce_max_bytes = max;
        let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
        let (reads0, bytes0) = (f.storage.total_reads(), f.storage.bytes_read());
        let e = f.epoch(&ds, Split::Train).unwrap().unwrap();
        check_epoch(&e, &shape, 0, &[("t2m", 0)], &(0..64).collect::<Vec<_>>(), 8);
        let st = ds.last_pass().unwrap();
        assert_eq!(f.storage.total_reads() - reads0, st.storage_reads + st.index_reads, "{}", st.summary());
        assert_eq!((st.index_reads, st.tiles_read, st.gap_bytes), (4, 64, 0));
        assert_eq!(st.bytes_fetched, data_bytes, "each inner chunk once, no gap read");
        assert_eq!(f.storage.bytes_read() - bytes0, data_bytes + 4 * index_bytes);
        requests.push(st.storage_reads);
    }
    assert_eq!(requests[0], 64, "coalescing off: one request per inner chunk");
    assert!(requests[1] <= 16, "at most one request per sample chunk (4 neighbouring inner chunks): {requests:?}");
}

/// A gap between two needed ranges is read when it is within `coalesce_gap_bytes`, and
/// counted as such; a request never grows past `coalesce_max_bytes`.
#[test]
fn gaps_within_the_limit_are_read_and_counted_and_requests_stay_under_the_cap() {
    let shape = [64u64, 8, 8];
    let f = Fixture::new(Some(Duration::from_millis(5)));
    f.array("t2m", &shape, &[16, 8, 8], Some(&[4, 4, 4]));
    let mut opts =
        DatasetOptions { knobs: Knobs { batch_size: 8, block_chunks: 1, ..Default::default() }, ..Default::default() };
    opts.read_policy.coalesce_gap_bytes = 1 << 20;
    opts.read_policy.coalesce_max_bytes = 1 << 30;
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let e = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&e, &shape, 0, &[("t2m", 0)], &(0..64).collect::<Vec<_>>(), 8);
    let st = ds.last_pass().unwrap();
    let needed = st.bytes_fetched - st.gap_bytes;
    assert!(st.storage_reads < 16, "{}", st.summary());
    assert!(st.tiles_read >= 64, "every tile delivered: {}", st.tiles_read);
    assert!(needed <= st.bytes_fetched);
}

/// A read much slower than the others gets a second request once enough answers are known;
/// the first answer wins, so the pass finishes long before the slow one would have answered
/// (on the virtual clock), with exact batches and the hedge counted. Without hedging the
/// pass waits for it.
#[test]
fn a_slow_read_is_hedged_and_the_pass_does_not_wait_for_it() {
    let shape = [96u64, 4, 4];
    let slow = Duration::from_secs(10);
    let mut walls = Vec::new();
    for hedge in [true, false] {
        let f = Fixture::new(Some(Duration::from_millis(10)));
        f.array("t2m", &shape, &[4, 4, 4], None);
        f.storage.set_fault("t2m/c/20/0/0", Fault::Slow { reads: 1, delay: slow });
        let mut opts = DatasetOptions {
            knobs: Knobs { batch_size: 8, block_chunks: 2, max_inflight: 4, shuffle: false, ..Default::default() },
            ..Default::default()
        };
        if !hedge {
            opts.read_policy.hedge = None;
        }
        let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
        let e = f.epoch(&ds, Split::Train).unwrap().unwrap();
        check_epoch(&e, &shape, 0, &[("t2m", 0)], &(0..96).collect::<Vec<_>>(), 8);
        let st = ds.last_pass().unwrap();
        let expect = if hedge { (1, 1, 2) } else { (0, 0, 1) };
        assert_eq!((st.hedged_reads, st.hedge_wins, f.storage.reads_of("t2m/c/20/0/0")), expect, "{}", st.summary());
        walls.push(st.wall_s);
    }
    assert!(walls[0] < 1.0 && walls[1] >= slow.as_secs_f64(), "virtual seconds, hedged vs not: {walls:?}");
}

/// Hedges are capped at their share of requests: a store where a quarter of the reads are
/// slow gets at most `max_share` of its requests hedged, and batches stay exact.
#[test]
fn hedges_stay_within_their_share_when_many_reads_are_slow() {
    let shape = [96u64, 4, 4];
    let f = Fixture::new(Some(Duration::from_millis(10)));
    f.array("t2m", &shape, &[4, 4, 4], None);
    for c in (8..24).step_by(4) {
        f.storage.set_fault(format!("t2m/c/{c}/0/0"), Fault::Slow { reads: 1, delay: Duration::from_secs(5) });
    }
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 8, block_chunks: 2, max_inflight: 4, shuffle: false, ..Default::default() },
        ..Default::default()
    };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let e = f.epoch(&ds, Split::Train).unwrap().unwrap();
    check_epoch(&e, &shape, 0, &[("t2m", 0)], &(0..96).collect::<Vec<_>>(), 8);
    let st = ds.last_pass().unwrap();
    let cap = ((st.storage_reads + st.hedged_reads) as f64 * 0.05).floor().max(1.0) as u64;
    assert!(st.hedged_reads >= 1 && st.hedged_reads <= cap, "{} hedges, cap {cap}: {}", st.hedged_reads, st.summary());
}

/// The probe on the virtual clock: a store that answers every read in 50 ms (no bandwidth
/// limit, decodes taking no time) predicts an epoch within a third of the real pass's time,
/// as limited by the store, and keeps nothing it read: the pass after it reads every chunk.
#[test]
fn the_probe_predicts_a_simulated_epoch_and_keeps_nothing_it_read() {
    let f = Fixture::new(Some(Duration::from_millis(50)));
    f.array("t2m", &[96, 4, 4], &[4, 4, 4], None);
    let opts = DatasetOptions {
        knobs: Knobs { batch_size: 8, block_chunks: 4, max_inflight: 8, ..Default::default() },
        ..Default::default()
    };
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let probing = ds.clone();
    let report = f.sim.run(async move { probing.probe(Split::Train, 4).await }, LIMIT).unwrap().unwrap();
    assert!((report.first_byte_s - 0.05).abs() < 1e-6, "{report:?}");
    assert_eq!(report.predicted.limiting_stage, crate::stats::LimitingStage::Store, "{}", report.render());
    let reads = f.storage.total_reads();
    f.epoch(&ds, Split::Train).unwrap().unwrap();
    assert_eq!(f.storage.total_reads() - reads, 24, "the pass read every chunk: the probe kept none");
    let real = ds.last_pass().unwrap().wall_s;
    let ratio = report.predicted.seconds / real;
    assert!(
        (1.0 / 1.3..=1.3).contains(&ratio),
        "predicted {:.3} s, real {real:.3} s: {}",
        report.predicted.seconds,
        report.render()
    );
}

/// A pass closed while one of its requests is reading inner chunks ahead (a pass dropped
/// mid-epoch) leaves nothing waiting on that request: the next pass's loads that find those
/// chunks "coming" read them themselves, and the budget is given back. Dropped after each
/// of the first batches in turn, so some drop lands while a read-ahead request is in flight
/// (counted: the epochs read ahead); every epoch after a drop finishes, exact.
#[test]
fn a_pass_dropped_while_reading_ahead_leaves_no_load_waiting() {
    let shape = [64u64, 8, 8];
    let f = Fixture::new(Some(Duration::from_millis(5)));
    f.array("t2m", &shape, &[16, 8, 8], Some(&[4, 4, 4]));
    let mut opts = DatasetOptions {
        knobs: Knobs { batch_size: 4, block_chunks: 2, max_inflight: 4, ..Default::default() },
        ..Default::default()
    };
    opts.read_policy.coalesce_gap_bytes = 0;
    opts.read_policy.read_ahead_bytes = Some(1 << 20);
    let ds = f.dataset(&[("t2m", "t2m", 0)], 0, (1.0, 0.0, 0.0), opts).unwrap();
    let mut read_ahead = 0;
    for taken in 1..8 {
        let dropped = ds.clone();
        f.sim
            .run(
                async move {
                    let mut s = dropped.iter(Split::Train)?;
                    for _ in 0..taken {
                        s.next_batch().await.expect("a batch")?;
                    }
                    Ok::<_, Error>(())
                },
                LIMIT,
            )
            .unwrap()
            .unwrap();
        let e = f.epoch(&ds, Split::Train).expect("the epoch after a dropped pass finishes").unwrap();
        check_epoch(&e, &shape, 0, &[("t2m", 0)], &(0..64).collect::<Vec<_>>(), 4);
        read_ahead += ds.last_pass().unwrap().tiles_read_ahead;
    }
    assert!(read_ahead > 0, "the passes read ahead");
}
