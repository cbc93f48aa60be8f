//! Zarr: the only module that knows the format. Parses v2/v3 array metadata, maps tile
//! coordinates to store keys (and to inner chunks of shards), decodes shard indexes and
//! tiles. Metadata parsing and codecs are zarrs'; fetching and threading are not done here.
//!
//! Everything here is pure except [`open_array`] and [`open_arrays`], which read metadata
//! through the [`Storage`] seam. zarrs' error types are `!Send` on wasm32, so they are turned
//! into strings at once.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use zarrs::array::codec::{ShardingCodec, ShardingCodecConfiguration, ShardingIndexLocation};
use zarrs::array::{
    Array, ArrayCreateError, ArrayMetadata, ArrayMetadataV2, ArrayMetadataV3, ArrayToBytesCodecTraits,
    BytesRepresentation, CodecChain, CodecOptions, FillValue,
};
use zarrs::plugin::{ExtensionName, PluginCreateError};

use crate::array::{AlignedBytes, BUFFER_ALIGN, DType, NdArray, filled_bytes};
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::runtime::{ByteRange, Storage};
use bounded::BoundedChain;

/// Largest rank we accept from metadata.
const MAX_RANK: usize = 32;
/// Largest decoded tile (one stored chunk or inner chunk) we will allocate: 4 GiB.
pub const MAX_TILE_BYTES: u64 = 1 << 32;
/// Most inner chunks one shard may declare (its index is 16 bytes per inner chunk).
pub const MAX_CHUNKS_PER_SHARD: u64 = 1 << 24;

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
struct Sharding {
    shard_shape: Vec<u64>,
    chunks_per_shard: Vec<u64>,
    codec: Arc<ShardingCodec>,
    inner: Arc<CodecChain>,
    index_size: u64,
    index_location: ShardingIndexLocation,
    inner_names: Vec<String>,
    /// Most bytes one encoded inner chunk can have (the inner chain's bound), when the chain
    /// has one: a larger index entry is corrupt, and is refused before it is fetched.
    max_inner_bytes: Option<u64>,
}

/// One Zarr array's metadata and codecs; never touches storage.
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
    sharding: Option<Sharding>,
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

/// Read a JSON array of positive-or-zero integers.
fn u64_list(v: Option<&Value>, what: &str, key: &str) -> Result<Vec<u64>> {
    let Some(Value::Array(items)) = v else {
        return Err(malformed(format!("`{what}` must be a list of integers, got {}", short(v)), key));
    };
    if items.len() > MAX_RANK {
        return Err(meta_err(
            format!("`{what}` has {} dimensions; at most {MAX_RANK} are supported", items.len()),
            key,
        ));
    }
    items
        .iter()
        .map(|x| {
            x.as_u64().ok_or_else(|| {
                malformed(format!("`{what}` entry {} is not a non-negative integer", short(Some(x))), key)
            })
        })
        .collect()
}

/// Check a shape and its chunk shape before zarrs sees them: ranks agree, chunks are
/// non-zero, byte counts do not overflow and one chunk is not absurd.
fn check_extents(shape: &[u64], chunk: &[u64], what: &str, key: &str) -> Result<()> {
    if shape.len() != chunk.len() {
        return Err(meta_err(format!("shape {shape:?} and {what} {chunk:?} differ in rank"), key));
    }
    if chunk.contains(&0) {
        return Err(meta_err(format!("{what} {chunk:?} has a zero extent"), key));
    }
    if shape.iter().try_fold(16u64, |acc, &d| acc.checked_mul(d.max(1))).is_none() {
        return Err(meta_err(format!("shape {shape:?} overflows 64-bit byte counts"), key));
    }
    match chunk.iter().try_fold(16u64, |acc, &d| acc.checked_mul(d)) {
        Some(_) => Ok(()),
        None => Err(meta_err(format!("{what} {chunk:?} overflows 64-bit byte counts"), key)),
    }
}

/// What to say about an element type we cannot read.
const DTYPE_HINT: &str = "only fixed-size bool, integer and float types of at most 8 bytes are supported";

/// Refuse a v3 `data_type` we cannot read before zarrs sees it: zarrs would size a raw-bits
/// type of 2^40 bytes (`r8796093022208`) or an extension type's fill value first.
fn check_v3_dtype(dtype: Option<&Value>, key: &str) -> Result<()> {
    let name = match dtype {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Object(o)) => o.get("name").and_then(Value::as_str),
        _ => None,
    };
    match name {
        Some(n) if DType::from_zarr_name(n).is_some() => Ok(()),
        Some(n) => Err(meta_err(format!("data_type {n:?} is not supported; {DTYPE_HINT}"), key)),
        None => Err(malformed(format!("`data_type` must be a data type name, got {}", short(dtype)), key)),
    }
}

