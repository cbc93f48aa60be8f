//! kerchunk's Parquet reference sets, read lazily: a folder with `.zmetadata` (every metadata
//! document, and `record_size`) and, per array, `ARRAY/refs.N.parq` files of `record_size`
//! rows each (`path`, `offset`, `size`, `raw`), row `i` of file `N` being the chunk whose
//! C-order number in the array's chunk grid is `N * record_size + i` (fsspec's
//! `LazyReferenceMapper`, which `kerchunk.df.refs_to_dataframe` writes). A record file is read
//! (one request) and decoded the first time one of its chunks is asked for, and kept, so a set
//! of millions of chunks costs only the records a pass touches. In core (feature
//! `parquet-refs`), so the native and the wasm builds read the same sets the same way; each
//! side gives how a file URL is made absolute ([`ResolveFile`]) and where a record is decoded
//! ([`RecordDecoder`]: natively off the runtime's threads).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::Shared;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use serde_json::Value;

use super::{Reference, ReferenceIndex};
use crate::runtime::{BoxFuture, MaybeSend, MaybeSync, Storage, StorageError};

/// Record files kept decoded at once; past it the cache starts over (a pass walks its chunks
/// block by block, so the records it needs next are read again at most once).
const MAX_RECORDS: usize = 256;

/// One decoded record file: each row's reference (`None`: no chunk there).
type Record = Arc<Vec<Option<Reference>>>;
type Loading = Shared<BoxFuture<'static, Result<Record, StorageError>>>;

/// Makes a file URL of the set absolute: one with a scheme as it is, an absolute path a local
/// file, anything else relative to the set's folder (with the platform's URL parser, as the
/// JSON sets' files are resolved on each side).
pub trait ResolveFile: MaybeSend + MaybeSync + std::fmt::Debug {
    /// `file` as an absolute URL, or a message saying why it cannot be one.
    ///
    /// # Errors
    /// A message naming what is wrong with `file`.
    fn resolve(&self, file: &str) -> Result<String, String>;
}

/// Where a record file is decoded: [`decode_record`] on the calling task, or (natively) on a
/// thread of its own, so a large record does not hold up the runtime's other reads.
pub trait RecordDecoder: MaybeSend + MaybeSync + std::fmt::Debug {
    /// The rows of the record file `bytes`, as [`decode_record`] reads them.
    fn decode(
        &self,
        bytes: Bytes,
        resolve: Arc<dyn ResolveFile>,
    ) -> BoxFuture<'static, Result<Vec<Option<Reference>>, String>>;
}

/// Decodes on the task that asked for the record (the wasm builds: no threads to hand it to).
#[derive(Debug, Default)]
pub struct DecodeInline;

impl RecordDecoder for DecodeInline {
    fn decode(
        &self,
        bytes: Bytes,
        resolve: Arc<dyn ResolveFile>,
    ) -> BoxFuture<'static, Result<Vec<Option<Reference>>, String>> {
        Box::pin(std::future::ready(decode_record(bytes, resolve.as_ref())))
    }
}

/// A Parquet reference set: its metadata in memory, its records read as they are needed.
#[derive(Debug)]
pub struct ParquetIndex {
    /// The set's own store, and the set folder's key in it.
    store: Arc<dyn Storage>,
    root: String,
    /// Makes the rows' file URLs absolute (relative ones against the set's folder).
    resolve: Arc<dyn ResolveFile>,
    decoder: Arc<dyn RecordDecoder>,
    metadata: BTreeMap<String, Bytes>,
    record_size: u64,
    /// Each array's chunk grid (chunks along each axis), from its `.zarray`.
    grids: HashMap<String, Vec<u64>>,
    records: Mutex<HashMap<(String, u64), Loading>>,
}

impl ParquetIndex {
    /// The set whose `.zmetadata` is `zmetadata`, its records read from `store` under `root`,
    /// their file URLs made absolute by `resolve` and decoded by `decoder`.
    ///
    /// # Errors
    /// A message naming what is malformed in `.zmetadata`.
    pub fn new(
        zmetadata: &[u8],
        (store, root): (Arc<dyn Storage>, String),
        resolve: Arc<dyn ResolveFile>,
        decoder: Arc<dyn RecordDecoder>,
    ) -> Result<Self, String> {
        let doc: Value = serde_json::from_slice(zmetadata)
            .map_err(|e| format!("the Parquet reference set's .zmetadata is not JSON ({e})"))?;
        let record_size = doc.get("record_size").and_then(Value::as_u64).filter(|&n| n > 0).ok_or_else(|| {
            "the Parquet reference set's .zmetadata has no positive `record_size` (kerchunk writes one)".to_string()
        })?;
        let Some(Value::Object(entries)) = doc.get("metadata") else {
            return Err("the Parquet reference set's .zmetadata has no `metadata` object".into());
        };
        let mut metadata = BTreeMap::new();
        let mut grids = HashMap::new();
        for (key, value) in entries {
            if let Some(array) = key.strip_suffix("/.zarray").or_else(|| (key == ".zarray").then_some("")) {
                grids.insert(array.to_string(), grid(value).map_err(|m| format!("{key}: {m}"))?);
            }
            metadata.insert(key.clone(), Bytes::from(value.to_string()));
        }
        let records = Mutex::new(HashMap::new());
        Ok(Self { store, root, resolve, decoder, metadata, record_size, grids, records })
    }

