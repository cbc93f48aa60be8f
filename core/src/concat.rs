//! Several stores read as one along the sample axis: decades of ERA5 kept one store per year,
//! read as one array per variable.
//!
//! Every array that has the concatenated dimension is one array of the stores' summed length
//! on it; its chunk `g` along that axis is chunk `g - start(p)` of part `p`, so the engine's
//! plan, `max_inflight`, byte budget and disk tier span the parts unchanged, and each chunk
//! is still read once per epoch. What makes that exact: the parts agree on everything but
//! that length (data type, chunks, codecs, fill value, dimension names), and every part but
//! the last holds whole chunks (shards) along it, so no chunk straddles two stores. Arrays
//! without the dimension (static fields, the other axes' coordinates) are read from the
//! first store.
//!
//! Hand-written: no Zarr crate concatenates stores lazily (zarrs reads one store;
//! xarray's `concat` is eager per chunk in Python), and the engine's storage seam is its own
//! trait.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::retry::{PolicyStorage, ReadPolicy};
use crate::runtime::{BoxFuture, ByteRange, Executor, Location, Storage, StorageError, slice_in_memory};

/// The start of the key of a part's object that stands for a range of another
/// ([`ConcatStorage::locate`]); the part's number and the object's key follow. A control
/// character, as in [`crate::refs::FILE_OBJECT`], so no Zarr key starts with it.
const PART_OBJECT: &str = "\u{1}part:";

/// Stores concatenated along one dimension.
#[derive(Debug)]
pub struct ConcatStorage {
    parts: Vec<Arc<dyn Storage>>,
    /// Per array path with the dimension: how its chunk keys map to the parts.
    arrays: Vec<(String, Concatenated)>,
    /// What this storage answers itself, by key: metadata documents rewritten with the summed
    /// lengths, and the values of coordinates concatenated in memory ([`Self::synthesize`]).
    served: HashMap<String, Bytes>,
    /// The joined metadata document of each concatenated array, for the consolidated metadata.
    docs: Vec<(String, Value)>,
}

/// A 1-d array along the dimension (a coordinate) whose stores chunk it so that it cannot be
/// concatenated chunk by chunk (one chunk per store of another length, as yearly stores keep
/// their time axis) is read whole at open and served from memory, if it has at most this
/// many values.
const MAX_SYNTHESIZED: u64 = 1 << 24;

/// One concatenated array.
#[derive(Debug)]
struct Concatenated {
    /// The concatenated axis.
    axis: usize,
    /// Per part, its first chunk along the axis in the whole; then the total chunk count.
    chunk_starts: Vec<u64>,
    encoding: KeyEncoding,
}

/// How an array names its chunks (zarr v3 `chunk_key_encoding`, v2 `dimension_separator`).
#[derive(Debug, Clone, PartialEq)]
enum KeyEncoding {
    /// `c/0/1/2` (v3 default; the separator may be `.`).
    Default(char),
    /// `0.1.2` (v3 `v2` encoding and zarr v2; the separator may be `/`).
    V2(char),
}

impl KeyEncoding {
    fn of(meta: &Value, v2: bool) -> Self {
        let sep = |v: Option<&Value>, d: char| v.and_then(Value::as_str).and_then(|s| s.chars().next()).unwrap_or(d);
        if v2 {
            return Self::V2(sep(meta.get("dimension_separator"), '.'));
        }
        let enc = meta.get("chunk_key_encoding");
        let sep_of = |d| sep(enc.and_then(|e| e.pointer("/configuration/separator")), d);
        match enc.and_then(|e| e.get("name")).and_then(Value::as_str) {
            Some("v2") => Self::V2(sep_of('.')),
            _ => Self::Default(sep_of('/')),
        }
    }

    /// The chunk coordinates a key names (the part after the array's path); `None` for
    /// anything else (metadata).
    fn parse(&self, rest: &str) -> Option<Vec<u64>> {
        let (body, sep) = match self {
            Self::Default(sep) => (rest.strip_prefix('c')?.strip_prefix(*sep).unwrap_or(""), *sep),
            Self::V2(sep) => (rest, *sep),
        };
        body.split(sep).map(|p| p.parse().ok()).collect()
    }

