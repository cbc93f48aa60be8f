//! [`Storage`] over the global `fetch` (browsers, workers), or a read hook the JS entry sets
//! (Node's `node:http`, the threaded build's fetch worker), with HTTP `Range` requests. Plain
//! HTTP cannot list, so discovery needs consolidated metadata.

use std::sync::Arc;

use bytes::Bytes;
use insitubatch_core::runtime::{BoxFuture, ByteRange, Storage, StorageError};
use js_sys::{Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    /// `globalThis.fetch(url, init)`.
    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(url: &str, init: &Object) -> js_sys::Promise;
}

/// A read-only store rooted at an `http(s)://` URL, read with `fetch`.
#[derive(Debug, Clone)]
pub struct FetchStorage {
    base: String,
}

impl FetchStorage {
    /// A store rooted at `base` (`https://host/era5.zarr`); keys are appended after a `/`.
    pub fn new(base: &str) -> Self {
        Self { base: base.trim_end_matches('/').to_string() }
    }

    fn url(&self, key: &str) -> String {
        let key = key.trim_matches('/');
        if key.is_empty() { self.base.clone() } else { format!("{}/{key}", self.base) }
    }

    /// One GET; `Ok(None)` on 404/410. The `Range` header, if any, is sent as given.
    /// Returns the body and whether the server honoured the range (206). `expect`, the
    /// range's length, lets a read hook (`hooked` below: the threaded build's fetch worker,
    /// Node's `node:http` reads) write the body straight into wasm memory.
    async fn fetch(
        &self,
        key: &str,
        range: Option<String>,
        expect: Option<usize>,
    ) -> Result<Option<(Bytes, bool)>, StorageError> {
        let url = self.url(key);
        if let Some(hook) = hooked::hook() {
            return hooked::fetch_into(&hook, &url, range.as_deref(), expect).await;
        }
        let init = Object::new();
        set(&init, "method", &JsValue::from_str("GET"))?;
        let abort = AbortOnDrop::new();
        if let Some(signal) = abort.signal() {
            set(&init, "signal", &signal)?;
        }
        if let Some(r) = &range {
            let headers = Object::new();
            set(&headers, "Range", &JsValue::from_str(r))?;
            set(&init, "headers", &headers)?;
        }
        let resp = JsFuture::from(global_fetch(&url, &init))
            .await
            .map_err(|e| StorageError::transient(format!("network error: {}", js_message(&e))))?;
        let resp: web_sys::Response = resp.unchecked_into();
        let status = resp.status();
        if !check_status(status, &resp.status_text())? {
            return Ok(None);
        }
        let buf = resp.array_buffer().map_err(|e| StorageError::transient(js_message(&e)))?;
        let buf = JsFuture::from(buf)
            .await
            .map_err(|e| StorageError::transient(format!("reading the body failed: {}", js_message(&e))))?;
        drop(abort); // the body is read: aborting now is a no-op
        Ok(Some((Bytes::from(Uint8Array::new(&buf).to_vec()), status == 206)))
    }

    /// Exactly `start..end`, or an error: a server clips a range that runs past the end of
    /// the object, and the engine asks only for ranges a shard index gave it, so a short
    /// object is a truncated shard or a corrupt index, never a chunk to decode (core's
    /// storage contract, `insitubatch_core::conformance`).
    async fn get_bounded(&self, key: &str, start: u64, end: u64) -> Result<Option<Bytes>, StorageError> {
        if start > end {
            return Err(StorageError::permanent(format!("invalid byte range {start}..{end}: start after end")));
        }
        if start == end {
            // HTTP has no empty range: a whole GET says whether the object is there, and its size.
            let Some((b, _)) = self.fetch(key, None, None).await? else { return Ok(None) };
            return if end > b.len() as u64 {
                Err(past_end(start, end, b.len() as u64))
            } else {
                Ok(Some(Bytes::new()))
            };
        }
        let range = format!("bytes={start}-{}", end - 1);
        let Some((b, partial)) = self.fetch(key, Some(range.clone()), usize::try_from(end - start).ok()).await? else {
            return Ok(None);
        };
        if !partial {
            // The server ignored the range and sent the whole object.
            let len = b.len() as u64;
            return if end > len {
                Err(past_end(start, end, len))
            } else {
                Ok(Some(b.slice(start as usize..end as usize)))
            };
        }
        // A server clips a range that runs past the end of the object (RFC 9110).
        if (b.len() as u64) < end - start {
            return Err(past_end(start, end, start + b.len() as u64));
        }
        if b.len() as u64 > end - start {
            return Err(range_overrun(&range, &b.len().to_string(), end - start));
        }
        Ok(Some(b))
    }
}