    /// The record file of chunk number `n` of `array` and its row there; `None` for a key that
    /// names no chunk of an array of the set.
    fn place(&self, key: &str) -> Option<(String, u64, usize)> {
        let (array, chunk) = key.rsplit_once('/').unwrap_or(("", key));
        let grid = self.grids.get(array)?;
        let index: Vec<u64> = chunk.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        if index.len() != grid.len() || index.iter().zip(grid).any(|(i, n)| i >= n) {
            return None;
        }
        let n = index.iter().zip(grid).fold(0u64, |acc, (i, g)| acc.saturating_mul(*g).saturating_add(*i));
        Some((array.to_string(), n / self.record_size, usize::try_from(n % self.record_size).ok()?))
    }

    /// Record `record` of `array`, read and decoded once (concurrent askers share the read).
    fn record(&self, array: &str, record: u64) -> Loading {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= MAX_RECORDS {
            records.clear();
        }
        let id = (array.to_string(), record);
        if let Some(loading) = records.get(&id) {
            return loading.clone();
        }
        let key = if array.is_empty() { format!("refs.{record}.parq") } else { format!("{array}/refs.{record}.parq") };
        let key = if self.root.is_empty() { key } else { format!("{}/{key}", self.root) };
        let (store, resolve, decoder) = (Arc::clone(&self.store), Arc::clone(&self.resolve), Arc::clone(&self.decoder));
        let loading: BoxFuture<'static, Result<Record, StorageError>> = Box::pin(async move {
            // A record file that is not there holds no chunk (fsspec reads it so too).
            let Some(bytes) = store.get(&key).await? else { return Ok(Arc::new(Vec::new())) };
            let decoded = decoder.decode(bytes, resolve).await;
            decoded.map(Arc::new).map_err(|m| {
                StorageError::permanent(format!(
                    "the Parquet reference file {} is malformed ({m})",
                    store.key_url(&key)
                ))
            })
        });
        let loading = loading.shared();
        records.insert(id, loading.clone());
        loading
    }
}

/// The chunk grid of an array from its `.zarray` (chunks along each axis; `[1]` for a scalar).
fn grid(zarray: &Value) -> Result<Vec<u64>, String> {
    let list = |name: &str| -> Result<Vec<u64>, String> {
        zarray.get(name).and_then(Value::as_array).map_or_else(
            || Err(format!("no `{name}` list")),
            |v| v.iter().map(|x| x.as_u64().ok_or_else(|| format!("`{name}` holds {x}"))).collect(),
        )
    };
    let (shape, chunks) = (list("shape")?, list("chunks")?);
    if shape.len() != chunks.len() || chunks.contains(&0) {
        return Err(format!("shape {shape:?} and chunks {chunks:?} do not make a grid"));
    }
    let grid: Vec<u64> = shape.iter().zip(&chunks).map(|(s, c)| s.div_ceil(*c)).collect();
    Ok(if grid.is_empty() { vec![1] } else { grid })
}

/// A record file's rows as references: `raw` is inline data; else `path` (`offset` and
/// `size` both 0: the whole file), or nothing (no chunk).
///
/// # Errors
/// A message naming what is malformed: the file, a column, a row, or a file URL.
pub fn decode_record(bytes: Bytes, resolve: &dyn ResolveFile) -> Result<Vec<Option<Reference>>, String> {
    let reader = SerializedFileReader::new(bytes).map_err(|e| e.to_string())?;
    let rows = reader.get_row_iter(None).map_err(|e| e.to_string())?;
    let mut urls: HashMap<String, Arc<str>> = HashMap::new();
    let mut out = Vec::new();
    for row in rows {
        let row = row.map_err(|e| e.to_string())?;
        let (mut path, mut offset, mut size, mut raw) = (None, 0i64, 0i64, None);
        for (name, field) in row.get_column_iter() {
            match (name.as_str(), field) {
                (_, Field::Null) => {}
                ("path", Field::Str(s)) => path = Some(s.clone()),
                ("offset", Field::Long(v)) => offset = *v,
                ("size", Field::Long(v)) => size = *v,
                ("offset", Field::Int(v)) => offset = i64::from(*v),
                ("size", Field::Int(v)) => size = i64::from(*v),
                ("raw", Field::Bytes(b)) => raw = Some(Bytes::copy_from_slice(b.data())),
                ("raw", Field::Str(s)) => raw = Some(Bytes::from(s.clone())),
                (name, other) => return Err(format!("column {name:?} holds {other}, not what kerchunk writes")),
            }
        }
        let (Ok(offset), Ok(size)) = (u64::try_from(offset), u64::try_from(size)) else {
            return Err(format!("row {} has a negative offset or size", out.len()));
        };
        out.push(match (raw, path) {
            (Some(data), _) => Some(Reference::Inline(data)),
            (None, None) => None,
            (None, Some(path)) => {
                let url = match urls.get(&path) {
                    Some(u) => Arc::clone(u),
                    None => {
                        let u: Arc<str> = Arc::from(resolve.resolve(&path)?.as_str());
                        urls.insert(path, Arc::clone(&u));
                        u
                    }
                };
                offset.checked_add(size).ok_or_else(|| format!("row {}: offset + size overflows", out.len()))?;
                let range = (offset, size) != (0, 0);
                Some(Reference::File { url, range: range.then_some((offset, size)) })
            }
        });
    }
    Ok(out)
}

