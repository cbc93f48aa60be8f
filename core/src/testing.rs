//! Test doubles for the runtime seams: an in-memory store with injectable latency, failures
//! and read counts, and a deterministic simulated clock and executor.
//!
//! Fakes are for fault injection and simulation; end-to-end tests use real stores.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::runtime::{BoxFuture, ByteRange, Executor, Storage, StorageError};

mod link;
pub use link::{GeneratedArray, LinkModel, LinkedStore};

/// What a [`MemoryStorage`] does to a read of one key.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Fail the next `n` reads with a transient error, then succeed.
    TransientFailures(u32),
    /// Fail every read permanently.
    Permanent(String),
    /// Delay the next `reads` reads by `delay` more than the store's latency (a slow tail);
    /// needs [`MemoryStorage::with_latency`]'s clock.
    Slow {
        /// Reads still to delay.
        reads: u32,
        /// The extra wait.
        delay: Duration,
    },
}

/// Counters a test can assert on.
#[derive(Debug, Default)]
pub struct ReadCounts {
    /// Whole-object and ranged reads, by key.
    pub by_key: Mutex<HashMap<String, u64>>,
    /// All reads.
    pub total: AtomicU64,
    /// Bytes all reads returned.
    pub bytes: AtomicU64,
}

/// An in-memory store. Reads can be delayed on an [`Executor`]'s clock, fail, and are counted.
#[derive(Debug, Clone, Default)]
pub struct MemoryStorage {
    objects: Arc<Mutex<BTreeMap<String, Bytes>>>,
    faults: Arc<Mutex<HashMap<String, Fault>>>,
    latency: Option<(Arc<dyn Executor>, Duration)>,
    /// Read counters.
    pub counts: Arc<ReadCounts>,
    listable: bool,
}

impl MemoryStorage {
    /// An empty, listable store with no latency.
    pub fn new() -> Self {
        Self { listable: true, ..Self::default() }
    }

    /// Delay every read by `latency` on `executor`'s clock.
    #[must_use]
    pub fn with_latency(mut self, executor: Arc<dyn Executor>, latency: Duration) -> Self {
        self.latency = Some((executor, latency));
        self
    }

    /// Make `list` answer `None`, like a plain HTTP server.
    #[must_use]
    pub fn unlistable(mut self) -> Self {
        self.listable = false;
        self
    }

    /// Put an object.
    pub fn insert(&self, key: impl Into<String>, value: impl Into<Bytes>) {
        self.objects.lock().unwrap().insert(key.into(), value.into());
    }

    /// Remove an object.
    pub fn remove(&self, key: &str) {
        self.objects.lock().unwrap().remove(key);
    }

    /// Inject a fault on one key.
    pub fn set_fault(&self, key: impl Into<String>, fault: Fault) {
        self.faults.lock().unwrap().insert(key.into(), fault);
    }

