//! [`Storage`] over the global `fetch` (Node ≥ 18, browsers, workers), with HTTP `Range`
//! requests. Plain HTTP cannot list, so discovery needs consolidated metadata.

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
    /// Returns the body and whether the server honoured the range (206).
    async fn fetch(&self, key: &str, range: Option<String>) -> Result<Option<(Bytes, bool)>, StorageError> {
        let url = self.url(key);
        let init = Object::new();
        let set = |o: &Object, k: &str, v: &JsValue| {
            Reflect::set(o, &JsValue::from_str(k), v).map_err(|e| StorageError::permanent(js_message(&e)))
        };
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
        if status == 404 || status == 410 {
            return Ok(None);
        }
        if !(200..300).contains(&status) {
            let msg = format!("HTTP {status} {}", resp.status_text());
            return Err(if status >= 500 || status == 429 || status == 408 {
                StorageError::transient(msg)
            } else {
                StorageError::permanent(msg)
            });
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
            let Some((b, _)) = self.fetch(key, None).await? else { return Ok(None) };
            return if end > b.len() as u64 {
                Err(past_end(start, end, b.len() as u64))
            } else {
                Ok(Some(Bytes::new()))
            };
        }
        let Some((b, partial)) = self.fetch(key, Some(format!("bytes={start}-{}", end - 1))).await? else {
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
        if b.len() as u64 != end - start {
            return Err(past_end(start, end, start + b.len() as u64));
        }
        Ok(Some(b))
    }
}

/// A range that reaches past the end of its object: never worth retrying.
fn past_end(start: u64, end: u64, size: u64) -> StorageError {
    StorageError::permanent(format!(
        "byte range {start}..{end} reaches past the end of the object ({size} bytes); the object may be truncated, \
         or the shard index that gave the range is corrupt"
    ))
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
        Box::pin(async move { Ok(self.fetch(key, None).await?.map(|(b, _)| b)) })
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            match range {
                ByteRange::Bounded { start, end } => self.get_bounded(key, start, end).await,
                ByteRange::Suffix(n) => {
                    let got = match self.fetch(key, Some(format!("bytes=-{n}"))).await {
                        Ok(g) => g,
                        // Some servers reject a suffix longer than the object: take it whole.
                        Err(e) => match self.fetch(key, None).await {
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
