//! Tests for `zarr.rs` and its parts: arrays are written by zarrs itself into its `MemoryStore`, copied
//! into [`MemoryStorage`], then opened and decoded tile by tile with our code.

use super::*;
use crate::array::BUFFER_ALIGN;
use crate::runtime::{ByteRange, Storage};
use crate::testing::MemoryStorage;
use bytes::Bytes;
use futures::executor::block_on;
use serde_json::json;
use zarrs::array::ArrayMetadata;
use zarrs::storage::store::MemoryStore;
use zarrs::storage::{ListableStorageTraits, ReadableStorageTraits};
// On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
// takes the place of libtest's `#[test]`.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// Write an array with zarrs: metadata (v2 or v3 JSON) and `values` over the whole array.
fn write(store: &Arc<MemoryStore>, path: &str, meta: Value, values: &[f32]) {
    let metadata: ArrayMetadata = serde_json::from_value(meta).unwrap();
    let array = Array::new_with_metadata(store.clone(), &format!("/{path}"), metadata).unwrap();
    array.store_metadata().unwrap();
    if !values.is_empty() {
        array.store_array_subset(&array.subset_all(), values.to_vec()).unwrap();
    }
}

fn to_storage(store: &MemoryStore) -> MemoryStorage {
    let storage = MemoryStorage::new();
    for key in store.list().unwrap() {
        let v = store.get(&key).unwrap().unwrap();
        storage.insert(key.as_str().to_string(), v);
    }
    storage
}

fn v3(shape: &[u64], chunk: &[u64], codecs: Value, dims: Option<Vec<&str>>) -> Value {
    let mut m = json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": codecs, "attributes": {}
    });
    if let Some(d) = dims {
        m["dimension_names"] = json!(d);
    }
    m
}

/// The compressor of the common chain: zstd, or gzip in a build without C codecs.
const COMP: &str = if cfg!(feature = "c-codecs") { "zstd" } else { "gzip" };

fn zstd_codecs() -> Value {
    let comp = if cfg!(feature = "c-codecs") {
        json!({"name": "zstd", "configuration": {"level": 3, "checksum": false}})
    } else {
        json!({"name": "gzip", "configuration": {"level": 3}})
    };
    json!([{"name": "bytes", "configuration": {"endian": "little"}}, comp])
}

fn group_v3() -> Value {
    json!({"zarr_format": 3, "node_type": "group", "attributes": {}})
}

fn put_json(storage: &MemoryStorage, key: &str, v: &Value) {
    storage.insert(key.to_string(), serde_json::to_vec(v).unwrap());
}

/// 1-based row-major values (so 0 = fill is distinguishable).
fn ramp(shape: &[u64]) -> Vec<f32> {
    (0..shape.iter().product::<u64>()).map(|i| i as f32 + 1.0).collect()
}

fn unravel(mut i: u64, shape: &[u64]) -> Vec<u64> {
    let mut out = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        out[k] = i % shape[k];
        i /= shape[k];
    }
    out
}

/// Fetch and decode every tile with our API, place it, return the whole array.
fn read_all(storage: &MemoryStorage, a: &ZarrArray) -> Vec<f32> {
    let shape = a.shape().to_vec();
    let tile = a.tile_shape().to_vec();
    let grid: Vec<u64> = shape.iter().zip(&tile).map(|(s, t)| s.div_ceil(*t)).collect();
    let mut out = vec![f32::NAN; shape.iter().product::<u64>() as usize];
    for t in 0..grid.iter().product::<u64>() {
        let coord = unravel(t, &grid);
        let loc = a.tile_location(&coord);
        let encoded = match &loc {
            TileLocation::Object { key } => block_on(storage.get(key)).unwrap(),
            TileLocation::InShard { key, index } => {
                match block_on(storage.get_range(key, a.shard_index_range().unwrap())).unwrap() {
                    None => None,
                    Some(ib) => {
                        let idx = a.decode_shard_index(&ib, key).unwrap();
                        idx.range(*index).map(|r| block_on(storage.get_range(key, r)).unwrap().unwrap())
                    }
                }
            }
        };
        let nd = a.decode_tile(encoded, loc.key()).unwrap();
        assert_eq!(nd.shape, tile.iter().map(|&d| d as usize).collect::<Vec<_>>());
        let vals = nd.as_slice::<f32>().unwrap();
        for (j, v) in vals.iter().enumerate() {
            let within = unravel(j as u64, &tile);
            let g: Vec<u64> = coord.iter().zip(&tile).zip(&within).map(|((c, t), w)| c * t + w).collect();
            if g.iter().zip(&shape).all(|(x, s)| x < s) {
                let lin = g.iter().zip(&shape).fold(0u64, |acc, (x, s)| acc * s + x);
                out[lin as usize] = *v;
            }
        }
    }
    out
}

#[test]
fn v3_zstd_ragged_roundtrip_fast_path() {
    let store = Arc::new(MemoryStore::new());
    let shape = [7u64, 10];
    let vals = ramp(&shape);
    write(&store, "t2m", v3(&shape, &[3, 4], zstd_codecs(), Some(vec!["time", "x"])), &vals);
    let storage = to_storage(&store);
    let a = block_on(open_array(&storage, "t2m")).unwrap();
    assert_eq!(a.zarr_format(), 3);
    assert_eq!(a.shape(), &[7, 10]);
    assert_eq!(a.tile_shape(), &[3, 4]);
    assert_eq!(a.shard_shape(), None);
    assert_eq!(a.dtype(), DType::Float32);
    assert_eq!(a.fill_value(), &0f32.to_ne_bytes());
    assert_eq!(a.codec_names(), vec!["bytes", COMP]);
    assert_eq!(a.tile_location(&[2, 1]), TileLocation::Object { key: "t2m/c/2/1".into() });
    assert_eq!(a.dimension_names(), Some(vec![Some("time".into()), Some("x".into())]));
    assert!(!a.is_coordinate());
    #[cfg(feature = "c-codecs")]
    assert!(a.has_fast_path());
    assert_eq!(read_all(&storage, &a), vals);
    // The fast path and zarrs' generic path agree.
    let enc = block_on(storage.get("t2m/c/2/2")).unwrap().unwrap();
    let fast = a.decode_tile(Some(enc.clone()), "k").unwrap();
    assert_eq!(fast.data.as_ptr() as usize % BUFFER_ALIGN, 0);
    assert_eq!(&fast.data[..], &a.decode_generic(&enc).unwrap()[..]);
    let g = a.geometry(0).unwrap();
    assert_eq!((g.shape.clone(), g.tile.clone(), g.shard.clone()), (vec![7, 10], vec![3, 4], None));
}