    /// Reads of `key` so far.
    pub fn reads_of(&self, key: &str) -> u64 {
        self.counts.by_key.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    /// All reads so far.
    pub fn total_reads(&self) -> u64 {
        self.counts.total.load(Ordering::SeqCst)
    }

    /// Bytes all reads so far returned.
    pub fn bytes_read(&self) -> u64 {
        self.counts.bytes.load(Ordering::SeqCst)
    }

    /// The length of a stored object (0 when missing).
    pub fn object_len(&self, key: &str) -> u64 {
        self.objects.lock().unwrap().get(key).map_or(0, |b| b.len() as u64)
    }

    /// Keys currently stored.
    pub fn keys(&self) -> Vec<String> {
        self.objects.lock().unwrap().keys().cloned().collect()
    }

    async fn serve(&self, key: &str, range: Option<ByteRange>) -> Result<Option<Bytes>, StorageError> {
        let extra = match self.faults.lock().unwrap().get_mut(key) {
            Some(Fault::Slow { reads, delay }) if *reads > 0 => {
                *reads -= 1;
                *delay
            }
            _ => Duration::ZERO,
        };
        // Counted as the request arrives, so a request dropped while it waits (a hedge's
        // loser) is counted too.
        *self.counts.by_key.lock().unwrap().entry(key.to_string()).or_default() += 1;
        self.counts.total.fetch_add(1, Ordering::SeqCst);
        if let Some((exec, d)) = &self.latency {
            exec.sleep(*d + extra).await;
        }
        {
            let mut faults = self.faults.lock().unwrap();
            match faults.get_mut(key) {
                Some(Fault::TransientFailures(n)) if *n > 0 => {
                    *n -= 1;
                    return Err(StorageError::transient("injected transient failure"));
                }
                Some(Fault::Permanent(msg)) => return Err(StorageError::permanent(msg.clone())),
                _ => {}
            }
        }
        let Some(obj) = self.objects.lock().unwrap().get(key).cloned() else { return Ok(None) };
        let out = slice_range(obj, range)?;
        self.counts.bytes.fetch_add(out.len() as u64, Ordering::SeqCst);
        Ok(Some(out))
    }
}

/// The part of a stored object a read asks for (all of it without a range), or the error a
/// store gives for a range past its end.
fn slice_range(obj: Bytes, range: Option<ByteRange>) -> Result<Bytes, StorageError> {
    let len = obj.len() as u64;
    match range {
        None => Ok(obj),
        Some(ByteRange::Bounded { start, end }) if start <= end && end <= len => {
            Ok(obj.slice(start as usize..end as usize))
        }
        Some(ByteRange::Bounded { start, end }) => {
            Err(StorageError::permanent(format!("range {start}..{end} outside object of {len} bytes")))
        }
        Some(ByteRange::Suffix(n)) => Ok(obj.slice((len - n.min(len)) as usize..)),
    }
}

impl Storage for MemoryStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.serve(key, None))
    }
    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.serve(key, Some(range)))
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async move {
            if !self.listable {
                return Ok(None);
            }
            Ok(Some(self.objects.lock().unwrap().keys().filter(|k| k.starts_with(prefix)).cloned().collect()))
        })
    }
    fn location(&self) -> String {
        "memory://".to_string()
    }
    /// In memory, as local as reads get, unless a latency makes it stand for a remote store;
    /// so the engine's tests run with the narrow read window a local store starts with.
    fn reads_are_local(&self) -> bool {
        self.latency.is_none()
    }
}

/// A deterministic executor with a virtual clock.
///
/// [`SimExecutor::run`] drives a future and every task it spawns on one thread; whenever
/// nothing can make progress it advances the clock to the next timer. If nothing can make
/// progress and no timer is pending, the simulation is deadlocked and `run` returns
/// [`SimError::Deadlock`] — a hang becomes a test failure, without wall-clock timeouts.
#[derive(Debug, Clone, Default)]
pub struct SimExecutor {
    inner: Arc<Mutex<SimState>>,
}

#[derive(Default)]
struct SimState {
    now: Duration,
    next_id: u64,
    timers: BTreeMap<(Duration, u64), Option<std::task::Waker>>,
    spawned: Vec<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for SimState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimState").field("now", &self.now).field("timers", &self.timers.len()).finish()
    }
}

/// Why a simulation stopped without a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// Nothing could run and no timer was pending.
    Deadlock(Duration),
    /// Virtual time passed the limit.
    TimeLimit(Duration),
}

impl SimExecutor {
    /// A new simulation at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drive `fut` (and spawned tasks) to completion on the virtual clock, up to `limit`.
    ///
    /// # Errors
    /// [`SimError`] on a deadlock or when virtual time passes `limit`.
    pub fn run<T: 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + 'static,
        limit: Duration,
    ) -> Result<T, SimError> {
        use futures::task::LocalSpawnExt;
        let mut pool = futures::executor::LocalPool::new();
        let spawner = pool.spawner();
        let (tx, mut rx) = futures::channel::oneshot::channel();
        spawner
            .spawn_local(async move {
                let _ = tx.send(fut.await);
            })
            .expect("local pool accepts tasks");
        loop {
            loop {
                let spawned = std::mem::take(&mut self.inner.lock().unwrap().spawned);
                if spawned.is_empty() {
                    break;
                }
                for t in spawned {
                    spawner.spawn_local(t).expect("local pool accepts tasks");
                }
                pool.run_until_stalled();
            }
            pool.run_until_stalled();
            if !self.inner.lock().unwrap().spawned.is_empty() {
                continue;
            }
            if let Ok(Some(v)) = rx.try_recv() {
                return Ok(v);
            }
            let mut s = self.inner.lock().unwrap();
            let Some((&(deadline, _), _)) = s.timers.iter().next() else {
                return Err(SimError::Deadlock(s.now));
            };
            if deadline > limit {
                return Err(SimError::TimeLimit(deadline));
            }
            s.now = s.now.max(deadline);
            let now = s.now;
            let due: Vec<(Duration, u64)> = s.timers.range(..=(now, u64::MAX)).map(|(k, _)| *k).collect();
            for k in due {
                if let Some(Some(w)) = s.timers.remove(&k) {
                    w.wake();
                }
            }
        }
    }
}

