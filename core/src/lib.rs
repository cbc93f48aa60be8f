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
// Every `pub` is reachable from outside, so the public API is what lib.rs lists; the rest
// is `pub(crate)`.
#![warn(unreachable_pub)]
#![cfg_attr(
    target_arch = "wasm32",
    allow(
        clippy::arc_with_non_send_sync,
        reason = "on native these Arcs are Send + Sync; on wasm32 MaybeSend/MaybeSync are empty by design (runtime.rs)"
    )
)]

// The machinery: private. Its vocabulary is re-exported below (quinn-proto's lib.rs is the
// model): a caller names `insitubatch_core::Dataset`, not the module that happens to hold it.
mod ahead;
mod array;
mod assemble;
mod batch;
mod concat;
mod dataset;
mod describe;
mod draws;
mod engine;
#[cfg(test)]
mod engine_tests;
mod error;
mod fleet;
mod hedge;
mod join;
mod mesh;
mod pass;
mod patch;
mod plan;
mod pool;
mod random;
mod ranks;
mod reads;
mod refs;
mod retry;
mod split;
mod stats;
mod tier;
mod units;
mod whatif;
mod window;
mod zarr;

// Public namespaces: what a backend or a binding implements or calls by name.
#[cfg(any(test, feature = "testing", feature = "conformance"))]
pub mod conformance;
// Coordinate labels and selections by label (`sel`).
pub mod coords;
// Tile geometry: which stored tiles a sample touches and where they land.
pub mod geometry;
// The runtime seam: storage, executor and thread pool, which each target implements.
pub mod runtime;
// The numpy-exact streaming statistics behind `StandardScaler`.
pub mod scaler;
// The cross-target draw-order specification (ARCHITECTURE.md): the same `(seed, epoch,
// split)` gives the same order on every target.
pub mod shuffle;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
// Chunk and batch transforms: the user's code that runs on the pool.
pub mod transform;

/// Internals that the fuzz targets, the bindings' explorer and the tests reach into (the
/// metadata parser, the retry wrapper, the stage verdict). Not a stable API: it changes
/// with the engine.
#[doc(hidden)]
pub mod internals {
    pub use crate::array::{BUFFER_ALIGN, zeroed_bytes};
    pub use crate::retry::PolicyStorage;
    pub use crate::stats::{Recorded, verdict};
    pub use crate::zarr::{TileLocation, open_array, open_arrays};
}

pub use array::{AlignedBytes, DType, Element, NdArray, Prefault};
pub use batch::{Batch, BatchPart, BatchPatches};
pub use concat::ConcatStorage;
pub use dataset::{
    CacheFlags, Dataset, DatasetBuilder, DatasetOptions, DatasetSpec, EpochPrediction, HedgeFields, HedgeSpec, Knobs,
    PROBE_CHUNKS, ProbeReport, ReadPolicySpec, ResolvedSpec, TargetAbilities, Variable, VariableSpec, VariablesSpec,
};
pub use describe::{ConfigReport, DatasetReport, MemoryReport, Note, Severity, VariableReport};
pub use engine::BadChunk;
pub use error::{Error, ErrorKind, Result, camel_case};
pub use fleet::{FleetSummary, RankReport, STRAGGLER_SHARE, fleet_summary};
pub use geometry::ArrayGeometry;
pub use hedge::HedgePolicy;
pub use join::JoinedStorage;
pub use mesh::ModelParallel;
/// The n-d array crate batches are viewed through ([`Batch::view`]), re-exported so callers
/// use the same version.
pub use ndarray;
pub use pass::BatchStream;
pub use patch::{AxisSizes, PatchAxis, PatchMode, PatchOptions, PatchPlacement, parse_axis_sizes};
pub use pool::PoolCounters;
pub use random::{Split, UnknownSplit};
pub use ranks::{Checkpoint, Cut};
#[cfg(all(feature = "icechunk", feature = "testing"))]
pub use refs::icechunk_sample;
#[cfg(feature = "parquet-refs")]
pub use refs::{DecodeInline, ParquetIndex, RecordDecoder, ResolveFile, decode_record};
pub use refs::{FILE_OBJECT, FileOpener, ICECHUNK_PREFIX, Reference, ReferenceIndex, ReferenceSet, ReferenceStorage};
#[cfg(feature = "icechunk")]
pub use refs::{IcechunkIndex, IcechunkVersion, icechunk_url};
pub use retry::{COALESCE_GAP_BYTES, COALESCE_MAX_BYTES, OnBadChunk, ReadPolicy};
pub use runtime::{ByteRange, Executor, Location, Runtime, Storage, StorageError, ThreadPool};
pub use split::{SplitManifest, SplitOptions, split_by_chunk, valid_anchor_range};
pub use stats::{Depths, LimitingStage, PassObserver, PassStats, Stage, StageTimes};
pub use tier::{ArrayIdentity, ChunkTier, CommitRecord, TierCounters, TierOpener};
pub use units::human_bytes;
pub use whatif::{DrawOrderReport, QualityPoint};
pub use window::WindowReason;
pub use zarr::ZarrArray;