/// Refuse a v2 `dtype` we cannot read before zarrs sees it (`|S1099511627776`, a 2^40-byte
/// void, a structured dtype): only numpy's `[<>|=]` + `b1`, `i1`-`i8`, `u1`-`u8`, `f2`-`f8`.
fn check_v2_dtype(dtype: Option<&Value>, key: &str) -> Result<()> {
    const OK: [&str; 12] = ["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"];
    match dtype {
        Some(Value::String(s)) if OK.contains(&s.trim_start_matches(['<', '>', '|', '='])) => Ok(()),
        Some(Value::String(s)) => Err(meta_err(format!("dtype {s:?} is not supported; {DTYPE_HINT}"), key)),
        Some(Value::Array(_)) => Err(meta_err(format!("a structured dtype is not supported; {DTYPE_HINT}"), key)),
        other => Err(malformed(format!("`dtype` must be a numpy type string, got {}", short(other)), key)),
    }
}

/// Names zarrs gives the bz2 codec (v3 and v2).
const BZ2_NAMES: [&str; 3] = ["bz2", "numcodecs.bz2", "https://codec.zarrs.dev/bytes_to_bytes/bz2"];

/// Refuse codec parameters that zarrs accepts but its codec libraries panic on, before
/// zarrs builds the codecs: a bz2 level of 0 (zarrs takes 0..=9, the bzip2 crate asserts
/// 1..=9; found by the `zarr_v2_metadata` fuzzer). Walks nested chains (sharding).
fn check_codec_params(codecs: Option<&Value>, key: &str) -> Result<()> {
    let Some(v) = codecs else { return Ok(()) };
    match v {
        Value::Array(items) => items.iter().try_for_each(|c| check_codec_params(Some(c), key)),
        Value::Object(o) => {
            let name = o.get("name").or_else(|| o.get("id")).and_then(Value::as_str).unwrap_or("");
            if BZ2_NAMES.contains(&name) {
                let level = o.get("configuration").and_then(|c| c.get("level")).or_else(|| o.get("level"));
                if let Some(l) = level.and_then(Value::as_u64)
                    && !(1..=9).contains(&l)
                {
                    return Err(meta_err(format!("codec {name} has level {l}; bz2 levels are 1 to 9"), key));
                }
            }
            o.values().try_for_each(|c| check_codec_params(Some(c), key))
        }
        _ => Ok(()),
    }
}

/// Run a zarrs constructor, turning a panic into an error on native (a safety net under
/// the checks above: a panic would take the caller's process, or a wasm instance, down).
fn no_panic<T>(what: &str, key: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(meta_err(format!("{what} panicked on this metadata (a bug to report)"), key)))
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (what, key);
        f()
    }
}

