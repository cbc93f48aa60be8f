//! Shared parts of the fuzz targets: the fixed arrays the decode and shard-index targets feed
//! bytes through, the checks every parsed array must pass, and the built-in seed corpus.
//!
//! Seeds: each target's `init` calls [`write_seeds_if_asked`]; with `IB_FUZZ_SEEDS=DIR` set it
//! writes its seeds into DIR and exits, so scripts/fuzz.sh seeds a corpus from the fuzz binary
//! itself (no second, uninstrumented build of the core just to encode a few chunks).

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use insitubatch_core::ZarrArray;
use insitubatch_core::internals::TileLocation;
use serde_json::{Value, json};
use zarrs::array::{Array, ArrayBytes};
use zarrs::storage::ReadableStorageTraits;
use zarrs::storage::store::MemoryStore;

/// Largest tile the targets decode as fill value: libFuzzer's `-rss_limit_mb=512` also caps
/// one allocation at 512 MiB, and parsing must never allocate a tile, so only small ones are
/// materialized here.
const MAX_FILL_DECODE: usize = 1 << 16;

/// Poll a future that never waits (`MemoryStorage` without latency answers at once).
///
/// # Panics
/// If the future is pending: nothing in these targets can wait, so that would be a hang.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a metadata read over MemoryStorage did not complete at once"),
    }
}

/// Everything the engine asks of an opened array must hold for any metadata the parser
/// accepts: consistent ranks, non-zero tiles, the tile byte count, a valid geometry or a
/// clean error, and (for small tiles) a fill-value decode of exactly that size.
///
/// # Panics
/// When an invariant is broken (that is a finding).
pub fn check_array(a: &ZarrArray) {
    let rank = a.shape().len();
    assert_eq!(a.tile_shape().len(), rank, "tile rank");
    assert!(!a.tile_shape().contains(&0), "zero tile extent accepted: {:?}", a.tile_shape());
    let elems = a.tile_shape().iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).expect("tile elements overflow");
    assert_eq!(elems * a.dtype().size() as u64, a.tile_bytes() as u64, "tile bytes");
    assert_eq!(a.fill_value().len(), a.dtype().size(), "fill value size");
    let _ = a.codec_names();
    let _ = a.metadata_document();
    let _ = a.is_coordinate();
    let _ = a.shard_index_range();
    for axis in 0..=rank {
        if let Ok(g) = a.geometry(axis) {
            let _ = (g.n_chunks(), g.max_slot_bytes(), g.stored_chunk_bytes(), g.ragged_multiplier());
        }
    }
    let origin = vec![0u64; rank];
    match a.tile_location(&origin) {
        TileLocation::Object { key } | TileLocation::InShard { key, .. } => assert!(!key.is_empty() || rank == 0),
    }
    if a.tile_bytes() <= MAX_FILL_DECODE {
        let t = a.decode_tile(None, "fill").expect("a fill tile always decodes");
        assert_eq!(t.data.len(), a.tile_bytes());
    }
}

fn v3(dtype: &str, shape: &[u64], chunk: &[u64], fill: Value, codecs: Value) -> Value {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill, "codecs": codecs, "attributes": {}, "dimension_names": null
    })
}

fn v2(dtype: &str, shape: &[u64], chunk: &[u64], compressor: Value, filters: Value) -> Value {
    json!({
        "zarr_format": 2, "shape": shape, "chunks": chunk, "dtype": dtype, "compressor": compressor,
        "fill_value": 0, "order": "C", "filters": filters, "dimension_separator": "/"
    })
}

fn sharded(dtype: &str, shape: &[u64], inner: &[u64], codecs: Value, index_codecs: Value, at: &str) -> Value {
    let config = json!({"chunk_shape": inner, "codecs": codecs, "index_codecs": index_codecs, "index_location": at});
    v3(dtype, shape, shape, json!(0), json!([{"name": "sharding_indexed", "configuration": config}]))
}

/// The metadata of every codec chain the loader supports, one small array each: v3 bytes
/// (both endians), zstd (the direct fast path and inside longer chains), gzip, blosc,
/// crc32c, transpose, sharding (index at start and end, with and without crc32c), and v2
/// zlib, blosc, bz2 and uncompressed.
pub fn chain_metadata() -> Vec<(u8, Value)> {
    let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let be = json!({"name": "bytes", "configuration": {"endian": "big"}});
    let zstd = json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}});
    let zstd_ck = json!({"name": "zstd", "configuration": {"level": 1, "checksum": true}});
    let gzip = json!({"name": "gzip", "configuration": {"level": 1}});
    let crc = json!({"name": "crc32c"});
    let blosc = json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}});
    let transpose = json!({"name": "transpose", "configuration": {"order": [1, 0]}});
    vec![
        (3, v3("float32", &[4, 5], &[4, 5], json!("NaN"), json!([le, zstd]))),
        (3, v3("uint8", &[10], &[10], json!(7), json!([{"name": "bytes"}, zstd]))),
        (3, v3("float32", &[6, 5], &[4, 5], json!(0.0), json!([le, gzip]))),
        (3, v3("float64", &[8], &[8], json!(1.5), json!([be, gzip, crc]))),
        (3, v3("int16", &[4, 3], &[4, 3], json!(-1), json!([transpose, le, zstd_ck, crc]))),
        (3, v3("float32", &[8, 3], &[8, 3], json!(0.0), json!([le, blosc]))),
        (3, v3("uint16", &[4, 4], &[4, 4], json!(0), json!([le, crc]))),
        (3, v3("bool", &[9], &[9], json!(false), json!([{"name": "bytes"}, gzip]))),
        (3, v3("int64", &[3, 2], &[3, 2], json!(0), json!([be]))),
        (3, sharded("float32", &[4, 4], &[2, 2], json!([le, zstd]), json!([le, crc]), "end")),
        (3, sharded("uint16", &[4, 6], &[2, 3], json!([transpose, le, gzip]), json!([le]), "start")),
        (2, v2("<f4", &[6, 4], &[4, 4], json!({"id": "zlib", "level": 1}), Value::Null)),
        (
            2,
            v2(
                "<i4",
                &[8],
                &[8],
                json!({"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1, "blocksize": 0}),
                Value::Null,
            ),
        ),
        (2, v2(">f8", &[5], &[5], Value::Null, Value::Null)),
        (2, v2("<u2", &[4, 4], &[4, 4], json!({"id": "bz2", "level": 1}), Value::Null)),
        (2, v2("|u1", &[7], &[7], json!({"id": "zstd", "level": 1}), Value::Null)),
    ]
}

fn open(format: u8, meta: &Value) -> ZarrArray {
    let bytes = serde_json::to_vec(meta).expect("json");
    let a = if format == 3 { ZarrArray::from_v3("a", &bytes) } else { ZarrArray::from_v2("a", &bytes, None) };
    a.unwrap_or_else(|e| panic!("a fixed fuzz array does not open ({e}): {meta}"))
}

/// The fixed arrays, opened once.
pub fn chain_arrays() -> &'static [ZarrArray] {
    static ARRAYS: OnceLock<Vec<ZarrArray>> = OnceLock::new();
    ARRAYS.get_or_init(|| chain_metadata().iter().map(|(f, m)| open(*f, m)).collect())
}

