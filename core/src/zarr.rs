//! Zarr: the only module that knows the format. Parses v2/v3 array metadata, maps tile
//! coordinates to store keys (and to inner chunks of shards), decodes shard indexes and
//! tiles. Metadata parsing and codecs are zarrs'; fetching and threading are not done here.
//!
//! Everything here is pure except [`open_array`] and [`open_arrays`], which read metadata
//! through the [`Storage`](crate::runtime::Storage) seam. zarrs' error types are `!Send` on
//! wasm32, so they are turned into strings at once.
//!
//! The parts: [`metadata`] parses and checks metadata and builds the codecs, [`shard`]
//! locates and decodes shard indexes, [`decode`] turns a tile's stored bytes into its
//! values (with the zstd fast path), [`open`] reads metadata through storage and
//! discovers a store's arrays.

use std::num::NonZeroU64;
use std::sync::Arc;

use serde_json::Value;
use zarrs::array::Array;

use crate::array::DType;
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use bounded::BoundedChain;

/// Largest rank we accept from metadata.
const MAX_RANK: usize = 32;
/// Largest decoded tile (one stored chunk or inner chunk) we will allocate: 4 GiB.
pub(crate) const MAX_TILE_BYTES: u64 = 1 << 32;
/// Most inner chunks one shard may declare (its index is 16 bytes per inner chunk).
pub(crate) const MAX_CHUNKS_PER_SHARD: u64 = 1 << 24;

/// What to tell the user when a stored chunk cannot be decoded.
const BAD_CHUNK_HINT: &str = "the stored chunk is corrupt or truncated; pass on_bad_chunk=\"nan\" to read it as NaN (or fill) instead of failing";

/// Where one tile is stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TileLocation {
    /// A whole object: the tile is the stored chunk.
    Object {
        /// The chunk key (`t2m/c/0/1/2`).
        key: String,
    },
    /// An inner chunk of a shard object.
    InShard {
        /// The shard key.
        key: String,
        /// Row-major index of the inner chunk within its shard (its shard-index entry).
        index: usize,
    },
}

impl TileLocation {
    /// The object key.
    pub fn key(&self) -> &str {
        match self {
            Self::Object { key } | Self::InShard { key, .. } => key,
        }
    }
}

/// An opened Zarr array: its metadata and codecs, read once, never touching storage.
/// [`DatasetBuilder::read_metadata`](crate::DatasetBuilder::read_metadata) opens them and
/// [`DatasetBuilder::opened_arrays`](crate::DatasetBuilder::opened_arrays) gives them out; a
/// clone handed to [`DatasetBuilder::opened`](crate::DatasetBuilder::opened) builds another
/// dataset over the same arrays without reading their metadata again (the wasm explorer
/// builds one per configuration so).
#[derive(Debug, Clone)]
pub struct ZarrArray {
    /// zarrs' array over no storage (`()`): used for keys, data type, fill value and codecs.
    array: Arc<Array<()>>,
    path: String,
    meta_key: String,
    format: u8,
    shape: Vec<u64>,
    tile_shape: Vec<u64>,
    dtype: DType,
    fill_value: Vec<u8>,
    dimension_names: Option<Vec<Option<String>>>,
    sharding: Option<shard::Sharding>,
    /// The chain that decodes one tile (outer chain, or the inner chain of a shard), each of
    /// its bytes-to-bytes codecs bounded by what it may decode to.
    tile_chain: BoundedChain,
    tile_shape_nz: Vec<NonZeroU64>,
    tile_bytes: usize,
    /// `[bytes(little), zstd]` on a little-endian host: decode straight into our buffer.
    fast_zstd: bool,
    codec_names: Vec<String>,
}

fn meta_err(message: impl Into<String>, key: &str) -> Error {
    Error::Metadata { message: message.into(), key: key.to_string() }
}

fn malformed(detail: impl std::fmt::Display, key: &str) -> Error {
    meta_err(format!("malformed zarr metadata ({detail})"), key)
}

fn normalize_path(path: &str) -> String {
    path.trim_matches('/').to_string()
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}/{name}") }
}

impl ZarrArray {
    /// Array path in the store (`t2m`, `group/t2m`, `""` for a root array).
    pub fn path(&self) -> &str {
        &self.path
    }
    /// The stored metadata as canonical JSON without attributes: shape, chunk grid, data
    /// type, fill value and codecs, i.e. everything that decides a decoded chunk's bytes.
    pub fn metadata_document(&self) -> Vec<u8> {
        // Attributes are left out: editing an attribute does not change a chunk's bytes.
        let mut meta = self.array.metadata().clone();
        match &mut meta {
            zarrs::array::ArrayMetadata::V3(m) => m.attributes.clear(),
            zarrs::array::ArrayMetadata::V2(m) => m.attributes.clear(),
        }
        serde_json::to_vec(&meta).unwrap_or_default()
    }

