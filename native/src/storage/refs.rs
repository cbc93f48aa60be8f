//! Reference sets by URL: `reference+URL` opens the kerchunk reference set at `URL` (a JSON
//! file, or kerchunk's Parquet folder, read lazily by core's [`ParquetIndex`]) as core's
//! [`ReferenceStorage`], its files read through the same object_store stores as any URL
//! (`file`, `s3`, `gs`, `az`, `http(s)`), so coalescing, hedging, retries and the request
//! counters apply to them.
//!
//! Why a scheme prefix rather than a flag or a rule on the file's name: a reference set is a
//! store, so every place that takes a store URL takes one with nothing added (the CLI's
//! positional URL, `--concat`, joins, Python's URL strings, storage options), and the prefix
//! says what the bytes are instead of guessing from a name (a Parquet set is a folder, and
//! `.json` is also a Zarr metadata suffix). fsspec spells the same thing `reference://`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use insitubatch_core::runtime::{BoxFuture, Storage, StorageError};
use insitubatch_core::{
    FileOpener, ParquetIndex, RecordDecoder, Reference, ReferenceSet, ReferenceStorage, ResolveFile, decode_record,
};
use url::Url;

use super::{location_of, open_storage, parse_location};
use crate::NativeError;

/// The prefix of a reference set's URL: `reference+s3://bucket/era5.json`,
/// `reference+/data/era5.json`.
pub const REFERENCE_PREFIX: &str = "reference+";

/// The reference set's own URL, when `url` names one (`reference+URL`).
pub fn reference_url(url: &str) -> Option<&str> {
    url.strip_prefix(REFERENCE_PREFIX)
}

/// Open the reference set at `url` (`reference+URL`): read and parse it, resolve its file
/// URLs (relative ones against the set's own folder; a path without a scheme is a local
/// file) and open the stores that hold them. `options` configure every store that is not
/// local, the set's own and its files' (local stores take none).
///
/// # Errors
/// [`NativeError::Open`] for a set that cannot be read (nothing at the URL, a failed read) or
/// is malformed (core's message), or a file URL no store can take.
pub fn open_references(url: &str, options: &[(String, String)]) -> Result<Arc<dyn Storage>, NativeError> {
    let open_err = |message: String| NativeError::Open { message, url: url.to_string() };
    let inner =
        reference_url(url).ok_or_else(|| open_err(format!("a reference set's URL starts with {REFERENCE_PREFIX}")))?;
    let mut set_url = parse_location(inner)?;
    // A local path becomes a folder's URL (`parse_location`'s rule for stores); a set is a file
    // (JSON) or a folder (Parquet), named without its trailing slash.
    let path = set_url.path().trim_end_matches('/').to_string();
    set_url.set_path(&path);
    let location = format!("{REFERENCE_PREFIX}{}", location_of(&set_url, inner));
    let opener = Arc::new(NativeFiles::new(options));
    let storage = match read_set(&set_url, "", options).map_err(open_err)? {
        Some(bytes) => {
            let mut set = ReferenceSet::from_json(&bytes, &location)?;
            set.map_files(|file| resolve(&set_url, file).map(String::from))
                .map_err(|m| open_err(format!("a file URL of the reference set cannot be read ({m})")))?;
            ReferenceStorage::open(set, opener, location).map_err(|e| open_err(e.message))?
        }
        None => {
            let Some(zmetadata) = read_set(&set_url, "/.zmetadata", options).map_err(open_err)? else {
                return Err(open_err(
                    "no reference set at this URL (kerchunk's JSON file, or its Parquet folder with .zmetadata)".into(),
                ));
            };
            // The records are read through a store of the opener's, used first by the engine.
            let (store, root) = opener.open(set_url.as_str()).map_err(|e| open_err(e.message))?;
            let mut base = set_url.clone();
            base.set_path(&format!("{path}/"));
            let index =
                ParquetIndex::new(&zmetadata, (store, root), Arc::new(AgainstFolder(base)), Arc::new(OffTheRuntime))
                    .map_err(|m| {
                        NativeError::Core(insitubatch_core::Error::Metadata { message: m, key: location.clone() })
                    })?;
            ReferenceStorage::lazy(Arc::new(index), opener, location)
        }
    };
    Ok(Arc::new(storage))
}

/// The bytes at `set_url` + `suffix` (`None`: nothing there), read on a runtime of its own (the
/// metadata reads of a dataset have not started; the store it opens here is not kept).
fn read_set(set_url: &Url, suffix: &str, options: &[(String, String)]) -> Result<Option<bytes::Bytes>, String> {
    let (root, key) = split(set_url);
    let store = open_storage(&root, options_for(&root, options)).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime to read the reference set ({e})"))?;
    runtime.block_on(store.get(&format!("{key}{suffix}"))).map_err(|e| format!("cannot read the reference set ({e})"))
}

