//! Patched datasets (`patch.rs`): every grid patch once per epoch, random patches per
//! (seed, epoch), values equal to slicing the array, each chunk read once, resume and ranks.

use crate::Knobs;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::dataset::{Dataset, DatasetOptions};
use crate::patch::{PatchAxis, PatchMode, PatchOptions};
use crate::runtime::{InlinePool, Runtime};
use crate::shuffle::Split;
use crate::split::SplitOptions;
use crate::testing::{MemoryStorage, SimExecutor, write_f32_array};
use crate::{Batch, Checkpoint, Error};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(60);
/// `t2m` is (time 12, lat 6, lon 8), element value = flat index.
const SHAPE: [u64; 3] = [12, 6, 8];

/// A store with a patched `t2m` (tiled, or sharded over the same inner chunks) and a 1-d
/// `toa` on the time axis only, which is read whole.
fn store(sharded: bool) -> MemoryStorage {
    let storage = MemoryStorage::new();
    let dims = Some(&["time", "lat", "lon"][..]);
    if sharded {
        write_f32_array(&storage, "t2m", &SHAPE, &[4, 6, 8], Some(&[4, 3, 4]), dims, |i| i as f32);
    } else {
        write_f32_array(&storage, "t2m", &SHAPE, &[4, 3, 4], None, dims, |i| i as f32);
    }
    write_f32_array(&storage, "toa", &[12], &[4], None, Some(&["time"]), |i| 1000.0 + i as f32);
    storage
}

fn open(storage: &MemoryStorage, patch: PatchOptions, options: DatasetOptions) -> (SimExecutor, Dataset) {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let options = DatasetOptions {
        knobs: Knobs { batch_size: 5, block_chunks: 1, seed: 3, ..options.knobs },
        patch: Some(patch),
        ..options
    };
    let builder = Dataset::builder(Arc::new(storage.clone()), runtime)
        .arrays(["t2m", "toa"])
        .options(options)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    let ds = sim.run(builder.open(), LIMIT).unwrap().unwrap();
    (sim, ds)
}

fn named(size: &[(&str, u64)], mode: PatchMode) -> PatchOptions {
    PatchOptions { size: size.iter().map(|&(n, s)| (PatchAxis::Name(n.into()), s)).collect(), mode }
}

fn epoch(sim: &SimExecutor, ds: &Dataset, epoch: u64) -> Vec<Batch> {
    ds.set_epoch(epoch);
    let stream = ds.iter(Split::Train).unwrap();
    drain(sim, stream, None).0
}

/// Up to `take` batches of a stream (all when `None`), and its checkpoint after them.
pub(super) fn drain(sim: &SimExecutor, mut s: crate::BatchStream, take: Option<usize>) -> (Vec<Batch>, Checkpoint) {
    sim.run(
        async move {
            let mut out = Vec::new();
            while take.is_none_or(|k| out.len() < k) {
                let Some(b) = s.next_batch().await else { break };
                out.push(b.unwrap());
            }
            (out, s.checkpoint())
        },
        LIMIT,
    )
    .unwrap()
}

/// Every row of every batch equals numpy-style slicing of the array at its sample and origin;
/// returns the (sample, origin) of each row.
fn check_values(batches: &[Batch], size: (u64, u64)) -> Vec<(u64, Vec<u64>)> {
    let mut rows = Vec::new();
    for b in batches {
        let p = b.patches.as_ref().expect("a patched batch says its patches");
        assert_eq!(p.dims, ["lat", "lon"]);
        let t2m = b.view::<f32>("t2m").unwrap();
        let toa = b.view::<f32>("toa").unwrap();
        assert_eq!(t2m.shape(), &[b.len(), size.0 as usize, size.1 as usize]);
        for (i, &t) in b.sample_indices.iter().enumerate() {
            let o = p.origin(i);
            for a in 0..size.0 {
                for c in 0..size.1 {
                    let want = (t * SHAPE[1] * SHAPE[2] + (o[0] + a) * SHAPE[2] + o[1] + c) as f32;
                    assert_eq!(t2m[[i, a as usize, c as usize]], want, "sample {t} origin {o:?}");
                }
            }
            assert_eq!(toa[[i]], 1000.0 + t as f32, "an unpatched variable is read whole");
            rows.push((t, o.to_vec()));
        }
    }
    rows
}

