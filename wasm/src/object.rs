//! Signed S3 on wasm (cargo feature `s3`: the Node package and the opt-in one-thread browser
//! build `js/pkg/web-s3`):
//! object_store's `AmazonS3` (SigV4 through `ring`, HTTP through reqwest's wasm backend, i.e.
//! the global `fetch`), wrapped as core's `Storage` by `insitubatch-object`, the adapter the
//! native crate uses too, so signing, retries and error text match.
//!
//! Credentials and endpoint come from `storageOptions` (object_store's config keys, e.g.
//! `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`, `aws_endpoint`,
//! `aws_region`, `aws_allow_http`: the spelling of Python's `storage_options` and the CLI's
//! `--storage-option`): wasm has no environment to read them from. Short-lived credentials
//! come from `open()`'s `credentials` callback instead ([`JsCredentials`]). Browsers also need
//! the endpoint to answer the CORS preflight of signed requests (and to expose `ETag` and
//! `Content-Range`).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use insitubatch_object::ObjectStoreStorage;
use js_sys::{Function, Reflect};
use object_store::CredentialProvider;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredential};
use object_store::path::Path;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::storage::js_message;

/// The storage options the `credentials` callback replaces: giving both is refused.
const KEY_OPTIONS: &[&str] = &["aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_token"];

/// Open `s3://bucket/prefix` with `options` (object_store's S3 config keys) and, if given,
/// `credentials`, a JS function returning (a promise of) `{ accessKeyId, secretAccessKey,
/// sessionToken?, expiration? }` ([`JsCredentials`]).
///
/// # Errors
/// A message naming the unknown option or the builder's complaint, with the URL last.
pub fn open_s3(
    url: &str,
    options: &BTreeMap<String, String>,
    credentials: Option<&Function>,
) -> Result<ObjectStoreStorage, String> {
    let rest = url.strip_prefix("s3://").ok_or_else(|| format!("not an s3:// URL: {url}"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("the S3 URL has no bucket; use s3://BUCKET/PREFIX: {url}"));
    }
    let keys = insitubatch_object::parse_options::<AmazonS3ConfigKey>(
        options,
        "s3://",
        ", e.g. aws_endpoint, aws_region, aws_access_key_id, aws_secret_access_key, aws_allow_http",
    )
    .map_err(|m| format!("{m}: {url}"))?;
    let mut b = keys.into_iter().fold(AmazonS3Builder::new().with_bucket_name(bucket), |b, (k, v)| b.with_config(k, v));
    if let Some(f) = credentials {
        let given: Vec<&String> =
            options.keys().filter(|k| KEY_OPTIONS.contains(&k.to_ascii_lowercase().as_str())).collect();
        if !given.is_empty() {
            return Err(format!(
                "pass the keys either in storageOptions ({given:?}) or by the credentials callback, not both: {url}"
            ));
        }
        b = b.with_credentials(Arc::new(JsCredentials::new(f.clone())));
    }
    let store = b.build().map_err(|e| format!("cannot open the S3 store ({e}): {url}"))?;
    let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| format!("invalid S3 prefix ({e}): {url}"))?;
    Ok(ObjectStoreStorage::new(Arc::new(store), prefix, url))
}

/// Credentials are fetched again once they expire within this margin, so a request is never
/// signed with a token about to lapse while it travels.
const REFRESH_MARGIN_MS: f64 = 60_000.0;

thread_local! {
    /// The callbacks of open stores, by [`JsCredentials::id`]. A JS function is not `Send`,
    /// and object_store's providers must be: each provider holds its number, and only tasks
    /// on this (the only) thread look the function up.
    static CALLBACKS: RefCell<BTreeMap<u64, Function>> = const { RefCell::new(BTreeMap::new()) };
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
}

/// object_store's [`CredentialProvider`] over `open()`'s `credentials` callback. Called when
/// a request needs credentials and none are cached, or the cached ones expire within
/// [`REFRESH_MARGIN_MS`] (by the callback's `expiration`, against `Date.now()`); never on a
/// timer. Concurrent requests wait for the one call in flight. Credentials that arrive
/// already expired sign the request that asked for them, and the next request asks again.
struct JsCredentials {
    id: u64,
    cached: futures::lock::Mutex<Option<Cached>>,
}

struct Cached {
    credential: Arc<AwsCredential>,
    /// The callback's `expiration` in ms since 1970 (`None`: never).
    expires_ms: Option<f64>,
}

impl std::fmt::Debug for JsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsCredentials").field("id", &self.id).finish_non_exhaustive()
    }
}

