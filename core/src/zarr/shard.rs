//! Sharded arrays: where an inner chunk's index entry lives, and decoding a shard's index.

use std::sync::Arc;

use zarrs::array::codec::{ShardingCodec, ShardingIndexLocation};
use zarrs::array::{CodecChain, CodecOptions};

use super::{BAD_CHUNK_HINT, ZarrArray, meta_err, nz};
use crate::error::{Error, Result};
use crate::runtime::ByteRange;

/// A decoded shard index: per inner chunk, `(offset, nbytes)` in the shard object, or `None`
/// when that inner chunk is absent (fill value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    entries: Vec<Option<(u64, u64)>>,
}

impl ShardIndex {
    /// Byte range of inner chunk `index` in its shard, `None` if absent (or out of range).
    pub fn range(&self, index: usize) -> Option<ByteRange> {
        self.entries
            .get(index)
            .copied()
            .flatten()
            .map(|(offset, n)| ByteRange::Bounded { start: offset, end: offset + n })
    }
    /// Number of inner chunks in the shard.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True for a shard with no inner chunks (never for a valid array).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Inner chunks present in the shard.
    pub fn n_present(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }
}

/// Sharding details of a sharded array.
#[derive(Debug, Clone)]
pub(super) struct Sharding {
    pub(super) shard_shape: Vec<u64>,
    pub(super) chunks_per_shard: Vec<u64>,
    pub(super) codec: Arc<ShardingCodec>,
    pub(super) inner: Arc<CodecChain>,
    pub(super) index_size: u64,
    pub(super) index_location: ShardingIndexLocation,
    pub(super) inner_names: Vec<String>,
    /// Most bytes one encoded inner chunk can have (the inner chain's bound), when the chain
    /// has one: a larger index entry is corrupt, and is refused before it is fetched.
    pub(super) max_inner_bytes: Option<u64>,
}

impl ZarrArray {
    /// Byte range of the shard index inside a shard object (sharded arrays only).
    pub fn shard_index_range(&self) -> Option<ByteRange> {
        self.sharding.as_ref().map(|s| match s.index_location {
            ShardingIndexLocation::Start => ByteRange::Bounded { start: 0, end: s.index_size },
            ShardingIndexLocation::End => ByteRange::Suffix(s.index_size),
        })
    }

    /// Inner chunks per shard, and the most bytes a whole shard object decodes to (its
    /// inner chunks' decoded bytes: a bound on its stored size for any compressing codec);
    /// `None` for an array that is not sharded.
    pub fn shard_extent(&self) -> Option<(u64, u64)> {
        self.sharding.as_ref().map(|s| {
            let n: u64 = s.chunks_per_shard.iter().product();
            (n, n.saturating_mul(self.tile_bytes as u64))
        })
    }

    /// The shard index held in a whole shard object's bytes (`None` when the object is
    /// shorter than the index).
    pub fn shard_index_in<'a>(&self, object: &'a [u8]) -> Option<&'a [u8]> {
        let s = self.sharding.as_ref()?;
        let n = usize::try_from(s.index_size).ok()?;
        match s.index_location {
            ShardingIndexLocation::Start => object.get(..n),
            ShardingIndexLocation::End => object.len().checked_sub(n).and_then(|at| object.get(at..)),
        }
    }

    /// Decode a shard index fetched with [`Self::shard_index_range`].
    ///
    /// # Errors
    /// [`Error::Decode`] when the bytes are not a valid index; [`Error::Metadata`] when the
    /// array is not sharded.
    pub fn decode_shard_index(&self, bytes: &[u8], key: &str) -> Result<ShardIndex> {
        let Some(s) = &self.sharding else {
            return Err(meta_err("decode_shard_index called on an array that is not sharded", &self.meta_key));
        };
        let bad = |what: String| Error::Decode {
            message: format!("bad shard index: {what}; {BAD_CHUNK_HINT}"),
            key: key.to_string(),
        };
        if bytes.len() as u64 != s.index_size {
            return Err(bad(format!("{} bytes, expected {}", bytes.len(), s.index_size)));
        }
        let opts = CodecOptions::default().with_concurrent_target(1);
        let words = s.codec.decode_index(bytes, &nz(&s.chunks_per_shard), &opts).map_err(|e| bad(e.to_string()))?;
        let n: usize = s.chunks_per_shard.iter().product::<u64>() as usize;
        if words.len() != 2 * n {
            return Err(bad(format!("{} entries, expected {}", words.len() / 2, n)));
        }
        let entries = words
            .chunks_exact(2)
            .enumerate()
            .map(|(i, w)| match (w[0], w[1]) {
                (u64::MAX, u64::MAX) => Ok(None),
                (_, l) if s.max_inner_bytes.is_some_and(|max| l > max) => Err(bad(format!(
                    "entry {i} has length {l}, more than the {} bytes an encoded inner chunk can have",
                    s.max_inner_bytes.unwrap_or_default()
                ))),
                (o, l) if o != u64::MAX && l != u64::MAX && o.checked_add(l).is_some() => Ok(Some((o, l))),
                (o, l) => Err(bad(format!("entry {i} has offset {o} and length {l}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ShardIndex { entries })
    }
}