/// Reads of each chunk object (metadata aside) during one train epoch.
fn epoch_reads(
    storage: &MemoryStorage,
    sim: &SimExecutor,
    ds: &Dataset,
    e: u64,
) -> (Vec<Batch>, BTreeMap<String, u64>) {
    let before: BTreeMap<String, u64> = storage.keys().iter().map(|k| (k.clone(), storage.reads_of(k))).collect();
    let batches = epoch(sim, ds, e);
    let reads = before
        .into_iter()
        .filter(|(k, _)| !k.ends_with("zarr.json"))
        .map(|(k, n)| (k.clone(), storage.reads_of(&k) - n))
        .collect();
    (batches, reads)
}

#[test]
fn every_grid_patch_of_every_sample_is_drawn_once_and_equals_slicing() {
    for sharded in [false, true] {
        let storage = store(sharded);
        let (sim, ds) =
            open(&storage, named(&[("lat", 3), ("lon", 4)], PatchMode::Grid { stride: vec![] }), Default::default());
        assert_eq!(ds.rows_per_sample(), 4);
        let (batches, reads) = epoch_reads(&storage, &sim, &ds, 1);
        let rows = check_values(&batches, (3, 4));
        let drawn: BTreeSet<(u64, Vec<u64>)> = rows.iter().cloned().collect();
        assert_eq!((rows.len(), drawn.len()), (48, 48), "each (sample, patch) once");
        for o in [[0, 0], [0, 4], [3, 0], [3, 4]] {
            assert!(drawn.contains(&(11, o.to_vec())));
        }
        // The patches read exactly what an epoch of whole samples reads: each chunk once.
        let whole = store(sharded);
        let (sim, unpatched) =
            open(&whole, named(&[("lat", 6)], PatchMode::Grid { stride: vec![] }), Default::default());
        assert_eq!(unpatched.rows_per_sample(), 1);
        assert_eq!(epoch_reads(&whole, &sim, &unpatched, 1).1, reads, "sharded: {sharded}");
        if !sharded {
            assert!(reads.values().all(|&n| n == 1), "{reads:?}");
        }
        let notes = ds.describe(1).unwrap().notes;
        assert!(notes.iter().any(|n| n.code == "patches" && n.message.contains("4 per sample")), "{notes:?}");
    }
}

#[test]
fn an_overlapping_grid_drops_a_narrow_remainder_at_the_far_edge() {
    let storage = store(false);
    let patch = named(&[("lon", 3)], PatchMode::Grid { stride: vec![2] });
    let (sim, ds) = open(&storage, patch, Default::default());
    let rows = epoch(&sim, &ds, 0);
    let origins: BTreeSet<u64> = rows.iter().flat_map(|b| b.patches.clone().unwrap().origins).collect();
    assert_eq!(origins, BTreeSet::from([0, 2, 4]), "origin 6 would leave the field");
    assert_eq!(rows[0].arrays["t2m"].shape, [5, 6, 3]);
}

#[test]
fn random_patches_fit_follow_seed_and_epoch_and_equal_slicing() {
    let storage = store(false);
    let patch = || named(&[("lat", 2), ("lon", 3)], PatchMode::Random { per_sample: 2 });
    let (sim, ds) = open(&storage, patch(), Default::default());
    let rows = check_values(&epoch(&sim, &ds, 2), (2, 3));
    let mut per_sample: BTreeMap<u64, usize> = BTreeMap::new();
    for (t, o) in &rows {
        *per_sample.entry(*t).or_default() += 1;
        assert!(o[0] <= 4 && o[1] <= 5, "origin {o:?} leaves the field");
    }
    assert!(per_sample.len() == 12 && per_sample.values().all(|&n| n == 2), "{per_sample:?}");
    let (sim2, again) = open(&storage, patch(), Default::default());
    assert_eq!(check_values(&epoch(&sim2, &again, 2), (2, 3)), rows, "same (seed, epoch), same patches");
    assert_ne!(check_values(&epoch(&sim, &ds, 3), (2, 3)), rows);
}

