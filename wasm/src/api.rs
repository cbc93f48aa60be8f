//! The JavaScript API. Every export returns `Result<_, JsValue>`: a rejected promise or a
//! thrown `Error` with the engine's message, its option names in JS's spelling, and the
//! engine's `kind` and `option` on it (`errors.rs`); nothing panics into JS.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use insitubatch_core::coords::CoordValues;
#[cfg(not(feature = "threads"))]
use insitubatch_core::runtime::InlinePool;
use insitubatch_core::{Batch, Checkpoint, DType, NdArray, Runtime, Split};
use js_sys::{Array, ArrayBuffer, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::errors::{err, js_error, text_err};
use crate::storage::{FetchStorage, shared};
use crate::{JsOpenOptions, LocalExecutor, parse_split};

#[wasm_bindgen(start)]
fn start() {
    crate::trap::install_panic_hook();
}

/// A JS value from anything serializable, through JSON (u64 → number, maps → objects).
pub(crate) fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, JsValue> {
    let s = serde_json::to_string(v).map_err(text_err)?;
    js_sys::JSON::parse(&s).map_err(|e| js_error(&crate::storage::js_message(&e)))
}

pub(crate) fn set(o: &Object, k: &str, v: &JsValue) -> Result<(), JsValue> {
    Reflect::set(o, &JsValue::from_str(k), v).map(|_| ()).map_err(|e| js_error(&crate::storage::js_message(&e)))
}

/// A non-negative integer from a JS number.
pub(crate) fn whole(name: &str, v: f64) -> Result<u64, JsValue> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 {
        Ok(v as u64)
    } else {
        Err(js_error(&format!("{name} must be a non-negative integer, got {v}")))
    }
}

/// An integer (of either sign) from a JS number.
pub(crate) fn signed(name: &str, v: f64) -> Result<i64, JsValue> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_991.0 {
        Ok(v as i64)
    } else {
        Err(js_error(&format!("{name} must be an integer, got {v}")))
    }
}

/// The probe's `chunks` from JS: absent, core's [`PROBE_CHUNKS`](insitubatch_core::PROBE_CHUNKS),
/// the CLI's and Python's default; else at least 1 (the concurrent part needs a chunk).
pub(crate) fn probe_chunks(chunks: Option<f64>) -> Result<usize, JsValue> {
    match chunks {
        None => Ok(insitubatch_core::PROBE_CHUNKS),
        Some(v) => match whole("chunks", v)? {
            0 => Err(js_error("chunks must be at least 1: the probe loads that many chunks at once after the first")),
            n => usize::try_from(n).map_err(text_err),
        },
    }
}

/// A promise of `ds`'s probe of the train split at its epoch, as a JS object: what the CLI's
/// `describe --probe` and Python's `describe(probe=True)` report. `keep` lives until it settles.
pub(crate) fn probe_promise<K: 'static>(ds: insitubatch_core::Dataset, chunks: usize, keep: K) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let _keep = keep;
        let report = ds.probe(insitubatch_core::shuffle::Split::Train, chunks).await.map_err(err)?;
        to_js(&report)
    })
}

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
#[cfg(not(feature = "threads"))]
#[wasm_bindgen(js_name = openReferences)]
pub async fn open_references(url: String, files: JsValue, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    let local = crate::JsStorage::new(&files, "file:///").map_err(|e| js_error(&e))?;
    let storage = url_storage(&url, &opts, Some(shared(local))).await?;
    open_on(storage, url, &opts).await
}

/// The storage of a URL: a reference set (`reference+URL`, read now; its local files through
/// `local`, in Node), or [`storage_for`]'s.
async fn url_storage(
    url: &str,
    opts: &JsOpenOptions,
    local: Option<Arc<dyn insitubatch_core::Storage>>,
) -> Result<Arc<dyn insitubatch_core::Storage>, JsValue> {
    if !url.starts_with(crate::refs::REFERENCE_PREFIX) {
        return storage_for(url, opts);
    }
    if opts.credentials {
        return Err(js_error(&format!(
            "credentials apply to s3:// stores opened by URL, not to a reference set; give its S3 files \
             storageOptions: {url}"
        )));
    }
    let files = crate::refs::WasmFiles::new(local, opts.spec.storage_options.clone());
    crate::refs::open_references(url, files).await
}