/// A JSON value for an error message, cut short (hostile metadata can be megabytes).
fn short(v: Option<&Value>) -> String {
    let text = v.map_or_else(|| "nothing".to_string(), Value::to_string);
    match text.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

fn zarrs_create_err(e: &ArrayCreateError, key: &str) -> Error {
    match e {
        ArrayCreateError::CodecsCreateError(PluginCreateError::Unsupported(u)) => {
            meta_err(format!("{u} by this build of insitubatch (zstd and blosc need the c-codecs feature)"), key)
        }
        ArrayCreateError::DataTypeCreateError(PluginCreateError::Unsupported(u)) => {
            meta_err(format!("{u} by this build of insitubatch"), key)
        }
        other => meta_err(format!("unsupported or invalid zarr array ({other})"), key),
    }
}

/// Names of a chain's codecs, in order.
fn chain_names(chain: &CodecChain) -> Vec<String> {
    let name = |n: Option<Cow<'static, str>>, m: Option<Cow<'static, str>>| {
        n.or(m).map_or_else(|| "unknown".to_string(), Cow::into_owned)
    };
    let mut out = Vec::new();
    for c in chain.array_to_array_codecs() {
        out.push(name(c.name_v3(), c.name_v2()));
    }
    let a2b = chain.array_to_bytes_codec();
    out.push(name(a2b.name_v3(), a2b.name_v2()));
    for c in chain.bytes_to_bytes_codecs() {
        out.push(name(c.name_v3(), c.name_v2()));
    }
    out
}

/// True for `[bytes(little endian, or none for 1-byte types), zstd]` on a little-endian host.
fn is_le_zstd(chain: &CodecChain, dtype: DType) -> bool {
    #[cfg(feature = "c-codecs")]
    {
        use zarrs::array::CodecMetadataOptions;
        use zarrs::array::codec::{BytesCodec, ZstdCodec};
        if !cfg!(target_endian = "little") || !chain.array_to_array_codecs().is_empty() {
            return false;
        }
        let a2b = chain.array_to_bytes_codec();
        if a2b.as_any().downcast_ref::<BytesCodec>().is_none() {
            return false;
        }
        let endian = a2b
            .configuration_v3(&CodecMetadataOptions::default())
            .and_then(|c| c.get("endian").and_then(|e| e.as_str().map(str::to_string)));
        let endian_ok = match endian.as_deref() {
            Some("little") => true,
            None => dtype.size() == 1,
            _ => false,
        };
        let b2b = chain.bytes_to_bytes_codecs();
        endian_ok && b2b.len() == 1 && b2b[0].as_any().downcast_ref::<ZstdCodec>().is_some()
    }
    #[cfg(not(feature = "c-codecs"))]
    {
        let _ = (chain, dtype);
        false
    }
}

fn nz(v: &[u64]) -> Vec<NonZeroU64> {
    v.iter().map(|&d| NonZeroU64::new(d).unwrap_or(NonZeroU64::MIN)).collect()
}

impl ZarrArray {
    /// Parse v3 `zarr.json` bytes. `path` is the array path in the store (`t2m`, `""` for a
    /// root array).
    ///
    /// # Errors
    /// [`Error::Metadata`] for malformed or unsupported metadata, [`Error::Config`] for a group.
    pub fn from_v3(path: &str, zarr_json: &[u8]) -> Result<Self> {
        let path = normalize_path(path);
        let key = join(&path, "zarr.json");
        let value: Value = serde_json::from_slice(zarr_json).map_err(|e| malformed(e, &key))?;
        Self::from_v3_value(&path, value, &key)
    }

    fn from_v3_value(path: &str, value: Value, key: &str) -> Result<Self> {
        let Value::Object(obj) = &value else { return Err(malformed("expected a JSON object", key)) };
        match obj.get("node_type").and_then(Value::as_str) {
            Some("array") => {}
            Some("group") => {
                return Err(Error::Config(format!("{key} is a group, not an array; name one of its arrays")));
            }
            other => return Err(malformed(format!("node_type {other:?} is not \"array\""), key)),
        }
        if obj.get("zarr_format").and_then(Value::as_u64) != Some(3) {
            return Err(malformed("zarr_format is not 3", key));
        }
        // Validate extents from the raw JSON before zarrs sees them.
        let shape = u64_list(obj.get("shape"), "shape", key)?;
        let grid = obj.get("chunk_grid").ok_or_else(|| malformed("missing chunk_grid", key))?;
        let grid_name = grid.get("name").and_then(Value::as_str).unwrap_or("");
        if grid_name != "regular" {
            return Err(meta_err(
                format!("chunk grid {grid_name:?} is not supported by this build of insitubatch (only \"regular\")"),
                key,
            ));
        }
        let chunk = u64_list(grid.get("configuration").and_then(|c| c.get("chunk_shape")), "chunk_shape", key)?;
        check_extents(&shape, &chunk, "chunk shape", key)?;
        check_v3_dtype(obj.get("data_type"), key)?;
        check_codec_params(obj.get("codecs"), key)?;
        if let Some(Value::Array(names)) = obj.get("dimension_names")
            && names.len() != shape.len()
        {
            return Err(meta_err(
                format!("dimension_names has {} entries but shape {shape:?} has {}", names.len(), shape.len()),
                key,
            ));
        }
        if let Some(Value::Array(t)) = obj.get("storage_transformers")
            && !t.is_empty()
        {
            return Err(meta_err("storage transformers are not supported by this build of insitubatch", key));
        }
        let metadata: ArrayMetadataV3 = serde_json::from_value(value).map_err(|e| malformed(e, key))?;
        let dimension_names = metadata.dimension_names.clone();
        let array = no_panic("zarrs", key, || {
            Array::new_with_metadata(Arc::new(()), &format!("/{path}"), ArrayMetadata::V3(metadata))
                .map_err(|e| zarrs_create_err(&e, key))
        })?;
        Self::build(path, key, 3, array, shape, chunk, dimension_names)
    }

    /// Parse v2 `.zarray` (+ optional `.zattrs`) bytes.
    ///
    /// # Errors
    /// [`Error::Metadata`] for malformed or unsupported metadata.
    pub fn from_v2(path: &str, zarray: &[u8], zattrs: Option<&[u8]>) -> Result<Self> {
        let path = normalize_path(path);
        let key = join(&path, ".zarray");
        let value: Value = serde_json::from_slice(zarray).map_err(|e| malformed(e, &key))?;
        let attrs = match zattrs {
            None => None,
            Some(b) => {
                let akey = join(&path, ".zattrs");
                Some(serde_json::from_slice::<Value>(b).map_err(|e| malformed(e, &akey))?)
            }
        };
        Self::from_v2_value(&path, value, attrs, &key)
    }

    fn from_v2_value(path: &str, mut value: Value, attrs: Option<Value>, key: &str) -> Result<Self> {
        let Value::Object(obj) = &mut value else { return Err(malformed("expected a JSON object", key)) };
        if obj.get("zarr_format").and_then(Value::as_u64) != Some(2) {
            return Err(malformed("zarr_format is not 2", key));
        }
        let shape = u64_list(obj.get("shape"), "shape", key)?;
        let chunk = u64_list(obj.get("chunks"), "chunks", key)?;
        check_extents(&shape, &chunk, "chunks", key)?;
        check_v2_dtype(obj.get("dtype"), key)?;
        check_codec_params(obj.get("compressor"), key)?;
        check_codec_params(obj.get("filters"), key)?;
        let attrs = match attrs {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(malformed(".zattrs is not a JSON object", &key.replace(".zarray", ".zattrs"))),
        };
        let dimension_names = match attrs.get("_ARRAY_DIMENSIONS") {
            Some(Value::Array(names)) if names.len() == shape.len() => {
                Some(names.iter().map(|n| n.as_str().map(str::to_string)).collect())
            }
            _ => None,
        };
        obj.insert("attributes".into(), Value::Object(attrs));
        let metadata: ArrayMetadataV2 = serde_json::from_value(value).map_err(|e| malformed(e, key))?;
        let array = no_panic("zarrs", key, || {
            Array::new_with_metadata(Arc::new(()), &format!("/{path}"), ArrayMetadata::V2(metadata))
                .map_err(|e| zarrs_create_err(&e, key))
        })?;
        Self::build(path, key, 2, array, shape, chunk, dimension_names)
    }

    fn build(
        path: &str,
        key: &str,
        format: u8,
        array: Array<()>,
        shape: Vec<u64>,
        chunk: Vec<u64>,
        dimension_names: Option<Vec<Option<String>>>,
    ) -> Result<Self> {
        let dt_name = array.data_type().name_v3().or_else(|| array.data_type().name_v2());
        let dtype = dt_name.as_deref().and_then(DType::from_zarr_name).ok_or_else(|| {
            meta_err(
                format!(
                    "data type {} is not supported (only fixed-size bool, integer and float types)",
                    array.data_type()
                ),
                key,
            )
        })?;
        let fill_value = array.fill_value().as_ne_bytes().to_vec();
        if fill_value.len() != dtype.size() {
            return Err(meta_err(format!("fill value has {} bytes, expected {}", fill_value.len(), dtype.size()), key));
        }
        let chain = array.codecs();
        let sharding = Self::sharding(&array, &chain, &chunk, key)?;
        let (tile_shape, tile_chain) = match &sharding {
            Some(s) => {
                let inner: Vec<u64> = chunk.iter().zip(&s.chunks_per_shard).map(|(c, n)| c / n).collect();
                (inner, s.inner.clone())
            }
            None => (chunk, chain.clone()),
        };
        let tile_bytes = tile_shape.iter().try_fold(dtype.size() as u64, |a, &d| a.checked_mul(d));
        let tile_bytes = match tile_bytes {
            Some(b) if b <= MAX_TILE_BYTES => usize::try_from(b).ok(),
            _ => None,
        }
        .ok_or_else(|| {
            meta_err(format!("one chunk of shape {tile_shape:?} ({dtype}) would exceed {MAX_TILE_BYTES} bytes"), key)
        })?;
        let codec_names = match &sharding {
            Some(s) => vec![format!("sharding_indexed({})", s.inner_names.join(","))],
            None => chain_names(&chain),
        };
        let fast_zstd = is_le_zstd(&tile_chain, dtype);
        let tile_chain = BoundedChain::new(&tile_chain, &tile_shape, &array).map_err(|e| {
            meta_err(
                format!("codec chain {codec_names:?} is unsupported: {e}, so one chunk could take any memory"),
                key,
            )
        })?;
        Ok(Self {
            fast_zstd,
            tile_shape_nz: nz(&tile_shape),
            array: Arc::new(array),
            path: path.to_string(),
            meta_key: key.to_string(),
            format,
            shape,
            tile_shape,
            dtype,
            fill_value,
            dimension_names,
            sharding,
            tile_chain,
            tile_bytes,
            codec_names,
        })
    }

    fn sharding(array: &Array<()>, chain: &CodecChain, shard: &[u64], key: &str) -> Result<Option<Sharding>> {
        let is_sharding = |name: &str| name == "sharding_indexed";
        let ArrayMetadata::V3(v3) = array.metadata() else { return Ok(None) };
        let positions: Vec<usize> =
            v3.codecs.iter().enumerate().filter(|(_, c)| is_sharding(c.name())).map(|(i, _)| i).collect();
        let a2b_is_sharding = chain.array_to_bytes_codec().as_any().downcast_ref::<ShardingCodec>().is_some();
        if positions.is_empty() && !a2b_is_sharding {
            return Ok(None);
        }
        if positions.len() != 1
            || !a2b_is_sharding
            || !chain.array_to_array_codecs().is_empty()
            || !chain.bytes_to_bytes_codecs().is_empty()
        {
            return Err(meta_err(
                format!(
                    "codec chain {:?} is unsupported: sharding_indexed must be the only codec (no transpose or compression around the shard)",
                    chain_names(chain)
                ),
                key,
            ));
        }
        let md = &v3.codecs[positions[0]];
        let config: ShardingCodecConfiguration =
            md.to_typed_configuration().map_err(|e| malformed(format!("sharding_indexed configuration: {e}"), key))?;
        let ShardingCodecConfiguration::V1(v1) = &config else {
            return Err(meta_err("this sharding_indexed configuration is unsupported", key));
        };
        let inner: Vec<u64> = v1.chunk_shape.iter().map(|d| d.get()).collect();
        if inner.len() != shard.len() || shard.iter().zip(&inner).any(|(s, i)| s % i != 0) {
            return Err(meta_err(
                format!("inner chunk shape {inner:?} does not evenly divide shard shape {shard:?}"),
                key,
            ));
        }
        let cps: Vec<u64> = shard.iter().zip(&inner).map(|(s, i)| s / i).collect();
        let n_inner = cps.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if n_inner.is_none_or(|n| n > MAX_CHUNKS_PER_SHARD) {
            return Err(meta_err(
                format!("a shard of {cps:?} inner chunks exceeds {MAX_CHUNKS_PER_SHARD} inner chunks"),
                key,
            ));
        }
        let inner_chain = CodecChain::from_metadata(&v1.codecs)
            .map_err(|e| meta_err(format!("sharding inner codecs: {e} by this build of insitubatch"), key))?;
        let index_chain = CodecChain::from_metadata(&v1.index_codecs)
            .map_err(|e| meta_err(format!("sharding index codecs: {e}"), key))?;
        let mut index_shape = nz(&cps);
        index_shape.push(NonZeroU64::new(2).unwrap_or(NonZeroU64::MIN));
        let index_size = match index_chain.encoded_representation(
            &index_shape,
            &zarrs::array::data_type::uint64(),
            &FillValue::from(u64::MAX),
        ) {
            Ok(BytesRepresentation::FixedSize(n)) => n,
            Ok(_) => return Err(meta_err("the shard index codecs do not have a fixed size (unsupported)", key)),
            Err(e) => return Err(meta_err(format!("sharding index codecs: {e}"), key)),
        };
        let codec = ShardingCodec::new_with_configuration(&config)
            .map_err(|e| meta_err(format!("sharding_indexed: {e}"), key))?;
        let max_inner_bytes =
            match inner_chain.encoded_representation(&nz(&inner), array.data_type(), array.fill_value()) {
                Ok(BytesRepresentation::FixedSize(n) | BytesRepresentation::BoundedSize(n)) => Some(n),
                _ => None,
            };
        Ok(Some(Sharding {
            shard_shape: shard.to_vec(),
            chunks_per_shard: cps,
            codec: Arc::new(codec),
            inner_names: chain_names(&inner_chain),
            inner: Arc::new(inner_chain),
            index_size,
            index_location: v1.index_location,
            max_inner_bytes,
        }))
    }

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

    /// Decode one tile's stored bytes into the FULL tile (edge padding included), physical
    /// axis order, native endianness. `None` means the object (or the inner chunk in its
    /// shard) is absent: a tile of fill value.
    ///
    /// # Errors
    /// [`Error::Decode`] (corrupt, truncated, wrong size), with `key` last.
    pub fn decode_tile(&self, encoded: Option<Bytes>, key: &str) -> Result<NdArray> {
        self.decode_tile_into(encoded, key, None)
    }

    /// [`Self::decode_tile`], decompressing into `buffer` when the fast path applies (a
    /// recycled allocation avoids page-faulting a fresh one for every tile).
    ///
    /// # Errors
    /// As [`Self::decode_tile`].
    pub fn decode_tile_into(&self, encoded: Option<Bytes>, key: &str, buffer: Option<AlignedBytes>) -> Result<NdArray> {
        // Only the zstd fast path (one of the C codecs) decompresses into the caller's buffer.
        #[cfg(not(feature = "c-codecs"))]
        drop(buffer);
        let shape: Vec<usize> = self.tile_shape.iter().map(|&d| d as usize).collect();
        let Some(encoded) = encoded else {
            let data = filled_bytes(self.tile_bytes / self.dtype.size(), &self.fill_value);
            return NdArray::new(self.dtype, shape, data).map_err(|e| self.decode_err(e, key));
        };
        #[cfg(feature = "c-codecs")]
        if self.fast_zstd {
            let data = zstd_into_aligned(&encoded, self.tile_bytes, buffer).map_err(|e| self.decode_err(e, key))?;
            return NdArray::new(self.dtype, shape, data).map_err(|e| self.decode_err(e, key));
        }
        let data = self.decode_generic(&encoded).map_err(|e| self.decode_err(e, key))?;
        NdArray::new(self.dtype, shape, data).map_err(|e| self.decode_err(e, key))
    }

    /// The codec chain (bounded: [`BoundedChain`]), then one copy into an aligned buffer.
    fn decode_generic(&self, encoded: &[u8]) -> std::result::Result<AlignedBytes, String> {
        let opts = CodecOptions::default().with_concurrent_target(1);
        let run = || -> std::result::Result<AlignedBytes, String> {
            let raw = self.tile_chain.decode(encoded, &self.tile_shape_nz, &self.array, &opts)?;
            if raw.len() != self.tile_bytes {
                return Err(format!("decoded {} bytes, expected {}", raw.len(), self.tile_bytes));
            }
            let mut out = AlignedBytes::with_capacity(BUFFER_ALIGN, raw.len());
            out.extend_from_slice(&raw);
            Ok(out)
        };
        // zarrs should not panic on bad input, but a corrupt chunk must never take the process down.
        #[cfg(not(target_arch = "wasm32"))]
        {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                .unwrap_or_else(|_| Err("the decoder panicked".to_string()))
        }
        #[cfg(target_arch = "wasm32")]
        {
            run()
        }
    }

    fn decode_err(&self, what: impl std::fmt::Display, key: &str) -> Error {
        Error::Decode {
            message: format!(
                "cannot decode a {} tile of shape {:?} ({what}); {BAD_CHUNK_HINT}",
                self.dtype, self.tile_shape
            ),
            key: key.to_string(),
        }
    }
}

// Fast path. zarrs' generic `CodecChain::decode` decompresses into a Vec it allocates, then
// the bytes codec hands that back and we copy it into the 128-byte-aligned buffer batches
// need: one extra allocation and one full copy per tile. For the common chain
// `[bytes(little), zstd]` (and the same inside a shard) on a little-endian host, the decoded
// bytes ARE the tile, so decompress straight into one fresh aligned buffer.
#[cfg(feature = "c-codecs")]
fn zstd_into_aligned(
    src: &[u8],
    expected: usize,
    buffer: Option<AlignedBytes>,
) -> std::result::Result<AlignedBytes, String> {
    use zstd::zstd_safe::{WriteBuf, get_error_name};

    /// The spare capacity of an aligned vec as a zstd output buffer.
    struct Spare<'a>(&'a mut AlignedBytes);
    // SAFETY: `as_slice` covers only initialised bytes, the pointer and capacity describe the
    // allocation, and zstd calls `filled_until` with the number of bytes it wrote.
    unsafe impl WriteBuf for Spare<'_> {
        fn as_slice(&self) -> &[u8] {
            self.0.as_slice()
        }
        fn capacity(&self) -> usize {
            self.0.capacity()
        }
        fn as_mut_ptr(&mut self) -> *mut u8 {
            self.0.as_mut_ptr()
        }
        unsafe fn filled_until(&mut self, n: usize) {
            // SAFETY: the caller (zstd) initialised the first `n <= capacity` bytes.
            unsafe { self.0.set_len(n) }
        }
    }

    let mut out = match buffer {
        Some(mut b) => {
            b.clear();
            b.reserve(expected);
            b
        }
        None => AlignedBytes::with_capacity(BUFFER_ALIGN, expected),
    };
    let written = bounded::with_dctx(|dctx| {
        dctx.decompress(&mut Spare(&mut out), src).map_err(|code| format!("zstd: {}", get_error_name(code)))
    })?;
    if written != expected || out.len() != expected {
        return Err(format!("zstd decompressed {written} bytes, expected {expected}"));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Opening arrays from storage.

fn storage_err(storage: &dyn Storage, e: &crate::runtime::StorageError, key: &str) -> Error {
    Error::Storage { message: format!("cannot read zarr metadata ({e})"), key: located(storage, key) }
}

fn located(storage: &dyn Storage, key: &str) -> String {
    let loc = storage.location();
    if loc.ends_with('/') { format!("{loc}{key}") } else { format!("{loc}/{key}") }
}

/// Put the store location in front of a metadata error's key.
fn with_location(storage: &dyn Storage, e: Error) -> Error {
    match e {
        Error::Metadata { message, key } => Error::Metadata { message, key: located(storage, &key) },
        other => other,
    }
}

async fn get(storage: &dyn Storage, key: &str) -> Result<Option<Bytes>> {
    storage.get(key).await.map_err(|e| storage_err(storage, &e, key))
}

/// Open one array by path: v3 `{path}/zarr.json`, else v2 `{path}/.zarray` (+ `.zattrs`).
///
/// # Errors
/// [`Error::NotFound`] naming the path with the store last; [`Error::Config`] for a group;
/// [`Error::Metadata`] for bad metadata; [`Error::Storage`] when reads fail.
pub async fn open_array(storage: &dyn Storage, path: &str) -> Result<ZarrArray> {
    let path = normalize_path(path);
    if let Some(b) = get(storage, &join(&path, "zarr.json")).await? {
        return ZarrArray::from_v3(&path, &b).map_err(|e| with_location(storage, e));
    }
    if let Some(b) = get(storage, &join(&path, ".zarray")).await? {
        let attrs = get(storage, &join(&path, ".zattrs")).await?;
        return ZarrArray::from_v2(&path, &b, attrs.as_deref()).map_err(|e| with_location(storage, e));
    }
    if get(storage, &join(&path, ".zgroup")).await?.is_some() {
        return Err(Error::Config(format!(
            "{} is a group, not an array; name one of its arrays",
            located(storage, &join(&path, ".zgroup"))
        )));
    }
    Err(Error::NotFound {
        message: format!(
            "no zarr array at path {path:?} (neither {} nor {} exists)",
            join(&path, "zarr.json"),
            join(&path, ".zarray")
        ),
        key: storage.location(),
    })
}

/// Open the arrays of the group at the store root.
///
/// `variables = Some(names)`: exactly those, in that order (an explicit coordinate is kept).
/// `None`: discover them (consolidated metadata, else a listing), skip CF coordinates and
/// return the rest in sorted path order, nested groups included.
///
/// # Errors
/// [`Error::Config`] when the store cannot be listed and has no consolidated metadata, or
/// when every array found is a coordinate; otherwise as [`open_array`].
pub async fn open_arrays(storage: &dyn Storage, variables: Option<&[String]>) -> Result<Vec<ZarrArray>> {
    if let Some(names) = variables {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            out.push(open_array(storage, n).await?);
        }
        return Ok(out);
    }
    let found = discover(storage).await?;
    let (coords, mut data): (Vec<ZarrArray>, Vec<ZarrArray>) = found.into_iter().partition(ZarrArray::is_coordinate);
    if data.is_empty() {
        let skipped: Vec<&str> = coords.iter().map(ZarrArray::path).collect();
        return Err(Error::Config(format!(
            "no data arrays found in {} (skipped coordinates {skipped:?}); pass variables to name the arrays to read",
            storage.location()
        )));
    }
    data.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(data)
}

