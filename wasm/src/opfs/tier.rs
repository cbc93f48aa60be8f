//! The tier over an open directory: the opener `open()` and the explorer hold, stale
//! pipelines refused or reset, and each dataset's revives and stores.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use insitubatch_core::runtime::{BoxFuture, ThreadPool, run_on};
use insitubatch_core::{ArrayIdentity, ChunkTier, DType, Error, TierCounters, TierOpener};
use js_sys::Uint8Array;
use wasm_bindgen_futures::JsFuture;

use super::dir::{Dir, Read, list, open_dir, opfs_root};
use super::js::js_name;
use super::js::js_text;
use super::lock::LockGuard;
use super::{
    OpfsDir, TRAILER_LEN, chunk_file_name, header, parse_chunk_file_name, path_hash, stale_fingerprints, trailer,
    verify,
};

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
            .map(|a| Array { path: a.path.clone(), path_hash: path_hash(&a.path), fingerprint: a.fingerprint.clone() })
            .collect();
        let tier =
            OpfsTier { dir: Rc::clone(dir), arrays, revived: Cell::new(0), stored: Cell::new(0), misses: Cell::new(0) };
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

impl OpfsTier {
    fn array(&self, array: u32) -> Result<&Array, Error> {
        self.arrays.get(array as usize).ok_or_else(|| Error::Internal(format!("the disk tier has no array {array}")))
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

    async fn revive_now(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize]) -> Result<Option<Bytes>, Error> {
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

    async fn store_now(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize], data: &[u8]) -> Result<(), Error> {
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