/// Open the Zarr store a JS storage object reads (`{ get(key, range), list?(prefix),
/// location? }`, see [`JsStorage`](crate::JsStorage)): the Node package's `file://` store, or
/// the caller's own. `url`: the URL or path as the caller gave it (the dataset's `url`);
/// absent, the object's `location`.
#[cfg(not(feature = "threads"))]
#[wasm_bindgen(js_name = openWithStorage)]
pub async fn open_with_storage(storage: JsValue, url: Option<String>, options: JsValue) -> Result<Dataset, JsValue> {
    let opts = parse_options(options)?;
    let storage =
        crate::JsStorage::new(&storage, url.as_deref().unwrap_or("(a JS storage object)")).map_err(|e| js_error(&e))?;
    let url = url.unwrap_or_else(|| insitubatch_core::Storage::location(&storage));
    let why =
        format!("they apply only to a store opened by s3:// URL; configure the storage object itself instead: {url}");
    refuse_s3_options(&opts, &why)?;
    open_on(Arc::new(storage), url, &opts).await
}

/// Open several stores as one (core's `JoinedStorage`, docs/joins.md): store `names[i]`'s
/// arrays are `names[i]/path`, under one plan and one budget. `parts[i]`: a URL, read as
/// [`open`] reads it, or (not in the threaded build) a storage object, as [`open_with_storage`].
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
/// stores' arrays in order. `parts[i]`: a URL, or (not in the threaded build) a storage object.
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
#[cfg(not(feature = "threads"))]
fn storage_object(part: &JsValue, name: &str) -> Result<Arc<dyn insitubatch_core::Storage>, JsValue> {
    let storage = crate::JsStorage::new(part, &format!("(the JS storage object of {name:?})"));
    Ok(Arc::new(storage.map_err(|e| js_error(&e))?))
}

/// The threaded build reads URLs only (as `openWithStorage` is not in it).
#[cfg(feature = "threads")]
fn storage_object(_: &JsValue, name: &str) -> Result<Arc<dyn insitubatch_core::Storage>, JsValue> {
    Err(js_error(&format!(
        "this build (the threaded one, inside openInWorker) joins URLs only; give the store {name:?} as a URL"
    )))
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

/// The options object of `open()` and the explorer: this package's own keys taken out
/// ([`JS_OWN_NAMES`](crate::JS_OWN_NAMES)), the rest renamed by the one key-case pass
/// ([`snake_keys`](crate::snake_keys), which refuses unknown keys: serde-wasm-bindgen reads a
/// struct's declared fields only, so `deny_unknown_fields` never sees them) and read by core's
/// spec. `undefined` and `null` values are absent options (a form field left empty).
pub(crate) fn parse_options(v: JsValue) -> Result<JsOpenOptions, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(JsOpenOptions::default());
    }
    if !v.is_object() {
        return Err(js_error("invalid options: pass an object, e.g. { batchSize: 32 }"));
    }
    let own = |key: &str| Reflect::get(&v, &JsValue::from_str(key)).ok().filter(|x| !x.is_undefined() && !x.is_null());
    let credentials = own("credentials");
    if credentials.as_ref().is_some_and(|c| !c.is_function()) {
        return Err(js_error(
            "invalid options: credentials must be a function returning (a promise of) { accessKeyId, secretAccessKey, \
             sessionToken?, expiration? }",
        ));
    }
    let shift = own("shift").map(|s| signed("shift", s.as_f64().unwrap_or(f64::NAN))).transpose()?;
    let batch_views = own("batchViews").map(|b| b.is_truthy());
    let rest = JsObject(Object::assign(&Object::new(), v.unchecked_ref()));
    for key in crate::JS_OWN_NAMES {
        let _ = Reflect::delete_property(&rest.0, &JsValue::from_str(key));
    }
    let renamed = crate::snake_keys(&rest).map_err(err)?;
    let spec = insitubatch_core::DatasetSpec::from_deserializer(serde_wasm_bindgen::Deserializer::from(JsValue::from(
        renamed.0,
    )))
    .map_err(err)?;
    #[allow(unused_mut, reason = "the callback is kept only in the builds with signed S3")]
    #[allow(clippy::needless_update, reason = "`credentials_callback` is a field of the builds with signed S3 only")]
    let mut opts = JsOpenOptions { spec, shift, batch_views, credentials: credentials.is_some(), ..Default::default() };
    #[cfg(feature = "s3")]
    {
        opts.credentials_callback = credentials.and_then(|c| c.dyn_into::<js_sys::Function>().ok());
    }
    Ok(opts)
}