#[test]
fn v3_gzip_3d_ragged_and_absent_chunk() {
    let store = Arc::new(MemoryStore::new());
    let shape = [5u64, 6, 7];
    let mut vals = ramp(&shape);
    // Chunk (0,0,0) of shape [2,4,4] all fill: zarrs does not store it.
    for (i, v) in vals.iter_mut().enumerate() {
        let c = unravel(i as u64, &shape);
        if c[0] < 2 && c[1] < 4 && c[2] < 4 {
            *v = 0.0;
        }
    }
    let codecs = json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 5}}]);
    write(&store, "g/deep/v", v3(&shape, &[2, 4, 4], codecs, None), &vals);
    let storage = to_storage(&store);
    assert!(storage.keys().iter().all(|k| k != "g/deep/v/c/0/0/0"));
    let a = block_on(open_array(&storage, "g/deep/v")).unwrap();
    assert!(!a.has_fast_path());
    assert_eq!(a.codec_names(), vec!["bytes", "gzip"]);
    assert_eq!(read_all(&storage, &a), vals);
}

fn sharded_meta(shape: &[u64], shard: &[u64], inner: &[u64], location: &str) -> Value {
    let codecs = json!([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": inner,
        "codecs": zstd_codecs(),
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": location
    }}]);
    v3(shape, shard, codecs, Some(vec!["time", "x"]))
}

