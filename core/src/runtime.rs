//! The three runtime seams: storage, executor, CPU thread pool.
//!
//! Everything target-specific lives behind these traits: native implements them with
//! object_store + tokio + rayon, wasm with fetch + `spawn_local` + an inline pool, and the
//! tests with a simulated store and clock ([`crate::testing`]). The engine never reads a
//! clock, opens a socket or spawns a thread of its own.

use std::fmt::Debug;
use std::num::NonZeroUsize;
use std::time::Duration;

use bytes::Bytes;

#[cfg(not(target_arch = "wasm32"))]
mod platform {
    pub use core::marker::{Send as MaybeSend, Sync as MaybeSync};
    /// A boxed future; `Send` on native, not on wasm (browser futures are `!Send`).
    pub type BoxFuture<'a, T> = futures::future::BoxFuture<'a, T>;
    /// A unit of CPU work for a [`super::ThreadPool`].
    pub type Job = Box<dyn FnOnce() + Send + 'static>;
}
#[cfg(target_arch = "wasm32")]
mod platform {
    /// `Send` on native; a blanket trait on wasm.
    pub trait MaybeSend {}
    impl<T: ?Sized> MaybeSend for T {}
    /// `Sync` on native; a blanket trait on wasm.
    pub trait MaybeSync {}
    impl<T: ?Sized> MaybeSync for T {}
    /// A boxed future; `Send` on native, not on wasm (browser futures are `!Send`).
    pub type BoxFuture<'a, T> = futures::future::LocalBoxFuture<'a, T>;
    /// A unit of CPU work for a [`super::ThreadPool`].
    pub type Job = Box<dyn FnOnce() + 'static>;
}
pub use platform::{BoxFuture, Job, MaybeSend, MaybeSync};

/// A byte range of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteRange {
    /// `start..end`, half-open.
    #[allow(missing_docs, reason = "the variant's doc says what start and end are")]
    Bounded { start: u64, end: u64 },
    /// The last `n` bytes.
    Suffix(u64),
}

/// How a storage failure should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageErrorKind {
    /// Worth retrying: timeouts, resets, 5xx, throttling.
    Transient,
    /// Retrying will not help: permissions, bad request, malformed URL.
    Permanent,
}

/// A failed storage request. A missing key is not an error: reads return `Ok(None)`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct StorageError {
    /// Retry or not.
    pub kind: StorageErrorKind,
    /// What went wrong, without the key (the engine appends it, last).
    pub message: String,
}

impl StorageError {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self { kind: StorageErrorKind::Transient, message: message.into() }
    }
    /// A failure not worth retrying.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self { kind: StorageErrorKind::Permanent, message: message.into() }
    }
}

/// The body of a read whose store has answered: its bytes follow.
pub type Body<'a> = BoxFuture<'a, Result<Bytes, StorageError>>;

/// Read-only object storage, rooted at the store (keys are relative: `t2m/zarr.json`).
pub trait Storage: MaybeSend + MaybeSync + Debug {
    /// The whole object, or `None` if the key does not exist.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>>;
    /// Part of an object, or `None` if the key does not exist.
    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>>;
    /// Keys under `prefix` (recursively), or `None` if this store cannot list (plain HTTP).
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>>;
    /// The store's location, for error messages (`s3://bucket/era5.zarr`).
    fn location(&self) -> String;
    /// Whether reads are answered from this machine (local files, the page cache): then a
    /// read's latency is small against a decode, and reading far ahead of the decoders only
    /// holds memory, so the engine's read window starts narrow. Remote stores (the default)
    /// start with every `max_inflight` read allowed.
    fn reads_are_local(&self) -> bool {
        false
    }
    /// A read in two steps: resolves once the store has answered (its first byte: for HTTP,
    /// the response's headers), to the body still to come; `None` for a missing key. The
    /// engine hedges a read that has not answered by then (`hedge.rs`): a slow tail is a late
    /// answer, while the body's time depends on its size. The default reads everything
    /// first, for stores that cannot tell the answer from the bytes.
    fn start_read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, Result<Option<Body<'a>>, StorageError>> {
        Box::pin(async move { Ok(self.read(key, range).await?.map(ready_body)) })
    }
    /// The whole object (`range` `None`) or a range of it, in one step.
    fn read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        match range {
            None => self.get(key),
            Some(r) => self.get_range(key, r),
        }
    }
    /// True when [`Self::start_read`] resolves at the store's answer rather than after the
    /// whole body (so its times are times to first byte, whatever the size).
    fn answers_before_body(&self) -> bool {
        false
    }
    /// Where `key`'s bytes are kept when they are part of another object of this storage: a
    /// reference set's chunk is a byte range of a file (`refs.rs`), or nowhere for a chunk the
    /// set does not list. The engine then reads that range of that object, so the ranges of one
    /// file wait together and go out coalesced, as the inner chunks of a shard do. `None`
    /// (every store but references): `key` is an object of its own, or missing.
    fn locate<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Location>, StorageError>> {
        let _ = key;
        Box::pin(std::future::ready(Ok(None)))
    }
    /// The URL of `key` in messages: the location and the key, or for an object that stands
    /// for a file of a reference set ([`Self::locate`]), the file's own URL.
    fn key_url(&self, key: &str) -> String {
        join_url(&self.location(), key)
    }
}