/// A JS object as the key-case pass reads and makes it.
struct JsObject(Object);

impl crate::OptionObject for JsObject {
    fn present_keys(&self) -> Vec<String> {
        Object::keys(&self.0)
            .iter()
            .filter_map(|k| k.as_string())
            .filter(|k| Reflect::get(&self.0, &JsValue::from_str(k)).is_ok_and(|x| !x.is_undefined() && !x.is_null()))
            .collect()
    }

    fn object_at(&self, key: &str) -> Option<Self> {
        let v = Reflect::get(&self.0, &JsValue::from_str(key)).ok()?;
        // A plain object: not an array, a `Map` or a typed array (their keys are no option's).
        let plain = v.is_object()
            && !Array::is_array(&v)
            && !v.is_instance_of::<js_sys::Map>()
            && !ArrayBuffer::is_view(&v)
            && !v.is_function();
        plain.then(|| Self(v.unchecked_into()))
    }

    fn renamed(&self, rename: &dyn Fn(&str) -> String) -> Self {
        let out = Object::new();
        for key in self.present_keys() {
            let value = Reflect::get(&self.0, &JsValue::from_str(&key)).unwrap_or(JsValue::UNDEFINED);
            let _ = Reflect::set(&out, &JsValue::from_str(&rename(&key)), &value);
        }
        Self(out)
    }

    fn put(&mut self, key: &str, value: Self) {
        let _ = Reflect::set(&self.0, &JsValue::from_str(key), &value.0);
    }
}

/// The option names `open()` accepts, for the types check (`js/test/types.test.js`): `open`,
/// the options' keys, and each nested object's (`readPolicy`, `readPolicy.hedge`, and a
/// labelled variable's as `variables.*`), all in JS's spelling.
#[wasm_bindgen(js_name = optionNames)]
pub fn option_names() -> Result<JsValue, JsValue> {
    let mut names: std::collections::BTreeMap<String, Vec<String>> = crate::nested_option_names().into_iter().collect();
    names.insert("open".into(), crate::open_option_names());
    to_js(&names)
}

/// A reference to an opened dataset's engine. In the threaded build its release waits until
/// no pool job is queued or running (`threads::drop_when_idle`), so an engine is never freed
/// on a pool thread; every JS-facing object that can cause jobs holds one.
#[derive(Clone)]
#[cfg_attr(not(feature = "threads"), allow(dead_code, reason = "the field is read only by the threaded build's Drop"))]
struct KeepAlive(Option<insitubatch_core::Dataset>);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        #[cfg(feature = "threads")]
        if let Some(ds) = self.0.take() {
            crate::threads::drop_when_idle(ds);
        }
    }
}

/// An opened store: splits, shuffle, pool. Iterate one epoch of a split with `iter()`.
#[wasm_bindgen]
pub struct Dataset {
    inner: insitubatch_core::Dataset,
    url: String,
    /// `batchViews`: its passes yield views into wasm memory ([`batch_view_to_js`]).
    batch_views: bool,
    /// Where the latest pass over each split stands ([`PassCursor::position`]), kept after
    /// the pass ends: what [`Self::checkpoint`] returns.
    latest: RefCell<Vec<(Split, Rc<RefCell<Checkpoint>>)>>,
    _keep: KeepAlive,
}

/// A checkpoint from JS: core's serde form as an object (what `checkpoint()` returns) or
/// as JSON text (a file the CLI's `--checkpoint` or Python's `state_dict()` wrote).
fn checkpoint_from_js(v: &JsValue) -> Result<Checkpoint, JsValue> {
    let json = match v.as_string() {
        Some(s) => s,
        None if v.is_object() => js_sys::JSON::stringify(v)
            .map_err(|e| js_error(&crate::storage::js_message(&e)))?
            .as_string()
            .unwrap_or_default(),
        None => {
            return Err(js_error(
                "a checkpoint is the object checkpoint() returned (or its JSON text); got something else",
            ));
        }
    };
    Checkpoint::from_json(&json).map_err(err)
}

#[wasm_bindgen]
impl Dataset {
    /// The static report (memory model, variables, notes) for `iterations` concurrent
    /// iterations (default 1); nothing is read.
    pub fn describe(&self, iterations: Option<f64>) -> Result<JsValue, JsValue> {
        let n = whole("iterations", iterations.unwrap_or(1.0))? as usize;
        to_js(&self.inner.describe(n).map_err(err)?)
    }