    fn format(&self, coords: &[u64]) -> String {
        let join = |sep: char| coords.iter().map(u64::to_string).collect::<Vec<_>>().join(&sep.to_string());
        match self {
            Self::Default(sep) => format!("c{sep}{}", join(*sep)),
            Self::V2(sep) => join(*sep),
        }
    }
}

/// One array's metadata as a part holds it.
struct PartMeta {
    /// The metadata key (`path/zarr.json` or `path/.zarray`).
    key: String,
    doc: Value,
    v2: bool,
    dims: Option<Vec<String>>,
}

impl ConcatStorage {
    /// Concatenate `parts`, in order, along the dimension named `dim` (arrays with a
    /// dimension of that name) or, for arrays without dimension names, along physical axis
    /// `axis`.
    ///
    /// # Errors
    /// [`Error::Config`] for fewer than two stores, no array with the dimension, an array one
    /// store lacks, arrays that differ in more than their length on the dimension, or a part
    /// (not the last) that ends inside a chunk, naming the array and both stores; storage
    /// errors reading metadata.
    pub async fn open(parts: Vec<Arc<dyn Storage>>, dim: &str, axis: usize) -> Result<Self> {
        if parts.len() < 2 {
            return Err(Error::Config("concatenating stores needs at least two of them".into()));
        }
        let mut out = Self { parts, arrays: Vec::new(), served: HashMap::new(), docs: Vec::new() };
        let mut seen = Vec::new();
        for path in out.array_paths().await? {
            let metas = out.part_metas(&path).await?;
            let Some(first) = metas.first() else { continue };
            seen.extend(first.dims.as_ref().and_then(|d| d.get(axis)).cloned());
            let Some(ax) = concat_axis(first, dim, axis) else { continue };
            if let Some(doc) = out.synthesize(&path, &metas).await? {
                out.served.insert(first.key.clone(), json_bytes(&doc));
                out.docs.push((path, doc));
                continue;
            }
            let (joined, doc) = out.check_and_join(&path, &metas, ax)?;
            out.served.insert(first.key.clone(), json_bytes(&doc));
            out.docs.push((path.clone(), doc));
            out.arrays.push((path, joined));
        }
        if out.arrays.is_empty() {
            seen.sort();
            seen.dedup();
            return Err(Error::Config(format!(
                "no array has a dimension named {dim:?} to concatenate along (names at axis {axis}: {seen:?}); pass \
                 the sample axis's dimension name: {}",
                out.location()
            )));
        }
        out.rewrite_consolidated().await?;
        Ok(out)
    }

    /// [`Self::open`] with every metadata read it makes under `policy` (retries, backoff,
    /// the request timeout), as a single store's metadata reads at open are
    /// (`DatasetBuilder::read_metadata`): a 503 on one part's `zarr.json` is retried, not an
    /// open that fails. Afterwards the parts are read straight, since the engine's fetch
    /// applies the policy to chunk reads itself (once, not twice over). Every target opens a
    /// concatenation through here.
    ///
    /// # Errors
    /// As [`Self::open`], a read failing once the policy's retries are spent.
    pub async fn open_under_policy(
        parts: Vec<Arc<dyn Storage>>,
        dim: &str,
        axis: usize,
        executor: Arc<dyn Executor>,
        policy: ReadPolicy,
    ) -> Result<Self> {
        let retried = parts
            .iter()
            .map(|part| {
                let reads = PolicyStorage::new(Arc::clone(part), Arc::clone(&executor), policy.clone());
                Arc::new(reads) as Arc<dyn Storage>
            })
            .collect();
        let mut opened = Self::open(retried, dim, axis).await?;
        opened.parts = parts;
        Ok(opened)
    }

