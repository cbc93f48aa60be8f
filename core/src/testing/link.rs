//! An object store past this machine, for simulations at fleet scale: one float32 array whose
//! chunks are generated as they are read (a million chunks cost no memory), behind a model of
//! one node's link to the store (time to first byte, a rate per stream, a NIC all of the
//! node's requests share) on a simulated clock.
//!
//! Written here rather than taken from a library: the simulation needs the engine's own
//! [`Storage`] seam on [`super::SimExecutor`]'s virtual clock, which no network simulator
//! offers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::runtime::{BoxFuture, ByteRange, Executor, Storage, StorageError};

/// One node's link to an object store.
///
/// A request waits `first_byte`, then its bytes stream at `stream_bytes_per_s`; the node's
/// requests share `nic_bytes_per_s` first come, first served (each holds the NIC for its
/// bytes at that rate), so a request ends when both its stream and its turn on the NIC have
/// carried it.
#[derive(Debug, Clone, Copy)]
pub struct LinkModel {
    /// Time from a request to its first byte.
    pub first_byte: Duration,
    /// What one request (one connection) carries per second.
    pub stream_bytes_per_s: f64,
    /// What all of one node's requests together carry per second.
    pub nic_bytes_per_s: f64,
}

impl LinkModel {
    /// Little's law on this link: `window` requests of `bytes` each kept in flight deliver
    /// `window × bytes` per request time (first byte + streaming), up to the NIC.
    pub fn bound_bytes_per_s(&self, window: usize, bytes: u64) -> f64 {
        let request_s = self.first_byte.as_secs_f64() + bytes as f64 / self.stream_bytes_per_s;
        (window as f64 * bytes as f64 / request_s).min(self.nic_bytes_per_s)
    }
}

/// A Zarr v3 float32 array at `path`, shape `[n_chunks × chunk[0], chunk[1..]]`, chunked by
/// `chunk`, uncompressed; the element at flat index `i` is `i mod 2^24` (exact in f32).
/// Clones share the read counts, so every node's reads are counted in one place.
#[derive(Debug, Clone)]
pub struct GeneratedArray {
    path: String,
    n_chunks: u64,
    chunk: Vec<u64>,
    reads: Arc<Vec<AtomicU32>>,
}

impl GeneratedArray {
    /// A new array; `chunk` includes the sample axis (axis 0) and is not empty.
    pub fn new(path: &str, n_chunks: u64, chunk: &[u64]) -> Self {
        let reads = (0..n_chunks).map(|_| AtomicU32::new(0)).collect();
        Self { path: path.to_string(), n_chunks, chunk: chunk.to_vec(), reads: Arc::new(reads) }
    }

    /// The element value at flat index `i`.
    pub fn value(i: u64) -> f32 {
        (i % (1 << 24)) as f32
    }

    /// Stored bytes of one chunk.
    pub fn chunk_bytes(&self) -> u64 {
        4 * self.chunk.iter().product::<u64>()
    }

    /// Reads of chunk `c` so far, over every node.
    pub fn reads_of(&self, c: u64) -> u32 {
        self.reads[c as usize].load(Ordering::Relaxed)
    }

    /// This array as seen from one node through `link` on `executor`'s clock.
    pub fn node(&self, executor: Arc<dyn Executor>, link: LinkModel) -> LinkedStore {
        LinkedStore { array: self.clone(), executor, link, nic_free_at: Arc::new(Mutex::new(Duration::ZERO)) }
    }

    fn metadata(&self) -> Bytes {
        let mut shape = self.chunk.clone();
        shape[0] *= self.n_chunks;
        let meta = serde_json::json!({
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": self.chunk}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {}
        });
        Bytes::from(meta.to_string())
    }

    /// The chunk a key names (`{path}/c/{i}/0/...`), if it is one of this array's.
    fn chunk_of(&self, key: &str) -> Option<u64> {
        let rest = key.strip_prefix(&self.path)?.strip_prefix("/c/")?;
        let parts: Vec<&str> = rest.split('/').collect();
        let c: u64 = parts[0].parse().ok()?;
        let inner_zero = parts[1..].iter().all(|p| *p == "0");
        (parts.len() == self.chunk.len() && inner_zero && c < self.n_chunks).then_some(c)
    }

    fn object(&self, key: &str) -> Option<Bytes> {
        if key == format!("{}/zarr.json", self.path) {
            return Some(self.metadata());
        }
        let c = self.chunk_of(key)?;
        self.reads[c as usize].fetch_add(1, Ordering::Relaxed);
        let n = self.chunk.iter().product::<u64>();
        let values = (c * n..(c + 1) * n).flat_map(|i| Self::value(i).to_le_bytes());
        Some(values.collect::<Vec<u8>>().into())
    }
}

/// A [`GeneratedArray`] behind one node's [`LinkModel`] (see [`GeneratedArray::node`]).
#[derive(Debug, Clone)]
pub struct LinkedStore {
    array: GeneratedArray,
    executor: Arc<dyn Executor>,
    link: LinkModel,
    /// When the NIC has carried every byte asked of it so far.
    nic_free_at: Arc<Mutex<Duration>>,
}

impl LinkedStore {
    /// Wait as the link would for a response of `len` bytes.
    async fn carry(&self, len: u64) {
        self.executor.sleep(self.link.first_byte).await;
        let now = self.executor.now();
        let streamed = now + Duration::from_secs_f64(len as f64 / self.link.stream_bytes_per_s);
        let wire = Duration::from_secs_f64(len as f64 / self.link.nic_bytes_per_s);
        let carried = {
            let mut free = self.nic_free_at.lock().unwrap();
            *free = (*free).max(now) + wire;
            *free
        };
        self.executor.sleep(streamed.max(carried).saturating_sub(now)).await;
    }

    async fn serve(&self, key: &str, range: Option<ByteRange>) -> Result<Option<Bytes>, StorageError> {
        let Some(obj) = self.array.object(key) else {
            self.carry(0).await;
            return Ok(None);
        };
        let out = super::slice_range(obj, range)?;
        self.carry(out.len() as u64).await;
        Ok(Some(out))
    }
}

impl Storage for LinkedStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.serve(key, None))
    }
    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.serve(key, Some(range)))
    }
    fn list<'a>(&'a self, _prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async { Ok(None) })
    }
    fn location(&self) -> String {
        "sim://".to_string()
    }
    fn reads_are_local(&self) -> bool {
        false
    }
}