/// `file`, a URL as the set gives it, made absolute: a URL with a scheme as it is, an
/// absolute path as a local file, anything else relative to the set's folder.
fn resolve(set_url: &Url, file: &str) -> Result<Url, String> {
    let has_scheme = file
        .split_once("://")
        .is_some_and(|(s, _)| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)));
    if has_scheme {
        return Url::parse(file).map_err(|e| format!("{e}: {file}"));
    }
    if std::path::Path::new(file).is_absolute() {
        return Url::from_file_path(file).map_err(|()| format!("not a valid local path: {file}"));
    }
    set_url.join(file).map_err(|e| format!("{e}: {file} relative to {set_url}"))
}

/// A Parquet set's file URLs, resolved against its folder (`…/refs.parq/`) as [`resolve`] does.
#[derive(Debug)]
struct AgainstFolder(Url);

impl ResolveFile for AgainstFolder {
    fn resolve(&self, file: &str) -> Result<String, String> {
        resolve(&self.0, file).map(String::from)
    }
}

/// Decodes a Parquet record on tokio's blocking threads, so a large record does not hold up
/// the reads the runtime's workers serve (on the calling thread where there is no runtime).
#[derive(Debug)]
struct OffTheRuntime;

impl RecordDecoder for OffTheRuntime {
    fn decode(
        &self,
        bytes: Bytes,
        resolve: Arc<dyn ResolveFile>,
    ) -> BoxFuture<'static, Result<Vec<Option<Reference>>, String>> {
        Box::pin(async move {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => handle
                    .spawn_blocking(move || decode_record(bytes, resolve.as_ref()))
                    .await
                    .map_err(|e| format!("decoding a Parquet record stopped ({e})"))?,
                Err(_) => decode_record(bytes, resolve.as_ref()),
            }
        })
    }
}

/// The root of `url`'s store (`s3://bucket/`, `https://host/`, `file:///`) and the object's
/// key under it, percent-decoded.
fn split(url: &Url) -> (String, String) {
    let root = format!("{}/", &url[..url::Position::BeforePath]);
    let key = percent_encoding::percent_decode_str(url.path().trim_start_matches('/')).decode_utf8_lossy();
    (root, key.into_owned())
}

/// Storage options for the store at `root`: none for a local one, which takes none.
fn options_for<'o>(root: &str, options: &'o [(String, String)]) -> &'o [(String, String)] {
    if root.starts_with("file:") { &[] } else { options }
}

/// Opens the stores of a set's files (and of an Icechunk repository's chunks): one per bucket
/// or host, shared by its files.
#[derive(Debug)]
pub(super) struct NativeFiles {
    options: Vec<(String, String)>,
    stores: Mutex<HashMap<String, Arc<dyn Storage>>>,
}

impl NativeFiles {
    /// An opener whose remote stores take `options` (local ones take none).
    pub(super) fn new(options: &[(String, String)]) -> Self {
        Self { options: options.to_vec(), stores: Mutex::new(HashMap::new()) }
    }
}

impl FileOpener for NativeFiles {
    fn open(&self, url: &str) -> Result<(Arc<dyn Storage>, String), StorageError> {
        let parsed = Url::parse(url).map_err(|e| StorageError::permanent(format!("not a URL ({e})")))?;
        let (root, key) = split(&parsed);
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(store) = stores.get(&root) {
            return Ok((Arc::clone(store), key));
        }
        let store = open_storage(&root, options_for(&root, &self.options))
            .map_err(|e| StorageError::permanent(e.to_string()))?;
        stores.insert(root, Arc::clone(&store));
        Ok((store, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_resolve_against_the_set_and_split_at_their_store() {
        let set = Url::parse("s3://bucket/refs/era5.json").unwrap();
        assert_eq!(resolve(&set, "2020.nc").unwrap().as_str(), "s3://bucket/refs/2020.nc");
        assert_eq!(resolve(&set, "../data/a b.nc").unwrap().as_str(), "s3://bucket/data/a%20b.nc");
        assert_eq!(resolve(&set, "/data/x.nc").unwrap().as_str(), "file:///data/x.nc");
        assert_eq!(resolve(&set, "gs://other/y.nc").unwrap().as_str(), "gs://other/y.nc");
        let (root, key) = split(&resolve(&set, "../data/a b.nc").unwrap());
        assert_eq!((root.as_str(), key.as_str()), ("s3://bucket/", "data/a b.nc"));
        let (root, key) = split(&Url::parse("file:///data/x.nc").unwrap());
        assert_eq!((root.as_str(), key.as_str()), ("file:///", "data/x.nc"));
        let (root, key) = split(&Url::parse("https://host:8080/dir/f.nc").unwrap());
        assert_eq!((root.as_str(), key.as_str()), ("https://host:8080/", "dir/f.nc"));
    }
}