    /// The paths of the first store's arrays (by listing it, or by its consolidated metadata).
    async fn array_paths(&self) -> Result<Vec<String>> {
        let first = self.parts[0].as_ref();
        let keys = crate::join::keys_or_metadata_keys(first).await.map_err(|e| storage_error(&e, first))?;
        let Some(keys) = keys else {
            return Err(Error::Config(format!(
                "the first store to concatenate can neither list its keys nor has consolidated metadata, so its \
                 arrays cannot be found; consolidate it: {}",
                first.location()
            )));
        };
        let mut paths: Vec<String> = keys
            .iter()
            .filter_map(|k| k.strip_suffix("zarr.json").or_else(|| k.strip_suffix(".zarray")))
            .map(|p| p.trim_end_matches('/').to_string())
            .collect();
        paths.sort();
        paths.dedup();
        Ok(paths)
    }

    /// Array `path`'s metadata in every part; `None` entries are refused (an array one
    /// store lacks), groups are skipped by the caller through an empty result.
    async fn part_metas(&self, path: &str) -> Result<Vec<PartMeta>> {
        let mut out = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            match read_meta(part.as_ref(), path).await? {
                Some(m) => out.push(m),
                None if out.is_empty() => return Ok(Vec::new()),
                None => {
                    return Err(Error::Config(format!(
                        "array {path:?} of {} is missing from {}; concatenated stores must hold the same arrays",
                        self.parts[0].location(),
                        part.location()
                    )));
                }
            }
        }
        Ok(out)
    }

    /// Check that the parts' metadata differ only in the length on `axis`, that each part
    /// but the last ends on a chunk boundary, and build the mapping and the joined document.
    fn check_and_join(&self, path: &str, metas: &[PartMeta], axis: usize) -> Result<(Concatenated, Value)> {
        let first = &metas[0];
        let chunk = outer_chunk(&first.doc, first.v2, axis)
            .ok_or_else(|| Error::Config(format!("array {path:?} has no chunk size on axis {axis}")))?;
        let mut chunk_starts = vec![0u64];
        let mut total = 0u64;
        for (p, m) in metas.iter().enumerate() {
            if without_length(&m.doc, axis) != without_length(&first.doc, axis) || m.dims != first.dims {
                return Err(Error::Config(format!(
                    "array {path:?} differs between concatenated stores in more than its length on axis {axis} (data \
                     type, chunks, codecs, fill value or dimension names): {} and {}",
                    self.parts[0].location(),
                    self.parts[p].location()
                )));
            }
            let len = length(&m.doc, axis).unwrap_or(0);
            if p + 1 < metas.len() && !len.is_multiple_of(chunk) {
                return Err(Error::Config(format!(
                    "array {path:?} has {len} entries on axis {axis} in {}, not a whole number of its chunks of \
                     {chunk}, so a chunk would straddle two stores; only the last store may end inside a chunk \
                     (rechunk, or split the stores at chunk boundaries)",
                    self.parts[p].location()
                )));
            }
            total += len;
            chunk_starts.push(chunk_starts[p] + len.div_ceil(chunk));
        }
        let mut doc = first.doc.clone();
        set_length(&mut doc, axis, total);
        Ok((Concatenated { axis, chunk_starts, encoding: KeyEncoding::of(&first.doc, first.v2) }, doc))
    }

    /// A 1-d array the stores chunk differently (see [`MAX_SYNTHESIZED`]): its values read
    /// from every store, concatenated, and served as one uncompressed `float64` chunk; the
    /// joined document, or `None` for an array that is concatenated chunk by chunk.
    async fn synthesize(&mut self, path: &str, metas: &[PartMeta]) -> Result<Option<Value>> {
        let first = &metas[0];
        let lengths: Vec<u64> = metas.iter().map(|m| length(&m.doc, 0).unwrap_or(0)).collect();
        let total: u64 = lengths.iter().sum();
        let rank = first.doc.get("shape").and_then(Value::as_array).map_or(0, Vec::len);
        let chunk = outer_chunk(&first.doc, first.v2, 0).unwrap_or(1);
        let chunked = metas.iter().all(|m| outer_chunk(&m.doc, m.v2, 0) == Some(chunk))
            && lengths[..lengths.len() - 1].iter().all(|l| l.is_multiple_of(chunk));
        let comparable = |m: &PartMeta| {
            let mut d = without_length(&m.doc, 0);
            set_chunk(&mut d, m.v2, 0);
            (d, m.v2, m.dims.clone())
        };
        if rank != 1 || chunked || total > MAX_SYNTHESIZED || metas.iter().any(|m| comparable(m) != comparable(first)) {
            return Ok(None);
        }
        let mut values = Vec::with_capacity(total as usize);
        for part in &self.parts {
            let arrays = crate::zarr::open_arrays(part.as_ref(), Some(&[path.to_string()])).await?;
            values.extend(crate::coords::read_numbers(part.as_ref(), &arrays[0]).await?);
        }
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let encoding = KeyEncoding::of(&first.doc, first.v2);
        let chunk_key = encoding.format(&[0]);
        let key = if path.is_empty() { chunk_key } else { format!("{path}/{chunk_key}") };
        self.served.insert(key, Bytes::from(bytes));
        Ok(Some(float64_doc(&first.doc, first.v2, total)))
    }

    /// The first store's consolidated metadata (v3 root `zarr.json`, v2 `.zmetadata`) with
    /// the concatenated arrays' joined documents, so discovery sees the whole.
    async fn rewrite_consolidated(&mut self) -> Result<()> {
        let first = Arc::clone(&self.parts[0]);
        for key in ["zarr.json", ".zmetadata"] {
            let Some(bytes) = first.get(key).await.map_err(|e| storage_error(&e, first.as_ref()))? else { continue };
            let Ok(mut doc) = serde_json::from_slice::<Value>(&bytes) else { continue };
            let pointer = if key == "zarr.json" { "/consolidated_metadata/metadata" } else { "/metadata" };
            let Some(entries) = doc.pointer_mut(pointer).and_then(Value::as_object_mut) else { continue };
            for (path, joined) in &self.docs {
                let entry = if key == "zarr.json" { path.clone() } else { format!("{path}/.zarray") };
                if let Some(meta) = entries.get_mut(&entry) {
                    *meta = joined.clone();
                }
            }
            self.served.insert(key.to_string(), json_bytes(&doc));
        }
        Ok(())
    }

    /// The part and key a key is read from: a concatenated array's chunk goes to the part
    /// holding it (`None`: past the end), anything else to the first store.
    fn route<'k>(&self, key: &'k str) -> Option<(usize, std::borrow::Cow<'k, str>)> {
        let found = self
            .arrays
            .iter()
            .filter_map(|(path, c)| {
                let rest = if path.is_empty() { Some(key) } else { key.strip_prefix(path.as_str())?.strip_prefix('/') };
                Some((path, c, rest?))
            })
            .max_by_key(|(path, _, _)| path.len());
        let Some((path, c, rest)) = found else { return Some((0, key.into())) };
        let Some(mut coords) = c.encoding.parse(rest).filter(|v| v.len() > c.axis) else {
            return Some((0, key.into()));
        };
        let g = coords[c.axis];
        let p = c.chunk_starts.windows(2).position(|w| w[0] <= g && g < w[1])?;
        coords[c.axis] = g - c.chunk_starts[p];
        let local = c.encoding.format(&coords);
        let key = if path.is_empty() { local } else { format!("{path}/{local}") };
        Some((p, key.into()))
    }

    /// A part's object that stands for a range of another ([`Storage::locate`]: a file of a
    /// reference set), as `PART_OBJECT{part}/{object}`: the part and its key there.
    fn part_object<'k>(&self, key: &'k str) -> Option<(&dyn Storage, &'k str)> {
        let (part, object) = key.strip_prefix(PART_OBJECT)?.split_once('/')?;
        Some((self.parts.get(part.parse::<usize>().ok()?)?.as_ref(), object))
    }
}

