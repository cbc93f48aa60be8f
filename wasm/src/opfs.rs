//! The browser's disk tier (`cacheDir`): decoded chunks in the origin private file system
//! (OPFS), kept across passes and page loads, under the native tier's contract
//! (`native/src/cache/`): `persist`, `readonlyCache`, stale pipelines per array (refused, or
//! reset with `resetStaleCache`), one writer with readers excluded, and chunk files that a
//! killed tab never leaves reading as valid.
//!
//! Why asynchronous: OPFS's synchronous access handles exist only in dedicated workers and
//! are opened asynchronously, while the engine also runs on a page's main thread (`open()`,
//! the dashboard's and the notebook widget's explorer) and, in the threaded build, makes its
//! blocking tier calls on pool threads (other workers, which cannot use the engine thread's
//! JS handles). So this tier answers core's `ChunkTier::revive_async`/`store_async`, which
//! the engine awaits on its executor where it would have awaited the blocking call's pool job
//! (core/src/engine.rs `revive`, `spill`): one code path for pages, workers and both builds.
//!
//! - **Files.** One file per chunk, `{safe path}__{path hash}__{fingerprint}__{chunk}.ibchunk`:
//!   a header line (what it holds: the pipeline fingerprint, chunk, dtype and shape, padded to
//!   128 bytes), the chunk's bytes, then a commit record (`IBCOMMIT` and the CRC-32C of header
//!   and data). It is written with `createWritable()`, whose data the browser keeps in a swap
//!   file until `close()` commits it at once; a revive checks the size, the header byte for
//!   byte, the commit record and the checksum, and any difference is a miss (the chunk is read
//!   from the store and written again). So a write cut anywhere (a killed tab, a full disk)
//!   never reads back as a chunk.
//! - **Locks.** Web Locks (`navigator.locks`), held for the tier's lifetime: exclusive for a
//!   writer, shared for `readonlyCache`. The browser releases them when the page or worker
//!   goes. A lock held by this instance's earlier life (it trapped: its Rust side is gone) is
//!   let go first (`LockGuard`).
//! - **Staleness.** The directory's listing at open says which fingerprints each array path
//!   has files of; a path this run reads with files of another fingerprint is stale.
//! - **Quota.** A write refused for space (`QuotaExceededError`) stops the writes of this
//!   tier, said by `describe()` and `warnings()` (the dataset's notes) and once on the
//!   console; chunks already cached stay valid and the rest is read from the store, as
//!   without a cache. Never wrong data: a refused write commits nothing.

use std::collections::BTreeSet;

use insitubatch_core::{CacheFlags, CommitRecord, DType, Error, TargetAbilities};
use sha2::{Digest, Sha256};

/// `cacheDir` and its flags as this tier opens them: core's [`CacheFlags`] (their rules
/// checked there, with this target's abilities: persisted or read-only, one writer) and the
/// directory's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpfsDir {
    /// The directory's names under the origin's OPFS root (`"a/b"` → `["a", "b"]`).
    pub dir: Vec<String>,
    /// Read a complete cache; write nothing; a miss is an error. Takes the lock shared.
    pub readonly: bool,
    /// Delete the cached chunks of arrays whose pipeline changed instead of refusing.
    pub reset_stale: bool,
}

impl OpfsDir {
    /// The directory `flags` name, in this origin's private file system.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for what this tier cannot do (`TargetAbilities::WASM`) or a
    /// directory name OPFS refuses.
    pub fn from_flags(flags: &CacheFlags) -> Result<Self, Error> {
        flags.check_for(&TargetAbilities::WASM)?;
        Ok(Self { dir: dir_segments(&flags.dir)?, readonly: flags.readonly, reset_stale: flags.reset_stale })
    }

    /// `a/b`: the directory as the caller names it.
    pub fn dir_name(&self) -> String {
        self.dir.join("/")
    }

    /// `opfs:a/b`: the cache in errors and reports (last in a message).
    pub fn key(&self) -> String {
        format!("opfs:{}", self.dir_name())
    }
}

/// `cacheDir`'s names: non-empty, none `.` or `..` (OPFS's own rule), separated by `/`.
fn dir_segments(dir: &str) -> Result<Vec<String>, Error> {
    let segments: Vec<String> = dir.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
    if segments.is_empty() || segments.iter().any(|s| s == "." || s == ".." || s.contains(['\\', '\0'])) {
        return Err(Error::option(
            "cache_dir",
            format!(
                "`cache_dir` names a directory in this origin's private file system: names separated by '/', none of \
                 them '.' or '..' and no '\\', e.g. \"insitubatch/era5\"; got {dir:?}"
            ),
        ));
    }
    Ok(segments)
}

/// What every chunk file name ends with.
const SUFFIX: &str = ".ibchunk";
/// The header line's length: a multiple of this.
const HEADER_ALIGN: usize = 128;
/// The commit record's length: core's [`CommitRecord`] over header and data, as the native tier's.
pub const TRAILER_LEN: usize = CommitRecord::LEN;

