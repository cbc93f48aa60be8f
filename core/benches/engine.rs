//! Micro-benchmarks of the engine's CPU work, one stage at a time, with no I/O and no clock of
//! the engine's own (criterion times the calls): the decode of one stored tile (the zstd fast
//! path into a fresh or a recycled aligned buffer), and whole epochs over an in-memory store,
//! which place decoded tiles in their slots and gather sample rows into batches (whole samples,
//! and patches, whose gather copies runs of rows out of tiles).
//!
//! `cargo bench -p insitubatch-core --features testing --bench engine`; CI runs each once as a
//! test (`cargo test ... --bench engine`, scripts/test.sh's Rust phase) so they keep compiling
//! and running. The loader's end-to-end figures against the reference implementation and the
//! peers are `bench/run.py`'s (docs/benchmarks.md); these are for changing one stage.

#![cfg_attr(
    target_arch = "wasm32",
    allow(
        clippy::arc_with_non_send_sync,
        reason = "on wasm32 the simulated runtime's types are not Send (core's MaybeSend is empty there); clippy checks this file for wasm32 too"
    )
)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use insitubatch_core::internals::{TileLocation, open_array};
use insitubatch_core::runtime::{InlinePool, Runtime, Storage};
use insitubatch_core::testing::{MemoryStorage, SimExecutor, write_f32_array};
use insitubatch_core::{
    AlignedBytes, Dataset, DatasetOptions, Knobs, PatchAxis, PatchOptions, PatchPlacement, Split, SplitOptions,
    ZarrArray,
};

/// Long enough for any epoch here on a slow machine; the simulated clock never sleeps.
const LIMIT: Duration = Duration::from_secs(600);

/// A store of one f32 array `x` of `shape` in tiles of `chunks`, values = element index.
fn store(shape: &[u64], chunks: &[u64]) -> MemoryStorage {
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "x", shape, chunks, None, Some(&["time", "lat", "lon"]), |i| (i % 1000) as f32);
    storage
}

/// The array's metadata and its first tile's stored bytes.
fn first_tile(storage: &MemoryStorage) -> (ZarrArray, Bytes) {
    let sim = SimExecutor::new();
    let s = storage.clone();
    let array = sim.run(async move { open_array(&s, "x").await }, LIMIT).unwrap().unwrap();
    let TileLocation::Object { key } = array.tile_location(&[0, 0, 0]) else { unreachable!("not sharded") };
    let s = storage.clone();
    let bytes = sim.run(async move { s.get(&key).await }, LIMIT).unwrap().unwrap();
    (array, bytes.expect("the first tile is stored"))
}

fn decode(c: &mut Criterion) {
    let storage = store(&[16, 256, 256], &[16, 256, 256]); // one 4 MiB tile
    let (array, bytes) = first_tile(&storage);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Bytes(array.tile_bytes() as u64));
    group.bench_function("zstd tile, fresh buffer", |b| {
        b.iter(|| array.decode_tile(Some(bytes.clone()), "x/c/0/0/0").unwrap());
    });
    let mut spare: Option<AlignedBytes> = None;
    group.bench_function("zstd tile, recycled buffer", |b| {
        b.iter(|| {
            let tile = array.decode_tile_into(Some(bytes.clone()), "x/c/0/0/0", spare.take()).unwrap();
            spare = Some(tile.into_data());
        });
    });
    group.finish();
}

/// One train epoch of `options` over `storage`: every batch drawn, their rows counted.
fn epoch(storage: &MemoryStorage, options: &DatasetOptions) -> u64 {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let split = SplitOptions { fractions: (1.0, 0.0, 0.0), ..SplitOptions::default() };
    let builder =
        Dataset::builder(Arc::new(storage.clone()), runtime).arrays(["x"]).split(split).options(options.clone());
    let run = async move {
        let ds = builder.open().await.unwrap();
        let mut stream = ds.iter(Split::Train).unwrap();
        let mut rows = 0u64;
        while let Some(batch) = stream.next_batch().await {
            rows += batch.unwrap().sample_indices.len() as u64;
        }
        rows
    };
    sim.run(run, LIMIT).unwrap()
}

fn epochs(c: &mut Criterion) {
    // 128 samples of 64 × 128, tiles of 8 × 32 × 64: 16 chunks of 8 tiles each, 4 MiB in all.
    let storage = store(&[128, 64, 128], &[8, 32, 64]);
    let whole =
        DatasetOptions { knobs: Knobs { batch_size: 16, block_chunks: 4, ..Default::default() }, ..Default::default() };
    let patch = PatchOptions::from_parts(
        vec![(PatchAxis::Name("lat".into()), 16), (PatchAxis::Name("lon".into()), 16)],
        PatchPlacement::Random,
        None,
        Some(4),
    )
    .unwrap();
    let patched = DatasetOptions { patch: Some(patch), ..whole.clone() };
    let mut group = c.benchmark_group("epoch in memory");
    group.sample_size(20);
    for (name, options) in [("whole samples", &whole), ("4 random 16x16 patches per sample", &patched)] {
        let rows = epoch(&storage, options);
        group.throughput(Throughput::Elements(rows));
        group.bench_with_input(BenchmarkId::from_parameter(name), options, |b, o| b.iter(|| epoch(&storage, o)));
    }
    group.finish();
}

criterion_group!(benches, decode, epochs);
criterion_main!(benches);