#[test]
fn a_patched_pass_resumes_bit_for_bit_and_refuses_other_patch_options() {
    let storage = store(false);
    let patch = || named(&[("lat", 2), ("lon", 4)], PatchMode::Random { per_sample: 3 });
    let (sim, ds) = open(&storage, patch(), Default::default());
    ds.set_epoch(4);
    let (whole, _) = drain(&sim, ds.iter(Split::Train).unwrap(), None);
    let (head, cp) = drain(&sim, ds.iter(Split::Train).unwrap(), Some(3));
    assert_eq!(cp.rows_per_sample, Some(3));
    let cp = Checkpoint::from_json(&cp.to_json()).unwrap();
    let (sim, fresh) = open(&storage, patch(), Default::default());
    let (tail, _) = drain(&sim, fresh.resume(&cp).unwrap(), None);
    let key = |b: &Batch| (b.index, b.sample_indices.clone(), b.patches.clone(), b.arrays["t2m"].data.to_vec());
    let joined: Vec<_> = head.iter().chain(&tail).map(key).collect();
    assert_eq!(joined, whole.iter().map(key).collect::<Vec<_>>());

    let (_, other) = open(&storage, named(&[("lat", 2)], PatchMode::Random { per_sample: 2 }), Default::default());
    let err = other.resume(&cp).unwrap_err();
    assert!(matches!(&err, Error::Config(m) if m.contains("3 rows per sample")), "{err}");
}

#[test]
fn ranks_draw_disjoint_patches() {
    let storage = store(false);
    let mut all = BTreeSet::new();
    for rank in 0..2 {
        let options =
            DatasetOptions { knobs: Knobs { rank, world_size: 2, ..Default::default() }, ..Default::default() };
        let (sim, ds) = open(&storage, named(&[("lat", 3), ("lon", 4)], PatchMode::Grid { stride: vec![] }), options);
        for row in check_values(&epoch(&sim, &ds, 1), (3, 4)) {
            assert!(all.insert(row.clone()), "{row:?} drawn by both ranks");
        }
    }
    // Three chunks over two ranks: one chunk's 16 rows are dropped for equal shares.
    assert_eq!(all.len(), 32);
}

#[test]
fn axes_the_variables_lack_or_hold_in_part_are_refused_with_names() {
    let storage = store(false);
    let refused = |patch: PatchOptions| {
        let sim = SimExecutor::new();
        let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
        let options = DatasetOptions { patch: Some(patch), ..Default::default() };
        let b = Dataset::builder(Arc::new(storage.clone()), runtime).arrays(["t2m", "toa"]).options(options);
        sim.run(b.open(), LIMIT).unwrap().unwrap_err().to_string()
    };
    let grid = || PatchMode::Grid { stride: vec![] };
    let e = refused(named(&[("level", 2)], grid()));
    assert!(e.contains("\"level\"") && e.contains("no variable"), "{e}");
    let e = refused(named(&[("time", 2)], grid()));
    assert!(e.contains("sample axis") && e.contains("\"t2m\""), "{e}");
    let e = refused(named(&[("lat", 7)], grid()));
    assert!(e.contains("axis length 6"), "{e}");
    let e = refused(PatchOptions { size: vec![(PatchAxis::Axis(1), 2)], mode: PatchMode::Random { per_sample: 0 } });
    assert!(e.contains("patches_per_sample"), "{e}");
}

