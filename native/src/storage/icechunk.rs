//! Icechunk repositories by URL: `icechunk+URL` opens the repository at `URL` (a local path or
//! `file://`, `s3://` or `http(s)://`) at one snapshot, read through core's
//! [`ReferenceStorage`]: the repository's refs, snapshots and manifests are read by the
//! `icechunk` crate (the format's own reader, both format versions), and every chunk is
//! resolved to a range of an object and read by our read path like any other: native chunks
//! are ranges of the repository's `chunks/` objects, virtual chunks ranges of the files they
//! point into, inline chunks come with the manifest. So coalescing, hedging, retries, the
//! request counters and the disk tier apply to an Icechunk repository's chunks as to a Zarr
//! store's.
//!
//! The version follows the URL's fragment: `#branch=NAME` (the default is `main`),
//! `#tag=NAME` or `#snapshot=ID`. A branch is resolved once, at open, to its snapshot, and
//! the storage's location names that snapshot, so a run (and the disk tier, which keys its
//! cache by location) reads one fixed version while writers commit.
//!
//! Not (yet) done natively: `gs://` and `az://` repositories (Python's
//! `icechunk_store` reads those through the icechunk package), and the checksums Icechunk
//! keeps for virtual chunks (the ETag or modification time of the file when the reference
//! was written): a file changed since is read as it is now, as a kerchunk reference would be.

use std::collections::{HashMap, VecDeque};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use icechunk::Repository;
use icechunk::format::manifest::{ChunkPayload, VirtualChunkRef};
use icechunk::format::{ChunkIndices, Path, SnapshotId};
use icechunk::repository::VersionInfo;
use icechunk::session::{Session, SessionErrorKind};
use icechunk::storage::{S3Credentials, S3Options, S3StaticCredentials};
use insitubatch_core::runtime::{BoxFuture, StorageError};
use insitubatch_core::{Reference, ReferenceIndex, ReferenceStorage};
use object_store::aws::AmazonS3ConfigKey;
use url::Url;

use super::refs::NativeFiles;
use super::{location_of, parse_location};
use crate::NativeError;

/// The prefix of a repository's URL: `icechunk+s3://bucket/era5#tag=v1`,
/// `icechunk+/data/era5.icechunk`.
pub const ICECHUNK_PREFIX: &str = "icechunk+";

/// The repository's own URL (fragment included), when `url` names one (`icechunk+URL`).
pub fn icechunk_url(url: &str) -> Option<&str> {
    url.strip_prefix(ICECHUNK_PREFIX)
}

/// Which snapshot of the repository to read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Version {
    Branch(String),
    Tag(String),
    Snapshot(String),
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Branch(b) => write!(f, "branch {b:?}"),
            Self::Tag(t) => write!(f, "tag {t:?}"),
            Self::Snapshot(s) => write!(f, "snapshot {s}"),
        }
    }
}

/// The version a URL's fragment names (none: branch `main`).
fn version_of(fragment: Option<&str>) -> Result<Version, String> {
    let Some(fragment) = fragment.filter(|f| !f.is_empty()) else { return Ok(Version::Branch("main".into())) };
    let (what, name) = fragment.split_once('=').unwrap_or((fragment, ""));
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy().into_owned();
    if name.is_empty() {
        return Err(format!(
            "the URL's fragment #{fragment} names no version; write #branch=NAME, #tag=NAME or #snapshot=ID"
        ));
    }
    match what {
        "branch" => Ok(Version::Branch(name)),
        "tag" => Ok(Version::Tag(name)),
        "snapshot" => Ok(Version::Snapshot(name)),
        _ => Err(format!(
            "the URL's fragment #{fragment} is not a version; write #branch=NAME, #tag=NAME or #snapshot=ID"
        )),
    }
}