/// Where a key's bytes are kept ([`Storage::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A range of another object of the same storage.
    In {
        /// The object's key in the same storage.
        object: String,
        /// Its range, or `None` for the whole object.
        range: Option<ByteRange>,
    },
    /// Nowhere: the key does not exist, so a chunk reads as its fill value with no request (a
    /// chunk a reference set does not list).
    Missing,
}

impl Location {
    /// The same place, its object's key made by `f` (a storage over others puts its prefix on it).
    #[must_use]
    pub fn map_object(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::In { object, range } => Self::In { object: f(object), range },
            Self::Missing => Self::Missing,
        }
    }
}

/// `location/key`, with one slash between them.
pub fn join_url(location: &str, key: &str) -> String {
    if location.ends_with('/') { format!("{location}{key}") } else { format!("{location}/{key}") }
}

/// Bytes already read, as the body of a two-step read ([`Storage::start_read`]).
pub fn ready_body<'a>(bytes: Bytes) -> Body<'a> {
    Box::pin(std::future::ready(Ok(bytes)))
}

/// A suffix read for stores that refuse a suffix longer than the object (object_store's
/// local files, zarr's `LocalStore`): when `suffix` fails, read the object whole with
/// `whole` and keep its last `n` bytes. If that read fails too, the first error stands.
///
/// # Errors
/// `suffix`'s error when the whole read cannot stand in for it.
pub async fn suffix_or_whole<S, W, F>(n: u64, suffix: S, whole: W) -> Result<Option<Bytes>, StorageError>
where
    S: Future<Output = Result<Option<Bytes>, StorageError>>,
    W: FnOnce() -> F,
    F: Future<Output = Result<Option<Bytes>, StorageError>>,
{
    let err = match suffix.await {
        Ok(b) => return Ok(b),
        Err(e) => e,
    };
    match whole().await {
        Ok(Some(b)) => {
            let keep = usize::try_from(n).unwrap_or(usize::MAX).min(b.len());
            Ok(Some(b.slice(b.len() - keep..)))
        }
        Ok(None) => Ok(None),
        Err(_) => Err(err),
    }
}

/// A bounded read held to the storage contract (`conformance.rs`), for stores whose own
/// ranged read clips or fails past the end (object_store, zarr's stores): `start > end` and
/// a range past the end are [`StorageErrorKind::Permanent`] errors, never short reads (a
/// short shard read means a truncated shard or a corrupt index); `start == end` is an empty
/// read of an existing object, at most at its end. `read` does the ranged read (only for a
/// non-empty range); `size` gives the object's length (`None`: missing), asked only when
/// the answer depends on it.
///
/// # Errors
/// The cases above, or `read`'s error when the range is within the object.
pub async fn exact_bounded<R, RF, S, SF>(start: u64, end: u64, read: R, size: S) -> Result<Option<Bytes>, StorageError>
where
    R: FnOnce() -> RF,
    RF: Future<Output = Result<Option<Bytes>, StorageError>>,
    S: FnOnce() -> SF,
    SF: Future<Output = Result<Option<u64>, StorageError>>,
{
    if start > end {
        return Err(reversed(start, end));
    }
    if start == end {
        return match size().await? {
            Some(len) if end > len => Err(past_end(start, end, len)),
            Some(_) => Ok(Some(Bytes::new())),
            None => Ok(None),
        };
    }
    match read().await {
        Ok(Some(b)) if b.len() as u64 == end - start => Ok(Some(b)),
        Ok(Some(b)) => Err(past_end(start, end, start + b.len() as u64)),
        Ok(None) => Ok(None),
        Err(e) => match size().await {
            Ok(Some(len)) if end > len => Err(past_end(start, end, len)),
            _ => Err(e),
        },
    }
}

/// A range that reaches past the end of its object: never worth retrying.
pub fn past_end(start: u64, end: u64, size: u64) -> StorageError {
    StorageError::permanent(format!(
        "byte range {start}..{end} reaches past the end of the object ({size} bytes); the object may be truncated, \
         or the shard index that gave the range is corrupt"
    ))
}