/// A patch reads only the tiles it touches: per epoch, each touched tile of a chunk is read
/// once and the others never, on tiled and sharded stores, and the values equal slicing.
#[test]
fn random_patches_read_only_the_tiles_they_touch_once_each() {
    const SHAPE: [u64; 3] = [8, 12, 16];
    const TILE: [u64; 3] = [4, 3, 4];
    for sharded in [false, true] {
        let storage = MemoryStorage::new();
        let dims = Some(&["time", "y", "x"][..]);
        let (chunks, inner) = if sharded { ([4, 12, 16], Some(&TILE[..])) } else { (TILE, None) };
        write_f32_array(&storage, "f", &SHAPE, &chunks, inner, dims, |i| i as f32);
        let sim = SimExecutor::new();
        let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
        let patch = named(&[("y", 3), ("x", 4)], PatchMode::Random { per_sample: 1 });
        let options = DatasetOptions {
            knobs: Knobs { batch_size: 3, block_chunks: 1, seed: 5, ..Default::default() },
            patch: Some(patch),
            ..Default::default()
        };
        let builder = Dataset::builder(Arc::new(storage.clone()), runtime)
            .arrays(["f"])
            .options(options)
            .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
        let ds = sim.run(builder.open(), LIMIT).unwrap().unwrap();
        let (batches, reads) = epoch_reads(&storage, &sim, &ds, 0);
        // The truth: the tiles each (sample, origin) covers, and its values by slicing.
        let mut touched: BTreeSet<(u64, u64, u64)> = BTreeSet::new();
        for b in &batches {
            let p = b.patches.as_ref().unwrap();
            let f = b.view::<f32>("f").unwrap();
            for (i, &t) in b.sample_indices.iter().enumerate() {
                let o = p.origin(i);
                for (a, c) in (0..3).flat_map(|a| (0..4).map(move |c| (a, c))) {
                    let want = (t * SHAPE[1] * SHAPE[2] + (o[0] + a) * SHAPE[2] + o[1] + c) as f32;
                    assert_eq!(f[[i, a as usize, c as usize]], want, "sample {t} origin {o:?}");
                }
                for ty in o[0] / TILE[1]..=(o[0] + 2) / TILE[1] {
                    for tx in o[1] / TILE[2]..=(o[1] + 3) / TILE[2] {
                        touched.insert((t / TILE[0], ty, tx));
                    }
                }
            }
        }
        assert!(touched.len() < 32, "the seed should leave some of the 32 tiles untouched: {touched:?}");
        let stats = ds.last_pass().unwrap();
        assert_eq!(stats.tiles_read, touched.len() as u64, "sharded: {sharded}");
        let notes = ds.describe(1).unwrap().notes;
        let said = format!("{} of the 32 tiles", touched.len());
        assert!(notes.iter().any(|n| n.code == "patches" && n.message.contains(&said)), "{said}: {notes:?}");
        if !sharded {
            for (key, n) in &reads {
                let parts: Vec<u64> = key.rsplit('/').take(3).filter_map(|p| p.parse().ok()).collect();
                let want = u64::from(touched.contains(&(parts[2], parts[1], parts[0])));
                assert_eq!(*n, want, "{key} read {n} times: {reads:?}");
            }
        }
    }
}

