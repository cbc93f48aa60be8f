//! Kerchunk reference sets in wasm: `reference+URL` read as core's [`ReferenceStorage`] (a JSON
//! file, or kerchunk's Parquet folder read lazily by core's `ParquetIndex` in the builds with
//! the `parquet` feature), its files read with `fetch` (`http(s)://`, one [`FetchStorage`] per
//! origin), object_store's signed S3 (`s3://`, the `s3` builds, with `storageOptions`), or in
//! Node a storage object over the local file system (`file://`, the facade's `node:fs` store
//! rooted at `/`). The set itself is read the same way. Relative file URLs resolve against the
//! set's URL with the platform's `URL` (as the native side resolves them with the `url` crate).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use insitubatch_core::runtime::{Storage, StorageError};
use insitubatch_core::{FileOpener, ReferenceSet, ReferenceStorage};
use wasm_bindgen::prelude::*;

use crate::storage::{FetchStorage, js_message};

/// The prefix of a reference set's URL, as natively (`insitubatch_native::refs`).
pub(crate) const REFERENCE_PREFIX: &str = "reference+";
pub(crate) use insitubatch_core::ICECHUNK_PREFIX;

/// Where the files of a set are read from.
#[derive(Debug, Default)]
pub(crate) struct WasmFiles {
    /// Local files (Node): a storage rooted at `/`, keyed by absolute path without its `/`.
    local: Option<Arc<dyn Storage>>,
    /// `storageOptions` for `s3://` files.
    #[cfg_attr(not(feature = "s3"), allow(dead_code, reason = "only the s3 builds open s3:// files"))]
    s3_options: std::collections::BTreeMap<String, String>,
    stores: Mutex<HashMap<String, Arc<dyn Storage>>>,
}

impl WasmFiles {
    pub(crate) fn new(local: Option<Arc<dyn Storage>>, s3_options: std::collections::BTreeMap<String, String>) -> Self {
        Self { local, s3_options, stores: Mutex::new(HashMap::new()) }
    }

    /// The store of `url`'s origin (`https://host/`, `s3://bucket/`), opened once.
    fn store(
        &self,
        root: &str,
        open: impl FnOnce() -> Result<Arc<dyn Storage>, String>,
    ) -> Result<Arc<dyn Storage>, String> {
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = stores.get(root) {
            return Ok(Arc::clone(s));
        }
        let s = open()?;
        stores.insert(root.to_string(), Arc::clone(&s));
        Ok(s)
    }

    /// The storage holding `url` and its key there.
    fn locate(&self, url: &str) -> Result<(Arc<dyn Storage>, String), String> {
        let parsed = web_sys::Url::new(url).map_err(|e| format!("not a URL ({})", js_message(&e)))?;
        let protocol = parsed.protocol();
        let path: String = parsed.pathname();
        match protocol.as_str() {
            "http:" | "https:" => {
                let root = parsed.origin();
                let store = self.store(&root, || Ok(Arc::new(FetchStorage::new(&root)) as Arc<dyn Storage>))?;
                let query = parsed.search();
                Ok((store, format!("{}{query}", path.trim_start_matches('/'))))
            }
            "file:" => match &self.local {
                Some(local) => Ok((Arc::clone(local), decode(path.trim_start_matches('/'))?)),
                None => {
                    Err("a local file can only be read in Node; serve the files over http(s):// (with CORS) and give \
                     the set http(s) URLs (or URLs relative to it)"
                        .into())
                }
            },
            "s3:" => self.s3(&parsed, &path),
            other => {
                Err(format!("{other}// files cannot be read here; use http(s)://, s3:// or, in Node, local files"))
            }
        }
    }

    #[cfg(feature = "s3")]
    fn s3(&self, parsed: &web_sys::Url, path: &str) -> Result<(Arc<dyn Storage>, String), String> {
        let root = format!("s3://{}", parsed.host());
        let store = self.store(&root, || {
            let s3 = crate::object::open_s3(&root, &self.s3_options, None)?;
            Ok(Arc::new(s3) as Arc<dyn Storage>)
        })?;
        Ok((store, decode(path.trim_start_matches('/'))?))
    }

    #[cfg(not(feature = "s3"))]
    fn s3(&self, _: &web_sys::Url, _: &str) -> Result<(Arc<dyn Storage>, String), String> {
        Err("this build has no S3 support (the default browser builds leave it out); import insitubatch/web-s3, or \
             read the files over https://"
            .into())
    }
}

/// A URL path's percent-decoding (object keys are decoded names).
fn decode(path: &str) -> Result<String, String> {
    js_sys::decode_uri_component(path).map(String::from).map_err(|e| format!("a bad URL path ({})", js_message(&e)))
}

impl FileOpener for WasmFiles {
    fn open(&self, url: &str) -> Result<(Arc<dyn Storage>, String), StorageError> {
        self.locate(url).map_err(StorageError::permanent)
    }
}

/// `file`, as the set gives it, made an absolute URL: with a scheme as it is, an absolute path
/// as a local file, anything else relative to the set's URL.
fn resolve(set_url: &str, file: &str) -> Result<String, String> {
    let absolute_path = file.starts_with('/');
    let base = if absolute_path { "file:///" } else { set_url };
    web_sys::Url::new_with_base(file, base)
        .map(|u| u.href())
        .map_err(|e| format!("{} ({file} relative to {base})", js_message(&e)))
}