/// A range whose start is after its end: never worth retrying.
pub(crate) fn reversed(start: u64, end: u64) -> StorageError {
    StorageError::permanent(format!("invalid byte range {start}..{end}: start after end"))
}

/// `range` of bytes already in memory (an inline value, a concatenation's synthesized
/// metadata), held to the storage contract: a reversed range or one past the end is an error.
pub(crate) fn slice_in_memory(bytes: &Bytes, range: Option<ByteRange>) -> Result<Bytes, StorageError> {
    let len = bytes.len() as u64;
    match range {
        None => Ok(bytes.clone()),
        Some(ByteRange::Suffix(n)) => Ok(bytes.slice((len - n.min(len)) as usize..)),
        Some(ByteRange::Bounded { start, end }) if start > end => Err(reversed(start, end)),
        Some(ByteRange::Bounded { start, end }) if end <= len => Ok(bytes.slice(start as usize..end as usize)),
        Some(ByteRange::Bounded { start, end }) => Err(past_end(start, end, len)),
    }
}

/// Background tasks and time. Time is an input so tests can simulate it.
pub trait Executor: MaybeSend + MaybeSync + Debug {
    /// Run `task` in the background until it completes or is dropped.
    fn spawn(&self, task: BoxFuture<'static, ()>);
    /// Complete after `duration` has elapsed on this executor's clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
    /// Monotonic time since an arbitrary origin fixed for the executor's life.
    fn now(&self) -> Duration;
}

/// Where CPU-bound work (decode, assembly, gather, transforms) runs; never the executor.
pub trait ThreadPool: MaybeSend + MaybeSync + Debug {
    /// Run `job`. An inline pool may run it before returning.
    fn execute(&self, job: Job);
    /// How many jobs can run at once.
    fn parallelism(&self) -> NonZeroUsize;
}

/// The job was dropped before it produced a result (the pool shut down).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the thread pool dropped a job before it finished; it is shutting down")]
pub struct Cancelled;

/// Run `f` on `pool` and await its result.
pub fn run_on<R, F>(pool: &dyn ThreadPool, f: F) -> impl Future<Output = Result<R, Cancelled>> + use<R, F>
where
    R: MaybeSend + 'static,
    F: FnOnce() -> R + MaybeSend + 'static,
{
    let (tx, rx) = futures::channel::oneshot::channel();
    pool.execute(Box::new(move || {
        let _ = tx.send(f());
    }));
    async move { rx.await.map_err(|_| Cancelled) }
}

/// The executor and thread pool an engine runs on, and how much memory it may plan for.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// Async tasks and the clock.
    pub executor: std::sync::Arc<dyn Executor>,
    /// CPU work.
    pub pool: std::sync::Arc<dyn ThreadPool>,
    /// Bytes the engine can have: the memory available when it started (cgroup-aware)
    /// natively, the instance's room to grow in wasm; `None` when unknown. The automatic
    /// budget is sized within it and an explicit budget beyond it is refused, so a plan
    /// never assumes more memory than the machine has. Reading it is the target's job:
    /// core reads no system state.
    pub memory_available: Option<u64>,
    /// Faults in the pages of each fresh large buffer the engine allocates (chunk slots,
    /// batches) in one call, before they are written: cheaper and steadier than a fault per
    /// page on the first write (bench/run.py faults). `None` where the target has no such call.
    pub prefault: Option<crate::array::Prefault>,
}

impl Runtime {
    /// A runtime over `executor` and `pool`, with no memory limit known.
    pub fn new(executor: std::sync::Arc<dyn Executor>, pool: std::sync::Arc<dyn ThreadPool>) -> Self {
        Self { executor, pool, memory_available: None, prefault: None }
    }

    /// The same runtime, faulting fresh buffers in with `prefault`.
    #[must_use]
    pub fn with_prefault(mut self, prefault: crate::array::Prefault) -> Self {
        self.prefault = Some(prefault);
        self
    }

    /// The same runtime, planning within `bytes` of memory.
    #[must_use]
    pub fn with_memory_available(mut self, bytes: Option<u64>) -> Self {
        self.memory_available = bytes;
        self
    }
}

/// A pool that runs every job on the calling thread, at once. The wasm default (one
/// thread) and the deterministic choice for simulations.
#[derive(Debug, Default, Clone, Copy)]
pub struct InlinePool;

impl ThreadPool for InlinePool {
    fn execute(&self, job: Job) {
        job();
    }
    fn parallelism(&self) -> NonZeroUsize {
        NonZeroUsize::MIN
    }
}