    /// The metadata key this array was read from (`t2m/zarr.json`).
    pub fn metadata_key(&self) -> &str {
        &self.meta_key
    }
    /// 2 or 3.
    pub fn zarr_format(&self) -> u8 {
        self.format
    }
    /// Array shape, physical order.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// The fetch unit: the stored chunk, or the INNER chunk of a sharded array.
    pub fn tile_shape(&self) -> &[u64] {
        &self.tile_shape
    }
    /// Bytes of one decoded tile (edge padding included).
    pub fn tile_bytes(&self) -> usize {
        self.tile_bytes
    }
    /// The shard shape of a sharded array.
    pub fn shard_shape(&self) -> Option<&[u64]> {
        self.sharding.as_ref().map(|s| s.shard_shape.as_slice())
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// One element of fill value, native endianness.
    pub fn fill_value(&self) -> &[u8] {
        &self.fill_value
    }
    /// v3 `dimension_names`, or v2 attribute `_ARRAY_DIMENSIONS`.
    pub fn dimension_names(&self) -> Option<Vec<Option<String>>> {
        self.dimension_names.clone()
    }
    /// The array's attributes.
    pub fn attributes(&self) -> &serde_json::Map<String, Value> {
        self.array.attributes()
    }
    /// Codec names for reports: `["bytes","zstd"]`, `["sharding_indexed(bytes,zstd)"]`.
    pub fn codec_names(&self) -> Vec<String> {
        self.codec_names.clone()
    }
    /// True when tiles decode through the direct zstd path.
    pub fn has_fast_path(&self) -> bool {
        self.fast_zstd
    }
    /// 0-D, or 1-D whose single dimension name equals its own name: a CF coordinate or grid
    /// mapping.
    pub fn is_coordinate(&self) -> bool {
        match self.shape.len() {
            0 => true,
            1 => {
                let name = self.path.rsplit('/').next().unwrap_or("");
                matches!(&self.dimension_names, Some(d) if d.first().and_then(|n| n.as_deref()) == Some(name))
            }
            _ => false,
        }
    }

    /// The engine's geometry for this array with `sample_axis`.
    ///
    /// # Errors
    /// [`Error::Geometry`] from [`ArrayGeometry::validate`].
    pub fn geometry(&self, sample_axis: usize) -> Result<ArrayGeometry> {
        let mut g = ArrayGeometry::new(
            self.path.clone(),
            self.shape.clone(),
            self.tile_shape.clone(),
            self.dtype,
            sample_axis,
        )?;
        if let Some(s) = &self.sharding {
            g.shard = Some(s.shard_shape.clone());
            g.validate()?;
        }
        Ok(g)
    }

    /// Where the tile at physical tile-grid coordinate `coord` (units of `tile_shape`) is stored.
    /// Hidden, as `internals` (which names [`TileLocation`]): the engine's addressing, for the
    /// fuzz targets and the benches; not a stable API.
    #[doc(hidden)]
    pub fn tile_location(&self, coord: &[u64]) -> TileLocation {
        match &self.sharding {
            None => TileLocation::Object { key: self.array.chunk_key(coord).as_str().to_string() },
            Some(s) => {
                let shard: Vec<u64> = coord.iter().zip(&s.chunks_per_shard).map(|(c, n)| c / n).collect();
                let index = coord
                    .iter()
                    .zip(&s.chunks_per_shard)
                    .fold(0u64, |acc, (c, n)| acc.wrapping_mul(*n).wrapping_add(c % n));
                TileLocation::InShard {
                    key: self.array.chunk_key(&shard).as_str().to_string(),
                    index: usize::try_from(index).unwrap_or(usize::MAX),
                }
            }
        }
    }
}

fn nz(v: &[u64]) -> Vec<NonZeroU64> {
    v.iter().map(|&d| NonZeroU64::new(d).unwrap_or(NonZeroU64::MIN)).collect()
}

mod bounded;
mod decode;
mod metadata;
mod open;
mod shard;
#[cfg(test)]
mod tests;

pub use open::{open_array, open_arrays};
pub(crate) use shard::ShardIndex;
