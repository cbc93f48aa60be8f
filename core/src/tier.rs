//! The disk tier seam: where decoded chunks go besides the heap, and where they come back from.
//!
//! The core has no filesystem, so a tier is a trait; `insitubatch-native` implements it over
//! memory-mapped files in a `cache_dir` (spill, persist across runs, one writer / many
//! readers). The engine asks the tier before it fetches a chunk ([`ChunkTier::revive`]) and
//! hands it every chunk it loads ([`ChunkTier::store`]); a stored chunk is served from the
//! returned bytes (a mapping) and the heap copy is freed. Residency is charged to the same
//! pool budget whichever backing holds it.
//!
//! Identity is per array ([`ArrayIdentity::fingerprint`]): the store, the array path, its
//! geometry and codec metadata, and the chunk transforms scoped to it (without the scope),
//! so a changed pipeline over one array invalidates only that array.
//!
//! A tier whose storage has no blocking API (the browser's Origin Private File System outside
//! dedicated workers, `insitubatch-wasm`'s `opfs/`) answers [`ChunkTier::revive_async`] and
//! [`ChunkTier::store_async`] instead: the engine awaits them on its executor where it would
//! have awaited the blocking calls' pool job.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::array::DType;
use crate::error::Result;
use crate::runtime::{BoxFuture, MaybeSend, MaybeSync};
use crate::transform::ChunkTransform;

/// What the tier needs to know about one array of a dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayIdentity {
    /// Array path in the store (the tier's name for it).
    pub path: String,
    /// 16 hex characters: a hash of everything that decides the cached bytes.
    pub fingerprint: String,
    /// Element type of a cached chunk (after the chunk transforms).
    pub dtype: DType,
    /// Per-sample shape of a cached chunk (after the chunk transforms).
    pub inner: Vec<usize>,
}

/// Fingerprint of one array's cached bytes.
///
/// `location` is the store URL, `metadata` the array's stored metadata document (codecs,
/// fill value, shape, chunk grid), and each transform contributes its
/// [`ChunkTransform::cache_token`] for this array, in pipeline order.
pub(crate) fn array_fingerprint(
    location: &str,
    path: &str,
    sample_axis: usize,
    metadata: &[u8],
    transforms: &[Arc<dyn ChunkTransform>],
) -> String {
    let mut h = Sha256::new();
    // Length-prefixed fields, so no two inputs concatenate to the same stream.
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(b"insitubatch-rs chunk cache v1");
    field(location.trim_end_matches('/').as_bytes());
    field(path.as_bytes());
    field(&(sample_axis as u64).to_le_bytes());
    field(metadata);
    for t in transforms {
        field(t.cache_token(path).as_bytes());
    }
    let digest = h.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The record that ends every chunk file a disk tier writes, natively (`cache_dir`) and in
/// the browser (`cacheDir`): `IBCOMMIT`, the CRC-32C of everything the file says before it
/// (and of whatever names the chunk, passed in as the first part: the native tier's file
/// name), little-endian, then `END\n`.
///
/// It is written last, so an interrupted write, a truncated file, a flipped bit and a file
/// moved under another chunk's name all fail [`CommitRecord::check`], and a revive treats
/// any of them as a miss. CRC-32C, not a cryptographic hash: it is there to catch accidents
/// (its 32 bits miss a random corruption once in 4 billion, and every burst of up to 32 bits),
/// at the speed of the CPU's `crc32` instruction on x86-64, because it runs over every byte a
/// revive serves. A deliberate forgery is kept out by who may write the folder, not by the
/// checksum (docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitRecord([u8; CommitRecord::LEN]);

impl CommitRecord {
    /// Its length in bytes, at the end of the file.
    pub const LEN: usize = 16;
    const START: &[u8; 8] = b"IBCOMMIT";
    const END: &[u8; 4] = b"END\n";

    /// The record of `parts`, in order (their concatenation is what it checks).
    pub fn over(parts: &[&[u8]]) -> Self {
        let crc = parts.iter().fold(0, |crc, part| crc32c::crc32c_append(crc, part));
        let mut out = [0u8; Self::LEN];
        out[..8].copy_from_slice(Self::START);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
        out[12..].copy_from_slice(Self::END);
        Self(out)
    }

    /// The bytes to write.
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }

    /// Whether `tail`, read from the end of a file, is the record of `parts`: `Err` says what
    /// is wrong, in words that follow "a cached chunk file".
    ///
    /// # Errors
    /// No record there (a write cut short, or not a chunk file), or a checksum that differs.
    pub fn check(parts: &[&[u8]], tail: &[u8]) -> std::result::Result<(), &'static str> {
        if tail.len() != Self::LEN || tail[..8] != Self::START[..] || tail[12..] != Self::END[..] {
            return Err("has no commit record (an interrupted write, or not a chunk file)");
        }
        if tail != Self::over(parts).0 {
            return Err("does not match its checksum (damaged, or another chunk's file)");
        }
        Ok(())
    }
}

