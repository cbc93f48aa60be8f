//! [`Storage`] over `object_store`: local files, S3, GCS, Azure and plain HTTP(S).

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use insitubatch_core::runtime::{BoxFuture, ByteRange, Storage, StorageError};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreScheme};
use url::Url;

use crate::NativeError;

/// Core's [`Storage`] over any [`ObjectStore`], rooted at `prefix`.
#[derive(Debug, Clone)]
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    location: String,
    can_list: bool,
}

impl ObjectStoreStorage {
    /// Wrap `store`; keys are resolved under `prefix`; `location` is shown in errors.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, location: impl Into<String>) -> Self {
        Self { store, prefix, location: location.into(), can_list: true }
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
}

/// Classify an object_store error: retry only what may go away.
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
}

/// Apply `KEY=VALUE` options to a builder through its config-key parser, rejecting unknown keys.
macro_rules! apply_opts {
    ($builder:expr, $key_ty:ty, $options:expr, $url:expr) => {{
        let mut b = $builder;
        for (k, v) in $options {
            let key: $key_ty = k.to_ascii_lowercase().parse().map_err(|_| NativeError::Open {
                message: format!("unknown storage option {k:?} for this kind of store"),
                url: $url.to_string(),
            })?;
            b = b.with_config(key, v.clone());
        }
        b
    }};
}

fn build_err(url: &str) -> impl Fn(object_store::Error) -> NativeError + '_ {
    move |e| NativeError::Open { message: format!("cannot configure storage ({e})"), url: url.to_string() }
}

/// Open a store by URL: `file://`, a bare local path, `s3://`, `gs://`, `az://`/`abfs://`,
/// `http(s)://`. Credentials come from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`),
/// then `options` (`KEY=VALUE`, object_store's config keys) override them.
///
/// # Errors
/// [`NativeError::Url`] for an unparsable URL, [`NativeError::Open`] for unknown schemes,
/// unknown options or builder failures.
pub fn open_storage(url: &str, options: &[(String, String)]) -> Result<Arc<dyn Storage>, NativeError> {
    let parsed = parse_location(url)?;
    let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|e| NativeError::Open {
        message: format!("unsupported store URL ({e}); use file://, s3://, gs://, az://, abfs:// or http(s)://"),
        url: url.to_string(),
    })?;
    let (store, can_list): (Arc<dyn ObjectStore>, bool) = match scheme {
        ObjectStoreScheme::Local => {
            if !options.is_empty() {
                return Err(NativeError::Open {
                    message: "local stores take no storage options".into(),
                    url: url.to_string(),
                });
            }
            (Arc::new(object_store::local::LocalFileSystem::new()), true)
        }
        ObjectStoreScheme::AmazonS3 => {
            let b = object_store::aws::AmazonS3Builder::from_env().with_url(parsed.as_str());
            let b = apply_opts!(b, object_store::aws::AmazonS3ConfigKey, options, url);
            (Arc::new(b.build().map_err(build_err(url))?), true)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let b = object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(parsed.as_str());
            let b = apply_opts!(b, object_store::gcp::GoogleConfigKey, options, url);
            (Arc::new(b.build().map_err(build_err(url))?), true)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(parsed.as_str());
            let b = apply_opts!(b, object_store::azure::AzureConfigKey, options, url);
            (Arc::new(b.build().map_err(build_err(url))?), true)
        }
        ObjectStoreScheme::Http => {
            let base = &parsed[..url::Position::BeforePath];
            // A plain http:// URL is an explicit choice (a local or internal server), so allow it.
            let b = object_store::http::HttpBuilder::new()
                .with_url(base)
                .with_client_options(object_store::ClientOptions::new().with_allow_http(parsed.scheme() == "http"));
            let b = apply_opts!(b, object_store::ClientConfigKey, options, url);
            (Arc::new(b.build().map_err(build_err(url))?), false)
        }
        other => {
            return Err(NativeError::Open {
                message: format!("unsupported store scheme {other:?}"),
                url: url.to_string(),
            });
        }
    };
    let storage = ObjectStoreStorage::new(store, prefix, url);
    Ok(Arc::new(if can_list { storage } else { storage.without_listing() }))
}

/// Parse a URL, or turn a bare local path into an absolute `file://` URL.
pub(crate) fn parse_location(url: &str) -> Result<Url, NativeError> {
    let looks_like_url = url
        .split_once("://")
        .is_some_and(|(s, _)| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)));
    if looks_like_url {
        return Url::parse(url).map_err(|e| NativeError::Url { message: e.to_string(), url: url.to_string() });
    }
    let path = std::path::Path::new(url);
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| NativeError::Url {
                message: format!("cannot resolve a relative path ({e})"),
                url: url.to_string(),
            })?
            .join(path)
    };
    Url::from_directory_path(&abs)
        .or_else(|()| Url::from_file_path(&abs))
        .map_err(|()| NativeError::Url { message: "not a valid local path".into(), url: url.to_string() })
}