    /// The same report, rendered as text.
    #[wasm_bindgen(js_name = describeText)]
    pub fn describe_text(&self, iterations: Option<f64>) -> Result<String, JsValue> {
        let n = whole("iterations", iterations.unwrap_or(1.0))? as usize;
        Ok(self.inner.describe(n).map_err(err)?.render())
    }

    /// Reshuffle deterministically for `epoch`.
    #[wasm_bindgen(js_name = setEpoch)]
    pub fn set_epoch(&self, epoch: f64) -> Result<(), JsValue> {
        self.inner.set_epoch(whole("epoch", epoch)?);
        Ok(())
    }

    /// The current epoch.
    #[wasm_bindgen(getter)]
    pub fn epoch(&self) -> f64 {
        self.inner.epoch() as f64
    }

    /// The variable labels, in batch order.
    #[wasm_bindgen(getter)]
    pub fn labels(&self) -> Vec<String> {
        let mut l: Vec<String> = self.inner.variables().iter().map(|v| v.label.clone()).collect();
        l.sort();
        l
    }

    /// The store URL as given.
    #[wasm_bindgen(getter)]
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// One epoch of `split` (`"train"`, `"val"`, `"test"` or `"all"`) at the current epoch.
    pub fn iter(&self, split: &str) -> Result<BatchStream, JsValue> {
        let split = parse_split(split).map_err(text_err)?;
        let stream = self.inner.iter(split).map_err(err)?;
        Ok(self.stream(split, stream))
    }

    /// The pass a checkpoint was taken in (core's `Dataset::resume`), from where it stopped:
    /// with the world size it was taken with, exactly the batches the uninterrupted pass
    /// would have yielded next; with another, this rank's share of the samples no rank had
    /// consumed. Sets the epoch to the checkpoint's. `checkpoint`: what `checkpoint()`
    /// returned, or its JSON text.
    pub fn resume(&self, checkpoint: JsValue) -> Result<BatchStream, JsValue> {
        let checkpoint = checkpoint_from_js(&checkpoint)?;
        let stream = self.inner.resume(&checkpoint).map_err(err)?;
        Ok(self.stream(checkpoint.split, stream))
    }

    /// Where the latest pass over `split` stands (core's `Checkpoint`, as a plain object),
    /// or, before a pass of the current epoch, the checkpoint of a fresh one.
    pub fn checkpoint(&self, split: &str) -> Result<JsValue, JsValue> {
        let split = parse_split(split).map_err(text_err)?;
        let epoch = self.inner.epoch();
        let latest = self.latest.borrow().iter().find(|(s, _)| *s == split).map(|(_, at)| at.borrow().clone());
        match latest {
            Some(c) if c.epoch == epoch => to_js(&c),
            _ => to_js(&self.inner.fresh_checkpoint(split, epoch)),
        }
    }

    /// A JS stream over `stream`, remembered as the latest pass over `split`.
    fn stream(&self, split: Split, stream: insitubatch_core::BatchStream) -> BatchStream {
        let cursor = PassCursor::new(stream);
        let mut latest = self.latest.borrow_mut();
        latest.retain(|(s, _)| *s != split);
        latest.push((split, cursor.position()));
        BatchStream { cursor, keep: KeepAlive(Some(self.inner.clone())), views: self.batch_views }
    }

    /// Probe the store: a few real reads and decodes of the train split at the current
    /// epoch, timed, and the epoch they predict (core's `Dataset::probe`; `chunks`, default
    /// `PROBE_CHUNKS`, are loaded at once after the first). A promise of the report; nothing
    /// it loads is kept, so the next pass starts cold.
    pub fn probe(&self, chunks: Option<f64>) -> js_sys::Promise {
        match probe_chunks(chunks) {
            Ok(n) => probe_promise(self.inner.clone(), n, KeepAlive(Some(self.inner.clone()))),
            Err(e) => js_sys::Promise::reject(&e),
        }
    }

    /// Chunks filled under `onBadChunk: "nan"` so far: `{ array, chunk_index, tile, error }`.
    #[wasm_bindgen(js_name = badChunks)]
    pub fn bad_chunks(&self) -> Result<JsValue, JsValue> {
        to_js(&self.inner.bad_chunks())
    }