struct SimSleep {
    sim: Arc<Mutex<SimState>>,
    deadline: Duration,
    id: u64,
}

impl std::future::Future for SimSleep {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let mut s = self.sim.lock().unwrap();
        if s.now >= self.deadline {
            s.timers.remove(&(self.deadline, self.id));
            return std::task::Poll::Ready(());
        }
        s.timers.insert((self.deadline, self.id), Some(cx.waker().clone()));
        std::task::Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let Ok(mut s) = self.sim.lock() {
            s.timers.remove(&(self.deadline, self.id));
        }
    }
}

impl Executor for SimExecutor {
    fn spawn(&self, task: BoxFuture<'static, ()>) {
        self.inner.lock().unwrap().spawned.push(task);
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let mut s = self.inner.lock().unwrap();
        let id = s.next_id;
        s.next_id += 1;
        let deadline = s.now + duration;
        Box::pin(SimSleep { sim: Arc::clone(&self.inner), deadline, id })
    }
    fn now(&self) -> Duration {
        self.inner.lock().unwrap().now
    }
}

/// Write a float32 Zarr v3 array with zarrs into `storage` (zstd, or gzip without C codecs),
/// optionally sharded with `inner` chunks. `value(i)` gives the element at flat index `i`.
pub fn write_f32_array(
    storage: &MemoryStorage,
    path: &str,
    shape: &[u64],
    chunks: &[u64],
    inner: Option<&[u64]>,
    dimension_names: Option<&[&str]>,
    value: impl Fn(u64) -> f32,
) {
    use zarrs::array::{Array, ArrayMetadata};
    use zarrs::storage::store::MemoryStore;
    use zarrs::storage::{ListableStorageTraits, ReadableStorageTraits};
    let comp = if cfg!(feature = "c-codecs") {
        serde_json::json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})
    } else {
        serde_json::json!({"name": "gzip", "configuration": {"level": 1}})
    };
    let bytes = serde_json::json!({"name": "bytes", "configuration": {"endian": "little"}});
    let codecs = match inner {
        None => serde_json::json!([bytes, comp]),
        Some(inner) => serde_json::json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": [bytes, comp],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]),
    };
    let mut meta = serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": codecs, "attributes": {}
    });
    if let Some(d) = dimension_names {
        meta["dimension_names"] = serde_json::json!(d);
    }
    let store = Arc::new(MemoryStore::new());
    let metadata: ArrayMetadata = serde_json::from_value(meta).expect("valid metadata");
    let array = Array::new_with_metadata(store.clone(), &format!("/{path}"), metadata).expect("valid array");
    array.store_metadata().expect("store metadata");
    let n: u64 = shape.iter().product();
    let values: Vec<f32> = (0..n).map(value).collect();
    array.store_array_subset(&array.subset_all(), values).expect("store values");
    for key in store.list().expect("list") {
        let v = store.get(&key).expect("get").expect("present");
        storage.insert(key.as_str().to_string(), v);
    }
}

/// A disk tier in memory, for engine simulations: it keeps stored chunks, counts calls, and
/// can fail or refuse on purpose (the real one is `insitubatch_native::cache`).
#[derive(Debug, Default, Clone)]
pub struct MemoryTier {
    inner: Arc<Mutex<MemoryTierState>>,
}

#[derive(Debug, Default)]
struct MemoryTierState {
    chunks: BTreeMap<(u32, u64), Bytes>,
    persist: bool,
    readonly: bool,
    fail_store: bool,
    /// Answer `revive_async`/`store_async` (as the browser's tier does); the blocking calls
    /// then fail, so a test sees which form the engine used.
    asynchronous: bool,
    counters: crate::tier::TierCounters,
    opened_with: Vec<crate::tier::ArrayIdentity>,
}

impl MemoryTier {
    /// A persisting tier (revives what it stored).
    pub fn persisting() -> Self {
        let t = Self::default();
        t.inner.lock().unwrap().persist = true;
        t
    }

    /// Refuse misses like a `readonly_cache` opener.
    pub fn set_readonly(&self, readonly: bool) {
        self.inner.lock().unwrap().readonly = readonly;
    }

    /// Make every store fail (disk full).
    pub fn set_fail_store(&self, fail: bool) {
        self.inner.lock().unwrap().fail_store = fail;
    }

    /// Answer only the asynchronous calls (`revive_async`, `store_async`), as a tier over an
    /// asynchronous API does; the blocking ones fail.
    pub fn set_asynchronous(&self, asynchronous: bool) {
        self.inner.lock().unwrap().asynchronous = asynchronous;
    }

