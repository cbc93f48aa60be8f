//! The exported `open*` functions: a store from a URL, a JS storage object, reference files,
//! joined or concatenated parts, and the one path that builds the dataset over it (`open_on`).

use std::cell::RefCell;
use std::sync::Arc;

use insitubatch_core::Runtime;
#[cfg(not(feature = "threads"))]
use insitubatch_core::runtime::InlinePool;
use wasm_bindgen::prelude::*;

use super::dataset::{Dataset, KeepAlive};
use super::js_options::parse_options;
use crate::errors::{err, js_error};
use crate::storage::{FetchStorage, shared};
use crate::{JsOpenOptions, LocalExecutor};

/// `fetch` for `http(s)://`; object_store's signed S3 for `s3://` (with `storageOptions` and
/// the `credentials` callback).
fn storage_for(url: &str, opts: &JsOpenOptions) -> Result<Arc<dyn insitubatch_core::Storage>, JsValue> {
    if url.starts_with("http://") || url.starts_with("https://") {
        refuse_s3_options(opts, &format!("they apply to s3:// URLs only; drop them for an http(s) store: {url}"))?;
        return Ok(Arc::new(FetchStorage::new(url)));
    }
    if url.starts_with("s3://") {
        #[cfg(feature = "s3")]
        {
            let o = opts.spec.storage_options.clone();
            let s3 = crate::object::open_s3(url, &o, opts.credentials_callback.as_ref());
            return Ok(Arc::new(s3.map_err(|e| js_error(&e))?));
        }
        #[cfg(not(feature = "s3"))]
        {
            return Err(js_error(&format!(
                "this build has no S3 support: the default browser builds leave it out to stay small; import \
                 insitubatch/web-s3 (one thread, signed S3) to read s3:// in a page, or read the store over \
                 https:// instead: {url}"
            )));
        }
    }
    if url.starts_with("file://") || !has_scheme(url) {
        // The Node entry (js/src/index.js) reads local stores itself, with node:fs, and hands
        // them over as a storage object; anything that reaches here is in a browser.
        return Err(js_error(&format!(
            "a local path cannot be read in a browser; serve the store over http(s):// (with CORS), or pass a \
             storage object {{ get(key, range) }} to open(); in Node, open() reads file:// URLs and plain paths: {url}"
        )));
    }
    Err(js_error(&format!("unsupported store URL; use http://, https://, s3://, or in Node file:// or a path: {url}")))
}

/// `storageOptions` and `credentials` configure a store opened by `s3://` URL: refused for any
/// other, with `why`.
fn refuse_s3_options(opts: &JsOpenOptions, why: &str) -> Result<(), JsValue> {
    if !opts.spec.storage_options.is_empty() {
        let keys: Vec<&String> = opts.spec.storage_options.keys().collect();
        return Err(err(insitubatch_core::Error::option(
            "storage_options",
            format!("`storage_options` {keys:?}: {why}"),
        )));
    }
    if opts.credentials {
        return Err(js_error(&format!("credentials: {why}")));
    }
    Ok(())
}