/// The first 16 hex digits of SHA-256 of an array's path. File names carry it so that the
/// directory's listing says which array a file belongs to (the readable part is lossy).
pub fn path_hash(path: &str) -> String {
    Sha256::digest(path.as_bytes())[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `t2m/level` → `t2m_level`, at most 40 characters: for people reading the directory; the
/// path hash is what identifies the array.
fn safe_name(path: &str) -> String {
    let s: String = path.chars().take(40).map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if s.is_empty() { "root".into() } else { s }
}

/// The file of chunk `chunk` of the array at `path` under the pipeline `fingerprint`.
pub fn chunk_file_name(path: &str, fingerprint: &str, chunk: u64) -> String {
    format!("{}__{}__{fingerprint}__{chunk}{SUFFIX}", safe_name(path), path_hash(path))
}

/// What a chunk file's name says: its array's path hash, its pipeline and its chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileKey {
    /// [`path_hash`] of the array's path.
    pub path_hash: String,
    /// The array's fingerprint when it was written.
    pub fingerprint: String,
    /// The chunk index.
    pub chunk: u64,
}

/// The key of a chunk file's name; `None` for any other name (the browser's swap files, a
/// user's own files), which the tier never reads.
pub fn parse_chunk_file_name(name: &str) -> Option<FileKey> {
    let stem = name.strip_suffix(SUFFIX)?;
    let mut parts = stem.rsplitn(4, "__");
    let chunk = parts.next()?.parse().ok()?;
    let fingerprint = parts.next()?;
    let path_hash = parts.next()?;
    parts.next()?;
    let hex = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    (hex(fingerprint) && hex(path_hash)).then(|| FileKey {
        path_hash: path_hash.to_string(),
        fingerprint: fingerprint.to_string(),
        chunk,
    })
}

/// The header line of a chunk file: the pipeline, chunk, dtype and shape as JSON, padded
/// with spaces to a multiple of 128 bytes, ending in a newline. A revive compares it byte for
/// byte with the one it would write.
pub fn header(fingerprint: &str, chunk: u64, dtype: DType, shape: &[usize]) -> Vec<u8> {
    let json = format!(
        "{{\"insitubatch\":\"opfs-chunk-v1\",\"pipeline\":\"{fingerprint}\",\"chunk\":{chunk},\"dtype\":\"{}\",\
         \"shape\":{shape:?}}}",
        dtype.name()
    );
    let len = (json.len() + 1).div_ceil(HEADER_ALIGN) * HEADER_ALIGN;
    let mut out = json.into_bytes();
    out.resize(len - 1, b' ');
    out.push(b'\n');
    out
}

/// The commit record written after `header` and `data` (core's [`CommitRecord`]: the
/// header names the pipeline and the chunk, so no other part is needed).
pub fn trailer(header: &[u8], data: &[u8]) -> [u8; TRAILER_LEN] {
    *CommitRecord::over(&[header, data]).as_bytes()
}

/// Whether a file read back as `head`, `data` and `tail` is the chunk whose header is
/// `want`: `Err` says what is wrong with it.
///
/// # Errors
/// A header of another pipeline, shape or dtype; no commit record; a checksum that differs.
pub fn verify(head: &[u8], want: &[u8], data: &[u8], tail: &[u8]) -> Result<(), &'static str> {
    if head != want {
        return Err("holds another pipeline, shape or dtype");
    }
    CommitRecord::check(&[head, data], tail)
}

/// The fingerprints other than `fingerprint` that files of the array at `path` were written
/// under: its stale pipelines, in `keys` (the directory's chunk files).
pub fn stale_fingerprints<'a>(
    keys: impl IntoIterator<Item = &'a (String, String)>,
    path: &str,
    fingerprint: &str,
) -> BTreeSet<String> {
    let ph = path_hash(path);
    keys.into_iter().filter(|(p, f)| *p == ph && f != fingerprint).map(|(_, f)| f.clone()).collect()
}

#[cfg(target_arch = "wasm32")]
pub(crate) use js::opener;

#[cfg(target_arch = "wasm32")]
mod js {
    use std::cell::{Cell, RefCell};
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    use std::rc::Rc;
    use std::sync::Arc;

    use bytes::Bytes;
    use futures::FutureExt;
    use futures::future::{Either, Shared, select};
    use insitubatch_core::runtime::{BoxFuture, ThreadPool, run_on};
    use insitubatch_core::{ArrayIdentity, ChunkTier, DType, Error, TierCounters, TierOpener};
    use js_sys::{Object, Promise, Reflect, Uint8Array};
    use wasm_bindgen::prelude::*;
    use wasm_bindgen_futures::JsFuture;
    use web_sys::{
        FileSystemDirectoryHandle, FileSystemFileHandle, FileSystemGetDirectoryOptions, FileSystemGetFileOptions,
        FileSystemWritableFileStream,
    };

    use super::{
        OpfsDir, TRAILER_LEN, chunk_file_name, header, parse_chunk_file_name, path_hash, stale_fingerprints, trailer,
        verify,
    };
    use crate::storage::js_message;

    #[wasm_bindgen]
    extern "C" {
        /// `navigator.locks` (Web Locks).
        type LockManager;
        #[wasm_bindgen(method, catch)]
        fn request(this: &LockManager, name: &str, options: &Object, callback: &JsValue) -> Result<Promise, JsValue>;
    }

    /// How long an opener waits for a lock another context holds before refusing: a reload's
    /// old page or a terminated worker lets its locks go a moment after the new one asks.
    const LOCK_WAIT_MS: u32 = 3_000;