    /// Stats of the last pass that ended, or `undefined`.
    #[wasm_bindgen(js_name = lastPass)]
    pub fn last_pass(&self) -> Result<JsValue, JsValue> {
        match self.inner.last_pass() {
            Some(p) => to_js(&p),
            None => Ok(JsValue::UNDEFINED),
        }
    }
}

/// One pass over a split. `next()` resolves to a batch, or `undefined` at the end.
/// `close()` (or dropping it) ends the pass and frees its memory at once.
#[wasm_bindgen]
pub struct BatchStream {
    cursor: PassCursor,
    keep: KeepAlive,
    views: bool,
}

/// The JS side of one core pass, shared by [`BatchStream`] and the explorer's stream: one
/// `next()` at a time, the stream dropped (its pass ended) at the end, on an error or on
/// `close()`.
pub(crate) struct PassCursor {
    inner: Rc<RefCell<Option<insitubatch_core::BatchStream>>>,
    busy: Rc<Cell<bool>>,
    len: usize,
    /// The last batch yielded as views ([`Self::next_view`]): its buffers stay allocated, and
    /// are not recycled into later batches, until the next step or `close()`.
    held: Rc<RefCell<Option<Batch>>>,
    /// The pass's checkpoint after the last batch it returned (its start before the first),
    /// updated by each step: there between batches, while a step is pending (the stream is
    /// out of `inner` then) and after the pass has ended.
    at: Rc<RefCell<Checkpoint>>,
}

impl PassCursor {
    pub(crate) fn new(stream: insitubatch_core::BatchStream) -> Self {
        let len = stream.len();
        let at = Rc::new(RefCell::new(stream.checkpoint()));
        Self {
            inner: Rc::new(RefCell::new(Some(stream))),
            busy: Rc::new(Cell::new(false)),
            len,
            held: Rc::new(RefCell::new(None)),
            at,
        }
    }

    /// Where the pass stands after the last batch it returned (core's `BatchStream::checkpoint`).
    pub(crate) fn checkpoint(&self) -> Checkpoint {
        self.at.borrow().clone()
    }

    /// The cell [`Self::checkpoint`] reads, shared with the dataset (its `checkpoint()`).
    pub(crate) fn position(&self) -> Rc<RefCell<Checkpoint>> {
        Rc::clone(&self.at)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The next batch through `convert`, or `undefined` after the last one. `keep` lives
    /// until the promise settles (the stream may end, and be dropped, inside it).
    pub(crate) fn next<K: 'static>(&self, convert: fn(&Batch) -> Result<JsValue, JsValue>, keep: K) -> js_sys::Promise {
        self.step(convert, None, keep)
    }

    /// The next batch as views into wasm memory ([`batch_view_to_js`]): the batch is held
    /// here until the next call or `close()`, which release the one before (its buffers go
    /// back to the pass's recycler, so a view kept past that may show a later batch).
    pub(crate) fn next_view<K: 'static>(&self, keep: K) -> js_sys::Promise {
        self.held.borrow_mut().take();
        self.step(batch_view_to_js, Some(Rc::clone(&self.held)), keep)
    }

    /// One step of the pass: the batch through `convert`, then kept in `hold` if given.
    fn step<K: 'static>(
        &self,
        convert: fn(&Batch) -> Result<JsValue, JsValue>,
        hold: Option<Rc<RefCell<Option<Batch>>>>,
        keep: K,
    ) -> js_sys::Promise {
        let inner = Rc::clone(&self.inner);
        let busy = Rc::clone(&self.busy);
        let at = Rc::clone(&self.at);
        wasm_bindgen_futures::future_to_promise(async move {
            let _keep = keep;
            if busy.get() {
                return Err(js_error("next() was called again before the previous call resolved; await it first"));
            }
            let Some(mut stream) = inner.borrow_mut().take() else {
                return Ok(JsValue::UNDEFINED);
            };
            crate::trap::on_next().await;
            busy.set(true);
            let item = stream.next_batch().await;
            busy.set(false);
            match item {
                Some(Ok(batch)) => {
                    *at.borrow_mut() = stream.checkpoint();
                    *inner.borrow_mut() = Some(stream);
                    let js = convert(&batch)?;
                    if let Some(hold) = hold {
                        *hold.borrow_mut() = Some(batch);
                    }
                    Ok(js)
                }
                Some(Err(e)) => Err(err(e)),
                None => Ok(JsValue::UNDEFINED),
            }
        })
    }

    pub(crate) fn stats(&self) -> Result<JsValue, JsValue> {
        match self.inner.borrow().as_ref() {
            Some(s) => to_js(&s.stats()),
            None => Ok(JsValue::UNDEFINED),
        }
    }

    pub(crate) fn close(&self) {
        self.held.borrow_mut().take();
        if let Some(s) = self.inner.borrow_mut().take() {
            s.close();
        }
    }
}

