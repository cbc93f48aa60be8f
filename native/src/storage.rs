//! [`Storage`] over `object_store`: local files, S3, GCS, Azure and plain HTTP(S).

use std::sync::Arc;

use insitubatch_core::runtime::Storage;
pub use insitubatch_object::ObjectStoreStorage;
use object_store::{ObjectStore, ObjectStoreScheme};
use url::Url;

use crate::NativeError;

// Reference sets are a kind of store URL (`reference+URL`) whose files are opened by this
// module's `open_storage`: one recursion, so one module (`insitubatch_native::refs` is this).
pub mod refs;
// Icechunk repositories (`icechunk+URL`) are read as a lazy reference index over the same
// stores (`insitubatch_native::icechunk`), whose chunks `refs` opens.
pub mod icechunk;

/// Apply `KEY=VALUE` options to a builder through the shared config-key parser.
macro_rules! apply_opts {
    ($builder:expr, $key_ty:ty, $options:expr, $url:expr, $kind:expr) => {{
        let keys = insitubatch_object::parse_options::<$key_ty>($options.iter().map(|(k, v)| (k, v)), $kind, "")
            .map_err(|message| NativeError::Open { message, url: $url.to_string() })?;
        keys.into_iter().fold($builder, |b, (key, value)| b.with_config(key, value))
    }};
}

fn build_err(url: &str) -> impl Fn(object_store::Error) -> NativeError + '_ {
    move |e| NativeError::Open { message: format!("cannot configure storage ({e})"), url: url.to_string() }
}

/// Open a store by URL: `file://`, a bare local path, `s3://`, `gs://`, `az://`/`abfs://`,
/// `http(s)://`, a kerchunk reference set at any of those as `reference+URL` ([`refs`]), or an
/// Icechunk repository as `icechunk+URL` ([`icechunk`]). Credentials come from the environment
/// (`AWS_*`, `GOOGLE_*`, `AZURE_*`), then `options` (`KEY=VALUE`, object_store's config keys)
/// override them.
///
/// # Errors
/// [`NativeError::Url`] for an unparsable URL, [`NativeError::Open`] for unknown schemes,
/// unknown options or builder failures.
pub fn open_storage(url: &str, options: &[(String, String)]) -> Result<Arc<dyn Storage>, NativeError> {
    if refs::reference_url(url).is_some() {
        return refs::open_references(url, options);
    }
    if icechunk::icechunk_url(url).is_some() {
        return icechunk::open_icechunk(url, options);
    }
    let parsed = parse_location(url)?;
    let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|e| NativeError::Open {
        message: format!("unsupported store URL ({e}); use file://, s3://, gs://, az://, abfs:// or http(s)://"),
        url: url.to_string(),
    })?;
    let local = scheme == ObjectStoreScheme::Local;
    let (store, can_list): (Arc<dyn ObjectStore>, bool) = match scheme {
        ObjectStoreScheme::Local => {
            if !options.is_empty() {
                let keys: Vec<&str> = options.iter().map(|(k, _)| k.as_str()).collect();
                return Err(NativeError::Core(insitubatch_core::Error::option(
                    "storage_options",
                    format!("a local store takes no `storage_options` (got {keys:?}); leave them out: {url}"),
                )));
            }
            (Arc::new(object_store::local::LocalFileSystem::new()), true)
        }
        ObjectStoreScheme::AmazonS3 => {
            let b = object_store::aws::AmazonS3Builder::from_env().with_url(parsed.as_str());
            let b = apply_opts!(b, object_store::aws::AmazonS3ConfigKey, options, url, "s3://");
            (Arc::new(b.build().map_err(build_err(url))?), true)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let b = object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(parsed.as_str());
            let b = apply_opts!(b, object_store::gcp::GoogleConfigKey, options, url, "gs://");
            (Arc::new(b.build().map_err(build_err(url))?), true)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(parsed.as_str());
            let b = apply_opts!(b, object_store::azure::AzureConfigKey, options, url, "az://");
            (Arc::new(b.build().map_err(build_err(url))?), true)
        }
        ObjectStoreScheme::Http => {
            let clean = without_user_info(&parsed);
            let base = &clean[..url::Position::BeforePath];
            // A plain http:// URL is an explicit choice (a local or internal server), so allow it.
            let mut client = object_store::ClientOptions::new().with_allow_http(parsed.scheme() == "http");
            if let Some(headers) = basic_auth(&parsed) {
                client = client.with_default_headers(headers);
            }
            let b = object_store::http::HttpBuilder::new().with_url(base).with_client_options(client);
            let b = apply_opts!(b, object_store::ClientConfigKey, options, url, "http(s)://");
            (Arc::new(b.build().map_err(build_err(url))?), false)
        }
        other => {
            return Err(NativeError::Open {
                message: format!("unsupported store scheme {other:?}"),
                url: url.to_string(),
            });
        }
    };
    let storage = ObjectStoreStorage::new(store, prefix, location_of(&parsed, url));
    let storage = if local { storage.local() } else { storage };
    Ok(Arc::new(if can_list { storage } else { storage.without_listing() }))
}

/// The location shown at the end of every storage error message: `url` as the user gave
/// it, less any user info (`https://user:token@host/...`), which would print a password.
pub(crate) fn location_of(parsed: &Url, url: &str) -> String {
    if parsed.username().is_empty() && parsed.password().is_none() {
        return url.to_string();
    }
    without_user_info(parsed).to_string()
}

fn without_user_info(parsed: &Url) -> Url {
    let mut clean = parsed.clone();
    // Both only fail for URLs that cannot carry user info, and then there is none to remove.
    let _ = clean.set_username("");
    let _ = clean.set_password(None);
    clean
}

/// `Authorization: Basic …` for a URL's user info, marked sensitive (printed as `Sensitive`
/// in debug output); `None` without user info.
fn basic_auth(parsed: &Url) -> Option<http::HeaderMap> {
    use base64::Engine;
    if parsed.username().is_empty() && parsed.password().is_none() {
        return None;
    }
    let decode = |s: &str| percent_decode(s);
    let pair = format!("{}:{}", decode(parsed.username()), decode(parsed.password().unwrap_or("")));
    let mut value =
        http::HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
            .ok()?;
    value.set_sensitive(true);
    Some(http::HeaderMap::from_iter([(http::header::AUTHORIZATION, value)]))
}

/// URL user info arrives percent-encoded (`p%40ss` for `p@ss`).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
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
