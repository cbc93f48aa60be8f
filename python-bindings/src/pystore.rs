//! Store objects from Python, as core's [`Storage`].
//!
//! [`StoreArg::from_py`] converts what the Python package hands over and decides nothing:
//! - a `str` stays a URL, opened by `insitubatch_native::open` as before;
//! - an obstore store (`S3Store`, `GCSStore`, `AzureStore`, `HTTPStore`, `LocalStore`) becomes
//!   an object_store store through `pyo3-object_store`, read by the same
//!   [`ObjectStoreStorage`] as a URL, in Rust with no GIL. obstore's classes live in obstore's
//!   own extension module, so the store is rebuilt here from its configuration (the pickle
//!   arguments, `__getnewargs_ex__`): same settings and credential provider, its own
//!   connection pool. A `MemoryStore` has no configuration to rebuild from; the Python
//!   package wraps it as a zarr store (below);
//! - anything else with zarr's async `get`/`list_prefix` (a zarr-python v3 `Store`:
//!   `LocalStore`, `MemoryStore`, `FsspecStore`, an Icechunk session's store) is read through
//!   [`PyZarrStorage`].
//!
//! [`PyZarrStorage`] runs the store's coroutines on zarr's own I/O event loop
//! (`zarr.core.sync._get_loop()`, where zarr's synchronous API runs them, and where the
//! reference implementation runs its reads). Not a loop of our own: a store's async client is
//! bound to the first loop that uses it (fsspec's aiohttp session), so a second loop breaks a
//! store that was opened before, by `open_geometries` or by zarr itself ("Event loop is
//! closed"). The engine's I/O thread never waits for the GIL: a read is a message to a
//! submitter thread, which takes the GIL once for every request waiting, schedules each
//! coroutine on the loop, and lets the coroutine's done-callback send the bytes back. Every
//! read crosses the GIL twice and copies its bytes twice (zarr's `Buffer.to_bytes()`, then
//! into Rust), which is why this path is slower than obstore's (docs/benchmarks-python.md).

use std::ffi::CStr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::channel::oneshot;
use insitubatch_core::ReadPolicy;
use insitubatch_core::runtime::{BoxFuture, ByteRange, Storage, StorageError, exact_bounded, suffix_or_whole};
use insitubatch_native::{JoinPart, ObjectStoreStorage};
use pyo3::exceptions::{
    PyConnectionError, PyFileNotFoundError, PyKeyError, PyRuntimeError, PyTimeoutError, PyTypeError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCFunction, PyDict, PyList, PyModule, PyString, PyTuple};
use pyo3_object_store::AnyObjectStore;

use crate::attach::with_python;

/// What the Python package passed as the store, converted.
pub enum StoreArg {
    /// A URL (or a local path): the native opener decides everything, as before.
    Url(String),
    /// A store object, already a [`Storage`]; `location` names it in messages.
    Built {
        /// The store as the engine reads it.
        storage: Arc<dyn Storage>,
        /// `str(store)`: a URL-like name for messages and the cache fingerprint.
        location: String,
    },
    /// A `{name: store}` dict: several stores read as one, store `name`'s arrays as
    /// `name/path` (`insitubatch_native::open_joined_storage`).
    Joined(Vec<(String, StoreArg)>),
    /// A list of stores: read end to end along the sample axis
    /// (`insitubatch_native::open_concat_storage`).
    Concat(Vec<StoreArg>),
}

impl StoreArg {
    /// Convert a URL string, an obstore store, a zarr-python store, or a dict of them by name.
    pub fn from_py(store: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(joined) = store.cast::<PyDict>() {
            let mut parts = Vec::with_capacity(joined.len());
            for (name, one) in joined.iter() {
                let Ok(name) = name.extract::<String>() else {
                    let kind = name.get_type().name()?;
                    return Err(PyTypeError::new_err(format!("a joined store's name must be a str, got {kind}")));
                };
                parts.push((name, Self::from_list_or_one(&one)?));
            }
            return Ok(Self::Joined(parts));
        }
        Self::from_list_or_one(store)
    }