impl JsCredentials {
    fn new(callback: Function) -> Self {
        let id = NEXT_ID.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        CALLBACKS.with(|c| c.borrow_mut().insert(id, callback));
        Self { id, cached: futures::lock::Mutex::new(None) }
    }
}

impl Drop for JsCredentials {
    fn drop(&mut self) {
        CALLBACKS.with(|c| c.borrow_mut().remove(&self.id));
    }
}

/// Why the callback gave no credentials: it failed (threw, rejected: worth retrying, as a
/// failed token request is), or answered something that is not credentials (not).
enum Refused {
    Failed(String),
    Invalid(String),
}

impl Refused {
    fn into_error(self) -> object_store::Error {
        match self {
            Self::Failed(m) => object_store::Error::Generic { store: "S3", source: m.into() },
            Self::Invalid(m) => {
                object_store::Error::Unauthenticated { path: "(the credentials callback)".into(), source: m.into() }
            }
        }
    }
}

#[async_trait::async_trait]
impl CredentialProvider for JsCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref()
            && c.expires_ms.is_none_or(|t| t - js_sys::Date::now() > REFRESH_MARGIN_MS)
        {
            return Ok(Arc::clone(&c.credential));
        }
        // The callback's promise is awaited on a task of its own (a JS future is not `Send`);
        // this future only waits for its answer.
        let (tx, rx) = futures::channel::oneshot::channel();
        let id = self.id;
        wasm_bindgen_futures::spawn_local(async move {
            let _ = tx.send(call(id).await);
        });
        let answer =
            rx.await.map_err(|_| Refused::Failed("the credentials callback was dropped".into()).into_error())?;
        let (credential, expires_ms) = answer.map_err(Refused::into_error)?;
        let credential = Arc::new(credential);
        *cached = Some(Cached { credential: Arc::clone(&credential), expires_ms });
        Ok(credential)
    }
}

/// Call callback `id` and read its answer.
async fn call(id: u64) -> Result<(AwsCredential, Option<f64>), Refused> {
    let f = CALLBACKS
        .with(|c| c.borrow().get(&id).cloned())
        .ok_or_else(|| Refused::Failed("the store was closed".into()))?;
    let v = f
        .call0(&JsValue::UNDEFINED)
        .map_err(|e| Refused::Failed(format!("the credentials callback threw: {}", js_message(&e))))?;
    let v = JsFuture::from(js_sys::Promise::resolve(&v))
        .await
        .map_err(|e| Refused::Failed(format!("the credentials callback's promise was rejected: {}", js_message(&e))))?;
    credential_from(&v)
}

/// `{ accessKeyId, secretAccessKey, sessionToken?, expiration? }` (the AWS SDK for
/// JavaScript's `AwsCredentialIdentity`); `expiration`: a `Date`, ms since 1970, or a date
/// string (ISO 8601).
fn credential_from(v: &JsValue) -> Result<(AwsCredential, Option<f64>), Refused> {
    const SHAPE: &str = "return { accessKeyId, secretAccessKey, sessionToken?, expiration? }";
    if !v.is_object() {
        return Err(Refused::Invalid(format!("the credentials callback returned no object; {SHAPE}")));
    }
    let field = |k: &str| Reflect::get(v, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
    let text = |k: &str| -> Result<Option<String>, Refused> {
        let x = field(k);
        if x.is_undefined() || x.is_null() {
            return Ok(None);
        }
        x.as_string()
            .map(Some)
            .ok_or_else(|| Refused::Invalid(format!("the credentials callback's {k} is not a string; {SHAPE}")))
    };
    let required = |k: &str| -> Result<String, Refused> {
        text(k)?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Refused::Invalid(format!("the credentials callback returned no {k}; {SHAPE}")))
    };
    let credential = AwsCredential {
        key_id: required("accessKeyId")?,
        secret_key: required("secretAccessKey")?,
        token: text("sessionToken")?.filter(|s| !s.is_empty()),
    };
    let e = field("expiration");
    let expires_ms = if e.is_undefined() || e.is_null() {
        None
    } else {
        let ms = if let Some(d) = e.dyn_ref::<js_sys::Date>() {
            d.get_time()
        } else if let Some(n) = e.as_f64() {
            n
        } else if let Some(s) = e.as_string() {
            js_sys::Date::parse(&s)
        } else {
            f64::NAN
        };
        if ms.is_nan() {
            return Err(Refused::Invalid(format!(
                "the credentials callback's expiration is not a date (a Date, ms since 1970 or an ISO 8601 string): {}",
                js_message(&e)
            )));
        }
        Some(ms)
    };
    Ok((credential, expires_ms))
}