/// Array `path`'s metadata in one store: v3 `zarr.json` (an array's), else v2 `.zarray` with
/// its `.zattrs`' `_ARRAY_DIMENSIONS`; `None` when it has neither (or a group).
async fn read_meta(storage: &dyn Storage, path: &str) -> Result<Option<PartMeta>> {
    let key_of = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}/{name}") };
    let get = |key: String| async move {
        let b = storage.get(&key).await.map_err(|e| storage_error(&e, storage))?;
        Ok::<_, Error>(b.and_then(|b| serde_json::from_slice::<Value>(&b).ok()).map(|d| (key, d)))
    };
    if let Some((key, doc)) = get(key_of("zarr.json")).await? {
        if doc.get("node_type").and_then(Value::as_str) != Some("array") {
            return Ok(None);
        }
        let dims = names(doc.get("dimension_names"));
        return Ok(Some(PartMeta { key, doc, v2: false, dims }));
    }
    let Some((key, doc)) = get(key_of(".zarray")).await? else { return Ok(None) };
    let dims = get(key_of(".zattrs")).await?.and_then(|(_, a)| names(a.get("_ARRAY_DIMENSIONS")));
    Ok(Some(PartMeta { key, doc, v2: true, dims }))
}

fn names(v: Option<&Value>) -> Option<Vec<String>> {
    v?.as_array()?.iter().map(|n| n.as_str().map(str::to_string)).collect()
}