    /// A list or tuple of stores (concatenated), or one store.
    fn from_list_or_one(store: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(list) = store.cast::<PyList>() {
            return list.iter().map(|one| Self::from_one(&one)).collect::<PyResult<_>>().map(Self::Concat);
        }
        if let Ok(tuple) = store.cast::<PyTuple>() {
            return tuple.iter().map(|one| Self::from_one(&one)).collect::<PyResult<_>>().map(Self::Concat);
        }
        Self::from_one(store)
    }

    /// One store: a URL string, an obstore store or a zarr-python store.
    fn from_one(store: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(url) = store.cast::<PyString>() {
            return Ok(Self::Url(url.to_str()?.to_string()));
        }
        if let Ok(refs) = store.cast::<ReferenceStore>() {
            let refs = refs.get();
            return Ok(Self::Built { storage: Arc::clone(&refs.storage), location: refs.location.clone() });
        }
        if let Some(native) = native_icechunk(store)? {
            return Ok(native);
        }
        let location = store.str()?.to_str()?.to_string();
        let module: String = store.get_type().getattr("__module__")?.extract()?;
        if module.split('.').next() == Some("obstore") {
            let storage = obstore_storage(store, &location)?;
            return Ok(Self::Built { storage, location });
        }
        if store.hasattr("get")? && store.hasattr("list_prefix")? {
            let storage = Arc::new(PyZarrStorage::new(store, location.clone())?);
            return Ok(Self::Built { storage, location });
        }
        Err(PyTypeError::new_err(format!(
            "store must be a URL string, an obstore store or a zarr-python v3 Store, got {}",
            store.get_type().name()?
        )))
    }

    /// The storage to read: a URL opened with `options`, a store object as it is (options
    /// refused: it carries its own), a join of them (the options go to each URL), a list
    /// concatenated along `concat` (the dimension, and the axis for arrays without names), its
    /// metadata read under `policy`.
    ///
    /// # Errors
    /// As `insitubatch_native::open_url_storage`, `refuse_storage_options`,
    /// `open_joined_storage` and `open_concat_storage`.
    pub fn storage(
        self,
        options: &[(String, String)],
        concat: (&str, usize),
        policy: &ReadPolicy,
    ) -> insitubatch_native::Result<Arc<dyn Storage>> {
        match self {
            Self::Url(url) => insitubatch_native::open_url_storage(&url, options),
            Self::Built { storage, location } => {
                insitubatch_native::refuse_storage_options(options, &location).map(|()| storage)
            }
            Self::Joined(parts) => {
                insitubatch_native::open_joined_storage(Self::join_parts(parts, concat, options, policy)?, options)
            }
            Self::Concat(parts) => {
                insitubatch_native::open_concat_storage(Self::concat_parts(parts)?, concat, options, policy)
            }
        }
    }

    /// A concatenation's stores as the native opener takes them.
    ///
    /// # Errors
    /// A configuration error for a store that is itself a join or a concatenation.
    pub fn concat_parts(parts: Vec<Self>) -> insitubatch_native::Result<Vec<JoinPart>> {
        parts
            .into_iter()
            .map(|part| match part {
                Self::Url(url) => Ok(JoinPart::Url(url)),
                Self::Built { storage, .. } => Ok(JoinPart::Built(storage)),
                Self::Joined(_) | Self::Concat(_) => Err(insitubatch_core::Error::Config(
                    "a concatenated store is itself a join or a list; concatenate stores, URLs or paths".into(),
                )
                .into()),
            })
            .collect()
    }