/// A chunk read in part is held as its tiles only: the pool charges their bytes, the
/// residency floor (and so the budget `describe()` asks for) counts the tiles a chunk's rows
/// can touch, not the whole chunk, and the patches still equal slicing.
#[test]
fn a_chunk_read_in_part_is_held_and_charged_as_its_tiles() {
    const SHAPE: [u64; 3] = [8, 48, 64];
    let open_field = |chunks: &[u64]| {
        let storage = MemoryStorage::new();
        write_f32_array(&storage, "f", &SHAPE, chunks, None, Some(&["time", "y", "x"][..]), |i| i as f32);
        let sim = SimExecutor::new();
        let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
        let patch = named(&[("y", 8), ("x", 8)], PatchMode::Random { per_sample: 1 });
        let options = DatasetOptions {
            knobs: Knobs { batch_size: 2, block_chunks: 1, seed: 9, ..Default::default() },
            patch: Some(patch),
            ..Default::default()
        };
        let builder = Dataset::builder(Arc::new(storage), runtime)
            .arrays(["f"])
            .options(options)
            .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
        let ds = sim.run(builder.open(), LIMIT).unwrap().unwrap();
        (sim, ds)
    };
    // Whole chunks (one tile each) against 6 × 8 tiles of 8 × 8 per chunk: an 8 × 8 patch
    // touches at most 2 × 2 of them, so a chunk's 4 rows at most 16 of its 48 tiles.
    let (_, whole) = open_field(&[4, 48, 64]);
    let (sim, tiled) = open_field(&[4, 8, 8]);
    let whole_floor = whole.describe(1).unwrap().memory.floor_bytes;
    let floor = tiled.describe(1).unwrap().memory.floor_bytes;
    assert_eq!(floor * 3, whole_floor, "16 of 48 tiles: {floor} against {whole_floor}");
    for e in 0..3 {
        let batches = epoch(&sim, &tiled, e);
        for b in &batches {
            let (p, f) = (b.patches.as_ref().unwrap(), b.view::<f32>("f").unwrap());
            for (i, &t) in b.sample_indices.iter().enumerate() {
                let o = p.origin(i);
                for (a, c) in (0..8).flat_map(|a| (0..8).map(move |c| (a, c))) {
                    let want = (t * SHAPE[1] * SHAPE[2] + (o[0] + a) * SHAPE[2] + o[1] + c) as f32;
                    assert_eq!(f[[i, a as usize, c as usize]], want, "sample {t} origin {o:?}");
                }
            }
        }
        let touched = tiled.last_pass().unwrap().tiles_read;
        assert!(touched < 2 * 48, "epoch {e}: the patches should leave tiles unread ({touched} read)");
    }
    let peak = tiled.pool_counters().resident_peak_bytes;
    assert!(peak > 0 && peak <= floor, "resident peak {peak} within the tiles' floor {floor}");
    // One chunk's tiles are 4 rows × 8 × 8 elements each; a whole chunk is 4 × 48 × 64.
    assert_eq!(peak % (4 * 8 * 8 * 4), 0, "the pool charges whole tiles: {peak}");
    assert!(peak < 4 * 48 * 64 * 4, "less than one whole chunk: {peak}");
}

/// `store(false)` with its lat (decreasing, 50 to 0) and lon (100 to 107) coordinates.
fn store_with_grid() -> MemoryStorage {
    let storage = store(false);
    write_f32_array(&storage, "lat", &[6], &[6], None, Some(&["lat"]), |i| 50.0 - 10.0 * i as f32);
    write_f32_array(&storage, "lon", &[8], &[8], None, Some(&["lon"]), |i| 100.0 + i as f32);
    storage
}

fn sel(dim: &str, lo: f64, hi: f64) -> crate::coords::LabelSel {
    use crate::coords::Label::Number;
    crate::coords::LabelSel::range(dim, Number(lo), Number(hi))
}

fn open_sel(storage: &MemoryStorage, options: DatasetOptions) -> crate::Result<(SimExecutor, Dataset)> {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let options =
        DatasetOptions { knobs: Knobs { batch_size: 5, block_chunks: 1, seed: 3, ..options.knobs }, ..options };
    let builder = Dataset::builder(Arc::new(storage.clone()), runtime)
        .arrays(["t2m", "toa"])
        .options(options)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    let ds = sim.run(builder.open(), LIMIT).unwrap()?;
    Ok((sim, ds))
}