/// A 206 longer than its range: not a short object but a server that misreads ranges (sirv
/// sends all of an object for `bytes=0-0`), which a "past the end" message would hide. `got`:
/// the bytes it sent, or "at least N" where the read stopped at the first byte too many.
fn range_overrun(range: &str, got: &str, asked: u64) -> StorageError {
    StorageError::permanent(format!(
        "the server answered the range {range} with {got} bytes, more than the {asked} asked for: it does not serve \
         byte ranges correctly; serve the store with one that does"
    ))
}

/// A range that reaches past the end of its object: never worth retrying.
fn past_end(start: u64, end: u64, size: u64) -> StorageError {
    StorageError::permanent(format!(
        "byte range {start}..{end} reaches past the end of the object ({size} bytes); the object may be truncated, \
         or the shard index that gave the range is corrupt"
    ))
}

/// `Ok(false)` on 404/410 (no such object), `Ok(true)` on 2xx, else the error, transient
/// where a retry may help (5xx, 429, 408).
fn check_status(status: u16, status_text: &str) -> Result<bool, StorageError> {
    if status == 404 || status == 410 {
        return Ok(false);
    }
    if (200..300).contains(&status) {
        return Ok(true);
    }
    let msg = format!("HTTP {status} {status_text}");
    Err(if status >= 500 || status == 429 || status == 408 {
        StorageError::transient(msg)
    } else {
        StorageError::permanent(msg)
    })
}

/// `o[k] = v`, a JS error as a permanent storage error.
fn set(o: &Object, k: &str, v: &JsValue) -> Result<(), StorageError> {
    Reflect::set(o, &JsValue::from_str(k), v).map(|_| ()).map_err(|e| StorageError::permanent(js_message(&e)))
}

/// The message of a thrown JS value (an `Error`'s message, else its string form).
pub(crate) fn js_message(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        let mut m: String = err.message().into();
        // Node's fetch wraps the real reason (ECONNREFUSED, …) in `cause`.
        if let Ok(cause) = Reflect::get(err, &JsValue::from_str("cause"))
            && !cause.is_undefined()
        {
            m.push_str(&format!(" ({})", js_message(&cause)));
        }
        m
    } else {
        e.as_string().unwrap_or_else(|| format!("{e:?}"))
    }
}

impl Storage for FetchStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move { Ok(self.fetch(key, None, None).await?.map(|(b, _)| b)) })
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            match range {
                ByteRange::Bounded { start, end } => self.get_bounded(key, start, end).await,
                ByteRange::Suffix(n) => {
                    let got = match self.fetch(key, Some(format!("bytes=-{n}")), None).await {
                        Ok(g) => g,
                        // Some servers reject a suffix longer than the object: take it whole.
                        Err(e) => match self.fetch(key, None, None).await {
                            Ok(g) => g,
                            Err(_) => return Err(e),
                        },
                    };
                    Ok(got.map(
                        |(b, partial)| {
                            if partial || b.len() as u64 <= n { b } else { b.slice(b.len() - n as usize..) }
                        },
                    ))
                }
            }
        })
    }

    fn list<'a>(&'a self, _prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async { Ok(None) })
    }

    fn location(&self) -> String {
        self.base.clone()
    }
}

/// Aborts its `fetch` when dropped. The engine drops a read it has timed out
/// (`ReadPolicy::request_timeout`) or that belongs to a pass that ended; without an abort the
/// connection stays open until the JS runtime gives up on it (Node: 300 s), holding a socket
/// and keeping Node's event loop alive. Dropped once the body has been read, it does nothing.
struct AbortOnDrop(Option<web_sys::AbortController>);

impl AbortOnDrop {
    /// Holds no controller where `AbortController` is missing (very old runtimes): reads then
    /// cannot be cancelled, as before.
    fn new() -> Self {
        Self(web_sys::AbortController::new().ok())
    }

    fn signal(&self) -> Option<web_sys::AbortSignal> {
        self.0.as_ref().map(web_sys::AbortController::signal)
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.abort();
        }
    }
}

