//! # insitubatch-object
//!
//! Core's [`Storage`] over any `object_store` [`ObjectStore`]: keys resolved under a prefix,
//! ranged and suffix reads, listing, and error classification (transient failures are
//! retried by the engine, the rest are not). Shared by the native crate (local files, S3,
//! GCS, Azure, HTTP) and the wasm crate (signed S3 over `fetch`); each opens its own stores.
//! The same source gives `Send` futures natively and `!Send` ones on wasm through core's
//! `BoxFuture`.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use insitubatch_core::runtime::{
    Body, BoxFuture, ByteRange, Storage, StorageError, exact_bounded, past_end, ready_body, suffix_or_whole,
};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

/// Storage options (`KEY=VALUE`) parsed as one kind of store's object_store config keys
/// (`K`: `AmazonS3ConfigKey`, `GoogleConfigKey`, ...), case-insensitively. The one parser
/// of storage options, for native URLs and the wasm S3 store alike.
///
/// # Errors
/// A message naming the unknown key and `example_keys`, without the URL: callers append it
/// last, as every error here does.
pub fn parse_options<'a, K: std::str::FromStr>(
    options: impl IntoIterator<Item = (&'a String, &'a String)>,
    kind: &str,
    example_keys: &str,
) -> Result<Vec<(K, String)>, String> {
    options
        .into_iter()
        .map(|(k, v)| match k.to_ascii_lowercase().parse::<K>() {
            Ok(key) => Ok((key, v.clone())),
            Err(_) => Err(format!(
                "unknown storage option {k:?} for {kind} stores; use object_store's config keys{example_keys}"
            )),
        })
        .collect()
}

/// Core's [`Storage`] over any [`ObjectStore`], rooted at `prefix`.
#[derive(Debug, Clone)]
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    location: String,
    can_list: bool,
    local: bool,
}

impl ObjectStoreStorage {
    /// Wrap `store`; keys are resolved under `prefix`; `location` is shown in errors.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, location: impl Into<String>) -> Self {
        Self { store, prefix, location: location.into(), can_list: true, local: false }
    }

    /// Mark this store's reads as local (object_store's `LocalFileSystem`).
    #[must_use]
    pub fn local(mut self) -> Self {
        self.local = true;
        self
    }

    /// Mark this store as unable to list (plain HTTP): a failed listing returns `Ok(None)`.
    #[must_use]
    pub fn without_listing(mut self) -> Self {
        self.can_list = false;
        self
    }

    fn path(&self, key: &str) -> Path {
        let key = key.trim_matches('/');
        let full = if self.prefix.as_ref().is_empty() {
            key.to_string()
        } else if key.is_empty() {
            self.prefix.as_ref().to_string()
        } else {
            format!("{}/{key}", self.prefix.as_ref())
        };
        Path::parse(&full).unwrap_or_else(|_| Path::from(full.as_str()))
    }

    async fn get_opts(&self, key: &str, range: Option<GetRange>) -> Result<Option<Bytes>, StorageError> {
        let opts = GetOptions { range, ..GetOptions::default() };
        match self.store.get_opts(&self.path(key), opts).await {
            Ok(r) => r.bytes().await.map(Some).map_err(map_err),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(map_err(e)),
        }
    }

    /// Exactly `start..end`, or an error: object_store clips an end past the object and
    /// fails a start past it as a generic (retryable) error. The engine asks only for ranges
    /// a shard index gave it, so a short object is a truncated shard or a corrupt index, and
    /// must not reach the decoder as if it were the chunk (core's storage contract,
    /// `insitubatch_core::conformance`).
    async fn get_bounded(&self, key: &str, start: u64, end: u64) -> Result<Option<Bytes>, StorageError> {
        // object_store has no empty range, and clips an end past the object: core decides.
        exact_bounded(start, end, || self.get_opts(key, Some(GetRange::Bounded(start..end))), || self.size(key)).await
    }

    /// The object's size (`None`: missing), from a HEAD request or the file's metadata.
    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        let head = GetOptions { head: true, ..GetOptions::default() };
        match self.store.get_opts(&self.path(key), head).await {
            Ok(r) => Ok(Some(r.meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(map_err(e)),
        }
    }
}

/// Classify an object_store error: retry only what may go away.
fn map_err(e: object_store::Error) -> StorageError {
    use object_store::Error as E;
    let msg = e.to_string();
    match e {
        // Not `JoinError` by name: that variant exists only with object_store's `tokio` feature,
        // which this crate does not ask for (it built only where a workspace sibling did, and
        // `cargo publish --dry-run` found it). A failed join is a runtime shutting down.
        E::Generic { .. } => StorageError::transient(msg),
        // A wrong secret, an expired token or a policy that forbids the read: say what to
        // check, since the server's own words (`SignatureDoesNotMatch`, `AccessDenied`) don't.
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => StorageError::permanent(format!(
            "{msg}. The store refused the credentials: check the access key id and secret (or token) passed \
             in the store options or the environment, and that they may read this bucket"
        )),
        _ => StorageError::permanent(msg),
    }
}

impl Storage for ObjectStoreStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(self.get_opts(key, None))
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            match range {
                ByteRange::Bounded { start, end } => self.get_bounded(key, start, end).await,
                ByteRange::Suffix(n) => {
                    let suffix = self.get_opts(key, Some(GetRange::Suffix(n)));
                    suffix_or_whole(n, suffix, || self.get_opts(key, None)).await
                }
            }
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async move {
            let root = self.path(prefix);
            let strip =
                if self.prefix.as_ref().is_empty() { String::new() } else { format!("{}/", self.prefix.as_ref()) };
            let mut out = Vec::new();
            let mut s = self.store.list(if root.as_ref().is_empty() { None } else { Some(&root) });
            while let Some(item) = s.next().await {
                match item {
                    Ok(meta) => {
                        let loc = meta.location.as_ref();
                        out.push(loc.strip_prefix(strip.as_str()).unwrap_or(loc).to_string());
                    }
                    Err(object_store::Error::NotFound { .. }) => break,
                    Err(_) if !self.can_list => return Ok(None),
                    Err(object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }) => {
                        return Ok(None);
                    }
                    Err(e) => return Err(map_err(e)),
                }
            }
            out.sort();
            Ok(Some(out))
        })
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn reads_are_local(&self) -> bool {
        self.local
    }

    /// A whole object or a non-empty bounded range resolves at the response's headers; the
    /// body then checks its length (a short body of a bounded range is an error, as in
    /// [`exact_bounded`]). Anything else, and a failed answer, goes through the one-step
    /// read, which says exactly what went wrong.
    fn start_read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, Result<Option<Body<'a>>, StorageError>> {
        Box::pin(async move {
            let (get, want) = match range {
                None => (None, None),
                Some(ByteRange::Bounded { start, end }) if start < end => {
                    (Some(GetRange::Bounded(start..end)), Some((start, end)))
                }
                Some(r) => return Ok(self.get_range(key, r).await?.map(ready_body)),
            };
            let opts = GetOptions { range: get, ..GetOptions::default() };
            let answer = match self.store.get_opts(&self.path(key), opts).await {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(_) => return Ok(self.read(key, range).await?.map(ready_body)),
            };
            let body: Body<'a> = Box::pin(async move {
                let b = answer.bytes().await.map_err(map_err)?;
                match want {
                    Some((start, end)) if b.len() as u64 != end - start => {
                        Err(past_end(start, end, start + b.len() as u64))
                    }
                    _ => Ok(b),
                }
            });
            Ok(Some(body))
        })
    }

    fn answers_before_body(&self) -> bool {
        true
    }
}