/// Open the reference set `url` (`reference+URL`, `URL` absolute: the Node facade makes a
/// path a `file://` URL), reading it and its files through `files`.
pub(crate) async fn open_references(url: &str, files: WasmFiles) -> Result<Arc<dyn Storage>, JsValue> {
    let fail = |m: String| crate::errors::js_error(&format!("{m}: {url}"));
    let inner = url
        .strip_prefix(REFERENCE_PREFIX)
        .ok_or_else(|| fail(format!("a reference set's URL starts with {REFERENCE_PREFIX}")))?;
    // A set is a file (JSON) or a folder (Parquet), named without its trailing slash.
    let inner = inner.trim_end_matches('/');
    let (store, key) = files.locate(inner).map_err(&fail)?;
    let read = |key: String| {
        let store = Arc::clone(&store);
        async move { store.get(&key).await.map_err(|e| fail(format!("cannot read the reference set ({})", e.message))) }
    };
    #[allow(
        clippy::arc_with_non_send_sync,
        reason = "on wasm32 a `dyn FileOpener` need not be Send + Sync (core's MaybeSend/MaybeSync are empty there)"
    )]
    let opener = |files: WasmFiles| -> Arc<dyn FileOpener> { Arc::new(files) };
    if let Some(bytes) = read(key.clone()).await? {
        let mut set = ReferenceSet::from_json(&bytes, url).map_err(crate::errors::err)?;
        set.map_files(|f| resolve(inner, f))
            .map_err(|m| fail(format!("a file URL of the reference set cannot be read ({m})")))?;
        let storage = ReferenceStorage::open(set, opener(files), url).map_err(|e| fail(e.message))?;
        return Ok(crate::storage::shared(storage));
    }
    let Some(zmetadata) = read(format!("{key}/.zmetadata")).await? else {
        return Err(fail(
            "no reference set at this URL (kerchunk's JSON file, or its Parquet folder with .zmetadata)".into(),
        ));
    };
    parquet_set(&zmetadata, (store, key), opener(files), (inner, url))
}

/// kerchunk's Parquet form, its `.zmetadata` read: core's lazy `ParquetIndex` over the
/// folder `inner` (the set's URL `url`).
#[cfg(feature = "parquet")]
fn parquet_set(
    zmetadata: &[u8],
    at: (Arc<dyn Storage>, String),
    files: Arc<dyn FileOpener>,
    (inner, url): (&str, &str),
) -> Result<Arc<dyn Storage>, JsValue> {
    use insitubatch_core::{DecodeInline, ParquetIndex, ResolveFile};
    #[allow(clippy::arc_with_non_send_sync, reason = "as for the opener in open_references")]
    let folder: Arc<dyn ResolveFile> = Arc::new(AgainstFolder(format!("{inner}/")));
    let index = ParquetIndex::new(zmetadata, at, folder, Arc::new(DecodeInline))
        .map_err(|m| crate::errors::err(insitubatch_core::Error::Metadata { message: m, key: url.to_string() }))?;
    #[allow(clippy::arc_with_non_send_sync, reason = "as for the opener in open_references")]
    let index = Arc::new(index);
    Ok(crate::storage::shared(ReferenceStorage::lazy(index, files, url)))
}

#[cfg(not(feature = "parquet"))]
fn parquet_set(
    _: &[u8],
    _: (Arc<dyn Storage>, String),
    _: Arc<dyn FileOpener>,
    (_, url): (&str, &str),
) -> Result<Arc<dyn Storage>, JsValue> {
    Err(crate::errors::js_error(&format!(
        "this build does not read kerchunk's Parquet reference sets (the default browser builds leave the parquet \
         reader out); import insitubatch/web-s3, or write the set as JSON (kerchunk's default): {url}"
    )))
}

/// A Parquet set's file URLs, resolved against its folder (`…/refs.parq/`) as [`resolve`]
/// resolves a JSON set's against the file.
#[cfg(feature = "parquet")]
#[derive(Debug)]
struct AgainstFolder(String);

#[cfg(feature = "parquet")]
impl insitubatch_core::ResolveFile for AgainstFolder {
    fn resolve(&self, file: &str) -> Result<String, String> {
        resolve(&self.0, file)
    }
}

/// Open the Icechunk repository `url` (`icechunk+URL#VERSION`, `URL` absolute: the Node facade
/// makes a path a `file://` URL) at the version its fragment names, reading its files and its
/// chunks through `files` (core's `IcechunkIndex`, as natively).
#[cfg(feature = "icechunk")]
pub(crate) async fn open_icechunk(url: &str, files: WasmFiles) -> Result<Arc<dyn Storage>, JsValue> {
    use insitubatch_core::IcechunkIndex;
    let fail = |m: String| crate::errors::js_error(&format!("{m}: {url}"));
    let (repo, version) = insitubatch_core::icechunk_url(url)
        .ok_or_else(|| fail(format!("an Icechunk repository's URL starts with {ICECHUNK_PREFIX}")))?
        .map_err(&fail)?;
    let repo = repo.trim_end_matches('/');
    #[allow(clippy::arc_with_non_send_sync, reason = "as for the opener in open_references")]
    let files: Arc<dyn FileOpener> = Arc::new(files);
    let index = IcechunkIndex::open(repo, &version, files.as_ref(), Arc::clone(&files)).await.map_err(&fail)?;
    let location = format!("{ICECHUNK_PREFIX}{repo}#snapshot={}", index.snapshot_id());
    #[allow(clippy::arc_with_non_send_sync, reason = "as for the opener in open_references")]
    let index = Arc::new(index);
    Ok(crate::storage::shared(ReferenceStorage::lazy(index, files, location)))
}

#[cfg(not(feature = "icechunk"))]
#[allow(clippy::unused_async, reason = "the same signature as the reader's, which awaits its reads")]
pub(crate) async fn open_icechunk(url: &str, _: WasmFiles) -> Result<Arc<dyn Storage>, JsValue> {
    Err(crate::errors::js_error(&format!(
        "this build does not read Icechunk repositories (the default browser builds leave the reader out); import \
         insitubatch/web-s3, or read the repository from Node: {url}"
    )))
}