    /// The tier's directory as `open()` and the explorer open it, before the dataset is built
    /// (locked, listed), for [`TierOpener::open`], which the builder calls synchronously.
    /// `pool`: where a revived file's checksum is verified (the engine's, for CPU work).
    ///
    /// # Errors
    /// [`Error::Cache`] when this runtime has no OPFS or Web Locks, the directory cannot be
    /// opened (or, read-only, does not exist), or another context holds its lock.
    pub(crate) async fn opener(flags: OpfsDir, pool: Arc<dyn ThreadPool>) -> Result<Arc<dyn TierOpener>, Error> {
        let key = flags.key();
        let fail = |message: String| Error::Cache { message, key: key.clone() };
        let root = opfs_root().await.map_err(fail)?;
        let handle = open_dir(root, &flags).await?;
        let lock = LockGuard::acquire(&flags).await?;
        let names = list(&handle).await.map_err(|e| fail(format!("cannot list the cache directory ({e})")))?;
        let mut index: HashMap<(String, String), BTreeSet<u64>> = HashMap::new();
        for name in &names {
            if let Some(k) = parse_chunk_file_name(name) {
                index.entry((k.path_hash, k.fingerprint)).or_default().insert(k.chunk);
            } else if name.ends_with(".crswap") && !flags.readonly {
                // A write the browser never committed (its tab was killed): under the
                // exclusive lock no writer of this directory is alive to own it.
                let _ = JsFuture::from(handle.remove_entry(name)).await;
            }
        }
        let dir = Dir {
            flags,
            handle,
            pool,
            index: RefCell::new(index),
            stopped: RefCell::new(None),
            bad_file: RefCell::new(None),
            resetting: RefCell::new(None),
            _lock: lock,
        };
        Ok(shared(OpfsOpener(Rc::new(dir))))
    }