/// Open the repository at `url` (`icechunk+URL`) at the version its fragment names, with
/// `options` (object_store's S3 keys) for an `s3://` repository and the stores of its chunks.
///
/// # Errors
/// [`NativeError::Open`] for a URL this build cannot open natively, no repository there, an
/// unknown branch, tag or snapshot, or a failed read (icechunk's message).
pub fn open_icechunk(
    url: &str,
    options: &[(String, String)],
) -> Result<Arc<dyn insitubatch_core::runtime::Storage>, NativeError> {
    let open_err = |message: String| NativeError::Open { message, url: url.to_string() };
    let inner = icechunk_url(url)
        .ok_or_else(|| open_err(format!("an Icechunk repository's URL starts with {ICECHUNK_PREFIX}")))?;
    let (bare, fragment) = match inner.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (inner, None),
    };
    let version = version_of(fragment).map_err(open_err)?;
    let mut repo_url = parse_location(bare)?;
    let path = repo_url.path().trim_end_matches('/').to_string();
    repo_url.set_path(&path);
    // The repository's own reads run on a runtime of its own, kept with the storage: its
    // clients' connections live on the runtime that made them.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("insitubatch-icechunk")
        .enable_all()
        .build()
        .map_err(|e| open_err(format!("cannot start a runtime to read the repository ({e})")))?;
    let session = runtime.block_on(open_session(&repo_url, options, &version)).map_err(open_err)?;
    let location = format!("{ICECHUNK_PREFIX}{}#snapshot={}", location_of(&repo_url, bare), session.snapshot_id());
    let index = IcechunkIndex {
        session: Arc::new(session),
        repo: repo_url.to_string(),
        runtime: Some(runtime),
        recent: Mutex::new(VecDeque::with_capacity(RECENT)),
    };
    let opener = Arc::new(NativeFiles::new(options));
    Ok(Arc::new(ReferenceStorage::lazy(Arc::new(index), opener, location)))
}

/// The repository at `repo_url`, read-only at `version`.
async fn open_session(repo_url: &Url, options: &[(String, String)], version: &Version) -> Result<Session, String> {
    let storage = match repo_url.scheme() {
        "file" => {
            let path = repo_url.to_file_path().map_err(|()| "not a local path".to_string())?;
            if !path.is_dir() {
                return Err("no Icechunk repository exists at this path".into());
            }
            if !options.is_empty() {
                return Err("a local repository takes no `storage_options`; leave them out".into());
            }
            icechunk::new_local_filesystem_storage(&path).await.map_err(|e| brief(&e))?
        }
        "s3" | "s3a" => {
            let (config, credentials) = s3_config(options)?;
            let bucket = repo_url.host_str().unwrap_or_default().to_string();
            let prefix = Some(repo_url.path().trim_matches('/').to_string()).filter(|p| !p.is_empty());
            icechunk::new_s3_object_store_storage(config, bucket, prefix, Some(credentials), vec![], vec![])
                .await
                .map_err(|e| brief(&e))?
        }
        "http" | "https" => {
            if !options.is_empty() {
                return Err("an http(s):// repository takes no `storage_options`; leave them out".into());
            }
            // A plain http:// URL is an explicit choice (a local or internal server), as for stores.
            let allow = HashMap::from([("allow_http".to_string(), (repo_url.scheme() == "http").to_string())]);
            icechunk::storage::new_http_storage(&format!("{repo_url}/"), Some(allow), None).map_err(|e| brief(&e))?
        }
        other => {
            return Err(format!(
                "{other}:// Icechunk repositories are not read natively yet (file://, s3:// and http(s):// are); \
                 from Python, icechunk_store(url) reads one through the icechunk package"
            ));
        }
    };
    let repo =
        Repository::open(storage).execute().await.map_err(|e| format!("cannot open the repository ({})", brief(&e)))?;
    let wanted = version.to_string();
    let version = match version {
        Version::Branch(b) => VersionInfo::BranchTipRef(b.clone()),
        Version::Tag(t) => VersionInfo::TagRef(t.clone()),
        Version::Snapshot(s) => VersionInfo::SnapshotId(
            SnapshotId::try_from(s.as_str()).map_err(|e| format!("#snapshot={s} is not a snapshot id ({e})"))?,
        ),
    };
    repo.readonly_session(&version)
        .await
        .map_err(|e| format!("cannot read the {wanted} of the repository ({})", brief(&e)))
}

/// Icechunk's S3 configuration from object_store's S3 keys, as every `s3://` store takes them:
/// from the environment's `AWS_*` variables (as object_store's `from_env` reads them), then
/// `options` over them. The endpoint, region, keys, unsigned requests, path style and plain
/// HTTP; other keys in `options` are refused, naming them (the environment's are left to
/// the credential chain). Without keys, credentials come from icechunk's own chain.
fn s3_config(options: &[(String, String)]) -> Result<(S3Options, S3Credentials), String> {
    let from_env = std::env::vars().filter(|(k, _)| k.starts_with("AWS_")).filter_map(|(k, v)| {
        let lower = k.to_ascii_lowercase();
        let key = AmazonS3ConfigKey::from_str(&lower)
            .or_else(|_| AmazonS3ConfigKey::from_str(lower.trim_start_matches("aws_")))
            .ok()?;
        supported(key).then_some((key, v))
    });
    let mut settings: Vec<(AmazonS3ConfigKey, String)> = from_env.collect();
    for (k, v) in options {
        let key = AmazonS3ConfigKey::from_str(k).map_err(|_| format!("unknown S3 storage option {k:?}"))?;
        if !supported(key) {
            return Err(format!("the S3 storage option {k:?} is not supported for Icechunk repositories"));
        }
        settings.push((key, v.clone()));
    }
    s3_settings(settings)
}