    fn revive_now(&self, array: u32, chunk: u64) -> crate::Result<Option<Bytes>> {
        let mut s = self.inner.lock().unwrap();
        match s.chunks.get(&(array, chunk)).cloned() {
            Some(b) => {
                s.counters.revived += 1;
                Ok(Some(b))
            }
            None if s.readonly => Err(crate::Error::Cache {
                message: format!("readonly miss: chunk {chunk} of array #{array}"),
                key: "memory".into(),
            }),
            None => {
                s.counters.misses += 1;
                Ok(None)
            }
        }
    }

    fn store_now(&self, array: u32, chunk: u64, data: &[u8]) -> crate::Result<Bytes> {
        let mut s = self.inner.lock().unwrap();
        if s.fail_store {
            return Err(crate::Error::Cache { message: "disk full".into(), key: "memory".into() });
        }
        let b = Bytes::copy_from_slice(data);
        if s.persist {
            s.chunks.insert((array, chunk), b.clone());
        }
        s.counters.stored += 1;
        Ok(b)
    }

    fn blocking(&self) -> crate::Result<()> {
        if self.inner.lock().unwrap().asynchronous {
            return Err(crate::Error::Internal("an asynchronous tier's blocking call was made".into()));
        }
        Ok(())
    }

    /// Counters so far.
    pub fn counters(&self) -> crate::tier::TierCounters {
        self.inner.lock().unwrap().counters
    }

    /// The identities of the last open.
    pub fn opened_with(&self) -> Vec<crate::tier::ArrayIdentity> {
        self.inner.lock().unwrap().opened_with.clone()
    }
}

impl crate::tier::ChunkTier for MemoryTier {
    fn revive(&self, array: u32, chunk: u64, _dtype: crate::DType, _shape: &[usize]) -> crate::Result<Option<Bytes>> {
        self.blocking()?;
        self.revive_now(array, chunk)
    }

    fn store(
        &self,
        array: u32,
        chunk: u64,
        _dtype: crate::DType,
        _shape: &[usize],
        data: &[u8],
    ) -> crate::Result<Option<Bytes>> {
        self.blocking()?;
        self.store_now(array, chunk, data).map(Some)
    }

    fn revive_async<'a>(
        &'a self,
        array: u32,
        chunk: u64,
        _dtype: crate::DType,
        _shape: &'a [usize],
    ) -> Option<crate::runtime::BoxFuture<'a, crate::Result<Option<Bytes>>>> {
        let asynchronous = self.inner.lock().unwrap().asynchronous;
        asynchronous.then(|| -> crate::runtime::BoxFuture<'a, _> {
            Box::pin(async move {
                crate::reads::yield_once().await; // answered on a later poll, as I/O would be
                self.revive_now(array, chunk)
            })
        })
    }

    fn store_async<'a>(
        &'a self,
        array: u32,
        chunk: u64,
        _dtype: crate::DType,
        _shape: &'a [usize],
        data: &'a [u8],
    ) -> Option<crate::runtime::BoxFuture<'a, crate::Result<()>>> {
        let asynchronous = self.inner.lock().unwrap().asynchronous;
        asynchronous.then(|| -> crate::runtime::BoxFuture<'a, _> {
            Box::pin(async move {
                crate::reads::yield_once().await;
                self.store_now(array, chunk, data).map(drop)
            })
        })
    }

    fn persists(&self) -> bool {
        self.inner.lock().unwrap().persist
    }

    fn counters(&self) -> crate::tier::TierCounters {
        self.inner.lock().unwrap().counters
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

impl crate::tier::TierOpener for MemoryTier {
    fn open(&self, arrays: &[crate::tier::ArrayIdentity]) -> crate::Result<Arc<dyn crate::tier::ChunkTier>> {
        self.inner.lock().unwrap().opened_with = arrays.to_vec();
        Ok(Arc::new(self.clone()))
    }
}

/// Files by URL for reference sets and Icechunk repositories in tests: `file://host/KEY` is
/// key `KEY` of one memory store; any other URL is refused.
#[derive(Debug)]
pub struct MemoryFiles(pub MemoryStorage);

impl crate::FileOpener for MemoryFiles {
    fn open(&self, url: &str) -> Result<(Arc<dyn Storage>, String), StorageError> {
        match url.strip_prefix("file://host/") {
            Some(key) => Ok((Arc::new(self.0.clone()), key.to_string())),
            None => Err(StorageError::permanent(format!("no store for {url}"))),
        }
    }
}