    /// The `Arc` core holds a tier opener in; on wasm32 it need not be `Send + Sync`.
    #[allow(
        clippy::arc_with_non_send_sync,
        reason = "on wasm32 a tier need not be Send + Sync (core's MaybeSend/MaybeSync are empty there)"
    )]
    fn shared<T: TierOpener + 'static>(t: T) -> Arc<dyn TierOpener> {
        Arc::new(t)
    }

    /// The name of a thrown DOMException (`NotFoundError`, `QuotaExceededError`, ...).
    fn js_name(e: &JsValue) -> String {
        Reflect::get(e, &JsValue::from_str("name")).ok().and_then(|n| n.as_string()).unwrap_or_default()
    }

    /// `name: message` of a thrown value, for messages.
    fn js_text(e: &JsValue) -> String {
        match js_name(e) {
            n if n.is_empty() => js_message(e),
            n => format!("{n}: {}", js_message(e)),
        }
    }

    fn get(o: &JsValue, k: &str) -> JsValue {
        Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED)
    }

    /// `navigator.storage.getDirectory()`: the origin's private file system.
    async fn opfs_root() -> Result<FileSystemDirectoryHandle, String> {
        const NONE: &str = "cacheDir needs the browser's origin private file system (navigator.storage.getDirectory), \
                            which this runtime does not have: Node has none, and a page must be a secure context \
                            (https:// or localhost). Drop cacheDir here";
        let storage = get(&get(&js_sys::global(), "navigator"), "storage");
        let Ok(get_directory) = get(&storage, "getDirectory").dyn_into::<js_sys::Function>() else {
            return Err(NONE.into());
        };
        let promise = get_directory.call0(&storage).map_err(|e| format!("{NONE} ({})", js_text(&e)))?;
        let root = JsFuture::from(Promise::from(promise))
            .await
            .map_err(|e| format!("the origin private file system cannot be opened ({})", js_text(&e)))?;
        Ok(root.unchecked_into())
    }

    /// The cache directory under `root`, made by a writer; a read-only opener needs it to exist.
    async fn open_dir(root: FileSystemDirectoryHandle, flags: &OpfsDir) -> Result<FileSystemDirectoryHandle, Error> {
        let options = FileSystemGetDirectoryOptions::new();
        options.set_create(!flags.readonly);
        let mut dir = root;
        for name in &flags.dir {
            dir = match JsFuture::from(dir.get_directory_handle_with_options(name, &options)).await {
                Ok(d) => d.unchecked_into(),
                Err(e) if flags.readonly && js_name(&e) == "NotFoundError" => {
                    return Err(Error::option(
                        "readonly_cache",
                        format!(
                            "`readonly_cache` requires an existing `cache_dir`, and this one does not exist in this \
                             origin's private file system; warm it first with `persist`: {}",
                            flags.key()
                        ),
                    ));
                }
                Err(e) => {
                    return Err(Error::Cache {
                        message: format!("cannot open the cache directory ({})", js_text(&e)),
                        key: flags.key(),
                    });
                }
            };
        }
        Ok(dir)
    }

    /// Every name in `dir`.
    async fn list(dir: &FileSystemDirectoryHandle) -> Result<Vec<String>, String> {
        let keys = get(dir, "keys").dyn_into::<js_sys::Function>().map_err(|_| "no keys() on the directory")?;
        let iter = keys.call0(dir).map_err(|e| js_text(&e))?;
        let next = get(&iter, "next").dyn_into::<js_sys::Function>().map_err(|_| "no next() on its iterator")?;
        let mut names = Vec::new();
        loop {
            let step = next.call0(&iter).map_err(|e| js_text(&e))?;
            let step = JsFuture::from(Promise::from(step)).await.map_err(|e| js_text(&e))?;
            if get(&step, "done").is_truthy() {
                return Ok(names);
            }
            names.extend(get(&step, "value").as_string());
        }
    }

    /// A Web Lock on the cache directory, held until dropped.
    struct LockGuard {
        name: String,
        release: js_sys::Function,
    }

    /// This context's held cache locks, `name → { release, memory }` (a JS `Map` on the global
    /// object): a lock whose `memory` is not this instance's belongs to an instance that
    /// trapped, whose Rust side (and `Drop`) is gone, so the next opener lets it go.
    fn registry() -> js_sys::Map {
        let key = js_sys::Symbol::for_("insitubatch.cacheLocks");
        let global = js_sys::global();
        match Reflect::get(&global, &key).ok().and_then(|m| m.dyn_into::<js_sys::Map>().ok()) {
            Some(m) => m,
            None => {
                let m = js_sys::Map::new();
                let _ = Reflect::set(&global, &key, &m);
                m
            }
        }
    }

    impl LockGuard {
        async fn acquire(flags: &OpfsDir) -> Result<Self, Error> {
            let key = flags.key();
            let name = format!("insitubatch-cache:{}", flags.dir_name());
            let fail = |message: String| Error::Cache { message, key: key.clone() };
            let locks = get(&get(&js_sys::global(), "navigator"), "locks");
            if locks.is_undefined() || locks.is_null() {
                return Err(fail(
                    "cacheDir needs the Web Locks API (navigator.locks) to keep one writer per directory, which this \
                     runtime does not have"
                        .into(),
                ));
            }
            let locks: LockManager = locks.unchecked_into();
            let held = registry().get(&JsValue::from_str(&name));
            if !held.is_undefined() {
                if get(&held, "memory") == wasm_bindgen::memory() {
                    return Err(fail(
                        "cacheDir is already open in this page or worker: another dataset or explorer holds it (one \
                         writer, or readers only, per directory). close() that one first, or pick another cacheDir"
                            .into(),
                    ));
                }
                if let Ok(release) = get(&held, "release").dyn_into::<js_sys::Function>() {
                    let _ = release.call0(&JsValue::UNDEFINED);
                }
                registry().delete(&JsValue::from_str(&name));
            }
            let options = Object::new();
            let mode = if flags.readonly { "shared" } else { "exclusive" };
            let _ = Reflect::set(&options, &"mode".into(), &mode.into());
            let _ = Reflect::set(&options, &"signal".into(), &web_sys::AbortSignal::timeout_with_u32(LOCK_WAIT_MS));
            let mut resolve = None;
            let hold = Promise::new(&mut |res, _| resolve = Some(res));
            let release = resolve.ok_or_else(|| Error::Internal("a Promise did not run its executor".into()))?;
            let (granted_tx, granted) = futures::channel::oneshot::channel::<()>();
            let granted_tx = RefCell::new(Some(granted_tx));
            // Called once the lock is granted; the lock is held until `hold` settles.
            let callback = Closure::once_into_js(move |_lock: JsValue| -> JsValue {
                if let Some(tx) = granted_tx.borrow_mut().take() {
                    let _ = tx.send(());
                }
                hold.into()
            });
            let request = locks
                .request(&name, &options, &callback)
                .map_err(|e| fail(format!("cannot ask for the cache directory's lock ({})", js_text(&e))))?;
            match select(granted, JsFuture::from(request)).await {
                Either::Left((Ok(()), _)) => {}
                Either::Right((Err(e), _)) if matches!(js_name(&e).as_str(), "AbortError" | "TimeoutError") => {
                    let (holder, other) = if flags.readonly {
                        ("a writer", "until it closes")
                    } else {
                        ("another writer or readers", "until they close")
                    };
                    return Err(fail(format!(
                        "cacheDir is in use: {holder} in another tab, worker or instance of this origin held it for {} s \
                         (one writer, or readers only, per directory; a writer excludes readers). close() the \
                         dataset or explorer that has it, or close its tab, or wait {other}; or pick another cacheDir",
                        LOCK_WAIT_MS / 1000
                    )));
                }
                Either::Right((Err(e), _)) => {
                    return Err(fail(format!("the cache directory's lock was refused ({})", js_text(&e))));
                }
                _ => return Err(fail("the cache directory's lock was neither granted nor refused".into())),
            }
            let entry = Object::new();
            let _ = Reflect::set(&entry, &"release".into(), &release);
            let _ = Reflect::set(&entry, &"memory".into(), &wasm_bindgen::memory());
            registry().set(&JsValue::from_str(&name), &entry);
            Ok(Self { name, release })
        }
    }

    impl Drop for LockGuard {
        fn drop(&mut self) {
            let registry = registry();
            let mine = get(&registry.get(&JsValue::from_str(&self.name)), "release");
            if mine == JsValue::from(self.release.clone()) {
                registry.delete(&JsValue::from_str(&self.name));
            }
            let _ = self.release.call0(&JsValue::UNDEFINED);
        }
    }

    /// An open cache directory, shared by every dataset its opener builds (the explorer's).
    struct Dir {
        flags: OpfsDir,
        handle: FileSystemDirectoryHandle,
        /// The engine's thread pool: a revived file's checksum is CPU work.
        pool: Arc<dyn ThreadPool>,
        /// `(path hash, fingerprint)` → the chunks with a file: the listing at open, plus what
        /// this opener wrote, minus what it found invalid or reset.
        index: RefCell<HashMap<(String, String), BTreeSet<u64>>>,
        /// Why writes stopped (a full quota), once they did.
        stopped: RefCell<Option<String>>,
        /// The first chunk file that did not verify, for `warnings()`.
        bad_file: RefCell<Option<String>>,
        /// `resetStaleCache`'s deletion of stale files, while it runs: reads and writes await it.
        resetting: RefCell<Option<Shared<futures::future::LocalBoxFuture<'static, ()>>>>,
        /// Held for its `Drop`. Declared last: fields drop in order, so the lock goes after
        /// everything else.
        _lock: LockGuard,
    }

    /// A [`TierOpener`] over one locked directory.
    #[derive(Clone)]
    struct OpfsOpener(Rc<Dir>);

    impl std::fmt::Debug for OpfsOpener {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "OpfsOpener({})", self.0.flags.key())
        }
    }

    /// One array of a tier: its path, path hash and fingerprint.
    #[derive(Debug)]
    struct Array {
        path: String,
        path_hash: String,
        fingerprint: String,
    }

    impl TierOpener for OpfsOpener {
        fn open(&self, arrays: &[ArrayIdentity]) -> Result<Arc<dyn ChunkTier>, Error> {
            let dir = &self.0;
            let stale: BTreeMap<&str, BTreeSet<String>> = {
                let index = dir.index.borrow();
                arrays
                    .iter()
                    .map(|a| (a.path.as_str(), stale_fingerprints(index.keys(), &a.path, &a.fingerprint)))
                    .filter(|(_, s)| !s.is_empty())
                    .collect()
            };
            if !stale.is_empty() {
                let names: Vec<&str> = stale.keys().copied().collect();
                if dir.flags.readonly || !dir.flags.reset_stale {
                    return Err(Error::Cache {
                        message: format!(
                            "the cached chunks of {names:?} are stale: the pipeline over them (chunk transforms, \
                             codecs, geometry or store) changed since they were written. {}",
                            if dir.flags.readonly {
                                "A read-only opener cannot reset them; re-warm with a writer passing resetStaleCache: \
                                 true"
                            } else {
                                "Pass resetStaleCache: true to delete only these arrays' cached chunks (the other \
                                 arrays keep theirs)"
                            }
                        ),
                        key: dir.flags.key(),
                    });
                }
                // Their files have other names than this pipeline's, so deleting them in the
                // background races nothing; the task holds the directory (and its lock).
                let mut doomed = Vec::new();
                let mut index = dir.index.borrow_mut();
                for (path, fingerprints) in &stale {
                    for f in fingerprints {
                        let chunks = index.remove(&(path_hash(path), f.clone())).unwrap_or_default();
                        doomed.extend(chunks.into_iter().map(|c| chunk_file_name(path, f, c)));
                    }
                }
                web_sys::console::warn_1(
                    &format!(
                        "insitubatch: resetStaleCache: deleting the stale cached chunks of {names:?} ({})",
                        dir.flags.key()
                    )
                    .into(),
                );
                // Driven at once, and awaited by this tier's first read or write, so a pass
                // that has yielded a batch has deleted them (a worker terminated before that
                // may leave some: they are stale again at the next open, never read).
                let owner = Rc::clone(dir);
                let deleting: futures::future::LocalBoxFuture<'static, ()> = Box::pin(async move {
                    for name in doomed {
                        let _ = JsFuture::from(owner.handle.remove_entry(&name)).await;
                    }
                });
                let deleting = deleting.shared();
                wasm_bindgen_futures::spawn_local(deleting.clone());
                *dir.resetting.borrow_mut() = Some(deleting);
            }
            let arrays = arrays
                .iter()
                .map(|a| Array {
                    path: a.path.clone(),
                    path_hash: path_hash(&a.path),
                    fingerprint: a.fingerprint.clone(),
                })
                .collect();
            let tier = OpfsTier {
                dir: Rc::clone(dir),
                arrays,
                revived: Cell::new(0),
                stored: Cell::new(0),
                misses: Cell::new(0),
            };
            #[allow(
                clippy::arc_with_non_send_sync,
                reason = "on wasm32 a tier need not be Send + Sync (core's MaybeSend/MaybeSync are empty there)"
            )]
            Ok(Arc::new(tier))
        }
    }

    /// One dataset's view of the directory: its arrays (as the engine indexes them) and counters.
    struct OpfsTier {
        dir: Rc<Dir>,
        arrays: Vec<Array>,
        revived: Cell<u64>,
        stored: Cell<u64>,
        misses: Cell<u64>,
    }

    impl std::fmt::Debug for OpfsTier {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "OpfsTier({}, {:?})", self.dir.flags.key(), self.arrays)
        }
    }

    /// A test hook, read before each write: `globalThis.__insitubatchTierStopAfter = n` makes
    /// the next write stop after its first `n` bytes and never finish (as a tab killed
    /// mid-write), calling `globalThis.__insitubatchTierStopped(fileName)` once stopped.
    fn stop_after() -> Option<u32> {
        get(&js_sys::global(), "__insitubatchTierStopAfter").as_f64().map(|n| n.max(0.0) as u32)
    }

    /// A chunk file as read: its header, data and commit record, not yet verified.
    struct Read {
        head: Vec<u8>,
        data: Vec<u8>,
        tail: Vec<u8>,
    }

    impl Dir {
        /// The chunk file `name`, if its size is that of a chunk headed by `want` with `nbytes`
        /// of data: `Ok(None)` when there is no such file, `Err` saying what is wrong with
        /// one. The copies out of the browser's buffer are the engine thread's (JS objects
        /// live there); the checksum is not (`OpfsTier::revive_now`).
        async fn read(&self, name: &str, want: &[u8], nbytes: usize) -> Result<Option<Read>, String> {
            let file = match JsFuture::from(self.handle.get_file_handle(name)).await {
                Ok(h) => h.unchecked_into::<FileSystemFileHandle>(),
                Err(e) if js_name(&e) == "NotFoundError" => return Ok(None),
                Err(e) => return Err(format!("cannot be opened ({})", js_text(&e))),
            };
            let file: web_sys::File = JsFuture::from(file.get_file())
                .await
                .map_err(|e| format!("cannot be read ({})", js_text(&e)))?
                .unchecked_into();
            let (hl, total) = (want.len(), want.len() + nbytes + TRAILER_LEN);
            if file.size() != total as f64 {
                return Err(format!("has {} bytes where the chunk needs {total} (an interrupted write)", file.size()));
            }
            let buf =
                JsFuture::from(file.array_buffer()).await.map_err(|e| format!("cannot be read ({})", js_text(&e)))?;
            let all = Uint8Array::new(&buf);
            if all.length() as usize != total {
                return Err("changed size while it was read".into());
            }
            let part = |from: usize, to: usize| {
                let mut v = vec![0u8; to - from];
                all.subarray(from as u32, to as u32).copy_to(&mut v);
                v
            };
            Ok(Some(Read { head: part(0, hl), data: part(hl, hl + nbytes), tail: part(hl + nbytes, total) }))
        }

        /// Write `bytes` as the file `name`: `createWritable()` keeps them in a swap file until
        /// `close()` commits them at once, so a write cut short leaves no partial chunk file.
        async fn write(&self, name: &str, bytes: &Uint8Array) -> Result<(), JsValue> {
            let options = FileSystemGetFileOptions::new();
            options.set_create(true);
            let file: FileSystemFileHandle =
                JsFuture::from(self.handle.get_file_handle_with_options(name, &options)).await?.unchecked_into();
            let w: FileSystemWritableFileStream = JsFuture::from(file.create_writable()).await?.unchecked_into();
            if let Some(n) = stop_after() {
                let part = bytes.subarray(0, n.min(bytes.length()));
                JsFuture::from(w.write_with_js_u8_array(&part)?).await?;
                if let Ok(f) = get(&js_sys::global(), "__insitubatchTierStopped").dyn_into::<js_sys::Function>() {
                    let _ = f.call1(&JsValue::UNDEFINED, &JsValue::from_str(name));
                }
                std::future::pending::<()>().await;
            }
            let written = match w.write_with_js_u8_array(bytes) {
                Ok(p) => JsFuture::from(p).await.map(|_| ()),
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                let _ = JsFuture::from(w.abort()).await;
                return Err(e);
            }
            JsFuture::from(w.close()).await.map(|_| ())
        }

        /// Stop writing for the rest of this directory's life, saying why (once, on the console too).
        fn stop(&self, why: String) {
            if self.stopped.borrow().is_none() {
                web_sys::console::warn_1(&format!("insitubatch: {why}: {}", self.flags.key()).into());
                *self.stopped.borrow_mut() = Some(why);
            }
        }
    }

    impl OpfsTier {
        fn array(&self, array: u32) -> Result<&Array, Error> {
            self.arrays
                .get(array as usize)
                .ok_or_else(|| Error::Internal(format!("the disk tier has no array {array}")))
        }

        fn forget(&self, a: &Array, chunk: u64) {
            let key = (a.path_hash.clone(), a.fingerprint.clone());
            if let Some(chunks) = self.dir.index.borrow_mut().get_mut(&key) {
                chunks.remove(&chunk);
            }
        }

        fn miss(&self, a: &Array, chunk: u64, why: &str) -> Result<Option<Bytes>, Error> {
            self.misses.set(self.misses.get() + 1);
            if self.dir.flags.readonly {
                return Err(Error::Cache {
                    message: format!(
                        "readonlyCache: true but chunk {chunk} of array {:?} {why}. A read-only cache must be \
                         complete for what the run reads; the usual cause is a different split, sampleRange or \
                         variables than the run that warmed it. Warm it with a writer (persist: true) over this \
                         configuration first",
                        a.path
                    ),
                    key: self.dir.flags.key(),
                });
            }
            Ok(None)
        }

        /// Wait for `resetStaleCache`'s deletion, if one runs.
        async fn reset_done(&self) {
            let deleting = self.dir.resetting.borrow().clone();
            if let Some(d) = deleting {
                d.await;
            }
        }

        async fn revive_now(
            &self,
            array: u32,
            chunk: u64,
            dtype: DType,
            shape: &[usize],
        ) -> Result<Option<Bytes>, Error> {
            self.reset_done().await;
            let a = self.array(array)?;
            let key = (a.path_hash.clone(), a.fingerprint.clone());
            if !self.dir.index.borrow().get(&key).is_some_and(|c| c.contains(&chunk)) {
                return self.miss(a, chunk, "is not in the cache");
            }
            let name = chunk_file_name(&a.path, &a.fingerprint, chunk);
            let want = header(&a.fingerprint, chunk, dtype, shape);
            let nbytes = shape.iter().product::<usize>() * dtype.size();
            let read = match self.dir.read(&name, &want, nbytes).await {
                Ok(Some(Read { head, data, tail })) => {
                    // On the pool: a checksum over the whole chunk is CPU work.
                    let checked = run_on(&*self.dir.pool, move || verify(&head, &want, &data, &tail).map(|()| data));
                    checked.await?.map(Some).map_err(str::to_string)
                }
                other => other.map(|_| None),
            };
            match read {
                Ok(Some(data)) => {
                    self.revived.set(self.revived.get() + 1);
                    Ok(Some(Bytes::from(data)))
                }
                Ok(None) => {
                    self.forget(a, chunk);
                    self.miss(a, chunk, "is listed but its file is gone (site data cleared?)")
                }
                Err(why) => {
                    self.forget(a, chunk);
                    if self.dir.bad_file.borrow().is_none() {
                        let w = format!(
                            "a cached chunk file {why}; it is read from the store instead{}: {name}",
                            if self.dir.flags.readonly { "" } else { " and written again" }
                        );
                        web_sys::console::warn_1(&format!("insitubatch: {w}").into());
                        *self.dir.bad_file.borrow_mut() = Some(w);
                    }
                    self.miss(a, chunk, &format!("has a file that {why}"))
                }
            }
        }

        async fn store_now(
            &self,
            array: u32,
            chunk: u64,
            dtype: DType,
            shape: &[usize],
            data: &[u8],
        ) -> Result<(), Error> {
            if self.dir.flags.readonly || data.is_empty() || self.dir.stopped.borrow().is_some() {
                return Ok(());
            }
            self.reset_done().await;
            let a = self.array(array)?;
            let name = chunk_file_name(&a.path, &a.fingerprint, chunk);
            let head = header(&a.fingerprint, chunk, dtype, shape);
            // On this (the engine's) thread, unlike a revive's: `data` is lent for this call
            // only, so a pool job would need a copy of it, and the copy into the browser's
            // buffer below is this thread's work anyway (JS objects live here).
            let tail = trailer(&head, data);
            let (hl, n) = (head.len(), data.len());
            let total = u32::try_from(hl + n + TRAILER_LEN)
                .map_err(|_| Error::Internal(format!("chunk {chunk} of {:?} is over 4 GiB", a.path)))?;
            // A copy on the JS heap: a view of wasm memory would be detached if the memory
            // grew before the browser took the bytes.
            let file = Uint8Array::new_with_length(total);
            file.subarray(0, hl as u32).copy_from(&head);
            file.subarray(hl as u32, (hl + n) as u32).copy_from(data);
            file.subarray((hl + n) as u32, total).copy_from(&tail);
            match self.dir.write(&name, &file).await {
                Ok(()) => {
                    let key = (a.path_hash.clone(), a.fingerprint.clone());
                    self.dir.index.borrow_mut().entry(key).or_default().insert(chunk);
                    self.stored.set(self.stored.get() + 1);
                }
                Err(e) if js_name(&e) == "QuotaExceededError" => self.dir.stop(format!(
                    "the origin's storage quota is full ({}): the chunks cached so far stay and are revived, the rest \
                     is read from the store as without a cache. Free space (other cacheDirs, the site's data) or ask \
                     for more with navigator.storage.persist()",
                    js_text(&e)
                )),
                Err(e) => self.dir.stop(format!(
                    "cannot write chunks to the cache ({}): the chunks cached so far stay and are revived, the rest \
                     is read from the store as without a cache",
                    js_text(&e)
                )),
            }
            Ok(())
        }
    }

    impl ChunkTier for OpfsTier {
        fn revive(&self, _: u32, _: u64, _: DType, _: &[usize]) -> Result<Option<Bytes>, Error> {
            Err(Error::Internal("the browser's disk tier is asynchronous: revive_async, not revive".into()))
        }

        fn store(&self, _: u32, _: u64, _: DType, _: &[usize], _: &[u8]) -> Result<Option<Bytes>, Error> {
            Err(Error::Internal("the browser's disk tier is asynchronous: store_async, not store".into()))
        }

        fn revive_async<'a>(
            &'a self,
            array: u32,
            chunk: u64,
            dtype: DType,
            shape: &'a [usize],
        ) -> Option<BoxFuture<'a, Result<Option<Bytes>, Error>>> {
            Some(Box::pin(self.revive_now(array, chunk, dtype, shape)))
        }

        fn store_async<'a>(
            &'a self,
            array: u32,
            chunk: u64,
            dtype: DType,
            shape: &'a [usize],
            data: &'a [u8],
        ) -> Option<BoxFuture<'a, Result<(), Error>>> {
            Some(Box::pin(self.store_now(array, chunk, dtype, shape, data)))
        }

        fn persists(&self) -> bool {
            true
        }

        fn counters(&self) -> TierCounters {
            TierCounters { revived: self.revived.get(), stored: self.stored.get(), misses: self.misses.get() }
        }

        fn describe(&self) -> String {
            let mode = if self.dir.flags.readonly { "read-only (shared lock)" } else { "persist (writer lock)" };
            let stopped = if self.dir.stopped.borrow().is_some() { "; writes stopped, see the notes" } else { "" };
            format!("{} [{mode}{stopped}]", self.dir.flags.key())
        }

        fn warnings(&self) -> Vec<String> {
            self.dir.stopped.borrow().iter().chain(self.dir.bad_file.borrow().iter()).cloned().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(json: &str) -> Result<Option<OpfsDir>, String> {
        let spell = |e: Error| e.message_in(&insitubatch_core::camel_case);
        let o = crate::JsOpenOptions::from_json(json).map_err(spell)?;
        let cache = o.to_core().map_err(spell)?.cache;
        cache.as_ref().map(OpfsDir::from_flags).transpose().map_err(spell)
    }

    #[test]
    fn flags_are_checked_by_core_in_js_words() {
        assert_eq!(flags("{}"), Ok(None));
        let f = flags(r#"{"cacheDir":"insitubatch//era5/","persist":true}"#).unwrap().unwrap();
        assert_eq!(f.dir, ["insitubatch", "era5"]);
        assert_eq!((f.readonly, f.reset_stale, f.key().as_str()), (false, false, "opfs:insitubatch/era5"));
        let e = flags(r#"{"persist":true}"#).unwrap_err();
        assert!(e.contains("persist requires cacheDir"), "{e}");
        let e = flags(r#"{"resetStaleCache":true}"#).unwrap_err();
        assert!(e.contains("resetStaleCache requires cacheDir"), "{e}");
        let e = flags(r#"{"cacheDir":"c","readonlyCache":true,"resetStaleCache":true}"#).unwrap_err();
        assert!(e.contains("contradict") && e.ends_with(": c"), "{e}");
        let e = flags(r#"{"cacheDir":"c"}"#).unwrap_err();
        assert!(e.contains("needs persist"), "{e}");
        let e = flags(r#"{"cacheDir":"c","persist":true,"sharedCache":true}"#).unwrap_err();
        assert!(e.contains("sharedCache is not available"), "{e}");
        assert!(flags(r#"{"cacheDir":"c","readonlyCache":true}"#).unwrap().unwrap().readonly);
        for bad in ["", "/", "a/../b", "./a", "a\\b"] {
            let e = flags(&format!(r#"{{"cacheDir":{bad:?},"persist":true}}"#)).unwrap_err();
            assert!(e.contains("names separated by '/'"), "{bad}: {e}");
        }
    }

    #[test]
    fn file_names_carry_the_array_pipeline_and_chunk() {
        let name = chunk_file_name("t2m/level", "0123456789abcdef", 42);
        assert!(name.starts_with("t2m_level__") && name.ends_with("__0123456789abcdef__42.ibchunk"), "{name}");
        let k = parse_chunk_file_name(&name).unwrap();
        assert_eq!(k, FileKey { path_hash: path_hash("t2m/level"), fingerprint: "0123456789abcdef".into(), chunk: 42 });
        assert_ne!(path_hash("t2m/level"), path_hash("t2m_level"), "the readable part is lossy, the hash is not");
        // Names with `__` in the path, and long paths, still parse.
        let odd = chunk_file_name("a__b/", "fedcba9876543210", 0);
        assert_eq!(parse_chunk_file_name(&odd).unwrap().chunk, 0);
        let long = "x".repeat(300);
        assert!(chunk_file_name(&long, "fedcba9876543210", 1).len() < 120);
        for other in [
            "t2m.ibchunk.crswap",
            "notes.txt",
            "a__b__c__1.ibchunk",
            "a__0123456789abcdef__0123456789abcdeX__1.ibchunk",
        ] {
            assert_eq!(parse_chunk_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_file_reads_back_only_whole_and_committed() {
        let head = header("0123456789abcdef", 3, DType::Float32, &[8, 10, 12]);
        assert_eq!(head.len() % 128, 0);
        assert_eq!(*head.last().unwrap(), b'\n');
        let data: Vec<u8> = (0..8 * 10 * 12 * 4).map(|i| (i % 251) as u8).collect();
        let tail = trailer(&head, &data);
        assert_eq!(verify(&head, &head, &data, &tail), Ok(()));
        // Another pipeline, shape or dtype has another header.
        let other = header("0123456789abcdef", 3, DType::Float32, &[7, 10, 12]);
        assert!(verify(&other, &head, &data, &tail).unwrap_err().contains("another pipeline"));
        // No commit record: the write stopped before it.
        assert!(verify(&head, &head, &data, &[0; TRAILER_LEN]).unwrap_err().contains("commit record"));
        // One byte of the data changed (a torn write the size check did not catch).
        let mut torn = data.clone();
        torn[100] ^= 1;
        assert!(verify(&head, &head, &torn, &tail).unwrap_err().contains("checksum"));
        // A header longer than 128 bytes (many axes) is padded to the next multiple.
        let wide = header("0123456789abcdef", 1, DType::Uint8, &[1; 40]);
        assert_eq!(wide.len() % 128, 0);
        assert!(wide.len() > 128);
    }

    #[test]
    fn stale_means_another_pipeline_of_the_same_path() {
        let keys = [
            (path_hash("t2m"), "1111111111111111".to_string()),
            (path_hash("t2m"), "2222222222222222".to_string()),
            (path_hash("u10"), "3333333333333333".to_string()),
        ];
        let s = stale_fingerprints(keys.iter(), "t2m", "1111111111111111");
        assert_eq!(s.into_iter().collect::<Vec<_>>(), ["2222222222222222"]);
        assert!(stale_fingerprints(keys.iter(), "u10", "3333333333333333").is_empty());
        assert!(stale_fingerprints(keys.iter(), "v", "4444444444444444").is_empty(), "cold, not stale");
    }
}