/// Whether `url` starts with a URL scheme (`name://`); anything else is a plain path.
fn has_scheme(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// Where decode and gather run: rayon's Web Worker pool in the threaded build (started by
/// `initThreadPool`), else inline on the calling thread.
fn cpu_pool() -> Arc<dyn insitubatch_core::runtime::ThreadPool> {
    #[cfg(feature = "threads")]
    {
        Arc::new(crate::threads::RayonPool)
    }
    #[cfg(not(feature = "threads"))]
    {
        Arc::new(InlinePool)
    }
}

/// Open the Zarr store at `url` (`http(s)://…`, read with `fetch`; or `s3://bucket/prefix`,
/// signed, with `storageOptions`) and build a dataset. `options`: the fields of
/// [`JsOpenOptions`] (`index.d.ts`'s `OpenOptions`).
#[wasm_bindgen]
pub async fn open(url: String, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    let storage = url_storage(&url, &opts, None).await?;
    open_on(storage, url, &opts).await
}

/// Open the kerchunk reference set at `url` (`reference+URL`; `wasm/src/refs.rs`) whose local
/// files (`file://` URLs, absolute paths) are read through `files`, a storage object rooted at
/// `/` (the Node facade's `node:fs` store); its other files as [`open`] reads URLs.
#[wasm_bindgen(js_name = openReferences)]
pub async fn open_references(url: String, files: JsValue, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    let local = crate::JsStorage::new(&files, "file:///").map_err(|e| js_error(&e))?;
    let storage = url_storage(&url, &opts, Some(shared(local))).await?;
    open_on(storage, url, &opts).await
}

/// The storage of a URL: a reference set (`reference+URL`) or an Icechunk repository
/// (`icechunk+URL`), read now, their local files through `local` (in Node); or
/// [`storage_for`]'s.
async fn url_storage(
    url: &str,
    opts: &JsOpenOptions,
    local: Option<Arc<dyn insitubatch_core::Storage>>,
) -> Result<Arc<dyn insitubatch_core::Storage>, JsValue> {
    let icechunk = url.starts_with(crate::refs::ICECHUNK_PREFIX);
    if !icechunk && !url.starts_with(crate::refs::REFERENCE_PREFIX) {
        return storage_for(url, opts);
    }
    if opts.credentials {
        return Err(js_error(&format!(
            "credentials apply to s3:// stores opened by URL, not to a reference set or an Icechunk repository; give \
             its S3 files storageOptions: {url}"
        )));
    }
    let files = crate::refs::WasmFiles::new(local, opts.spec.storage_options.clone());
    if icechunk {
        return crate::refs::open_icechunk(url, files).await;
    }
    crate::refs::open_references(url, files).await
}

/// Open the Zarr store a JS storage object reads (`{ get(key, range), list?(prefix),
/// location? }`, see [`JsStorage`](crate::JsStorage)): the Node package's `file://` store, or
/// the caller's own. `url`: the URL or path as the caller gave it (the dataset's `url`);
/// absent, the object's `location`. In the threaded build too: Node's `insitubatch/threads`
/// runs the engine on its main thread, where the object lives (a browser's threaded engine
/// runs in `openInWorker`'s worker, to which an object's functions cannot be posted; the
/// facade says so before it gets here).
#[wasm_bindgen(js_name = openWithStorage)]
pub async fn open_with_storage(storage: JsValue, url: Option<String>, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    let storage =
        crate::JsStorage::new(&storage, url.as_deref().unwrap_or("(a JS storage object)")).map_err(|e| js_error(&e))?;
    let url = url.unwrap_or_else(|| insitubatch_core::Storage::location(&storage));
    let why =
        format!("they apply only to a store opened by s3:// URL; configure the storage object itself instead: {url}");
    refuse_s3_options(&opts, &why)?;
    open_on(shared(storage), url, &opts).await
}

/// Open several stores as one (core's `JoinedStorage`, docs/joins.md): store `names[i]`'s
/// arrays are `names[i]/path`, under one plan and one budget. `parts[i]`: a URL, read as
/// [`open`] reads it, or a storage object, as [`open_with_storage`].
#[wasm_bindgen(js_name = openJoined)]
pub async fn open_joined(names: Vec<String>, parts: Vec<JsValue>, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    if names.len() != parts.len() {
        return Err(js_error("openJoined takes one name per store"));
    }
    let mut mounts = Vec::with_capacity(names.len());
    for (name, part) in names.into_iter().zip(parts) {
        let storage = match part.as_string() {
            Some(url) => url_storage(&url, &opts, None).await?,
            // A list inside a join: its stores concatenated first (`{ era5: [a, b], static: c }`).
            None if js_sys::Array::is_array(&part) => {
                shared(concat_storage(js_sys::Array::from(&part).iter().collect(), &opts).await?)
            }
            None => storage_object(&part, &name)?,
        };
        mounts.push((name, storage));
    }
    open_named(insitubatch_core::JoinedStorage::new(mounts).map_err(err)?, &opts).await
}

/// Open a storage built of several (a join, a concatenation), named by its own location.
async fn open_named<S: insitubatch_core::Storage + 'static>(
    storage: S,
    opts: &JsOpenOptions,
) -> Result<Dataset, JsValue> {
    let url = insitubatch_core::Storage::location(&storage);
    open_on(shared(storage), url, opts).await
}

