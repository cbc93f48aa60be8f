//! [`Storage`] over a JavaScript object the caller gives: `{ get(key, range?), list?(prefix),
//! location? }`. The Node package's `file://` store (`js/src/node-storage.js`, node:fs with
//! ranged reads) is one; a caller may pass their own (IndexedDB, a zip, a test double).
//!
//! The JS side is untrusted input: a method that throws, rejects, or resolves to the wrong
//! type becomes a [`StorageError`] that says which method and what came back, never a panic.
//! The storage contract (exact ranges, `Ok(None)` for a missing key) is enforced here, so a
//! JS store that reads short cannot hand the decoder truncated bytes.

use bytes::Bytes;
use insitubatch_core::runtime::{BoxFuture, ByteRange, Storage, StorageError};
use js_sys::{Function, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::storage::js_message;

/// A store whose reads are calls into a JS object.
///
/// `get(key, range)` resolves to a `Uint8Array` (or `ArrayBuffer`), or `null`/`undefined`
/// for a missing key; `range` is `undefined` (the whole object), `{ start, end }` (half-open
/// byte offsets) or `{ suffix }` (the last `suffix` bytes, all of them if the object is
/// shorter). `list(prefix)`, if present, resolves to every key under `prefix` relative to
/// the store's root, or `null` when the store cannot list. An error thrown with
/// `transient: true` is retried under the read policy; any other is permanent.
pub struct JsStorage {
    object: Object,
    get: Function,
    list: Option<Function>,
    location: String,
}

impl std::fmt::Debug for JsStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsStorage").field("location", &self.location).finish_non_exhaustive()
    }
}

/// `object[name]` if it is a function; `Ok(None)` if absent; an error if it is something else.
fn method(object: &Object, name: &str) -> Result<Option<Function>, String> {
    let v = Reflect::get(object, &JsValue::from_str(name)).map_err(|e| js_message(&e))?;
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    v.dyn_into::<Function>().map(Some).map_err(|v| format!("storage.{name} must be a function, got {}", type_of(&v)))
}

/// A short description of a JS value's type, for messages.
fn type_of(v: &JsValue) -> String {
    if v.is_null() {
        return "null".into();
    }
    if let Some(o) = v.dyn_ref::<Object>() {
        let name: String = o.constructor().name().into();
        if !name.is_empty() {
            return name;
        }
    }
    v.js_typeof().as_string().unwrap_or_else(|| "unknown".into())
}