    /// A join's stores as the native opener takes them; a list among them is concatenated
    /// along `concat` first (`{"era5": [a, b], "static": c}`), its URLs opened with `options`.
    ///
    /// # Errors
    /// A configuration error for a store that is itself a join; as
    /// `insitubatch_native::open_concat_storage` for a list.
    pub fn join_parts(
        parts: Vec<(String, Self)>,
        concat: (&str, usize),
        options: &[(String, String)],
        policy: &ReadPolicy,
    ) -> insitubatch_native::Result<Vec<(String, JoinPart)>> {
        let mut out = Vec::with_capacity(parts.len());
        for (name, part) in parts {
            let part = match part {
                Self::Url(url) => JoinPart::Url(url),
                Self::Built { storage, .. } => JoinPart::Built(storage),
                Self::Concat(list) => JoinPart::Built(insitubatch_native::open_concat_storage(
                    Self::concat_parts(list)?,
                    concat,
                    options,
                    policy,
                )?),
                Self::Joined(_) => {
                    let why =
                        format!("the joined store {name:?} is itself a join; join stores, URLs or paths at one level");
                    return Err(insitubatch_core::Error::Config(why).into());
                }
            };
            out.push((name, part));
        }
        Ok(out)
    }
}

/// A kerchunk reference set opened as the engine's storage (`reference_store(url, ...)`): the
/// set read and parsed, its files' stores opened with the storage options it was given, read
/// in Rust like a URL (`insitubatch_native::refs`). A handle, so it goes wherever a store goes
/// (a join, a concatenation) carrying its own options.
#[pyclass(name = "ReferenceStore", module = "insitubatch_rs._native", frozen)]
pub struct ReferenceStore {
    storage: Arc<dyn Storage>,
    location: String,
}

#[pymethods]
impl ReferenceStore {
    /// Open the reference set at `url` (`reference+` in front or not) with `storage_options`.
    #[new]
    #[pyo3(signature = (url, storage_options = Vec::new()))]
    fn new(py: Python<'_>, url: &str, storage_options: Vec<(String, String)>) -> PyResult<Self> {
        let prefixed = match insitubatch_native::refs::reference_url(url) {
            Some(_) => url.to_string(),
            None => format!("{}{url}", insitubatch_native::refs::REFERENCE_PREFIX),
        };
        let storage = py
            .detach(|| insitubatch_native::open_storage(&prefixed, &storage_options))
            .map_err(crate::errors::native_err)?;
        Ok(Self { location: storage.location(), storage })
    }

    /// `reference+URL`: the set, as messages and the disk tier name it.
    #[getter]
    fn location(&self) -> String {
        self.location.clone()
    }

    fn __repr__(&self) -> String {
        format!("ReferenceStore({:?})", self.location)
    }

    fn __str__(&self) -> String {
        self.location.clone()
    }
}

/// An obstore store as an object_store store (rebuilt from its configuration, see above).
/// An Icechunk store that `icechunk_store` marked for the engine to read itself (its
/// `_insitubatch_native`: the repository's `icechunk+` URL at the session's snapshot, and
/// storage options), opened natively; `None` for any other object.
fn native_icechunk(store: &Bound<'_, PyAny>) -> PyResult<Option<StoreArg>> {
    let Ok(native) = store.getattr("_insitubatch_native") else { return Ok(None) };
    let (url, options): (String, Vec<(String, String)>) = native.extract()?;
    let storage =
        store.py().detach(|| insitubatch_native::open_storage(&url, &options)).map_err(crate::errors::native_err)?;
    Ok(Some(StoreArg::Built { location: storage.location(), storage }))
}

fn obstore_storage(store: &Bound<'_, PyAny>, location: &str) -> PyResult<Arc<dyn Storage>> {
    let class = store.get_type().name()?.to_str()?.to_string();
    let inner = store.extract::<AnyObjectStore>().map_err(|e| {
        PyTypeError::new_err(format!(
            "cannot read this obstore {class} directly ({e}); wrap it as zarr.storage.ObjectStore(store) to read it \
             through zarr: {location}"
        ))
    })?;
    // The store's own prefix is inside the rebuilt store, so keys are resolved at its root.
    let storage = ObjectStoreStorage::new(inner.into_dyn(), object_store::path::Path::default(), location);
    Ok(Arc::new(match class.as_str() {
        // A plain HTTP server cannot list (object_store's HTTP store lists with WebDAV).
        "HTTPStore" => storage.without_listing(),
        // Files on this machine, as a path string opens them: the read window starts narrow.
        "LocalStore" => storage.local(),
        _ => storage,
    }))
}