/// Every array of the store: from consolidated metadata (v3, then v2) when there is some,
/// else from a listing.
async fn discover(storage: &dyn Storage) -> Result<Vec<ZarrArray>> {
    let root_json = get(storage, "zarr.json").await?;
    if let Some(b) = &root_json
        && let Some(found) = from_v3_root(storage, b)?
    {
        return Ok(found);
    }
    if let Some(b) = get(storage, ".zmetadata").await? {
        return from_v2_consolidated(storage, &b);
    }
    from_listing(storage, root_json.is_some()).await
}

/// The root `zarr.json`: an array itself, or a group with consolidated metadata; `None` for
/// a group without it.
fn from_v3_root(storage: &dyn Storage, b: &[u8]) -> Result<Option<Vec<ZarrArray>>> {
    let root: Value = serde_json::from_slice(b).map_err(|e| with_location(storage, malformed(e, "zarr.json")))?;
    if root.get("node_type").and_then(Value::as_str) == Some("array") {
        return ZarrArray::from_v3("", b).map(|a| Some(vec![a])).map_err(|e| with_location(storage, e));
    }
    let Some(Value::Object(meta)) = root.get("consolidated_metadata").and_then(|c| c.get("metadata")) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for (path, m) in meta {
        if m.get("node_type").and_then(Value::as_str) != Some("array") {
            continue;
        }
        let path = normalize_path(path);
        let key = join(&path, "zarr.json");
        out.push(ZarrArray::from_v3_value(&path, m.clone(), &key).map_err(|e| with_location(storage, e))?);
    }
    Ok(Some(out))
}