/// Counters a tier reports into pass stats and `describe()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TierCounters {
    /// Chunks served from the tier without a fetch or a decode.
    pub revived: u64,
    /// Chunks written to the tier.
    pub stored: u64,
    /// Lookups that found nothing usable (absent, or a file that did not match).
    pub misses: u64,
}

/// A place decoded chunks spill to and come back from. Implementations do blocking I/O;
/// the engine calls them on its thread pool, never on the executor.
pub trait ChunkTier: MaybeSend + MaybeSync + std::fmt::Debug {
    /// The chunk's bytes (`product(shape) * dtype.size()`, row-major, native endianness) if
    /// the tier holds a valid copy; `Ok(None)` for a miss.
    ///
    /// # Errors
    /// Only for conditions that must stop the run, such as a miss in a read-only cache that
    /// promised to be complete.
    fn revive(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize]) -> Result<Option<Bytes>>;

    /// Write a decoded chunk and return bytes backed by the tier (a mapping) that replace the
    /// heap copy, or `Ok(None)` to keep serving the heap copy (a read-only tier).
    ///
    /// # Errors
    /// When the tier cannot write (disk full, permissions): the load fails with the message.
    fn store(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize], data: &[u8]) -> Result<Option<Bytes>>;

    /// True when stored chunks outlive eviction and the run, so re-reading an evicted chunk
    /// is a local revive rather than a fetch and a decode.
    fn persists(&self) -> bool;

    /// Counters so far.
    fn counters(&self) -> TierCounters;

    /// One line for reports: where it lives and in which mode.
    fn describe(&self) -> String;

    /// Conditions the user should know about (a cache on a network filesystem).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// [`Self::revive`] as a future, for a tier whose I/O is asynchronous: `Some`, and the
    /// engine awaits it on its executor instead of calling `revive` on the thread pool.
    /// Default `None` (the blocking call).
    fn revive_async<'a>(
        &'a self,
        _array: u32,
        _chunk: u64,
        _dtype: DType,
        _shape: &'a [usize],
    ) -> Option<BoxFuture<'a, Result<Option<Bytes>>>> {
        None
    }

    /// [`Self::store`] as a future, for a tier whose I/O is asynchronous: `Some`, and the
    /// engine awaits the write (so the chunk's bytes are held no longer than its load) and
    /// keeps serving the heap copy. Default `None` (the blocking call).
    fn store_async<'a>(
        &'a self,
        _array: u32,
        _chunk: u64,
        _dtype: DType,
        _shape: &'a [usize],
        _data: &'a [u8],
    ) -> Option<BoxFuture<'a, Result<()>>> {
        None
    }
}

/// Opens a tier for a dataset once its arrays' identities are known (at construction).
pub trait TierOpener: MaybeSend + MaybeSync + std::fmt::Debug {
    /// Open (lock, validate, reset stale arrays) for these arrays, indexed as the engine
    /// indexes them.
    ///
    /// # Errors
    /// A held lock, a stale cache, an unreadable log: the dataset is refused with the message.
    fn open(&self, arrays: &[ArrayIdentity]) -> Result<Arc<dyn ChunkTier>>;
}

#[cfg(test)]
mod tests {
    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh).
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::CommitRecord;

    #[test]
    fn the_record_is_crc32c_of_its_parts_in_order_and_checks_nothing_else() {
        // CRC-32C's check value (RFC 3720): the checksum is Castagnoli's, little-endian.
        let r = CommitRecord::over(&[b"1234", b"56789"]);
        assert_eq!(r.as_bytes()[..8], *b"IBCOMMIT");
        assert_eq!(r.as_bytes()[8..12], 0xE306_9283u32.to_le_bytes());
        assert_eq!(r.as_bytes()[12..], *b"END\n");
        assert_eq!(r, CommitRecord::over(&[b"123456789"]), "parts are concatenated");
        assert_eq!(CommitRecord::check(&[b"123456789"], r.as_bytes()), Ok(()));
        assert!(CommitRecord::check(&[b"123456780"], r.as_bytes()).unwrap_err().contains("checksum"));
        assert!(CommitRecord::check(&[b"x"], &r.as_bytes()[..15]).unwrap_err().contains("no commit record"));
        assert!(CommitRecord::check(&[b"x"], &[0; CommitRecord::LEN]).unwrap_err().contains("no commit record"));
    }
}
