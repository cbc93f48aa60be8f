//! # insitubatch-core
//!
//! The engine that turns a Zarr store into shuffled, split-aware training batches without
//! resharding: every stored chunk is fetched and decoded once per epoch, reads run under one
//! `max_inflight` budget, residency under one byte budget, and the shuffle is a pure function
//! of `(seed, epoch, split)`.
//!
//! This crate has no runtime: storage, executor and thread pool are traits
//! ([`runtime`]), implemented by `insitubatch-native` (tokio, object_store, rayon), by the
//! wasm crate (fetch, `spawn_local`) and by [`testing`] (a simulated store and clock).
//! Read `ARCHITECTURE.md` at the repository root first.
#![cfg_attr(
    target_arch = "wasm32",
    allow(
        clippy::arc_with_non_send_sync,
        reason = "on native these Arcs are Send + Sync; on wasm32 MaybeSend/MaybeSync are empty by design (runtime.rs)"
    )
)]

mod ahead;
pub mod array;
mod assemble;
pub mod batch;
mod concat;
#[cfg(any(test, feature = "testing", feature = "conformance"))]
pub mod conformance;
pub mod coords;
pub mod dataset;
pub mod describe;
pub mod draws;
pub mod engine;
#[cfg(test)]
mod engine_tests;
pub mod error;
mod fleet;
pub mod geometry;
mod hedge;
mod join;
pub mod mesh;
pub mod pass;
pub mod patch;
pub mod plan;
pub mod pool;
mod reads;
pub mod retry;
pub mod runtime;
pub mod scaler;
pub mod shard;
pub mod shuffle;
pub mod split;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tier;
pub mod transform;
mod window;
pub mod zarr;

pub use array::{DType, Element, NdArray};
pub use batch::{Batch, BatchPart, BatchPatches};
pub use concat::ConcatStorage;
pub use dataset::{
    Dataset, DatasetBuilder, DatasetOptions, EpochPrediction, OpenOptions, PROBE_CHUNKS, ProbeReport, Variable, open,
};
pub use describe::{DatasetReport, Note, Severity};
pub use engine::{BadChunk, COALESCE_GAP_BYTES, COALESCE_MAX_BYTES, OnBadChunk, ReadPolicy};
pub use error::{Error, Result};
pub use fleet::{FleetSummary, RankReport, STRAGGLER_SHARE, fleet_summary};
pub use geometry::ArrayGeometry;
pub use hedge::HedgePolicy;
pub use join::JoinedStorage;
pub use mesh::ModelParallel;
/// The n-d array crate batches are viewed through ([`Batch::view`]), re-exported so callers
/// use the same version.
pub use ndarray;
pub use pass::BatchStream;
pub use patch::{PatchAxis, PatchMode, PatchOptions};
pub use runtime::{ByteRange, Executor, Runtime, Storage, StorageError, ThreadPool};
pub use shard::{Checkpoint, Cut};
pub use shuffle::{Split, UnknownSplit};
pub use split::{SplitManifest, SplitOptions, split_by_chunk, valid_anchor_range};
pub use stats::{LimitingStage, PassObserver, PassStats, Stage};
pub use tier::{ArrayIdentity, ChunkTier, TierCounters, TierOpener};
pub use window::WindowReason;