/// Reads through a JS hook instead of `fetch`, set by the JS entry on the engine's thread:
/// - the threaded build's fetch worker (js/src/fetch-worker.js, started by
///   js/src/web-threads.js): chunk reads leave the engine's thread, which otherwise drains
///   every response body and copies it into wasm memory itself, beside driving the pass and
///   posting its batches; the worker shares this instance's memory;
/// - Node's one-thread entry (js/src/node-http.js, set by js/src/index.js): `node:http` and
///   `node:https` instead of the runtime's fetch, whose WHATWG streams cost more CPU per byte
///   than the rest of the engine beside the decode (issue #48).
///
/// The engine allocates a ranged read's buffer and hands its address to the hook, which
/// writes the body there as it arrives. A read of unknown length (a whole chunk of an
/// unsharded array, metadata, a shard index's suffix) is written into a buffer the hook asks
/// for once the response gives the length (Node), or comes back as bytes, copied into wasm
/// memory once here (the fetch worker, which cannot call into this thread).
mod hooked {
    use std::cell::RefCell;
    use std::rc::Rc;

    use bytes::Bytes;
    use insitubatch_core::runtime::StorageError;
    use js_sys::{Array, Function, Promise, Reflect, Uint8Array};
    use wasm_bindgen::prelude::*;
    use wasm_bindgen_futures::JsFuture;

    use super::{AbortOnDrop, check_status, js_message, range_overrun};

    thread_local! {
        /// Set on the engine's thread only; pool threads never read storage.
        static HOOK: RefCell<Option<Function>> = const { RefCell::new(None) };
    }

    /// Send this thread's reads through `hook(url, range, ptr, len, signal, alloc)` (`range`
    /// undefined for a whole object; `len` 0 where the length is not known; `alloc(n)`, a
    /// buffer of `n` bytes for a body of declared length, callable on this thread only), a
    /// promise of `{ status, statusText, written }` (the body is at `ptr`), the same with
    /// `sized: true` (at what `alloc` gave), `{ status, statusText, body }` (an `ArrayBuffer`
    /// or `Uint8Array`: the length was not known, or the server sent the whole object),
    /// `{ status, statusText, overflow: true, received }` (a 206 longer than `len`;
    /// `received`, the bytes seen when the hook stopped), `{ status, statusText }` (not 2xx),
    /// or a rejection (a network error, or `signal` aborted; with `lost: true` when the
    /// worker failed and may still write). `undefined` sends reads back to `fetch`.
    #[doc(hidden)]
    #[wasm_bindgen(js_name = setFetchHook)]
    pub fn set_fetch_hook(hook: Option<Function>) {
        HOOK.with(|h| *h.borrow_mut() = hook);
    }

    pub(super) fn hook() -> Option<Function> {
        HOOK.with(|h| h.borrow().clone())
    }

    /// Whether a rejection says the fetch worker failed (js/src/web-threads.js `stop`).
    fn worker_lost(e: &JsValue) -> bool {
        Reflect::get(e, &JsValue::from_str("lost")).is_ok_and(|v| v.is_truthy())
    }

    /// A buffer of the length the response declares (`Content-Length`), allocated
    /// when the hook asks (`alloc(n)`, the hook's sixth argument, on this thread only: Node's
    /// `node:http` hook, not the fetch worker) and written in place like a ranged read's.
    #[derive(Default)]
    struct Declared(Rc<RefCell<Vec<u8>>>);

    impl Declared {
        /// `alloc(n)`: a zeroed buffer of `n` bytes (zeroed as the ranged reads' are, so that
        /// whatever the hook reports written is initialised), its address; 0 where wasm
        /// memory has no room, or when asked twice.
        fn alloc_fn(&self) -> Closure<dyn FnMut(f64) -> f64> {
            let cell = self.0.clone();
            Closure::new(move |n: f64| {
                let mut v = cell.borrow_mut();
                let n = n as usize;
                if v.capacity() > 0 || v.try_reserve_exact(n).is_err() {
                    return 0.0;
                }
                v.resize(n, 0);
                f64::from(v.as_mut_ptr() as usize as u32)
            })
        }
    }

