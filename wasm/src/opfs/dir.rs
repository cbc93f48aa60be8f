//! An open cache directory: the origin's private file system opened and listed, and a chunk
//! file's read and write.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::future::Shared;
use insitubatch_core::Error;
use insitubatch_core::runtime::ThreadPool;
use js_sys::{Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    FileSystemDirectoryHandle, FileSystemFileHandle, FileSystemGetDirectoryOptions, FileSystemGetFileOptions,
    FileSystemWritableFileStream,
};

use super::js::{get, js_name, js_text};
use super::lock::LockGuard;
use super::{OpfsDir, TRAILER_LEN};

/// `navigator.storage.getDirectory()`: the origin's private file system.
pub(super) async fn opfs_root() -> Result<FileSystemDirectoryHandle, String> {
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
pub(super) async fn open_dir(
    root: FileSystemDirectoryHandle,
    flags: &OpfsDir,
) -> Result<FileSystemDirectoryHandle, Error> {
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
pub(super) async fn list(dir: &FileSystemDirectoryHandle) -> Result<Vec<String>, String> {
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

/// An open cache directory, shared by every dataset its opener builds (the explorer's).
pub(super) struct Dir {
    pub(super) flags: OpfsDir,
    pub(super) handle: FileSystemDirectoryHandle,
    /// The engine's thread pool: a revived file's checksum is CPU work.
    pub(super) pool: Arc<dyn ThreadPool>,
    /// `(path hash, fingerprint)` → the chunks with a file: the listing at open, plus what
    /// this opener wrote, minus what it found invalid or reset.
    pub(super) index: RefCell<HashMap<(String, String), BTreeSet<u64>>>,
    /// Why writes stopped (a full quota), once they did.
    pub(super) stopped: RefCell<Option<String>>,
    /// The first chunk file that did not verify, for `warnings()`.
    pub(super) bad_file: RefCell<Option<String>>,
    /// `resetStaleCache`'s deletion of stale files, while it runs: reads and writes await it.
    pub(super) resetting: RefCell<Option<Shared<futures::future::LocalBoxFuture<'static, ()>>>>,
    /// Held for its `Drop`. Declared last: fields drop in order, so the lock goes after
    /// everything else.
    pub(super) _lock: LockGuard,
}

/// A test hook, read before each write: `globalThis.__insitubatchTierStopAfter = n` makes
/// the next write stop after its first `n` bytes and never finish (as a tab killed
/// mid-write), calling `globalThis.__insitubatchTierStopped(fileName)` once stopped.
fn stop_after() -> Option<u32> {
    get(&js_sys::global(), "__insitubatchTierStopAfter").as_f64().map(|n| n.max(0.0) as u32)
}

/// A chunk file as read: its header, data and commit record, not yet verified.
pub(super) struct Read {
    pub(super) head: Vec<u8>,
    pub(super) data: Vec<u8>,
    pub(super) tail: Vec<u8>,
}

impl Dir {
    /// The chunk file `name`, if its size is that of a chunk headed by `want` with `nbytes`
    /// of data: `Ok(None)` when there is no such file, `Err` saying what is wrong with
    /// one. The copies out of the browser's buffer are the engine thread's (JS objects
    /// live there); the checksum is not (`OpfsTier::revive_now`).
    pub(super) async fn read(&self, name: &str, want: &[u8], nbytes: usize) -> Result<Option<Read>, String> {
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
        let buf = JsFuture::from(file.array_buffer()).await.map_err(|e| format!("cannot be read ({})", js_text(&e)))?;
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
    pub(super) async fn write(&self, name: &str, bytes: &Uint8Array) -> Result<(), JsValue> {
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
    pub(super) fn stop(&self, why: String) {
        if self.stopped.borrow().is_none() {
            web_sys::console::warn_1(&format!("insitubatch: {why}: {}", self.flags.key()).into());
            *self.stopped.borrow_mut() = Some(why);
        }
    }
}