/// The asyncio side of [`PyZarrStorage`]: the event loop, and coroutines that reduce a
/// zarr `Buffer` to `bytes` and an async listing to a list.
const LOOP_HELPERS: &CStr = cr#"
import asyncio
import threading

try:
    from zarr.core.buffer import default_buffer_prototype
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
except ImportError as e:
    raise ImportError(
        "reading a zarr Store object needs zarr-python >= 3 (pip install 'zarr>=3'): " + str(e)
    ) from e

PROTOTYPE = default_buffer_prototype()
_OWN_LOOP = []


def event_loop():
    try:
        from zarr.core.sync import _get_loop
    except ImportError:  # a zarr without it: one loop of ours, for every store, for good
        if not _OWN_LOOP:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="insitubatch-zarr-io", daemon=True).start()
            _OWN_LOOP.append(loop)
        return _OWN_LOOP[0]
    return _get_loop()


async def get(store, key, start, end, suffix):
    if suffix is not None:
        byte_range = SuffixByteRequest(suffix)
    elif start is not None:
        byte_range = RangeByteRequest(start, end)
    else:
        byte_range = None
    buf = await store.get(key, PROTOTYPE, byte_range)
    return None if buf is None else buf.to_bytes()


async def list_keys(store, prefix):
    keys = store.list() if prefix == "" else store.list_prefix(prefix)
    return [k async for k in keys]


def submit(loop, coro, done):
    asyncio.run_coroutine_threadsafe(coro, loop).add_done_callback(done)
"#;

type Reply<T> = oneshot::Sender<Result<T, StorageError>>;

/// One read, as the submitter thread receives it, with where its answer goes.
enum Request {
    Get { key: String, range: Option<ByteRange>, reply: Reply<Option<Bytes>> },
    List { prefix: String, reply: Reply<Vec<String>> },
}

/// Core's [`Storage`] over a zarr-python v3 `Store` (see the module docs).
pub struct PyZarrStorage {
    requests: mpsc::Sender<Request>,
    location: String,
    can_list: bool,
    /// A zarr `LocalStore` or `MemoryStore` (or a subclass): answered from this machine.
    local: bool,
}

impl std::fmt::Debug for PyZarrStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyZarrStorage({})", self.location)
    }
}

/// The Python objects the submitter thread owns.
struct Served {
    store: Py<PyAny>,
    event_loop: Py<PyAny>,
    helpers: Py<PyModule>,
}

/// [`LOOP_HELPERS`] as a module, compiled once.
fn helpers(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static HELPERS: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    HELPERS
        .get_or_try_init(py, || {
            Ok(PyModule::from_code(py, LOOP_HELPERS, c"insitubatch_zarr_store.py", c"insitubatch_zarr_store")?.unbind())
        })
        .map(|m| m.bind(py))
}