#[wasm_bindgen]
impl BatchStream {
    /// Batches this pass yields in all.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.cursor.len()
    }

    /// The next batch, or `undefined` after the last one. Under `batchViews` its arrays are
    /// views (`batch_view_to_js`) and this call ends the previous batch's.
    pub fn next(&self) -> js_sys::Promise {
        if self.views {
            self.cursor.next_view(self.keep.clone())
        } else {
            self.cursor.next(batch_to_js, self.keep.clone())
        }
    }

    /// Whether batches are views into wasm memory (the `batchViews` option): the facade
    /// (js/src/facade.js) wraps them so that each read re-derives the view.
    #[wasm_bindgen(getter, js_name = batchViews)]
    pub fn batch_views(&self) -> bool {
        self.views
    }

    /// Stats of this pass so far (`undefined` once it has ended; see `Dataset.lastPass()`).
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        self.cursor.stats()
    }

    /// Where this pass stands after the last batch it returned (core's `Checkpoint`, as a
    /// plain object): `Dataset.resume` continues from there, in this process or another, with
    /// any world size. Also after the pass has ended or was closed.
    pub fn checkpoint(&self) -> Result<JsValue, JsValue> {
        to_js(&self.cursor.checkpoint())
    }

    /// End the pass now (an early `break`); later `next()` calls resolve to `undefined`.
    pub fn close(&self) {
        self.cursor.close();
    }
}

/// A copy of `a`'s bytes in a fresh typed array of its dtype.
fn typed_array(a: &NdArray) -> JsValue {
    let bytes: &[u8] = &a.data[..];
    let u8a = Uint8Array::new_with_length(bytes.len() as u32);
    u8a.copy_from(bytes);
    typed_over(a.dtype, &u8a.buffer().into(), 0, (bytes.len() / a.dtype.size()) as u32)
}

/// The typed array of `dtype` over `n` elements of `buf` from `byte_offset` (float16 and
/// bfloat16 as raw `Uint16Array` bits, bool as `Uint8Array`).
fn typed_over(dtype: DType, buf: &JsValue, byte_offset: u32, n: u32) -> JsValue {
    match dtype {
        DType::Bool | DType::Uint8 => Uint8Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Int8 => js_sys::Int8Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Int16 => js_sys::Int16Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Uint16 | DType::Float16 | DType::Bfloat16 => {
            js_sys::Uint16Array::new_with_byte_offset_and_length(buf, byte_offset, n).into()
        }
        DType::Int32 => js_sys::Int32Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Uint32 => js_sys::Uint32Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Int64 => js_sys::BigInt64Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Uint64 => js_sys::BigUint64Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Float32 => js_sys::Float32Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Float64 => js_sys::Float64Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
    }
}

/// `{ arrays: { label: { data, shape, dtype } }, sampleIndices, offsets, index, epoch }`, with
/// `patchOrigins` and `patchDims` when patched: the one batch encoding every JS stream
/// (dataset, explorer, worker) receives.
pub(crate) fn batch_to_js(b: &Batch) -> Result<JsValue, JsValue> {
    batch_object(b, |a, o| set(o, "data", &typed_array(a)))
}

/// `batchViews`: each array's `data` is a typed array over wasm memory, at `byteOffset` with
/// `length` elements, instead of a copy. The batch must stay alive (and its buffers out of
/// the recycler) while JS reads it ([`PassCursor::next_view`] holds it). Non-shared memory
/// detaches its `ArrayBuffer` when it grows, which any allocation of the engine's background
/// tasks may do, so `data` is only right at creation: the facade re-derives it from
/// `byteOffset`, `length` and the current `wasmMemory().buffer` (js/src/facade.js).
pub(crate) fn batch_view_to_js(b: &Batch) -> Result<JsValue, JsValue> {
    let buf = wasm_memory().unchecked_into::<js_sys::WebAssembly::Memory>().buffer();
    batch_object(b, |a, o| {
        // wasm32: pointers are 32-bit offsets into the one linear memory.
        let byte_offset = a.data.as_ptr() as usize as u32;
        let n = (a.data.len() / a.dtype.size()) as u32;
        set(o, "data", &typed_over(a.dtype, &buf, byte_offset, n))?;
        set(o, "byteOffset", &JsValue::from_f64(f64::from(byte_offset)))?;
        set(o, "length", &JsValue::from_f64(f64::from(n)))
    })
}