/// The axis an array is concatenated on: where its dimension is named `dim`, or for an array
/// without names, `axis` when it has one; `None`: read from the first store.
fn concat_axis(meta: &PartMeta, dim: &str, axis: usize) -> Option<usize> {
    let rank = meta.doc.get("shape")?.as_array()?.len();
    match &meta.dims {
        Some(names) => names.iter().position(|n| n == dim),
        None => (axis < rank).then_some(axis),
    }
}

fn length(doc: &Value, axis: usize) -> Option<u64> {
    doc.get("shape")?.as_array()?.get(axis)?.as_u64()
}

fn set_length(doc: &mut Value, axis: usize, len: u64) {
    if let Some(slot) = doc.get_mut("shape").and_then(Value::as_array_mut).and_then(|s| s.get_mut(axis)) {
        *slot = Value::from(len);
    }
}

/// The chunk (v3: the outer grid's, so a shard) extent on `axis`.
fn outer_chunk(doc: &Value, v2: bool, axis: usize) -> Option<u64> {
    let shape = if v2 { doc.get("chunks") } else { doc.pointer("/chunk_grid/configuration/chunk_shape") };
    shape?.as_array()?.get(axis)?.as_u64().filter(|&c| c > 0)
}

/// The document with its length on `axis` cleared, for comparing parts.
fn without_length(doc: &Value, axis: usize) -> Value {
    let mut d = doc.clone();
    set_length(&mut d, axis, 0);
    d
}

/// Clear the chunk extent on `axis`, for comparing parts.
fn set_chunk(doc: &mut Value, v2: bool, axis: usize) {
    let shape = if v2 { doc.get_mut("chunks") } else { doc.pointer_mut("/chunk_grid/configuration/chunk_shape") };
    if let Some(slot) = shape.and_then(Value::as_array_mut).and_then(|s| s.get_mut(axis)) {
        *slot = Value::from(0);
    }
}

/// `doc` as a 1-d `float64` array of `len` values in one uncompressed chunk (a synthesized
/// coordinate), its attributes, dimension names and key encoding kept.
fn float64_doc(doc: &Value, v2: bool, len: u64) -> Value {
    let mut d = doc.clone();
    d["shape"] = serde_json::json!([len]);
    d["fill_value"] = Value::from("NaN");
    if v2 {
        d["chunks"] = serde_json::json!([len]);
        d["dtype"] = Value::from("<f8");
        d["compressor"] = Value::Null;
        d["filters"] = Value::Null;
    } else {
        d["chunk_grid"] = serde_json::json!({"name": "regular", "configuration": {"chunk_shape": [len]}});
        d["data_type"] = Value::from("float64");
        d["codecs"] = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
    }
    d
}

fn json_bytes(doc: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(doc).unwrap_or_default())
}

fn storage_error(e: &StorageError, storage: &dyn Storage) -> Error {
    Error::Storage {
        message: format!("cannot read the metadata of a store to concatenate ({e})"),
        key: storage.location(),
    }
}