impl PyZarrStorage {
    /// Start the submitter thread (it ends when this is dropped).
    pub fn new(store: &Bound<'_, PyAny>, location: String) -> PyResult<Self> {
        let py = store.py();
        let helpers = helpers(py)?;
        // `supports_listing` is a property of zarr's Store; a store without it is assumed to list.
        let can_list = match store.getattr("supports_listing") {
            Ok(v) => v.is_truthy()?,
            Err(_) => true,
        };
        // zarr's own local stores read from this machine: no slow tail to hedge (a hedge is a
        // second read of the same key), and a narrow read window (`reads_are_local`).
        let zarr_storage = py.import("zarr.storage")?;
        let local = store.is_instance(&zarr_storage.getattr("LocalStore")?)?
            || store.is_instance(&zarr_storage.getattr("MemoryStore")?)?;
        let event_loop = helpers.getattr("event_loop")?.call0()?.unbind();
        let served = Served { store: store.clone().unbind(), event_loop, helpers: helpers.clone().unbind() };
        let (requests, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("insitubatch-zarr-submit".into())
            .spawn(move || serve(served, &rx))
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread for the zarr store: {e}")))?;
        Ok(Self { requests, location, can_list, local })
    }

    /// Hand `request` (built around a fresh reply channel) to the submitter; await the answer.
    async fn call<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, StorageError> {
        let (reply, answer) = oneshot::channel();
        self.requests.send(request(reply)).map_err(|_| {
            StorageError::permanent("the zarr store's submitter thread has stopped (the interpreter is exiting)")
        })?;
        answer
            .await
            .map_err(|_| StorageError::permanent("the zarr store's event loop stopped before the read finished"))?
    }

    async fn get_opt(&self, key: &str, range: Option<ByteRange>) -> Result<Option<Bytes>, StorageError> {
        self.call(|reply| Request::Get { key: key.to_string(), range, reply }).await
    }
}

/// The submitter thread: wait for requests without the GIL, then schedule every request
/// waiting under one acquisition. Ends when the storage is dropped (or Python exits).
fn serve(served: Served, rx: &mpsc::Receiver<Request>) {
    while let Ok(first) = rx.recv() {
        let submitted = with_python(|py| {
            for request in std::iter::once(first).chain(rx.try_iter()) {
                submit(py, &served, request);
            }
        });
        if submitted.is_err() {
            return; // Python is exiting: the dropped replies read as "event loop stopped"
        }
    }
    let _ = with_python(|_py| drop(served)); // with the GIL held
}

/// Schedule one request's coroutine; a failure to schedule it is its answer.
fn submit(py: Python<'_>, served: &Served, request: Request) {
    let helpers = served.helpers.bind(py);
    let store = served.store.bind(py);
    match request {
        Request::Get { key, range, reply } => {
            let (start, end, suffix) = match range {
                None => (None, None, None),
                Some(ByteRange::Bounded { start, end }) => (Some(start), Some(end), None),
                Some(ByteRange::Suffix(n)) => (None, None, Some(n)),
            };
            let coro = helpers.getattr("get").and_then(|f| f.call1((store, key, start, end, suffix)));
            schedule(py, served, coro, reply, got_bytes);
        }
        Request::List { prefix, reply } => {
            let coro = helpers.getattr("list_keys").and_then(|f| f.call1((store, prefix)));
            schedule(py, served, coro, reply, |py, r| r.and_then(|v| v.extract()).map_err(|e| storage_error(py, &e)));
        }
    }
}

/// Run `coro` on the store's loop; its done-callback converts the result and replies.
fn schedule<T: Send + 'static>(
    py: Python<'_>,
    served: &Served,
    coro: PyResult<Bound<'_, PyAny>>,
    reply: Reply<T>,
    convert: fn(Python<'_>, PyResult<Bound<'_, PyAny>>) -> Result<T, StorageError>,
) {
    let slot = Arc::new(Mutex::new(Some(reply)));
    let theirs = Arc::clone(&slot);
    let scheduled = coro.and_then(|coro| {
        let done = PyCFunction::new_closure(py, None, None, move |args: &Bound<'_, PyTuple>, _| {
            let result = args.get_item(0).and_then(|fut| fut.call_method0("result"));
            send(&theirs, convert(args.py(), result));
        })?;
        helpers(py)?.getattr("submit")?.call1((served.event_loop.bind(py), coro, done)).map(drop)
    });
    if let Err(e) = scheduled {
        send(&slot, Err(storage_error(py, &e)));
    }
}

fn send<T>(slot: &Mutex<Option<Reply<T>>>, answer: Result<T, StorageError>) {
    if let Some(tx) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
        let _ = tx.send(answer); // the reader gave up (a timeout): nothing to deliver
    }
}

/// A finished `get`'s result. A missing key is `None`, also when the store says so with
/// `FileNotFoundError` or `KeyError` rather than zarr's `None`.
fn got_bytes(py: Python<'_>, result: PyResult<Bound<'_, PyAny>>) -> Result<Option<Bytes>, StorageError> {
    match result {
        Ok(v) if v.is_none() => Ok(None),
        Ok(v) => match v.cast::<PyBytes>() {
            Ok(b) => Ok(Some(Bytes::copy_from_slice(b.as_bytes()))),
            Err(_) => Err(StorageError::permanent("the zarr store's Buffer.to_bytes() did not return bytes")),
        },
        Err(e) if e.is_instance_of::<PyFileNotFoundError>(py) || e.is_instance_of::<PyKeyError>(py) => Ok(None),
        Err(e) => Err(storage_error(py, &e)),
    }
}

