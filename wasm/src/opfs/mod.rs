//! The browser's disk tier (`cacheDir`): decoded chunks in the origin private file system
//! (OPFS), kept across passes and page loads, under the native tier's contract
//! (`native/src/cache/`): `persist`, `readonlyCache`, stale pipelines per array (refused, or
//! reset with `resetStaleCache`), one writer with readers excluded, and chunk files that a
//! killed tab never leaves reading as valid.
//!
//! Why asynchronous: OPFS's synchronous access handles exist only in dedicated workers and
//! are opened asynchronously, while the engine also runs on a page's main thread (`open()`,
//! the dashboard's and the notebook widget's explorer) and, in the threaded build, makes its
//! blocking tier calls on pool threads (other workers, which cannot use the engine thread's
//! JS handles). So this tier answers core's `ChunkTier::revive_async`/`store_async`, which
//! the engine awaits on its executor where it would have awaited the blocking call's pool job
//! (core/src/engine.rs `revive`, `spill`): one code path for pages, workers and both builds.
//!
//! - **Files.** One file per chunk, `{safe path}__{path hash}__{fingerprint}__{chunk}.ibchunk`:
//!   a header line (what it holds: the pipeline fingerprint, chunk, dtype and shape, padded to
//!   128 bytes), the chunk's bytes, then a commit record (`IBCOMMIT` and the CRC-32C of header
//!   and data). It is written with `createWritable()`, whose data the browser keeps in a swap
//!   file until `close()` commits it at once; a revive checks the size, the header byte for
//!   byte, the commit record and the checksum, and any difference is a miss (the chunk is read
//!   from the store and written again). So a write cut anywhere (a killed tab, a full disk)
//!   never reads back as a chunk.
//! - **Locks.** Web Locks (`navigator.locks`), held for the tier's lifetime: exclusive for a
//!   writer, shared for `readonlyCache`. The browser releases them when the page or worker
//!   goes. A lock held by this instance's earlier life (it trapped: its Rust side is gone) is
//!   let go first (`LockGuard`).
//! - **Staleness.** The directory's listing at open says which fingerprints each array path
//!   has files of; a path this run reads with files of another fingerprint is stale.
//! - **Quota.** A write refused for space (`QuotaExceededError`) stops the writes of this
//!   tier, said by `describe()` and `warnings()` (the dataset's notes) and once on the
//!   console; chunks already cached stay valid and the rest is read from the store, as
//!   without a cache. Never wrong data: a refused write commits nothing.
//!
//! One file per concern:
//! - `flags.rs`: [`OpfsDir`], `cacheDir` and its flags as this tier opens them (core checks
//!   the flags; the directory's names are checked here).
//! - `files.rs`: the chunk files: names, header line, commit record, the check of one read
//!   back, and which fingerprints in a listing are stale. Plain data, tested on the host.
//! - `js.rs` (wasm32): thrown JS values and properties, read for messages and checks.
//! - `lock.rs` (wasm32): `LockGuard`, the directory's Web Lock.
//! - `dir.rs` (wasm32): the origin's private file system opened and listed, and `Dir`, an
//!   open directory: a chunk file's read and write, and writes stopped (a full quota).
//! - `tier.rs` (wasm32): `opener`, which opens, locks and lists the directory before a
//!   dataset is built, and the tier itself: stale pipelines refused or reset, revives and
//!   stores.

#[cfg(target_arch = "wasm32")]
mod dir;
mod files;
mod flags;
#[cfg(target_arch = "wasm32")]
mod js;
#[cfg(target_arch = "wasm32")]
mod lock;
#[cfg(target_arch = "wasm32")]
mod tier;

pub use files::{
    FileKey, TRAILER_LEN, chunk_file_name, header, parse_chunk_file_name, path_hash, stale_fingerprints, trailer,
    verify,
};
pub use flags::OpfsDir;
#[cfg(target_arch = "wasm32")]
pub(crate) use tier::opener;