impl Storage for ConcatStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, std::result::Result<Option<Bytes>, StorageError>> {
        self.read(key, None)
    }

    fn get_range<'a>(
        &'a self,
        key: &'a str,
        range: ByteRange,
    ) -> BoxFuture<'a, std::result::Result<Option<Bytes>, StorageError>> {
        self.read(key, Some(range))
    }

    /// The first store's keys: its metadata keys stand for the whole (discovery lists them).
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, std::result::Result<Option<Vec<String>>, StorageError>> {
        self.parts[0].list(prefix)
    }

    /// `concat(location, ...)`: every store, so a message names each.
    fn location(&self) -> String {
        let parts: Vec<String> = self.parts.iter().map(|s| s.location()).collect();
        format!("concat({})", parts.join(", "))
    }

    fn reads_are_local(&self) -> bool {
        self.parts.iter().all(|s| s.reads_are_local())
    }

    fn read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, std::result::Result<Option<Bytes>, StorageError>> {
        if let Some(doc) = self.served.get(key) {
            return Box::pin(async move { slice_in_memory(doc, range).map(Some) });
        }
        if let Some((storage, object)) = self.part_object(key) {
            return storage.read(object, range);
        }
        match self.route(key) {
            Some((p, k)) => Box::pin(async move { self.parts[p].read(&k, range).await }),
            None => Box::pin(async { Ok(None) }),
        }
    }

    /// A part's object (a file of a reference set) is that part's read, hedged at its answer.
    fn start_read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, std::result::Result<Option<crate::runtime::Body<'a>>, StorageError>> {
        if let Some((storage, object)) = self.part_object(key) {
            return storage.start_read(object, range);
        }
        Box::pin(async move { Ok(self.read(key, range).await?.map(crate::runtime::ready_body)) })
    }

    /// A chunk of a part that is a range of another of its objects (a reference set's chunk):
    /// that object, under the part's prefix.
    fn locate<'a>(&'a self, key: &'a str) -> BoxFuture<'a, std::result::Result<Option<Location>, StorageError>> {
        Box::pin(async move {
            if self.served.contains_key(key) || key.starts_with(PART_OBJECT) {
                return Ok(None);
            }
            let Some((p, k)) = self.route(key) else { return Ok(None) };
            let located = self.parts[p].locate(&k).await?;
            Ok(located.map(|l| l.map_object(|o| format!("{PART_OBJECT}{p}/{o}"))))
        })
    }

    fn key_url(&self, key: &str) -> String {
        match self.part_object(key) {
            Some((storage, object)) => storage.key_url(object),
            None => crate::runtime::join_url(&self.location(), key),
        }
    }

    // `start_read` of a chunk key is the whole read: a routed chunk key is made here, and a
    // body may not outlive it, so the engine hedges these reads compared at their size
    // (`answers_before_body` false) rather than at their first byte.
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn chunk_keys_parse_and_format_in_each_encoding() {
        let v3 = KeyEncoding::of(&serde_json::json!({}), false);
        assert_eq!(v3, KeyEncoding::Default('/'));
        assert_eq!(v3.parse("c/3/0/1"), Some(vec![3, 0, 1]));
        assert_eq!(v3.format(&[3, 0, 1]), "c/3/0/1");
        assert_eq!(v3.parse("zarr.json"), None);
        let dotted =
            serde_json::json!({"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}});
        assert_eq!(KeyEncoding::of(&dotted, false).parse("c.2.5"), Some(vec![2, 5]));
        let v2 = KeyEncoding::of(&serde_json::json!({"dimension_separator": "."}), true);
        assert_eq!(v2.parse("4.0.1"), Some(vec![4, 0, 1]));
        assert_eq!(v2.format(&[4, 0, 1]), "4.0.1");
        assert_eq!(v2.parse(".zarray"), None);
        let nested = KeyEncoding::of(&serde_json::json!({"dimension_separator": "/"}), true);
        assert_eq!(nested.format(&[1, 2]), "1/2");
    }
}
