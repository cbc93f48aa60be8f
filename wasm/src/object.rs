//! Signed S3 on wasm (cargo feature `s3`): object_store's `AmazonS3` (SigV4 through `ring`,
//! HTTP through reqwest's wasm backend, i.e. the global `fetch`), wrapped as core's
//! `Storage` by `insitubatch-object`, the adapter the native crate uses too, so signing,
//! retries and error text match.
//!
//! Credentials and endpoint come from `storageOptions` (object_store's config keys, e.g.
//! `aws_access_key_id`, `aws_endpoint`, `aws_region`, `aws_allow_http`): wasm has no
//! environment to read them from. Browsers also need the endpoint to answer the CORS
//! preflight of signed requests.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use insitubatch_object::ObjectStoreStorage;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;

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
    let keys = insitubatch_object::parse_options::<AmazonS3ConfigKey>(
        options,
        "s3://",
        ", e.g. aws_endpoint, aws_region, aws_access_key_id, aws_secret_access_key, aws_allow_http",
    )
    .map_err(|m| format!("{m}: {url}"))?;
    let b = keys.into_iter().fold(AmazonS3Builder::new().with_bucket_name(bucket), |b, (k, v)| b.with_config(k, v));
    let store = b.build().map_err(|e| format!("cannot open the S3 store ({e}): {url}"))?;
    let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| format!("invalid S3 prefix ({e}): {url}"))?;
    Ok(ObjectStoreStorage::new(Arc::new(store), prefix, url))
}