impl JsStorage {
    /// Wrap `object`; `fallback_location` names it in messages unless it has a string
    /// `location` of its own.
    ///
    /// # Errors
    /// A message when `object` is not an object or has no `get` function.
    pub fn new(object: &JsValue, fallback_location: &str) -> Result<Self, String> {
        const SHAPE: &str = "{ get(key, range) -> Promise<Uint8Array | null>, list?(prefix) -> Promise<string[] | null>, \
                             location?: string }";
        let Some(object) = object.dyn_ref::<Object>().filter(|_| object.is_object()) else {
            return Err(format!("a storage must be an object {SHAPE}, got {}", type_of(object)));
        };
        let Some(get) = method(object, "get")? else {
            return Err(format!("a storage needs a get(key, range) method: {SHAPE}"));
        };
        let list = method(object, "list")?;
        let location = Reflect::get(object, &JsValue::from_str("location"))
            .ok()
            .and_then(|l| l.as_string())
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| fallback_location.to_string());
        Ok(Self { object: object.clone(), get, list, location })
    }

    /// Call `f(args…)` on the object and await what it returns (a value or a promise).
    async fn call(&self, name: &str, f: &Function, args: &[JsValue]) -> Result<JsValue, StorageError> {
        let argv: js_sys::Array = args.iter().collect();
        let returned = f.apply(&self.object, &argv).map_err(|e| thrown(name, &e))?;
        JsFuture::from(js_sys::Promise::resolve(&returned)).await.map_err(|e| thrown(name, &e))
    }

    /// `get(key, range)` as bytes, `None` for `null`/`undefined`.
    async fn get_js(&self, key: &str, range: JsValue) -> Result<Option<Bytes>, StorageError> {
        let v = self.call("get", &self.get, &[JsValue::from_str(key), range]).await?;
        if v.is_undefined() || v.is_null() {
            return Ok(None);
        }
        if let Some(a) = v.dyn_ref::<Uint8Array>() {
            return Ok(Some(Bytes::from(a.to_vec())));
        }
        if v.is_instance_of::<js_sys::ArrayBuffer>() {
            return Ok(Some(Bytes::from(Uint8Array::new(&v).to_vec())));
        }
        Err(StorageError::permanent(format!(
            "storage.get resolved to {}; it must resolve to a Uint8Array, or null for a missing key",
            type_of(&v)
        )))
    }

    async fn get_bounded(&self, key: &str, start: u64, end: u64) -> Result<Option<Bytes>, StorageError> {
        if start > end {
            return Err(StorageError::permanent(format!("invalid byte range {start}..{end}: start after end")));
        }
        let range = Object::new();
        set(&range, "start", start)?;
        set(&range, "end", end)?;
        let Some(b) = self.get_js(key, range.into()).await? else { return Ok(None) };
        if b.len() as u64 != end - start {
            // The contract (core's conformance suite): exactly the range, or an error.
            return Err(StorageError::permanent(format!(
                "storage.get returned {} bytes for the byte range {start}..{end} ({} asked for); the object may be \
                 truncated, or the shard index that gave the range is corrupt",
                b.len(),
                end - start
            )));
        }
        Ok(Some(b))
    }

    async fn get_suffix(&self, key: &str, n: u64) -> Result<Option<Bytes>, StorageError> {
        let range = Object::new();
        set(&range, "suffix", n)?;
        let Some(b) = self.get_js(key, range.into()).await? else { return Ok(None) };
        if b.len() as u64 > n {
            return Err(StorageError::permanent(format!(
                "storage.get returned {} bytes for a suffix of {n}; it must return the last {n} bytes (or the whole \
                 object when shorter)",
                b.len()
            )));
        }
        Ok(Some(b))
    }

    async fn list_js(&self, prefix: &str) -> Result<Option<Vec<String>>, StorageError> {
        let Some(list) = &self.list else { return Ok(None) };
        let v = self.call("list", list, &[JsValue::from_str(prefix)]).await?;
        if v.is_undefined() || v.is_null() {
            return Ok(None);
        }
        let not_keys = || {
            StorageError::permanent(format!(
                "storage.list resolved to {}; it must resolve to an array of key strings, or null when the store \
                 cannot list",
                type_of(&v)
            ))
        };
        if !js_sys::Array::is_array(&v) {
            return Err(not_keys());
        }
        js_sys::Array::from(&v).iter().map(|k| k.as_string().ok_or_else(not_keys)).collect::<Result<_, _>>().map(Some)
    }
}

/// A byte offset as a JS number (exact below 2^53, which every real object is).
fn set(o: &Object, k: &str, v: u64) -> Result<(), StorageError> {
    Reflect::set(o, &JsValue::from_str(k), &JsValue::from_f64(v as f64))
        .map(|_| ())
        .map_err(|e| StorageError::permanent(js_message(&e)))
}

/// What the JS side threw or rejected with: transient when it says so (`transient: true`).
fn thrown(method: &str, e: &JsValue) -> StorageError {
    let message = format!("storage.{method} failed: {}", js_message(e));
    let transient =
        e.is_object() && Reflect::get(e, &JsValue::from_str("transient")).is_ok_and(|t| t.as_bool() == Some(true));
    if transient { StorageError::transient(message) } else { StorageError::permanent(message) }
}

impl Storage for JsStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.get_js(key, JsValue::UNDEFINED))
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            match range {
                ByteRange::Bounded { start, end } => self.get_bounded(key, start, end).await,
                ByteRange::Suffix(n) => self.get_suffix(key, n).await,
            }
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(self.list_js(prefix))
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}
