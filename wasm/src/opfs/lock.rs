//! Web Locks on the cache directory: one writer, or readers only, per directory.

use std::cell::RefCell;

use futures::future::{Either, select};
use insitubatch_core::Error;
use js_sys::{Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::OpfsDir;
use super::js::{get, js_name, js_text};

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

/// A Web Lock on the cache directory, held until dropped.
pub(super) struct LockGuard {
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
    pub(super) async fn acquire(flags: &OpfsDir) -> Result<Self, Error> {
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