    /// `url` (with `range`, if any) through `hook`; the result of `FetchStorage::fetch`.
    /// Where the read's length is known (`expect`), the body is written in place into a
    /// buffer of that length; otherwise (whole objects, suffixes) into one the hook asks for
    /// once it knows the length ([`Declared`]), or it comes back as bytes and is copied in here
    /// once, which is cheap beside draining it.
    pub(super) async fn fetch_into(
        hook: &Function,
        url: &str,
        range: Option<&str>,
        expect: Option<usize>,
    ) -> Result<Option<(Bytes, bool)>, StorageError> {
        let abort = AbortOnDrop::new();
        let len = expect.unwrap_or(0);
        let mut buf = vec![0u8; len];
        let sized = Declared::default();
        let alloc = sized.alloc_fn();
        // wasm32: a pointer is a 32-bit offset into the one linear memory the hook writes to.
        let ptr = buf.as_mut_ptr() as usize as u32;
        let signal = abort.signal().map_or(JsValue::UNDEFINED, JsValue::from);
        let range_js = range.map_or(JsValue::UNDEFINED, JsValue::from_str);
        let args = Array::of5(&url.into(), &range_js, &ptr.into(), &(len as u32).into(), &signal);
        args.push(alloc.as_ref());
        let promise: Promise = hook
            .apply(&JsValue::UNDEFINED, &args)
            .map_err(|e| StorageError::permanent(format!("the read hook refused a read: {}", js_message(&e))))?
            .unchecked_into();
        let (tx, rx) = futures::channel::oneshot::channel();
        // The hook may write into `buf` until its promise settles, also after this read is
        // dropped (timed out, or its pass closed; the drop aborts it): so `buf` belongs to a
        // task that outlives the read and frees it only once the hook is done with it. A fetch
        // worker that failed (`lost`) may still be running as it is terminated, so its
        // buffers are leaked, never reused: a few reads' worth, once.
        wasm_bindgen_futures::spawn_local(async move {
            let reply = JsFuture::from(promise).await;
            let buf = if reply.as_ref().is_err_and(worker_lost) {
                std::mem::forget(buf);
                Vec::new()
            } else {
                buf
            };
            drop(alloc); // settled: the hook asks for no more buffers
            let _ = tx.send((reply, buf, sized.0.take()));
        });
        let (reply, buf, sized) =
            rx.await.map_err(|_| StorageError::transient("the read hook's reply was lost".to_string()))?;
        drop(abort); // settled: aborting now is a no-op
        let reply = reply.map_err(|e| StorageError::transient(format!("network error: {}", js_message(&e))))?;
        let field = |k: &str| Reflect::get(&reply, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
        let status = field("status").as_f64().map_or(0, |s| s as u16);
        if !check_status(status, &field("statusText").as_string().unwrap_or_default())? {
            return Ok(None);
        }
        let body = field("body");
        if let Some(bytes) = body.dyn_ref::<Uint8Array>() {
            // A `Uint8Array` (a Node `Buffer`) as it is: `Uint8Array::new` would copy it first.
            return Ok(Some((Bytes::from(bytes.to_vec()), status == 206)));
        }
        if !body.is_undefined() {
            return Ok(Some((Bytes::from(Uint8Array::new(&body).to_vec()), status == 206)));
        }
        let range = range.unwrap_or("the whole object");
        if field("overflow").is_truthy() {
            let got = field("received").as_f64().map_or_else(|| "more".to_string(), |n| format!("at least {n}"));
            return Err(range_overrun(range, &got, len as u64));
        }
        let written = field("written").as_f64().map_or(usize::MAX, |w| w as usize);
        let (mut buf, len) = if field("sized").is_truthy() {
            let n = sized.len();
            (sized, n)
        } else {
            (buf, len)
        };
        if written > len {
            return Err(StorageError::permanent(format!(
                "the read hook reported {written} bytes written for {range} ({len} bytes): {url}"
            )));
        }
        buf.truncate(written);
        Ok(Some((Bytes::from(buf), status == 206)))
    }
}

pub use hooked::set_fetch_hook;

/// A storage as the engine shares it.
#[allow(
    clippy::arc_with_non_send_sync,
    reason = "on wasm32 a `dyn Storage` need not be Send + Sync (core's MaybeSend/MaybeSync are empty there)"
)]
pub(crate) fn shared<S: insitubatch_core::Storage + 'static>(storage: S) -> Arc<dyn insitubatch_core::Storage> {
    Arc::new(storage)
}