/// Retry what may go away (connection failures and timeouts); the rest is permanent.
fn storage_error(py: Python<'_>, e: &PyErr) -> StorageError {
    let message = format!("the zarr store raised {e}");
    if e.is_instance_of::<PyConnectionError>(py) || e.is_instance_of::<PyTimeoutError>(py) {
        StorageError::transient(message)
    } else {
        StorageError::permanent(message)
    }
}

impl Storage for PyZarrStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.get_opt(key, None))
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            match range {
                // zarr's stores clip a range past the end (and take start > end): core decides.
                ByteRange::Bounded { start, end } => {
                    let size = || async { Ok(self.get_opt(key, None).await?.map(|b| b.len() as u64)) };
                    exact_bounded(start, end, || self.get_opt(key, Some(range)), size).await
                }
                // fsspec reads `[-0:]`, the whole object.
                ByteRange::Suffix(0) => Ok(self.get_opt(key, None).await?.map(|_| Bytes::new())),
                // zarr's LocalStore cannot seek before the start of the object, and its
                // MemoryStore slices a suffix longer than the object wrongly (a shorter
                // suffix of it): a suffix shorter than asked is re-read whole.
                ByteRange::Suffix(n) => {
                    let suffix = async {
                        match self.get_opt(key, Some(range)).await? {
                            Some(b) if (b.len() as u64) < n => Err(StorageError::permanent("a short suffix")),
                            got => Ok(got),
                        }
                    };
                    suffix_or_whole(n, suffix, || self.get_opt(key, None)).await
                }
            }
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async move {
            if !self.can_list {
                return Ok(None);
            }
            // zarr's prefixes are plain string prefixes; core's are whole path segments.
            let prefix = match prefix.trim_matches('/') {
                "" => String::new(),
                p => format!("{p}/"),
            };
            let mut keys = self.call(|reply| Request::List { prefix, reply }).await?;
            keys.sort();
            Ok(Some(keys))
        })
    }

    fn reads_are_local(&self) -> bool {
        self.local
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}

/// The cases that passed, and `(case, message)` for each that failed.
type ConformanceOutcome = (Vec<String>, Vec<(String, String)>);

/// Core's storage conformance suite ([`insitubatch_core::conformance`]) on the store the
/// Python package would read `store` through (the zarr-Store adapter for a zarr `Store`),
/// which must hold [`_storage_conformance_fixture`] at its root. Returns the cases that
/// passed and `(case, message)` for each that failed. A test hook (tests/test_stores.py).
#[pyfunction]
#[pyo3(signature = (store, can_list = true))]
pub fn _storage_conformance(py: Python<'_>, store: &Bound<'_, PyAny>, can_list: bool) -> PyResult<ConformanceOutcome> {
    use insitubatch_core::conformance::{Expectations, check_storage};
    let StoreArg::Built { storage, .. } = StoreArg::from_py(store)? else {
        return Err(PyTypeError::new_err("give a store object, not a URL"));
    };
    let expect = if can_list { Expectations::listable() } else { Expectations::unlistable() };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a runtime for the suite: {e}")))?;
    // Without the GIL: the adapter's submitter thread takes it to schedule every read.
    let report = py.detach(|| rt.block_on(check_storage(&*storage, &expect)));
    Ok((report.passed, report.failures.into_iter().map(|f| (f.case, f.message)).collect()))
}

/// The suite's fixture objects, `[(key, bytes)]`, to put into a store before
/// [`_storage_conformance`].
#[pyfunction]
pub fn _storage_conformance_fixture(py: Python<'_>) -> Vec<(String, Bound<'_, PyBytes>)> {
    insitubatch_core::conformance::fixture().into_iter().map(|(k, b)| (k.to_string(), PyBytes::new(py, &b))).collect()
}