/// The object_store S3 keys [`s3_settings`] maps onto icechunk's configuration.
fn supported(key: AmazonS3ConfigKey) -> bool {
    use AmazonS3ConfigKey as K;
    matches!(
        key,
        K::Endpoint
            | K::Region
            | K::AccessKeyId
            | K::SecretAccessKey
            | K::Token
            | K::SkipSignature
            | K::VirtualHostedStyleRequest
            | K::Client(object_store::ClientConfigKey::AllowHttp)
    )
}

/// `settings` (supported keys; a later one overrides an earlier) as icechunk's S3 options and
/// credentials.
fn s3_settings(settings: Vec<(AmazonS3ConfigKey, String)>) -> Result<(S3Options, S3Credentials), String> {
    use AmazonS3ConfigKey as K;
    let mut config = S3Options::default();
    let (mut key, mut secret, mut token, mut virtual_hosted) = (None, None, None, None);
    for (k, v) in settings {
        let on = matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on");
        match k {
            K::Endpoint => config.endpoint_url = Some(v),
            K::Region => config.region = Some(v),
            K::AccessKeyId => key = Some(v),
            K::SecretAccessKey => secret = Some(v),
            K::Token => token = Some(v),
            K::SkipSignature => config.anonymous = on,
            K::VirtualHostedStyleRequest => virtual_hosted = Some(on),
            K::Client(object_store::ClientConfigKey::AllowHttp) => config.allow_http = on,
            _ => {}
        }
    }
    // A custom endpoint (MinIO, a loopback server) is path-style unless said otherwise.
    config.force_path_style = !virtual_hosted.unwrap_or(config.endpoint_url.is_none());
    let credentials = match (key, secret) {
        _ if config.anonymous => S3Credentials::Anonymous,
        (Some(access_key_id), Some(secret_access_key)) => S3Credentials::Static(S3StaticCredentials {
            access_key_id,
            secret_access_key,
            session_token: token,
            expires_after: None,
        }),
        (None, None) => S3Credentials::FromEnv,
        _ => return Err("an S3 access key and its secret go together; give both or neither".into()),
    };
    Ok((config, credentials))
}

/// A repository's snapshot as a reference index: metadata from its nodes, each chunk's
/// location from its manifests.
#[derive(Debug)]
struct IcechunkIndex {
    session: Arc<Session>,
    /// The repository's URL, without a trailing slash: native chunks are `{repo}/chunks/{id}`.
    repo: String,
    /// Where icechunk's reads run; shut down in the background on drop (a storage may be
    /// dropped on another runtime's worker, where a blocking shutdown is not allowed).
    runtime: Option<tokio::runtime::Runtime>,
    /// The last [`RECENT`] chunks resolved to a range of an object: `(url, key, offset,
    /// length)`, so a failed read of a range names the chunks in it
    /// ([`ReferenceIndex::in_file`]); a snapshot's manifests cannot be searched by file.
    recent: Mutex<VecDeque<Located>>,
}

/// A chunk resolved to a range of an object: `(url, key, offset, length)`.
type Located = (Arc<str>, String, u64, u64);

/// How many resolved chunks [`IcechunkIndex`] remembers for error messages: more than the
/// engine has in flight (a read is resolved just before it is made).
const RECENT: usize = 4096;

