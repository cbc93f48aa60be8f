//! A rank mesh (`mesh.rs`): the ranks of a model-parallel group draw the same rows and each
//! takes its part of every row; the groups share the epoch as ranks do.

use crate::Knobs;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::dataset::{Dataset, DatasetOptions};
use crate::mesh::ModelParallel;
use crate::patch::{PatchAxis, PatchOptions};
use crate::runtime::{InlinePool, Runtime};
use crate::shuffle::Split;
use crate::split::SplitOptions;
use crate::testing::{MemoryStorage, SimExecutor, write_f32_array};
use crate::{Batch, Result};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(60);
/// `t2m` is (time 16, lat 6, lon 5), element value = flat index.
const SHAPE: [u64; 3] = [16, 6, 5];

fn store() -> MemoryStorage {
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &SHAPE, &[4, 3, 5], None, Some(&["time", "lat", "lon"]), |i| i as f32);
    storage
}

fn open(
    storage: &MemoryStorage,
    rank: usize,
    world_size: usize,
    extra: DatasetOptions,
) -> Result<(SimExecutor, Dataset)> {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let mp = ModelParallel { size: 2, axis: PatchAxis::Name("lat".into()) };
    let options = DatasetOptions {
        knobs: Knobs { batch_size: 3, block_chunks: 1, seed: 4, rank, world_size, ..extra.knobs },
        model_parallel: Some(mp),
        ..extra
    };
    let builder = Dataset::builder(Arc::new(storage.clone()), runtime)
        .arrays(["t2m"])
        .options(options)
        .split(SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() });
    let ds = sim.run(builder.open(), LIMIT).unwrap()?;
    Ok((sim, ds))
}

fn epoch(sim: &SimExecutor, ds: &Dataset) -> Vec<Batch> {
    ds.set_epoch(1);
    let mut s = ds.iter(Split::Train).unwrap();
    sim.run(
        async move {
            let mut out = Vec::new();
            while let Some(b) = s.next_batch().await {
                out.push(b.unwrap());
            }
            out
        },
        LIMIT,
    )
    .unwrap()
}

/// Element `[t, y, x]` of the array.
fn at(t: u64, y: u64, x: u64) -> f32 {
    (t * SHAPE[1] * SHAPE[2] + y * SHAPE[2] + x) as f32
}

#[test]
fn a_group_draws_alike_and_its_parts_make_the_whole_row() {
    let storage = store();
    let mut groups: Vec<BTreeSet<u64>> = Vec::new();
    for group in 0..2 {
        let parts: Vec<Vec<Batch>> = (0..2)
            .map(|p| {
                let (sim, ds) = open(&storage, group * 2 + p, 4, DatasetOptions::default()).unwrap();
                epoch(&sim, &ds)
            })
            .collect();
        assert_eq!(parts[0].len(), parts[1].len());
        let mut samples = BTreeSet::new();
        for (b0, b1) in parts[0].iter().zip(&parts[1]) {
            assert_eq!(b0.sample_indices, b1.sample_indices, "the ranks of a group draw the same rows");
            for (p, b) in [(0u64, b0), (1, b1)] {
                let part = b.part.as_ref().unwrap();
                assert_eq!(
                    (part.dim.as_str(), part.index, part.of, part.start, part.len),
                    ("lat", p as usize, 2, 3 * p, 3)
                );
                let v = b.view::<f32>("t2m").unwrap();
                assert_eq!(v.shape(), &[b.len(), 3, 5]);
                for (i, &t) in b.sample_indices.iter().enumerate() {
                    for y in 0..3 {
                        for x in 0..5 {
                            assert_eq!(v[[i, y as usize, x as usize]], at(t, 3 * p + y, x));
                        }
                    }
                }
            }
            samples.extend(b0.sample_indices.iter().copied());
        }
        groups.push(samples);
    }
    assert!(groups[0].is_disjoint(&groups[1]), "two groups drew one sample");
    assert_eq!(groups[0].len() + groups[1].len(), 16);
}