impl ReferenceIndex for ParquetIndex {
    fn lookup<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Reference>, StorageError>> {
        Box::pin(async move {
            if let Some(doc) = self.metadata.get(key) {
                return Ok(Some(Reference::Inline(doc.clone())));
            }
            let Some((array, record, row)) = self.place(key) else { return Ok(None) };
            let rows = self.record(&array, record).await?;
            Ok(rows.get(row).cloned().flatten())
        })
    }

    /// The metadata keys (what discovery reads); chunk keys are not listed.
    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        let keys = self.metadata.keys().filter(|k| k.starts_with(prefix)).cloned().collect();
        Box::pin(std::future::ready(Ok(keys)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryStorage;

    /// File URLs as they are: the tests resolve nothing.
    #[derive(Debug)]
    struct AsGiven;

    impl ResolveFile for AsGiven {
        fn resolve(&self, file: &str) -> Result<String, String> {
            Ok(file.to_string())
        }
    }

    fn index(zmetadata: &[u8]) -> Result<ParquetIndex, String> {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        ParquetIndex::new(zmetadata, (store, "data/refs.parq".into()), Arc::new(AsGiven), Arc::new(DecodeInline))
    }

    #[test]
    fn a_chunk_key_is_a_row_of_a_record_file_in_c_order() {
        let set = index(
            serde_json::json!({"record_size": 5, "metadata": {
                ".zgroup": {"zarr_format": 2},
                "t2m/.zarray": {"shape": [10, 7], "chunks": [4, 3], "dtype": "<f4"},
                "t0/.zarray": {"shape": [], "chunks": [], "dtype": "<f8"},
            }})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        // A grid of 3 x 3 chunks: chunk 1.2 is number 5, the first row of record 1.
        assert_eq!(set.place("t2m/1.2"), Some(("t2m".into(), 1, 0)));
        assert_eq!(set.place("t2m/2.2"), Some(("t2m".into(), 1, 3)));
        assert_eq!(set.place("t0/0"), Some(("t0".into(), 0, 0)), "a scalar has one chunk");
        for outside in ["t2m/3.0", "t2m/0", "t2m/a.b", "nope/0.0", "t2m/.zarray"] {
            assert_eq!(set.place(outside), None, "{outside}");
        }
        let keys = futures::executor::block_on(set.keys("t2m/")).unwrap();
        assert_eq!(keys, ["t2m/.zarray"], "metadata keys are listed, chunk keys are not");
        // A record file that is not in the store holds no chunk.
        let missing = futures::executor::block_on(set.lookup("t2m/1.2")).unwrap();
        assert!(missing.is_none());
    }

    #[test]
    fn a_malformed_zmetadata_is_refused_saying_what() {
        for (doc, want) in [
            (serde_json::json!([1]), "no positive `record_size`"),
            (serde_json::json!({"record_size": 0, "metadata": {}}), "no positive `record_size`"),
            (serde_json::json!({"record_size": 4}), "no `metadata` object"),
            (
                serde_json::json!({"record_size": 4, "metadata": {"a/.zarray": {"shape": [4]}}}),
                "a/.zarray: no `chunks`",
            ),
            (
                serde_json::json!({"record_size": 4, "metadata": {"a/.zarray": {"shape": [4], "chunks": [0]}}}),
                "do not make a grid",
            ),
        ] {
            let e = index(doc.to_string().as_bytes()).unwrap_err();
            assert!(e.contains(want), "{doc}: {e}");
        }
        let e = index(b"not json").unwrap_err();
        assert!(e.contains("is not JSON"), "{e}");
    }

    #[test]
    fn a_record_file_that_is_not_parquet_is_named() {
        let store = MemoryStorage::new();
        store.insert("data/refs.parq/t2m/refs.0.parq", Bytes::from_static(b"PAR1 but not really"));
        let doc = serde_json::json!({"record_size": 4, "metadata": {
            "t2m/.zarray": {"shape": [4], "chunks": [1], "dtype": "<f4"},
        }});
        let set = ParquetIndex::new(
            doc.to_string().as_bytes(),
            (Arc::new(store), "data/refs.parq".into()),
            Arc::new(AsGiven),
            Arc::new(DecodeInline),
        )
        .unwrap();
        let e = futures::executor::block_on(set.lookup("t2m/2")).unwrap_err();
        assert!(e.message.contains("is malformed") && e.message.contains("t2m/refs.0.parq"), "{}", e.message);
    }
}