/// `sel` on inner axes cuts every row to the region (a decreasing coordinate too), values
/// equal to slicing, variables without the axes untouched, and only the tiles the region
/// touches read: latitude 45..35 is position 1 and longitude 100..103 positions 0..4, one
/// of a chunk's 2 × 2 tiles.
#[test]
fn sel_on_inner_axes_cuts_every_row_to_the_region_and_reads_its_tiles_only() {
    let storage = store_with_grid();
    let options = DatasetOptions { sel: vec![sel("lat", 35.0, 45.0), sel("lon", 100.0, 103.0)], ..Default::default() };
    let (sim, ds) = open_sel(&storage, options).unwrap();
    let mut seen = BTreeSet::new();
    let (batches, reads) = epoch_reads(&storage, &sim, &ds, 0);
    for b in batches {
        assert!(b.patches.is_none(), "a region is not a patch");
        let (t2m, toa) = (b.view::<f32>("t2m").unwrap(), b.view::<f32>("toa").unwrap());
        assert_eq!(t2m.shape(), &[b.len(), 1, 4]);
        for (i, &t) in b.sample_indices.iter().enumerate() {
            for c in 0..4 {
                let want = (t * SHAPE[1] * SHAPE[2] + SHAPE[2] + c) as f32;
                assert_eq!(t2m[[i, 0, c as usize]], want, "sample {t}");
            }
            assert_eq!(toa[[i]], 1000.0 + t as f32);
            seen.insert(t);
        }
    }
    assert_eq!(seen.len(), 12, "every sample once");
    assert_eq!(ds.last_pass().unwrap().tiles_read, 3 + 3, "one t2m tile of each of 3 chunks, and toa's 3 chunks");
    let t2m: Vec<(&String, &u64)> = reads.iter().filter(|(k, _)| k.starts_with("t2m/")).collect();
    assert_eq!(t2m.len(), 3 * 4, "{reads:?}");
    for (key, n) in t2m {
        assert_eq!(*n, u64::from(key.ends_with("/0/0")), "{key} read {n} times: {reads:?}");
    }
    let notes = ds.describe(1).unwrap().notes;
    assert!(notes.iter().any(|n| n.code == "region" && n.message.contains("lat positions 1..2 of 6")), "{notes:?}");
}

/// With patches, a region on a patched axis keeps every patch inside it (origins are
/// positions of the whole field), and the patches equal slicing.
#[test]
fn patches_lie_inside_a_region_on_their_axes() {
    let storage = store_with_grid();
    let patch = named(&[("lat", 3), ("lon", 2)], PatchMode::Random { per_sample: 3 });
    let options = DatasetOptions { sel: vec![sel("lon", 101.0, 106.0)], patch: Some(patch), ..Default::default() };
    let (sim, ds) = open_sel(&storage, options).unwrap();
    let rows = check_values(&epoch(&sim, &ds, 2), (3, 2));
    assert_eq!(rows.len(), 36);
    assert!(rows.iter().all(|(_, o)| (1..=5).contains(&o[1]) && o[0] <= 3), "{rows:?}");
    assert!(rows.iter().any(|(_, o)| o[1] == 1) && rows.iter().any(|(_, o)| o[1] == 5), "{rows:?}");
    // A patch wider than the region is refused, naming the axis.
    let wide = named(&[("lon", 7)], PatchMode::Random { per_sample: 1 });
    let options = DatasetOptions { sel: vec![sel("lon", 101.0, 106.0)], patch: Some(wide), ..Default::default() };
    let err = open_sel(&storage, options).err().unwrap().to_string();
    assert!(err.contains("lon") && err.contains('6'), "{err}");
}

