//! Parsing and checking v2/v3 array metadata, and building the codecs from it: every
//! refusal of metadata zarrs would accept but its codecs or our buffers could not live
//! with happens here, before zarrs sees it.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde_json::Value;
use zarrs::array::codec::{ShardingCodec, ShardingCodecConfiguration};
use zarrs::array::{
    Array, ArrayCreateError, ArrayMetadata, ArrayMetadataV2, ArrayMetadataV3, ArrayToBytesCodecTraits,
    BytesRepresentation, CodecChain, FillValue,
};
use zarrs::plugin::{ExtensionName, PluginCreateError};

use super::bounded::BoundedChain;
use super::shard::Sharding;
use super::{MAX_CHUNKS_PER_SHARD, MAX_RANK, MAX_TILE_BYTES, ZarrArray, join, malformed, meta_err, normalize_path, nz};
use crate::array::DType;
use crate::error::{Error, Result};

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

impl ZarrArray {
    /// Parse v3 `zarr.json` bytes. `path` is the array path in the store (`t2m`, `""` for a
    /// root array).
    ///
    /// # Errors
    /// [`Error::Metadata`] for malformed or unsupported metadata, [`Error::Config`] for a group.
    /// Hidden, as `internals`: the metadata parser, for the fuzz targets.
    #[doc(hidden)]
    pub fn from_v3(path: &str, zarr_json: &[u8]) -> Result<Self> {
        let path = normalize_path(path);
        let key = join(&path, "zarr.json");
        let value: Value = serde_json::from_slice(zarr_json).map_err(|e| malformed(e, &key))?;
        Self::from_v3_value(&path, value, &key)
    }

    pub(super) fn from_v3_value(path: &str, value: Value, key: &str) -> Result<Self> {
        let Value::Object(obj) = &value else { return Err(malformed("expected a JSON object", key)) };
        match obj.get("node_type").and_then(Value::as_str) {
            Some("array") => {}
            Some("group") => {
                return Err(Error::NotAnArray(format!("{key} is a group, not an array; name one of its arrays")));
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
    /// Hidden, as `internals`: the metadata parser, for the fuzz targets.
    #[doc(hidden)]
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

    pub(super) fn from_v2_value(path: &str, mut value: Value, attrs: Option<Value>, key: &str) -> Result<Self> {
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
}