/// The instance's `WebAssembly.Memory`, over which `batchViews` batches are views.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// A batch as a JS object; `array_fields` adds each array's data under its own name.
pub(crate) fn batch_object(
    b: &Batch,
    array_fields: impl Fn(&NdArray, &Object) -> Result<(), JsValue>,
) -> Result<JsValue, JsValue> {
    let arrays = Object::new();
    for (label, a) in &b.arrays {
        let o = Object::new();
        array_fields(a, &o)?;
        let shape: Array = a.shape.iter().map(|&d| JsValue::from_f64(d as f64)).collect();
        set(&o, "shape", &shape)?;
        set(&o, "dtype", &JsValue::from_str(a.dtype.name()))?;
        set(&arrays, label, &o)?;
    }
    let offsets = Object::new();
    for (label, off) in &b.offsets {
        set(&offsets, label, &JsValue::from_f64(*off as f64))?;
    }
    let idx = js_sys::BigUint64Array::new_with_length(b.sample_indices.len() as u32);
    idx.copy_from(&b.sample_indices);
    let out = Object::new();
    set(&out, "arrays", &arrays)?;
    set(&out, "sampleIndices", &idx)?;
    set(&out, "offsets", &offsets)?;
    set(&out, "index", &JsValue::from_f64(b.index as f64))?;
    set(&out, "epoch", &JsValue::from_f64(b.epoch as f64))?;
    if let Some(p) = &b.patches {
        set_patches(&out, p)?;
    }
    if !b.coords.is_empty() {
        set(&out, "coords", &coords_to_js(&b.coords)?.into())?;
    }
    if let Some(p) = &b.part {
        set(&out, "part", &part_to_js(p)?.into())?;
    }
    Ok(out.into())
}

/// `batch.coords`: each coordinate's value per row, CF time as nanoseconds since 1970 in a
/// `BigInt64Array`, numbers in a `Float64Array` (fresh arrays, the batch's own).
fn coords_to_js(coords: &std::collections::BTreeMap<String, CoordValues>) -> Result<Object, JsValue> {
    let out = Object::new();
    for (name, values) in coords {
        let v: JsValue = match values {
            CoordValues::Time(ns) => {
                let a = js_sys::BigInt64Array::new_with_length(ns.len() as u32);
                a.copy_from(ns);
                a.into()
            }
            CoordValues::Number(x) => js_sys::Float64Array::from(x.as_slice()).into(),
        };
        set(&out, name, &v)?;
    }
    Ok(out)
}

/// `batch.part` under a rank mesh: `{ dim, index, of, start, len }`, this rank's slice of
/// every row along `dim` (as Python's `batch.model_part`).
fn part_to_js(p: &insitubatch_core::BatchPart) -> Result<Object, JsValue> {
    let out = Object::new();
    set(&out, "dim", &JsValue::from_str(&p.dim))?;
    set(&out, "index", &JsValue::from_f64(p.index as f64))?;
    set(&out, "of", &JsValue::from_f64(p.of as f64))?;
    set(&out, "start", &JsValue::from_f64(p.start as f64))?;
    set(&out, "len", &JsValue::from_f64(p.len as f64))?;
    Ok(out)
}

/// A patched batch's `patchOrigins` (row-major `rows × patchDims.length`, a fresh
/// `BigUint64Array` as `sampleIndices`, so both are the batch's own under `batchViews` and
/// can be transferred by the worker) and `patchDims`; absent for whole samples.
fn set_patches(out: &Object, p: &insitubatch_core::BatchPatches) -> Result<(), JsValue> {
    let origins = js_sys::BigUint64Array::new_with_length(p.origins.len() as u32);
    origins.copy_from(&p.origins);
    let dims: Array = p.dims.iter().map(|d| JsValue::from_str(d)).collect();
    set(out, "patchOrigins", &origins)?;
    set(out, "patchDims", &dims)
}