impl Drop for IcechunkIndex {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A key of the Zarr v3 hierarchy, as Icechunk stores it.
#[derive(Debug, PartialEq, Eq)]
enum Key {
    /// The `zarr.json` of the node at this path (`/`, `/t2m`).
    Metadata(String),
    /// A chunk of the array at this path, by its grid indices (`t2m/c/0/1`).
    Chunk(String, Vec<u32>),
}

/// What `key` is; `None` for a key Icechunk cannot hold (a Zarr v2 key, say).
fn parse_key(key: &str) -> Option<Key> {
    if key == "zarr.json" {
        return Some(Key::Metadata("/".into()));
    }
    if let Some(node) = key.strip_suffix("/zarr.json") {
        return Some(Key::Metadata(format!("/{node}")));
    }
    let (node, coords) = if key == "c" {
        ("", "")
    } else if let Some(coords) = key.strip_prefix("c/") {
        ("", coords)
    } else {
        let (node, coords) = key.rsplit_once("/c/").or_else(|| key.strip_suffix("/c").map(|n| (n, "")))?;
        (node, coords)
    };
    let indices = if coords.is_empty() {
        Vec::new()
    } else {
        coords.split('/').map(|c| c.parse::<u32>().ok()).collect::<Option<Vec<_>>>()?
    };
    Some(Key::Chunk(format!("/{node}"), indices))
}

/// Whether a session's error says there is no such node (or no array there): a key that
/// does not exist, not a failure.
fn absent(kind: &SessionErrorKind) -> bool {
    matches!(kind, SessionErrorKind::NodeNotFound { .. } | SessionErrorKind::NotAnArray { .. })
}

/// An icechunk error as the engine's: permanent (the engine's retries are for the chunk
/// reads; icechunk retries its own).
fn failed(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::permanent(format!("{what} failed in the Icechunk repository ({})", brief(&e)))
}

/// An icechunk error's message without the span trace its `Display` appends ("context: ...").
fn brief(e: &impl std::fmt::Display) -> String {
    let full = e.to_string();
    let message = full.split("\n\ncontext:").next().unwrap_or_default();
    message.trim().to_string()
}

impl IcechunkIndex {
    /// `job` on icechunk's runtime, awaited from wherever the engine runs.
    async fn on_runtime<T: Send + 'static>(
        &self,
        job: impl std::future::Future<Output = Result<T, StorageError>> + Send + 'static,
    ) -> Result<T, StorageError> {
        let Some(rt) = self.runtime.as_ref() else {
            return Err(StorageError::permanent("the Icechunk repository's reader has shut down"));
        };
        rt.spawn(job).await.map_err(|e| failed("a read", e))?
    }

    /// Keep `key`'s range of `url` among the [`RECENT`] resolved chunks.
    fn remember(&self, url: &Arc<str>, key: &str, offset: u64, length: u64) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back((Arc::clone(url), key.to_string(), offset, length));
    }

    /// What a chunk's payload is read as.
    fn reference(&self, key: &str, payload: ChunkPayload) -> Result<Option<Reference>, StorageError> {
        Ok(match payload {
            ChunkPayload::Inline(bytes) => Some(Reference::Inline(bytes)),
            ChunkPayload::Ref(r) => Some(Reference::File {
                url: format!("{}/chunks/{}", self.repo, r.id).into(),
                range: Some((r.offset, r.length)),
            }),
            ChunkPayload::Virtual(v) => Some(self.virtual_reference(key, &v)?),
            _ => None,
        })
    }

    /// A virtual chunk: a range of a file under one of the repository's virtual chunk
    /// containers (one it does not declare is refused, as Icechunk itself refuses it; and a
    /// local file only for a local repository).
    fn virtual_reference(&self, key: &str, v: &VirtualChunkRef) -> Result<Reference, StorageError> {
        let url = self.session.resolve_virtual_location(&v.location).map_err(|e| {
            StorageError::permanent(format!(
                "chunk {key:?} has a virtual location that does not resolve ({})",
                brief(&e)
            ))
        })?;
        if self.session.matching_container(&v.location).is_none() {
            return Err(StorageError::permanent(format!(
                "chunk {key:?} refers to {url}, which is under no virtual chunk container the repository declares; \
                 add a container for it to the repository's config (icechunk's set_virtual_chunk_container)"
            )));
        }
        if url.starts_with("file:") && !self.repo.starts_with("file:") {
            return Err(StorageError::permanent(format!(
                "chunk {key:?} of a repository that is not local refers to the local file {url}, which is never \
                 read for it: a repository on a server must not reach this machine's files"
            )));
        }
        Ok(Reference::File { url: url.into(), range: Some((v.offset, v.length)) })
    }
}

impl ReferenceIndex for IcechunkIndex {
    fn lookup<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Reference>, StorageError>> {
        Box::pin(async move {
            let session = Arc::clone(&self.session);
            match parse_key(key) {
                None => Ok(None),
                Some(Key::Metadata(node)) => {
                    let owned = key.to_string();
                    self.on_runtime(async move {
                        let Ok(path) = Path::try_from(node.as_str()) else { return Ok(None) };
                        match session.get_node(&path).await {
                            Ok(n) => Ok(Some(Reference::Inline(n.user_data))),
                            Err(e) if absent(&e.kind) => Ok(None),
                            Err(e) => Err(failed(&format!("reading {owned:?}"), e)),
                        }
                    })
                    .await
                }
                Some(Key::Chunk(node, coords)) => {
                    let owned = key.to_string();
                    let payload = self
                        .on_runtime(async move {
                            let Ok(path) = Path::try_from(node.as_str()) else { return Ok(None) };
                            // One node lookup per chunk: get_chunk_ref finds the node itself.
                            match session.get_chunk_ref(&path, &ChunkIndices(coords)).await {
                                Ok(payload) => Ok(payload),
                                Err(e) if absent(&e.kind) => Ok(None), // no array here: nothing at this key
                                Err(e) => Err(failed(&format!("looking up chunk {owned:?}"), e)),
                            }
                        })
                        .await?;
                    let reference = payload.map(|p| self.reference(key, p)).transpose()?.flatten();
                    if let Some(Reference::File { url, range: Some((offset, length)) }) = &reference {
                        self.remember(url, key, *offset, *length);
                    }
                    Ok(reference)
                }
            }
        })
    }