#[test]
fn a_group_splits_each_patch_and_its_checkpoint_counts_groups() {
    let storage = store();
    let patch = PatchOptions::grid(vec![(PatchAxis::Name("lat".into()), 4), (PatchAxis::Name("lon".into()), 5)]);
    let extra = DatasetOptions { patch: Some(patch), ..DatasetOptions::default() };
    let (sim, ds) = open(&storage, 1, 2, extra).unwrap();
    for b in epoch(&sim, &ds) {
        let origins = b.patches.as_ref().unwrap();
        let v = b.view::<f32>("t2m").unwrap();
        assert_eq!(v.shape(), &[b.len(), 2, 5], "half of a 4-row patch");
        for (i, &t) in b.sample_indices.iter().enumerate() {
            assert_eq!(origins.origin(i), [0, 0], "lat 6 holds one patch of 4");
            assert_eq!(v[[i, 0, 0]], at(t, 2, 0), "rank 1's half starts 2 rows into the patch");
        }
    }
    let cp = ds.fresh_checkpoint(Split::Train, 0);
    assert_eq!(cp.world_size, 1, "one data-parallel group");
}

#[test]
fn a_mesh_that_does_not_fit_is_refused_saying_why() {
    let storage = store();
    let err = open(&storage, 0, 3, DatasetOptions::default()).unwrap_err().to_string();
    assert!(err.contains("divide world_size=3"), "{err}");
    let err = open(&storage, 0, 4, DatasetOptions { node_ranks: Some(1), ..Default::default() }).unwrap_err();
    assert!(err.to_string().contains("multiple of model_parallel"), "{err}");
    let patch = PatchOptions::grid(vec![(PatchAxis::Name("lat".into()), 1)]);
    let err = open(&storage, 0, 2, DatasetOptions { patch: Some(patch), ..Default::default() }).unwrap_err();
    assert!(err.to_string().contains("every rank of a group needs a part"), "{err}");
}

/// Where chunks are tiled along the split axis, a rank of a group fetches only the tiles of
/// its part: `t2m`'s chunks are 2 tiles along `lat` (3 rows each), and rank `p`'s part is
/// rows `3p..3p + 3`, so it reads tile `p` of each chunk once and never the other; its
/// `model-parallel` note says so. A chunk of one tile along the axis is read whole.
#[test]
fn a_rank_reads_only_the_tiles_of_its_part() {
    for p in 0..2u64 {
        let storage = store();
        let (sim, ds) = open(&storage, p as usize, 2, DatasetOptions::default()).unwrap();
        let before: Vec<(String, u64)> =
            storage.keys().into_iter().map(|k| (k.clone(), storage.reads_of(&k))).collect();
        let batches = epoch(&sim, &ds);
        assert_eq!(batches.iter().map(Batch::len).sum::<usize>(), 16, "one group draws every sample");
        for (key, n) in before.into_iter().filter(|(k, _)| !k.ends_with("zarr.json")) {
            // t2m/c/TIME/LAT/LON
            let lat: u64 = key.rsplit('/').nth(1).and_then(|s| s.parse().ok()).unwrap();
            let want = u64::from(lat == p);
            assert_eq!(storage.reads_of(&key) - n, want, "rank {p}: {key}");
        }
        assert_eq!(ds.last_pass().unwrap().tiles_read, 4, "rank {p}: one tile of each of the 4 chunks");
        let notes = ds.describe(1).unwrap().notes;
        let said = "only the tiles of its part, 4 of the 8 tiles";
        assert!(notes.iter().any(|n| n.code == "model-parallel" && n.message.contains(said)), "{said}: {notes:?}");
    }
    // Untiled along lat: every rank of the group reads whole chunks, and the note says so.
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &SHAPE, &[4, 6, 5], None, Some(&["time", "lat", "lon"]), |i| i as f32);
    let (sim, ds) = open(&storage, 1, 2, DatasetOptions::default()).unwrap();
    epoch(&sim, &ds);
    assert_eq!(ds.last_pass().unwrap().tiles_read, 4, "4 whole chunks of one tile");
    let notes = ds.describe(1).unwrap().notes;
    assert!(notes.iter().any(|n| n.code == "model-parallel" && n.message.contains("reads whole chunks")), "{notes:?}");
}
