//! Signed S3 on wasm (cargo feature `s3`): object_store's `AmazonS3` (SigV4 through `ring`,
//! HTTP through reqwest's wasm backend, i.e. the global `fetch`), wrapped as core's
//! [`Storage`]. The same library the native crate uses for `s3://`, so signing, retries and
//! error text match; the adapter mirrors `insitubatch_native::storage::ObjectStoreStorage`,
//! which cannot be shared because the native crate depends on tokio.
//!
//! Credentials and endpoint come from `storageOptions` (object_store's config keys, e.g.
//! `aws_access_key_id`, `aws_endpoint`, `aws_region`, `aws_allow_http`): wasm has no
//! environment to read them from. Browsers also need the endpoint to answer the CORS
//! preflight of signed requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use insitubatch_core::runtime::{BoxFuture, ByteRange, Storage, StorageError};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

/// Core's [`Storage`] over an [`ObjectStore`], rooted at `prefix`.
#[derive(Debug, Clone)]
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    location: String,
}

/// Open `s3://bucket/prefix` with `options` (object_store's S3 config keys).
///
/// # Errors
/// A message naming the unknown option or the builder's complaint, with the URL last.
pub fn open_s3(url: &str, options: &BTreeMap<String, String>) -> Result<ObjectStoreStorage, String> {
    let rest = url.strip_prefix("s3://").ok_or_else(|| format!("not an s3:// URL: {url}"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("the S3 URL has no bucket; use s3://BUCKET/PREFIX: {url}"));
    }
    let mut b = AmazonS3Builder::new().with_bucket_name(bucket);
    for (k, v) in options {
        let key: AmazonS3ConfigKey = k.to_ascii_lowercase().parse().map_err(|_| {
            format!(
                "unknown storage option {k:?} for s3:// stores; use object_store's keys, e.g. aws_endpoint, \
                 aws_region, aws_access_key_id, aws_secret_access_key, aws_allow_http: {url}"
            )
        })?;
        b = b.with_config(key, v.clone());
    }
    let store = b.build().map_err(|e| format!("cannot open the S3 store ({e}): {url}"))?;
    let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| format!("invalid S3 prefix ({e}): {url}"))?;
    Ok(ObjectStoreStorage { store: Arc::new(store), prefix, location: url.to_string() })
}

impl ObjectStoreStorage {
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
}

/// Classify an object_store error: retry only what may go away (as the native adapter).
fn map_err(e: object_store::Error) -> StorageError {
    use object_store::Error as E;
    let msg = e.to_string();
    match e {
        E::Generic { .. } | E::JoinError { .. } => StorageError::transient(msg),
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
                ByteRange::Bounded { start, end } => {
                    if end <= start {
                        return Ok(self.get_opts(key, None).await?.map(|_| Bytes::new()));
                    }
                    self.get_opts(key, Some(GetRange::Bounded(start..end))).await
                }
                ByteRange::Suffix(n) => match self.get_opts(key, Some(GetRange::Suffix(n))).await {
                    Ok(b) => Ok(b),
                    // Some stores reject a suffix longer than the object: take it whole.
                    Err(e) => match self.get_opts(key, None).await {
                        Ok(Some(b)) if (b.len() as u64) <= n => Ok(Some(b)),
                        Ok(Some(b)) => Ok(Some(b.slice(b.len() - n as usize..))),
                        Ok(None) => Ok(None),
                        Err(_) => Err(e),
                    },
                },
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
}