/// Open several stores end to end along the sample axis (core's `ConcatStorage`,
/// docs/joins.md): every array with the dimension `concatDim` (default `"time"`) is the
/// stores' arrays in order. `parts[i]`: a URL, or a storage object.
#[wasm_bindgen(js_name = openConcat)]
pub async fn open_concat(parts: Vec<JsValue>, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    open_named(concat_storage(parts, &opts).await?, &opts).await
}

/// Stores end to end along `opts`'s `concatDim` (default `"time"`): URLs or storage objects.
async fn concat_storage(parts: Vec<JsValue>, opts: &JsOpenOptions) -> Result<insitubatch_core::ConcatStorage, JsValue> {
    let mut storages = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        storages.push(match part.as_string() {
            Some(url) => url_storage(&url, opts, None).await?,
            None => storage_object(&part, &format!("#{i}"))?,
        });
    }
    // The dimension and axis, and its metadata reads' read policy, are the spec's (core decides).
    let resolved = opts.to_core().map_err(err)?;
    let (dim, axis) = (resolved.concat_dim.as_str(), resolved.sample_axis);
    let executor: Arc<dyn insitubatch_core::Executor> = Arc::new(LocalExecutor::new());
    insitubatch_core::ConcatStorage::open_under_policy(storages, dim, axis, executor, resolved.dataset.read_policy)
        .await
        .map_err(err)
}

/// A joined store given as a storage object.
fn storage_object(part: &JsValue, name: &str) -> Result<Arc<dyn insitubatch_core::Storage>, JsValue> {
    let storage = crate::JsStorage::new(part, &format!("(the JS storage object of {name:?})"));
    Ok(shared(storage.map_err(|e| js_error(&e))?))
}

/// Read the metadata of the arrays `opts` names (or discover them), then build the dataset
/// with core's builder: labelled by path unless the options ask for labels or a window.
async fn open_on(
    storage: Arc<dyn insitubatch_core::Storage>,
    url: String,
    opts: &JsOpenOptions,
) -> Result<Dataset, JsValue> {
    let resolved = opts.to_core().map_err(err)?;
    let pool = cpu_pool();
    // The disk tier (`cacheDir`): locked and listed now, asynchronously, since the builder
    // opens it synchronously (wasm/src/opfs/).
    let tier = match &resolved.cache {
        Some(flags) => {
            let dir = crate::opfs::OpfsDir::from_flags(flags).map_err(err)?;
            Some(crate::opfs::opener(dir, Arc::clone(&pool)).await.map_err(err)?)
        }
        None => None,
    };
    let runtime = Runtime::new(Arc::new(LocalExecutor::new()), pool).with_memory_available(crate::memory_available());
    let mut builder = insitubatch_core::Dataset::builder(Arc::clone(&storage), runtime).resolved(resolved);
    if let Some(tier) = tier {
        builder = builder.tier(tier);
    }
    builder = builder.read_metadata().await.map_err(err)?;
    if opts.windowed() {
        // A window (`shift`): the spec's variables, then each again `shift` samples on.
        let arrays = builder.opened_arrays();
        let variables = opts.variables_over(arrays, arrays, opts.shift.unwrap_or(0)).map_err(err)?;
        builder = builder.variables(variables);
    }
    // Variables in several groups: their sample-axis coordinates must agree (core's rule).
    builder = builder.read_coordinate().await.map_err(err)?;
    let inner = builder.build().map_err(err)?;
    Ok(Dataset {
        _keep: KeepAlive(Some(inner.clone())),
        inner,
        url,
        batch_views: opts.batch_views.unwrap_or(false),
        latest: RefCell::default(),
    })
}