/// `sel` labels on an inner axis that are not one run pick those positions, in the order
/// given (as xarray's `sel` with a list), reading only their tiles; labels on the sample axis
/// draw exactly those samples.
#[test]
fn sel_labels_pick_positions_in_their_order() {
    use crate::coords::Label::Number;
    let storage = store_with_grid();
    write_f32_array(&storage, "time", &[12], &[12], None, Some(&["time"]), |i| 2000.0 + i as f32);
    let lat = crate::coords::LabelSel::labels("lat", vec![Number(0.0), Number(50.0)]);
    let time = crate::coords::LabelSel::labels("time", vec![Number(2003.0), Number(2001.0), Number(2010.0)]);
    let options = DatasetOptions { sel: vec![lat, time, sel("lon", 100.0, 103.0)], ..Default::default() };
    let (sim, ds) = open_sel(&storage, options).unwrap();
    let (batches, reads) = epoch_reads(&storage, &sim, &ds, 0);
    let mut drawn = Vec::new();
    for b in batches {
        let t2m = b.view::<f32>("t2m").unwrap();
        assert_eq!(t2m.shape(), &[b.len(), 2, 4]);
        for (i, &t) in b.sample_indices.iter().enumerate() {
            for (k, y) in [5u64, 0].into_iter().enumerate() {
                for c in 0..4 {
                    let want = (t * SHAPE[1] * SHAPE[2] + y * SHAPE[2] + c) as f32;
                    assert_eq!(t2m[[i, k, c as usize]], want, "sample {t} lat position {y}");
                }
            }
            drawn.push(t);
        }
    }
    drawn.sort_unstable();
    assert_eq!(drawn, [1, 3, 10], "the listed times only");
    // lat positions 5 and 0 lie in lat tiles 1 and 0, lon 0..4 in lon tile 0: of chunks 0 and 2
    // (samples 1, 3 and 10; chunk 1 draws none), tiles (0, 0) and (1, 0).
    for (key, n) in reads.iter().filter(|(k, _)| k.starts_with("t2m/")) {
        let at: Vec<&str> = key.split('/').collect();
        let want = u64::from(at[2] != "1" && at[4] == "0");
        assert_eq!(*n, want, "{key} read {n} times: {reads:?}");
    }
    let notes = ds.describe(1).unwrap().notes;
    assert!(notes.iter().any(|n| n.code == "region" && n.message.contains("lat positions [5, 0] of 6")), "{notes:?}");
    let missing = crate::coords::LabelSel::labels("lat", vec![Number(15.0)]);
    let err = open_sel(&storage, DatasetOptions { sel: vec![missing], ..Default::default() }).err().unwrap();
    assert!(err.to_string().contains("15 is not among its 6 values"), "{err}");
}

/// `sel` on an inner axis without a coordinate, or bounds selecting nothing, is refused.
#[test]
fn sel_on_an_inner_axis_says_what_is_missing() {
    let storage = store(false);
    let err = open_sel(&storage, DatasetOptions { sel: vec![sel("lat", 0.0, 10.0)], ..Default::default() });
    let err = err.err().unwrap().to_string();
    assert!(err.contains("sel on \"lat\" needs its coordinate"), "{err}");
    let storage = store_with_grid();
    let err = open_sel(&storage, DatasetOptions { sel: vec![sel("lat", 51.0, 60.0)], ..Default::default() });
    assert!(err.err().unwrap().to_string().contains("selects nothing"));
}

/// With `coords`, each batch carries the values of each patched axis's coordinate that each
/// row's patch covers (rows × patch extent), beside the patches.
#[test]
fn with_coords_each_row_carries_its_patch_coordinates() {
    let storage = store(false);
    write_f32_array(&storage, "lat", &[6], &[6], None, Some(&["lat"]), |i| 10.0 * i as f32);
    write_f32_array(&storage, "lon", &[8], &[8], None, Some(&["lon"]), |i| 100.0 + i as f32);
    let options = DatasetOptions { knobs: Knobs { coords: true, ..Default::default() }, ..Default::default() };
    let (sim, ds) = open(&storage, named(&[("lat", 2), ("lon", 3)], PatchMode::Random { per_sample: 2 }), options);
    let mut rows = 0;
    for b in epoch(&sim, &ds, 1) {
        let p = b.patches.as_ref().unwrap();
        let crate::coords::CoordValues::Number(lat) = &b.coords["lat"] else { panic!("numbers") };
        let crate::coords::CoordValues::Number(lon) = &b.coords["lon"] else { panic!("numbers") };
        assert_eq!((lat.len(), lon.len()), (b.len() * 2, b.len() * 3), "rows × patch extent");
        for i in 0..b.len() {
            let o = p.origin(i);
            assert_eq!(&lat[i * 2..i * 2 + 2], &[10.0 * o[0] as f64, 10.0 * (o[0] + 1) as f64]);
            let want: Vec<f64> = (0..3).map(|c| 100.0 + (o[1] + c) as f64).collect();
            assert_eq!(&lon[i * 3..i * 3 + 3], want.as_slice());
            rows += 1;
        }
    }
    assert_eq!(rows, 24);
    let (sim, plain) = open(&storage, named(&[("lat", 2)], PatchMode::Random { per_sample: 1 }), Default::default());
    assert!(epoch(&sim, &plain, 0)[0].coords.is_empty(), "coordinates only when asked for");
}