    fn in_file<'a>(&'a self, url: &'a str, start: u64, end: u64) -> BoxFuture<'a, Vec<(String, u64, u64)>> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let mut found: Vec<(String, u64, u64)> = recent
            .iter()
            .filter(|(u, _, offset, length)| u.as_ref() == url && *offset < end && offset + length > start)
            .map(|(_, key, offset, length)| (key.clone(), *offset, *length))
            .collect();
        found.sort_by_key(|(_, offset, _)| *offset);
        found.dedup();
        Box::pin(std::future::ready(found))
    }

    /// Every node's `zarr.json` under `prefix` (chunks are looked up, not listed).
    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        Box::pin(async move {
            let session = Arc::clone(&self.session);
            let paths: Vec<String> = self
                .on_runtime(async move {
                    let nodes = session.list_nodes(&Path::root()).await.map_err(|e| failed("listing", e))?;
                    nodes.map(|n| n.map(|n| n.path.to_string()).map_err(|e| failed("listing", e))).collect()
                })
                .await?;
            let keys: Vec<String> = paths
                .into_iter()
                .map(|p| match p.trim_matches('/') {
                    "" => "zarr.json".to_string(),
                    node => format!("{node}/zarr.json"),
                })
                .filter(|k| k.starts_with(prefix))
                .collect();
            Ok(keys)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_icechunk_stores_them() {
        assert_eq!(parse_key("zarr.json"), Some(Key::Metadata("/".into())));
        assert_eq!(parse_key("a/b/zarr.json"), Some(Key::Metadata("/a/b".into())));
        assert_eq!(parse_key("t2m/c/0/12"), Some(Key::Chunk("/t2m".into(), vec![0, 12])));
        assert_eq!(parse_key("g/c/x/c/3"), Some(Key::Chunk("/g/c/x".into(), vec![3])));
        assert_eq!(parse_key("c/1/2"), Some(Key::Chunk("/".into(), vec![1, 2])));
        assert_eq!(parse_key("s/c"), Some(Key::Chunk("/s".into(), vec![])));
        assert_eq!(parse_key("t2m/.zarray"), None);
        assert_eq!(parse_key("t2m/c/x"), None);
    }

    #[test]
    fn the_fragment_names_the_version() {
        assert_eq!(version_of(None), Ok(Version::Branch("main".into())));
        assert_eq!(version_of(Some("tag=v%201")), Ok(Version::Tag("v 1".into())));
        assert_eq!(version_of(Some("snapshot=ABC")), Ok(Version::Snapshot("ABC".into())));
        assert!(version_of(Some("branch=")).unwrap_err().contains("#branch=NAME"));
        assert!(version_of(Some("commit=x")).unwrap_err().contains("not a version"));
    }

    #[test]
    fn s3_options_map_onto_icechunks_and_unknown_ones_are_named() {
        let o = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let parsed = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.parse().unwrap(), v.to_string())).collect();
        let (c, creds) = s3_settings(parsed(&[
            ("endpoint", "http://127.0.0.1:9000"),
            ("allow_http", "true"),
            ("access_key_id", "k"),
            ("secret_access_key", "s"),
            ("region", "us-east-1"),
        ]))
        .unwrap();
        assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(c.allow_http && c.force_path_style && !c.anonymous);
        assert!(matches!(creds, S3Credentials::Static(s) if s.access_key_id == "k"));
        let (c, creds) = s3_settings(parsed(&[("skip_signature", "true")])).unwrap();
        assert!(c.anonymous && matches!(creds, S3Credentials::Anonymous));
        assert!(s3_config(&o(&[("checksum", "sha256")])).unwrap_err().contains("\"checksum\""));
        assert!(s3_settings(parsed(&[("access_key_id", "k")])).unwrap_err().contains("go together"));
        let (c, _) = s3_settings(parsed(&[("region", "eu-west-1")])).unwrap();
        assert!(!c.force_path_style, "AWS itself is virtual-hosted");
    }
}