/// The sharded ones among [`chain_arrays`].
pub fn sharded_arrays() -> Vec<&'static ZarrArray> {
    chain_arrays().iter().filter(|a| a.shard_shape().is_some()).collect()
}

/// Encode one chunk of `meta` (filled with a ramp of bytes) with zarrs itself: the stored
/// object, as a store written by zarr-python or zarrs would hold it.
fn encode_chunk(format: u8, meta: &Value) -> Vec<u8> {
    let store = Arc::new(MemoryStore::new());
    let mut m = meta.clone();
    if format == 2 {
        m["attributes"] = json!({});
    }
    let metadata = serde_json::from_value(m).expect("metadata");
    let array = Array::new_with_metadata(store.clone(), "/a", metadata).expect("array");
    let shape: Vec<u64> =
        array.chunk_shape(&vec![0; array.dimensionality()]).expect("shape").iter().map(|d| d.get()).collect();
    let n: u64 = shape.iter().product();
    let size = array.data_type().fixed_size().expect("fixed size");
    let bool_type = meta["data_type"] == "bool";
    let bytes: Vec<u8> =
        (0..n as usize * size).map(|i| if bool_type { (i % 2) as u8 } else { (i * 37 % 251) as u8 }).collect();
    array.store_chunk(&vec![0; shape.len()], ArrayBytes::new_flen(bytes)).expect("store chunk");
    store.get(&array.chunk_key(&vec![0; shape.len()])).expect("get").expect("stored").to_vec()
}

/// Seeds for the decode target: selector byte, then a valid encoded tile of that array.
pub fn decode_seeds() -> Vec<Vec<u8>> {
    let metas = chain_metadata();
    let arrays = chain_arrays();
    let mut out = Vec::new();
    for (i, ((format, meta), array)) in metas.iter().zip(arrays).enumerate() {
        let stored = encode_chunk(*format, meta);
        let tile = match array.shard_index_range() {
            None => stored,
            Some(range) => {
                let (start, end) = resolve(range, stored.len() as u64);
                let index = array.decode_shard_index(&stored[start..end], "seed").expect("index");
                let (s, e) = resolve(index.range(0).expect("inner chunk 0 present"), stored.len() as u64);
                stored[s..e].to_vec()
            }
        };
        out.push([&[i as u8][..], &tile].concat());
    }
    out
}

/// Seeds for the shard-index target: selector byte (into [`sharded_arrays`]), then the
/// index of a valid shard.
pub fn shard_index_seeds() -> Vec<Vec<u8>> {
    let metas = chain_metadata();
    let mut out = Vec::new();
    let mut k = 0u8;
    for ((format, meta), array) in metas.iter().zip(chain_arrays()) {
        let Some(range) = array.shard_index_range() else { continue };
        let stored = encode_chunk(*format, meta);
        let (start, end) = resolve(range, stored.len() as u64);
        out.push([&[k][..], &stored[start..end]].concat());
        k += 1;
    }
    out
}

/// Seeds for the metadata targets: the fixed arrays' metadata documents.
pub fn metadata_seeds(format: u8) -> Vec<Vec<u8>> {
    chain_metadata()
        .into_iter()
        .filter(|(f, _)| *f == format)
        .map(|(_, m)| serde_json::to_vec_pretty(&m).expect("json"))
        .collect()
}

fn resolve(range: insitubatch_core::ByteRange, len: u64) -> (usize, usize) {
    match range {
        insitubatch_core::ByteRange::Bounded { start, end } => (start as usize, end as usize),
        insitubatch_core::ByteRange::Suffix(n) => ((len - n) as usize, len as usize),
    }
}

/// With `IB_FUZZ_SEEDS=DIR` set, write `seeds()` into DIR (one file each) and exit.
pub fn write_seeds_if_asked(seeds: impl FnOnce() -> Vec<Vec<u8>>) {
    let Some(dir) = std::env::var_os("IB_FUZZ_SEEDS") else { return };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create the seed directory");
    let seeds = seeds();
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("builtin-{i:03}")), s).expect("write a seed");
    }
    eprintln!("wrote {} built-in seeds to {}", seeds.len(), dir.display());
    std::process::exit(0);
}