/// v2 consolidated metadata (`.zmetadata`).
fn from_v2_consolidated(storage: &dyn Storage, b: &[u8]) -> Result<Vec<ZarrArray>> {
    let zm: Value = serde_json::from_slice(b).map_err(|e| with_location(storage, malformed(e, ".zmetadata")))?;
    let Some(Value::Object(meta)) = zm.get("metadata") else {
        return Err(with_location(storage, malformed("no `metadata` object", ".zmetadata")));
    };
    if let Some(m) = meta.get(".zarray") {
        let attrs = meta.get(".zattrs").cloned();
        return ZarrArray::from_v2_value("", m.clone(), attrs, ".zarray")
            .map(|a| vec![a])
            .map_err(|e| with_location(storage, e));
    }
    let mut out = Vec::new();
    for (k, m) in meta {
        let Some(path) = k.strip_suffix("/.zarray") else { continue };
        let attrs = meta.get(&format!("{path}/.zattrs")).cloned();
        out.push(ZarrArray::from_v2_value(path, m.clone(), attrs, k).map_err(|e| with_location(storage, e))?);
    }
    Ok(out)
}

/// Arrays found by listing the store (v3 `zarr.json` wins over v2 `.zarray` at one path).
async fn from_listing(storage: &dyn Storage, has_root_json: bool) -> Result<Vec<ZarrArray>> {
    let keys = storage.list("").await.map_err(|e| storage_err(storage, &e, ""))?;
    let not_found = || Error::NotFound {
        message: "no Zarr store here (no zarr.json, .zgroup, .zmetadata or any object); check the URL points at the \
                  store's root"
            .into(),
        key: storage.location(),
    };
    if keys.as_ref().is_some_and(Vec::is_empty) {
        return Err(not_found());
    }
    let Some(keys) = keys else {
        if !has_root_json && get(storage, ".zgroup").await?.is_none() && get(storage, ".zarray").await?.is_none() {
            return Err(not_found());
        }
        return Err(Error::Config(format!(
            "the store cannot be listed and has no consolidated metadata (zarr.json consolidated_metadata or \
             .zmetadata), so its arrays cannot be discovered; pass variables to name them: {}",
            storage.location()
        )));
    };
    let mut v3_paths = std::collections::BTreeSet::new();
    let mut v2_paths = std::collections::BTreeSet::new();
    for k in &keys {
        if let Some(p) = k.strip_suffix("/zarr.json") {
            v3_paths.insert(p.to_string());
        } else if let Some(p) = k.strip_suffix("/.zarray") {
            v2_paths.insert(p.to_string());
        } else if k == ".zarray" {
            v2_paths.insert(String::new());
        }
    }
    let mut out = Vec::new();
    for p in &v3_paths {
        let key = join(p, "zarr.json");
        let Some(b) = get(storage, &key).await? else { continue };
        let v: Value = serde_json::from_slice(&b).map_err(|e| with_location(storage, malformed(e, &key)))?;
        if v.get("node_type").and_then(Value::as_str) == Some("array") {
            out.push(ZarrArray::from_v3_value(p, v, &key).map_err(|e| with_location(storage, e))?);
        }
    }
    for p in v2_paths.difference(&v3_paths) {
        let key = join(p, ".zarray");
        let Some(b) = get(storage, &key).await? else { continue };
        let attrs = get(storage, &join(p, ".zattrs")).await?;
        out.push(ZarrArray::from_v2(p, &b, attrs.as_deref()).map_err(|e| with_location(storage, e))?);
    }
    Ok(out)
}

mod bounded;
#[cfg(test)]
mod tests;