#[test]
fn sharded_2x2_with_absent_inner_chunk() {
    for location in ["end", "start"] {
        let store = Arc::new(MemoryStore::new());
        let shape = [8u64, 7]; // ragged on the last axis
        let mut vals = ramp(&shape);
        // Inner chunk (1,0) of shard (0,0): rows 2..4, cols 0..2 -> fill.
        for (i, v) in vals.iter_mut().enumerate() {
            let c = unravel(i as u64, &shape);
            if (2..4).contains(&c[0]) && c[1] < 2 {
                *v = 0.0;
            }
        }
        write(&store, "s", sharded_meta(&shape, &[4, 4], &[2, 2], location), &vals);
        let storage = to_storage(&store);
        let a = block_on(open_array(&storage, "s")).unwrap();
        assert_eq!(a.tile_shape(), &[2, 2]);
        assert_eq!(a.shard_shape(), Some(&[4u64, 4][..]));
        assert_eq!(a.codec_names(), vec![format!("sharding_indexed(bytes,{COMP})")]);
        #[cfg(feature = "c-codecs")]
        assert!(a.has_fast_path());
        // 2x2 inner chunks x 16 bytes + crc32c 4.
        let expect = if location == "end" { ByteRange::Suffix(68) } else { ByteRange::Bounded { start: 0, end: 68 } };
        assert_eq!(a.shard_index_range(), Some(expect));
        assert_eq!(a.tile_location(&[1, 0]), TileLocation::InShard { key: "s/c/0/0".into(), index: 2 });
        assert_eq!(a.tile_location(&[3, 3]), TileLocation::InShard { key: "s/c/1/1".into(), index: 3 });
        let ib = block_on(storage.get_range("s/c/0/0", a.shard_index_range().unwrap())).unwrap().unwrap();
        let idx = a.decode_shard_index(&ib, "s/c/0/0").unwrap();
        assert_eq!((idx.len(), idx.n_present()), (4, 3));
        assert_eq!(idx.range(2), None);
        assert_eq!(read_all(&storage, &a), vals);
        let g = a.geometry(0).unwrap();
        assert_eq!(g.shard, Some(vec![4, 4]));
        // A bad index: wrong size and corrupted crc.
        assert!(matches!(a.decode_shard_index(&ib[1..], "s/c/0/0"), Err(Error::Decode { .. })));
        let mut bad = ib.to_vec();
        bad[0] ^= 0xff;
        match a.decode_shard_index(&bad, "s/c/0/0") {
            Err(Error::Decode { message, key }) => {
                assert!(message.contains("on_bad_chunk"), "{message}");
                assert_eq!(key, "s/c/0/0");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn v2_zlib_and_blosc_with_separators() {
    let store = Arc::new(MemoryStore::new());
    let shape = [5u64, 6];
    let vals = ramp(&shape);
    let zlib = json!({"zarr_format": 2, "shape": shape, "chunks": [2, 4], "dtype": "<f4", "compressor": {"id": "zlib", "level": 1},
        "fill_value": 0.0, "order": "C", "filters": null, "dimension_separator": "/"});
    write(&store, "a", zlib, &vals);
    let mut blosc = json!({"zarr_format": 2, "shape": shape, "chunks": [3, 3], "dtype": "<f4",
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
        "fill_value": 0.0, "order": "C", "filters": null});
    #[cfg(not(feature = "c-codecs"))]
    {
        blosc["compressor"] = json!({"id": "zlib", "level": 1});
    }
    write(&store, "b", blosc.clone(), &vals);
    let storage = to_storage(&store);
    storage.insert("b/.zattrs", serde_json::to_vec(&json!({"_ARRAY_DIMENSIONS": ["y", "x"]})).unwrap());
    let a = block_on(open_array(&storage, "a")).unwrap();
    assert_eq!(a.zarr_format(), 2);
    assert_eq!(a.tile_location(&[1, 1]), TileLocation::Object { key: "a/1/1".into() });
    assert_eq!(read_all(&storage, &a), vals);
    let b = block_on(open_array(&storage, "b")).unwrap();
    assert_eq!(b.tile_location(&[1, 1]), TileLocation::Object { key: "b/1.1".into() });
    assert_eq!(b.dimension_names(), Some(vec![Some("y".into()), Some("x".into())]));
    assert_eq!(read_all(&storage, &b), vals);
    // Direct parse of the same bytes; `.zattrs` optional.
    blosc["order"] = json!("C");
    let direct = ZarrArray::from_v2("b", &serde_json::to_vec(&blosc).unwrap(), None).unwrap();
    assert_eq!(direct.dimension_names(), None);
    // Big-endian v2 goes through zarrs' generic path.
    let be = json!({"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": ">f8", "compressor": null, "fill_value": null, "order": "C", "filters": null});
    let z = ZarrArray::from_v2("be", &serde_json::to_vec(&be).unwrap(), None).unwrap();
    assert!(!z.has_fast_path());
    let raw: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let nd = z.decode_tile(Some(Bytes::from(raw)), "be/0").unwrap();
    assert_eq!(nd.as_slice::<f64>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn chunk_key_encodings_and_root_array() {
    let mut m = v3(&[4, 4], &[2, 2], zstd_codecs(), None);
    let root = ZarrArray::from_v3("", &serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(root.path(), "");
    assert_eq!(root.tile_location(&[0, 1]), TileLocation::Object { key: "c/0/1".into() });
    m["chunk_key_encoding"] = json!({"name": "v2", "configuration": {"separator": "."}});
    let v2k = ZarrArray::from_v3("grp/x", &serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(v2k.tile_location(&[0, 1]), TileLocation::Object { key: "grp/x/0.1".into() });
    m["chunk_key_encoding"] = json!({"name": "default", "configuration": {"separator": "."}});
    let dot = ZarrArray::from_v3("/x/", &serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(dot.path(), "x");
    assert_eq!(dot.tile_location(&[1, 0]), TileLocation::Object { key: "x/c.1.0".into() });
    // Absent tile: fill value, full tile.
    m["fill_value"] = json!(-1.5);
    let f = ZarrArray::from_v3("x", &serde_json::to_vec(&m).unwrap()).unwrap();
    let nd = f.decode_tile(None, "x/c/0/0").unwrap();
    assert_eq!(nd.as_slice::<f32>().unwrap(), &[-1.5; 4]);
}

/// A CF-style store: a data variable, coordinates, a scalar grid mapping, a nested group.
fn cf_store() -> (Arc<MemoryStore>, MemoryStorage) {
    let store = Arc::new(MemoryStore::new());
    write(
        &store,
        "t2m",
        v3(&[4, 3, 5], &[2, 3, 5], zstd_codecs(), Some(vec!["time", "lat", "lon"])),
        &ramp(&[4, 3, 5]),
    );
    write(&store, "lat", v3(&[3], &[3], zstd_codecs(), Some(vec!["lat"])), &ramp(&[3]));
    write(&store, "time", v3(&[4], &[4], zstd_codecs(), Some(vec!["time"])), &ramp(&[4]));
    write(&store, "crs", v3(&[], &[], zstd_codecs(), None), &[]);
    write(&store, "sub/inner/u", v3(&[4, 2], &[2, 2], zstd_codecs(), Some(vec!["time", "u"])), &ramp(&[4, 2]));
    let storage = to_storage(&store);
    put_json(&storage, "zarr.json", &group_v3());
    put_json(&storage, "sub/zarr.json", &group_v3());
    put_json(&storage, "sub/inner/zarr.json", &group_v3());
    (store, storage)
}

#[test]
fn discovery_by_listing_skips_coordinates() {
    let (_, storage) = cf_store();
    let arrays = block_on(open_arrays(&storage, None)).unwrap();
    let paths: Vec<&str> = arrays.iter().map(ZarrArray::path).collect();
    assert_eq!(paths, vec!["sub/inner/u", "t2m"]);
    // Explicit names: exactly those, in order, coordinates honoured.
    let names = vec!["lat".to_string(), "t2m".to_string()];
    let arrays = block_on(open_arrays(&storage, Some(&names))).unwrap();
    assert_eq!(arrays.iter().map(ZarrArray::path).collect::<Vec<_>>(), vec!["lat", "t2m"]);
    assert!(arrays[0].is_coordinate());
    // A group named as an array.
    match block_on(open_array(&storage, "sub")) {
        Err(Error::NotAnArray(m)) => assert!(m.contains("is a group, not an array"), "{m}"),
        other => panic!("{other:?}"),
    }
    // 0-D has no sample axis.
    let crs = block_on(open_array(&storage, "crs")).unwrap();
    assert!(crs.is_coordinate());
    assert!(matches!(crs.geometry(0), Err(Error::Geometry(_))));
}

#[test]
fn discovery_from_consolidated_metadata_on_unlistable_store() {
    let (_, listable) = cf_store();
    let storage = MemoryStorage::new().unlistable();
    for k in listable.keys() {
        let v = block_on(listable.get(&k)).unwrap().unwrap();
        storage.insert(k, v);
    }
    // Without consolidated metadata: a clear Config error.
    match block_on(open_arrays(&storage, None)) {
        Err(Error::Config(m)) => {
            assert!(m.contains("cannot be listed") && m.contains("consolidated") && m.contains("variables"), "{m}");
            assert!(m.ends_with("memory://"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // v3 consolidated metadata in the root zarr.json.
    let mut meta = serde_json::Map::new();
    for p in ["t2m", "lat", "time", "crs", "sub", "sub/inner", "sub/inner/u"] {
        let b = block_on(storage.get(&format!("{p}/zarr.json"))).unwrap().unwrap();
        meta.insert(p.to_string(), serde_json::from_slice(&b).unwrap());
    }
    let mut root = group_v3();
    root["consolidated_metadata"] = json!({"kind": "inline", "must_understand": false, "metadata": meta});
    put_json(&storage, "zarr.json", &root);
    let reads_before = storage.total_reads();
    let arrays = block_on(open_arrays(&storage, None)).unwrap();
    assert_eq!(storage.total_reads() - reads_before, 1, "only the root zarr.json is read");
    assert_eq!(arrays.iter().map(ZarrArray::path).collect::<Vec<_>>(), vec!["sub/inner/u", "t2m"]);
    assert_eq!(read_all(&storage, &arrays[1]), ramp(&[4, 3, 5]));
}

#[test]
fn discovery_from_v2_zmetadata_and_all_coordinates() {
    let storage = MemoryStorage::new().unlistable();
    let arr = |shape: &[u64]| json!({"zarr_format": 2, "shape": shape, "chunks": shape, "dtype": "<f4", "compressor": null, "fill_value": 0.0, "order": "C", "filters": null});
    let zm = json!({"zarr_consolidated_format": 1, "metadata": {
        ".zgroup": {"zarr_format": 2},
        "lat/.zarray": arr(&[3]), "lat/.zattrs": {"_ARRAY_DIMENSIONS": ["lat"]},
        "z/.zarray": arr(&[2, 3]), "z/.zattrs": {"_ARRAY_DIMENSIONS": ["time", "lat"]},
        "a/.zarray": arr(&[2]), "a/.zattrs": {"_ARRAY_DIMENSIONS": ["time"]}
    }});
    put_json(&storage, ".zmetadata", &zm);
    let arrays = block_on(open_arrays(&storage, None)).unwrap();
    assert_eq!(arrays.iter().map(ZarrArray::path).collect::<Vec<_>>(), vec!["a", "z"]);
    // Only coordinates -> Config listing them.
    let only = json!({"zarr_consolidated_format": 1, "metadata": {
        "lat/.zarray": arr(&[3]), "lat/.zattrs": {"_ARRAY_DIMENSIONS": ["lat"]}, "s/.zarray": arr(&[])}});
    put_json(&storage, ".zmetadata", &only);
    match block_on(open_arrays(&storage, None)) {
        Err(Error::Config(m)) => {
            assert!(m.contains("\"lat\"") && m.contains("\"s\"") && m.contains("variables"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

fn metadata_error(storage: &MemoryStorage, path: &str) -> (String, String) {
    match block_on(open_array(storage, path)) {
        Err(Error::Metadata { message, key }) => (message, key),
        other => panic!("expected Error::Metadata, got {other:?}"),
    }
}

#[test]
fn bad_metadata_is_an_error_not_a_panic() {
    let storage = MemoryStorage::new();
    storage.insert("bad/zarr.json", &b"{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [4"[..]);
    let (m, k) = metadata_error(&storage, "bad");
    assert!(m.starts_with("malformed zarr metadata ("), "{m}");
    assert_eq!(k, "memory://bad/zarr.json");

    put_json(&storage, "zero/zarr.json", &v3(&[4, 4], &[0, 4], zstd_codecs(), None));
    let (m, k) = metadata_error(&storage, "zero");
    assert!(m.contains("zero extent"), "{m}");
    assert_eq!(k, "memory://zero/zarr.json");

    put_json(&storage, "huge/zarr.json", &v3(&[u64::MAX, 4], &[u64::MAX / 2, 1 << 40], zstd_codecs(), None));
    let (m, _) = metadata_error(&storage, "huge");
    assert!(m.contains("overflow") || m.contains("exceed"), "{m}");

    put_json(&storage, "big/zarr.json", &v3(&[1 << 20, 1 << 20], &[1 << 20, 1 << 20], zstd_codecs(), None));
    let (m, _) = metadata_error(&storage, "big");
    assert!(m.contains("exceed"), "{m}");

    let mut rank = v3(&[1; 40], &[1; 40], zstd_codecs(), None);
    rank["shape"] = json!(vec![1; 40]);
    put_json(&storage, "rank/zarr.json", &rank);
    metadata_error(&storage, "rank");

    let unknown = json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "lzma9000"}]);
    put_json(&storage, "codec/zarr.json", &v3(&[4], &[2], unknown, None));
    let (m, k) = metadata_error(&storage, "codec");
    assert!(m.contains("lzma9000") && m.contains("not supported by this build"), "{m}");
    assert_eq!(k, "memory://codec/zarr.json");

    let mut s = v3(&[4], &[2], zstd_codecs(), None);
    s["data_type"] = json!("string");
    s["fill_value"] = json!("");
    s["codecs"] = json!([{"name": "vlen-utf8"}]);
    put_json(&storage, "str/zarr.json", &s);
    let (m, _) = metadata_error(&storage, "str");
    assert!(m.contains("not supported"), "{m}");

    let mut grid = v3(&[4], &[2], zstd_codecs(), None);
    grid["chunk_grid"]["name"] = json!("rectilinear");
    put_json(&storage, "grid/zarr.json", &grid);
    metadata_error(&storage, "grid");

    // Sharding nested under transpose.
    let mut t = sharded_meta(&[4, 4], &[4, 4], &[2, 2], "end");
    let shard = t["codecs"][0].clone();
    t["codecs"] = json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, shard]);
    put_json(&storage, "tr/zarr.json", &t);
    let (m, _) = metadata_error(&storage, "tr");
    assert!(m.contains("unsupported"), "{m}");

    // Inner chunk not dividing the shard; too many inner chunks per shard.
    put_json(&storage, "div/zarr.json", &sharded_meta(&[6, 6], &[3, 3], &[2, 2], "end"));
    metadata_error(&storage, "div");
    put_json(&storage, "many/zarr.json", &sharded_meta(&[1 << 30, 1 << 30], &[1 << 30, 1 << 30], &[1, 1], "end"));
    metadata_error(&storage, "many");

    // v2: zero chunk, bad JSON in .zattrs.
    storage.insert("v2z/.zarray", serde_json::to_vec(&json!({"zarr_format": 2, "shape": [4], "chunks": [0], "dtype": "<f4", "compressor": null, "fill_value": 0.0, "order": "C", "filters": null})).unwrap());
    metadata_error(&storage, "v2z");
    storage.insert("v2a/.zarray", serde_json::to_vec(&json!({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f4", "compressor": null, "fill_value": 0.0, "order": "C", "filters": null})).unwrap());
    storage.insert("v2a/.zattrs", &b"{nope"[..]);
    let (m, k) = metadata_error(&storage, "v2a");
    assert!(m.starts_with("malformed"), "{m}");
    assert_eq!(k, "memory://v2a/.zattrs");

    // Missing array.
    match block_on(open_array(&storage, "nothere")) {
        Err(Error::ArrayNotFound { message, key }) => {
            assert!(message.contains("nothere"), "{message}");
            assert_eq!(key, "memory://");
        }
        other => panic!("{other:?}"),
    }
}

/// A shard index entry longer than any encoded inner chunk can be (a 2^40-byte inner chunk of
/// a 2x2 float32 tile) is refused before anything is fetched, naming the shard key.
#[test]
fn a_shard_index_entry_beyond_the_inner_chains_bound_is_refused() {
    let mut m = sharded_meta(&[4, 4], &[4, 4], &[2, 2], "end");
    m["codecs"][0]["configuration"]["index_codecs"] = json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
    let a = ZarrArray::from_v3("s", &serde_json::to_vec(&m).unwrap()).unwrap();
    let index = |len: u64| -> Vec<u8> {
        [[0u64, 16], [16, 16], [32, len], [u64::MAX, u64::MAX]].iter().flatten().flat_map(|w| w.to_le_bytes()).collect()
    };
    let ok = a.decode_shard_index(&index(16), "s/c/0/0").unwrap();
    assert_eq!(ok.range(2), Some(ByteRange::Bounded { start: 32, end: 48 }));
    match a.decode_shard_index(&index(1 << 40), "s/c/0/0") {
        Err(Error::Decode { message, key }) => {
            assert!(message.contains("entry 2 has length 1099511627776"), "{message}");
            assert_eq!(key, "s/c/0/0");
        }
        other => panic!("{other:?}"),
    }
}

/// Crash inputs the fuzzers found, kept as regression tests (fuzz/, docs/reliability.md).
#[test]
fn fuzzer_findings_are_errors() {
    let storage = MemoryStorage::new();
    // zarr_v2_metadata: a bz2 level of 0 passed zarrs' check and panicked in the bzip2 crate.
    let v2 = json!({"zarr_format": 2, "shape": [4, 4], "chunks": [4, 4], "dtype": "<u2",
        "compressor": {"id": "bz2", "level": 0}, "fill_value": 0, "order": "C", "filters": null,
        "dimension_separator": "/"});
    put_json(&storage, "bz2v2/.zarray", &v2);
    let (m, k) = metadata_error(&storage, "bz2v2");
    assert!(m.contains("level 0"), "{m}");
    assert_eq!(k, "memory://bz2v2/.zarray");
    // The same as a v2 filter, as a v3 codec, and inside a shard.
    let mut filt = v2.clone();
    filt["compressor"] = Value::Null;
    filt["filters"] = json!([{"id": "bz2", "level": 0}]);
    put_json(&storage, "bz2f/.zarray", &filt);
    assert!(metadata_error(&storage, "bz2f").0.contains("level 0"));
    let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let bz2 = json!({"name": "numcodecs.bz2", "configuration": {"level": 0}});
    put_json(&storage, "bz2v3/zarr.json", &v3(&[4], &[2], json!([le, bz2]), None));
    assert!(metadata_error(&storage, "bz2v3").0.contains("level 0"));
    let mut sh = sharded_meta(&[4, 4], &[4, 4], &[2, 2], "end");
    sh["codecs"][0]["configuration"]["codecs"] = json!([le, bz2]);
    put_json(&storage, "bz2s/zarr.json", &sh);
    assert!(metadata_error(&storage, "bz2s").0.contains("level 0"));
}

/// decode_tile: a 48-byte blosc chunk whose header declares 704651264 decoded bytes made
/// zarrs allocate that much for an 8-element tile. Now refused from the header, naming the key.
#[cfg(feature = "c-codecs")]
#[test]
fn a_blosc_header_declaring_more_than_the_tile_is_a_decode_error() {
    let meta = json!({"zarr_format": 2, "shape": [8], "chunks": [8], "dtype": "<i4", "fill_value": 0,
        "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1, "blocksize": 0},
        "order": "C", "filters": null, "dimension_separator": "/"});
    let a = ZarrArray::from_v2("b", &serde_json::to_vec(&meta).unwrap(), None).unwrap();
    let input: &[u8] = &[
        0x02, 0x01, 0x93, 0x00, 0x00, 0x20, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x25,
        0x4a, 0x6f, 0x94, 0xb9, 0xde, 0x08, 0x2d, 0x52, 0x77, 0x9c, 0xc1, 0xe6, 0x02, 0x10, 0x10, 0x10, 0x10, 0x10,
        0x80, 0x80, 0x80, 0x80, 0x84, 0x04, 0x04, 0x04, 0x00, 0x20, 0x20, 0x20,
    ];
    match a.decode_tile(Some(Bytes::copy_from_slice(input)), "b/0") {
        Err(Error::Decode { message, key }) => {
            assert!(message.contains("blosc header declares 704651264"), "{message}");
            assert_eq!(key, "b/0");
        }
        other => panic!("{other:?}"),
    }
}

/// Hostile or absurd metadata (issue 16): refused at open, before zarrs sees it or anything
/// is allocated, with an `Error::Metadata` whose key names the array's metadata object and
/// whose message names the field. Each case would otherwise overflow, abort on a huge
/// allocation, or read garbage.
#[test]
fn hostile_metadata_is_refused_naming_the_array_and_the_field() {
    let storage = MemoryStorage::new();
    let v2 = |shape: Value, chunks: Value, dtype: &str| {
        json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype, "compressor": null,
               "fill_value": 0, "order": "C", "filters": null})
    };
    let with = |mut m: Value, field: &str, v: Value| {
        m[field] = v;
        m
    };
    let f32v3 = |shape: Value, chunk: Value| {
        let mut m = v3(&[4, 4], &[2, 2], zstd_codecs(), None);
        m["shape"] = shape;
        m["chunk_grid"]["configuration"]["chunk_shape"] = chunk;
        m
    };
    let cases: Vec<(&str, u8, Value, &str)> = vec![
        // The shape's byte count overflows u64 (2^40 * 2^40 elements).
        ("shape_overflow", 3, f32v3(json!([1u64 << 40, 1u64 << 40]), json!([1, 1])), "shape"),
        ("shape_overflow_v2", 2, v2(json!([1u64 << 40, 1u64 << 40]), json!([1, 1]), "<f4"), "shape"),
        ("chunk_zero", 3, f32v3(json!([4, 4]), json!([0, 4])), "chunk shape"),
        ("chunk_zero_v2", 2, v2(json!([4, 4]), json!([4, 0]), "<f4"), "chunks"),
        ("chunk_negative", 3, f32v3(json!([4, 4]), json!([-2, 4])), "chunk_shape"),
        ("chunk_negative_v2", 2, v2(json!([4, 4]), json!([-1, 4]), "<f4"), "chunks"),
        ("shape_negative", 3, f32v3(json!([-4, 4]), json!([2, 4])), "shape"),
        ("shape_fraction", 3, f32v3(json!([4.5, 4]), json!([2, 4])), "shape"),
        ("shape_beyond_u64", 3, f32v3(json!([1e30, 4]), json!([2, 4])), "shape"),
        ("shape_not_a_list", 3, f32v3(json!("4,4"), json!([2, 4])), "shape"),
        // One chunk of 2^20 x 2^20 float32 (4 TiB): beyond any memory.
        ("chunk_huge", 3, f32v3(json!([1 << 20, 1 << 20]), json!([1 << 20, 1 << 20])), "chunk"),
        ("chunk_huge_v2", 2, v2(json!([1u64 << 40]), json!([1u64 << 40]), "<f8"), "chunk"),
        // Ranks that disagree.
        ("rank_mismatch", 3, f32v3(json!([4, 4]), json!([4])), "differ in rank"),
        ("rank_mismatch_v2", 2, v2(json!([4, 4, 4]), json!([4, 4]), "<f4"), "differ in rank"),
        ("rank_absurd", 3, f32v3(json!(vec![1; 40]), json!(vec![1; 40])), "dimensions"),
        ("dim_names_mismatch", 3, v3(&[4, 4], &[2, 2], zstd_codecs(), Some(vec!["time"])), "dimension_names"),
        // Element types of 2^40 bytes (raw bits, fixed-length bytes, unicode, void).
        (
            "dtype_huge",
            3,
            with(v3(&[4], &[2], json!([{"name": "bytes"}]), None), "data_type", json!("r8796093022208")),
            "data_type",
        ),
        ("dtype_huge_s", 2, v2(json!([4]), json!([2]), "|S1099511627776"), "dtype"),
        ("dtype_huge_u", 2, v2(json!([4]), json!([2]), "<U274877906944"), "dtype"),
        ("dtype_huge_v", 2, v2(json!([4]), json!([2]), "|V1099511627776"), "dtype"),
        (
            "dtype_structured",
            2,
            with(v2(json!([4]), json!([2]), "<f4"), "dtype", json!([["a", "<f4"], ["b", "|V1099511627776"]])),
            "dtype",
        ),
        (
            "dtype_object",
            3,
            with(v3(&[4], &[2], zstd_codecs(), None), "data_type", json!({"name": "r16", "configuration": {}})),
            "data_type",
        ),
    ];
    for (name, format, meta, field) in cases {
        let file = if format == 3 { "zarr.json" } else { ".zarray" };
        put_json(&storage, &format!("{name}/{file}"), &meta);
        let (m, k) = metadata_error(&storage, name);
        assert_eq!(k, format!("memory://{name}/{file}"), "{name}: the key names the array");
        assert!(m.contains(field), "{name}: the message must name `{field}`: {m}");
    }
}

#[test]
fn corrupt_tiles_are_decode_errors() {
    let store = Arc::new(MemoryStore::new());
    write(&store, "z", v3(&[4, 4], &[2, 4], zstd_codecs(), None), &ramp(&[4, 4]));
    let codecs = json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 5}}]);
    write(&store, "g", v3(&[4, 4], &[2, 4], codecs, None), &ramp(&[4, 4]));
    let storage = to_storage(&store);
    for path in ["z", "g"] {
        let a = block_on(open_array(&storage, path)).unwrap();
        let key = format!("{path}/c/0/0");
        let good = block_on(storage.get(&key)).unwrap().unwrap();
        let cases: Vec<Bytes> =
            vec![Bytes::from_static(b"definitely not compressed"), good.slice(..good.len() / 2), Bytes::new()];
        for bad in cases {
            match a.decode_tile(Some(bad), &key) {
                Err(Error::Decode { message, key: k }) => {
                    assert!(message.contains("on_bad_chunk=\"nan\""), "{message}");
                    assert_eq!(k, key);
                }
                other => panic!("{path}: {other:?}"),
            }
        }
    }
    // Valid zstd of the wrong decoded size.
    #[cfg(feature = "c-codecs")]
    {
        let a = block_on(open_array(&storage, "z")).unwrap();
        let small = zstd_frame(&[0u8; 12]);
        assert!(matches!(a.decode_tile(Some(small), "z/c/0/0"), Err(Error::Decode { .. })));
        let large = zstd_frame(&[0u8; 64]);
        assert!(matches!(a.decode_tile(Some(large), "z/c/0/0"), Err(Error::Decode { .. })));
    }
}

/// The v2 compressors whose decoders zarrs lets inflate without a limit, each on an array of
/// one 256-element float32 tile (1 KiB): `(name, .zarray)`. zstd is on a big-endian array,
/// so that it takes the bounded chain rather than the direct `[bytes, zstd]` path.
fn one_tile_compressed_arrays() -> Vec<(&'static str, Value)> {
    let v2 = |dtype: &str, compressor: Value| {
        json!({"zarr_format": 2, "shape": [256], "chunks": [256], "dtype": dtype, "compressor": compressor,
               "fill_value": 0.0, "order": "C", "filters": null, "dimension_separator": "/"})
    };
    let mut out = vec![
        ("gzip", v2("<f4", json!({"id": "gzip", "level": 1}))),
        ("zlib", v2("<f4", json!({"id": "zlib", "level": 1}))),
        ("bz2", v2("<f4", json!({"id": "bz2", "level": 1}))),
    ];
    if cfg!(feature = "c-codecs") {
        out.push(("zstd", v2(">f4", json!({"id": "zstd", "level": 1}))));
    }
    out
}

/// `zeros` zero bytes compressed by `codec` (a stream far smaller than what it inflates to).
fn compressed_zeros(codec: &str, zeros: usize) -> Bytes {
    use std::io::Write;
    fn feed<W: Write>(mut w: W, zeros: usize) -> W {
        let block = vec![0u8; 1 << 16];
        let mut left = zeros;
        while left > 0 {
            let n = left.min(block.len());
            w.write_all(&block[..n]).unwrap();
            left -= n;
        }
        w
    }
    let best = flate2::Compression::best();
    let out = match codec {
        "gzip" => feed(flate2::write::GzEncoder::new(Vec::new(), best), zeros).finish().unwrap(),
        "zlib" => feed(flate2::write::ZlibEncoder::new(Vec::new(), best), zeros).finish().unwrap(),
        "bz2" => feed(bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast()), zeros).finish().unwrap(),
        #[cfg(feature = "c-codecs")]
        "zstd" => zstd::bulk::compress(&vec![0u8; zeros], 1).unwrap(),
        other => panic!("no encoder for {other}"),
    };
    Bytes::from(out)
}

/// A decompression bomb (issue 16): a small chunk that inflates far beyond its tile, for every
/// compressor whose zarrs decoder inflates without a limit. Each is an `Error::Decode` naming
/// the key, and decoding it allocates about its tile (plus the decoder's state), never what the
/// stream inflates to: each bytes-to-bytes codec decodes into at most the bytes it may decode
/// to (zarr/bounded.rs). A chunk that decodes short of its tile is an error too, and a good
/// chunk still reads back exactly.
#[test]
fn a_decompression_bomb_is_an_error_and_allocates_only_its_tile() {
    // 16 MiB of zeros, 16384 times the 1 KiB tile: at most 32 KiB stored.
    const INFLATED: usize = 16 << 20;
    let store = Arc::new(MemoryStore::new());
    for (name, meta) in one_tile_compressed_arrays() {
        write(&store, name, meta, &ramp(&[256]));
    }
    let storage = to_storage(&store);
    for (name, _) in one_tile_compressed_arrays() {
        let a = block_on(open_array(&storage, name)).unwrap();
        assert!(!a.has_fast_path(), "{name}");
        assert_eq!(read_all(&storage, &a), ramp(&[256]), "{name}: a good chunk reads back exactly");
        let key = format!("{name}/0");
        let bomb = compressed_zeros(name, INFLATED);
        assert!(bomb.len() < INFLATED / 500, "{name}: {} bytes stored", bomb.len());
        let (result, peak) = peak::measure(|| a.decode_tile(Some(bomb), &key));
        match result {
            Err(Error::Decode { message, key: k }) => {
                assert!(
                    message.contains(&format!("{name} decodes to more than the 1024 bytes this tile can hold")),
                    "{message}"
                );
                assert!(message.contains("on_bad_chunk=\"nan\""), "{message}");
                assert_eq!(k, key);
            }
            other => panic!("{name}: {other:?}"),
        }
        // The tile, the decoder's state (bz2's is the largest, under 1 MiB at level 1), and
        // nothing in proportion to the 16 MiB the stream inflates to.
        if let Some(peak) = peak {
            assert!(peak < 2 << 20, "{name}: decoding the bomb allocated up to {peak} bytes at once");
        }
        // Short of the tile: 1000 of its 1024 bytes.
        match a.decode_tile(Some(compressed_zeros(name, 1000)), &key) {
            Err(Error::Decode { message, key: k }) => {
                assert!(message.contains(&format!("{name} decoded 1000 bytes, expected 1024")), "{message}");
                assert_eq!(k, key);
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Chains of more than one bytes-to-bytes codec, and with array-to-array codecs, decode
/// exactly through the bounded chain (zarr/bounded.rs runs the bytes-to-bytes codecs itself,
/// zarrs the rest). A codec further out is bounded by what the codecs before it encode the
/// tile to: zstd around gzip by gzip's bound for a 1 KiB tile (1191 bytes), so a zstd frame of
/// a whole gzip bomb is refused at the zstd stage.
#[cfg(feature = "c-codecs")]
#[test]
fn chains_of_several_codecs_read_back_exactly_and_bound_each_stage() {
    let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let be = json!({"name": "bytes", "configuration": {"endian": "big"}});
    let gzip = json!({"name": "gzip", "configuration": {"level": 1}});
    let zstd = json!({"name": "zstd", "configuration": {"level": 1, "checksum": true}});
    let bz2 = json!({"name": "numcodecs.bz2", "configuration": {"level": 1}});
    let crc = json!({"name": "crc32c"});
    let transpose = json!({"name": "transpose", "configuration": {"order": [1, 0]}});
    let chains = [
        ("gzip_zstd", json!([le, gzip, zstd])),
        ("zstd_crc", json!([le, zstd, crc])),
        ("t_be_gzip_crc", json!([transpose, be, gzip, crc])),
        ("bz2_gzip", json!([le, bz2, gzip])),
    ];
    let store = Arc::new(MemoryStore::new());
    for (name, codecs) in &chains {
        write(&store, name, v3(&[32, 24], &[16, 16], codecs.clone(), None), &ramp(&[32, 24]));
    }
    let storage = to_storage(&store);
    for (name, _) in &chains {
        let a = block_on(open_array(&storage, name)).unwrap();
        assert!(!a.has_fast_path(), "{name}");
        assert_eq!(read_all(&storage, &a), ramp(&[32, 24]), "{name}");
    }
    let a = block_on(open_array(&storage, "gzip_zstd")).unwrap();
    let gzip_bomb = compressed_zeros("gzip", 16 << 20);
    let bomb = Bytes::from(zstd::bulk::compress(&gzip_bomb, 1).unwrap());
    match a.decode_tile(Some(bomb), "gzip_zstd/c/0/0") {
        Err(Error::Decode { message, key }) => {
            assert!(message.contains("zstd decodes to more than the 1191 bytes this tile can hold"), "{message}");
            assert_eq!(key, "gzip_zstd/c/0/0");
        }
        other => panic!("{other:?}"),
    }
}

/// The most bytes live at once on the calling thread while a closure runs: a global allocator
/// that counts, on the threads that ask it to, every allocation, reallocation and free (a
/// reallocation counts its new size before it frees the old one, as a moving `realloc` does).
/// `None` on wasm32, where the tests run without it.
mod peak {
    #[cfg(not(target_arch = "wasm32"))]
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        pub(super) struct Counting;

        thread_local! {
            // `const` thread-locals without destructors: reading them never allocates.
            pub(super) static ARMED: Cell<bool> = const { Cell::new(false) };
            pub(super) static LIVE: Cell<isize> = const { Cell::new(0) };
            pub(super) static PEAK: Cell<isize> = const { Cell::new(0) };
        }

        fn note(delta: isize) {
            let _ = ARMED.try_with(|armed| {
                if armed.get() {
                    let live = LIVE.get() + delta;
                    LIVE.set(live);
                    PEAK.set(PEAK.get().max(live));
                }
            });
        }

        fn size(n: usize) -> isize {
            isize::try_from(n).unwrap_or(isize::MAX)
        }

        // SAFETY: every call is forwarded unchanged to the system allocator; the counting
        // touches only this thread's cells.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                note(size(layout.size()));
                // SAFETY: the caller's contract for `alloc`, passed on.
                unsafe { System.alloc(layout) }
            }
            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                note(size(layout.size()));
                // SAFETY: as `alloc`.
                unsafe { System.alloc_zeroed(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                note(-size(layout.size()));
                // SAFETY: `ptr` came from `System` with `layout` (every allocation goes there).
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                note(size(new_size));
                note(-size(layout.size()));
                // SAFETY: as `dealloc`, and the caller's contract for `realloc`.
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }

        #[global_allocator]
        static COUNTING: Counting = Counting;
    }

    /// `f()`, and the most bytes it had live at once (on this thread) beyond what was live before.
    pub(super) fn measure<T>(f: impl FnOnce() -> T) -> (T, Option<usize>) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            use counting::{ARMED, LIVE, PEAK};
            LIVE.set(0);
            PEAK.set(0);
            ARMED.set(true);
            let out = f();
            ARMED.set(false);
            (out, Some(usize::try_from(PEAK.get()).unwrap_or(0)))
        }
        #[cfg(target_arch = "wasm32")]
        {
            (f(), None)
        }
    }
}

#[cfg(feature = "c-codecs")]
/// A zstd frame encoded by zarrs' own zstd codec (through a one-tile array).
fn zstd_frame(raw: &[u8]) -> Bytes {
    let store = Arc::new(MemoryStore::new());
    let meta = json!({"zarr_format": 3, "node_type": "array", "shape": [raw.len()], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [raw.len()]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 7,
        "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]});
    let array = Array::new_with_metadata(store.clone(), "/f", serde_json::from_value(meta).unwrap()).unwrap();
    array.store_chunk(&[0], raw.to_vec()).unwrap();
    store.get(&array.chunk_key(&[0])).unwrap().unwrap()
}

/// Decode throughput of the direct zstd path vs zarrs' generic chain (run with
/// `cargo test -p insitubatch-core --release zarr::tests::bench -- --ignored --nocapture`).
/// Not on wasm32: it reads the wall clock, which wasm32-unknown-unknown's std has not.
#[test]
#[ignore]
#[cfg(all(feature = "c-codecs", not(target_arch = "wasm32")))]
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "an ignored micro benchmark: it measures wall time on purpose"
)]
fn bench_fast_vs_generic() {
    let store = Arc::new(MemoryStore::new());
    let shape = [64u64, 256, 256];
    let vals: Vec<f32> = (0..shape.iter().product::<u64>()).map(|i| ((i % 977) as f32).sin()).collect();
    write(&store, "b", v3(&shape, &[64, 256, 256], zstd_codecs(), None), &vals);
    let storage = to_storage(&store);
    let a = block_on(open_array(&storage, "b")).unwrap();
    let enc = block_on(storage.get("b/c/0/0/0")).unwrap().unwrap();
    let time = |f: &dyn Fn()| {
        (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..5 {
                    f();
                }
                t.elapsed().as_secs_f64() / 5.0
            })
            .fold(f64::INFINITY, f64::min)
    };
    let (mut fast, mut generic) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        generic = generic.min(time(&|| {
            std::hint::black_box(a.decode_generic(&enc).unwrap());
        }));
        fast = fast.min(time(&|| {
            std::hint::black_box(a.decode_tile(Some(enc.clone()), "k").unwrap());
        }));
    }
    let mb = a.tile_bytes() as f64 / 1e6;
    println!("tile {mb:.1} MB: fast {:.0} MB/s, zarrs generic {:.0} MB/s", mb / fast, mb / generic);
}

/// HDF5's chunks as NetCDF4 files hold them, read through the metadata kerchunk (and
/// `tests/fixtures/make_virtual.py`) writes for them: filters `[shuffle, zlib, fletcher32]`
/// (HDF5 applies them in that order and appends the checksum last). The two chunks below are
/// h5py's own bytes (`read_direct_chunk`) for the float32 array `1.5 * arange(24) - 7` of shape
/// (4, 6) in chunks of (2, 6), gzip level 4. They decode bit for bit; a byte flipped in either
/// is refused by the checksum, naming the key, rather than decoded.
#[test]
fn hdf5_chunks_decode_through_shuffle_zlib_and_a_checked_fletcher32() {
    let storage = MemoryStorage::new();
    let zarray = json!({
        "zarr_format": 2, "shape": [4, 6], "chunks": [2, 6], "dtype": "<f4", "fill_value": "NaN", "order": "C",
        "compressor": null, "dimension_separator": ".",
        "filters": [{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}, {"id": "fletcher32"}],
    });
    put_json(&storage, "x/.zarray", &zarray);
    let hex = |s: &str| {
        Bytes::from((0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>())
    };
    let chunks = [
        hex("785e6360c00e1e6c68506860604858708141e20010ecb777000247470086dc0a1923ac9335"),
        hex("785e6360c00e0c3c122a3aa62c58b3e3c8853b8e4800008ade09edbeec6ae3"),
    ];
    let a = block_on(open_array(&storage, "x")).unwrap();
    assert_eq!(a.codec_names(), ["bytes", "numcodecs.shuffle", "numcodecs.zlib", "numcodecs.fletcher32"]);
    let mut got = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let tile = a.decode_tile(Some(chunk.clone()), &format!("x/{i}.0")).unwrap();
        got.extend_from_slice(tile.as_slice::<f32>().unwrap());
    }
    let want: Vec<f32> = (0..24).map(|i| 1.5 * i as f32 - 7.0).collect();
    assert_eq!(got, want);
    for at in [0, 10, chunks[0].len() - 1] {
        let mut bad = chunks[0].to_vec();
        bad[at] ^= 0x40;
        match a.decode_tile(Some(Bytes::from(bad)), "x/0.0") {
            Err(Error::Decode { message, key }) => {
                assert_eq!(key, "x/0.0");
                assert!(message.contains("on_bad_chunk"), "byte {at}: {message}");
            }
            other => panic!("byte {at} flipped: {other:?}"),
        }
    }
}

/// netCDF-C puts HDF5's checksum first (`[fletcher32, shuffle, zlib]` in encoding order), so a
/// float64 chunk is shuffled together with its 4 checksum bytes: a length that is not a
/// multiple of the element size, whose last bytes HDF5's shuffle leaves in place (zarrs and
/// numcodecs refuse it; zarr/bounded.rs `unshuffle` reads it). The chunk is netCDF4-python's
/// own (`read_direct_chunk`) for the float64 array `0.25 * arange(15) - 1` of shape (3, 5),
/// one chunk, deflate level 4.
#[test]
fn netcdf_c_checksums_before_the_shuffle_decode_bit_for_bit() {
    let storage = MemoryStorage::new();
    let zarray = json!({
        "zarr_format": 2, "shape": [3, 5], "chunks": [3, 5], "dtype": "<f8", "fill_value": "NaN", "order": "C",
        "compressor": null, "dimension_separator": ".",
        "filters": [{"id": "fletcher32"}, {"id": "shuffle", "elementsize": 8}, {"id": "zlib", "level": 4}],
    });
    put_json(&storage, "v/.zarray", &zarray);
    let hex = "785e6360a015f8f0e2c105860b0f5e7cf8f2e30f0313cb7e2060b087000707877ae688750069ad10fc";
    let chunk = Bytes::from(
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect::<Vec<u8>>(),
    );
    let a = block_on(open_array(&storage, "v")).unwrap();
    let tile = a.decode_tile(Some(chunk), "v/0.0").unwrap();
    let want: Vec<f64> = (0..15).map(|i| 0.25 * f64::from(i) - 1.0).collect();
    assert_eq!(tile.as_slice::<f64>().unwrap(), want.as_slice());
}
