//! Icechunk repositories as a lazy [`ReferenceIndex`]: the repository's refs, snapshot and
//! manifests are read through the target's [`FileOpener`] (object_store natively, `fetch` or
//! `node:fs` in wasm) and parsed by `icechunk-format`, the Icechunk project's own format crate
//! (flatbuffers, both spec versions); each chunk key resolves to a range of an object, read by
//! [`ReferenceStorage`](super::ReferenceStorage) like any reference: native chunks are ranges
//! of the repository's `chunks/` objects, virtual chunks ranges of the files they point into,
//! inline chunks come with the manifest.
//!
//! Hand-written over `icechunk-format` (not the `icechunk` crate, which native used until
//! 2026-12-07): that crate's repository layer runs on tokio and its own storage clients, so it
//! builds for neither wasm32 nor our read path; what a reader needs of it is small (which
//! snapshot a branch or tag names, where the containers of virtual chunks are, which
//! manifest holds a chunk) and is written here once, for every target.
//!
//! The version is resolved once, at open: a run reads one fixed snapshot while writers
//! commit. Not read: the checksums Icechunk keeps for virtual chunks (a file changed since
//! the reference was written is read as it is now, as a kerchunk reference would be), and a
//! repository's transaction logs and history (a reader needs neither).

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};

use icechunk_format::format_constants::{CompressionAlgorithmBin, FileTypeBin, SpecVersionBin, parse_file_header};
use icechunk_format::manifest::{ChunkPayload, Manifest, ManifestRef, VirtualChunkRef};
use icechunk_format::repo_info::RepoInfo;
use icechunk_format::snapshot::{NodeData, NodeSnapshot, Snapshot};
use icechunk_format::{ChunkIndices, IcechunkFormatErrorKind, ManifestId, Path, SnapshotId};
use serde::Deserialize;

use super::{FileOpener, ICECHUNK_PREFIX, Reference, ReferenceIndex};
use crate::runtime::{BoxFuture, Storage, StorageError};

/// The most bytes one of a repository's files (snapshot, manifest, repo info) may decode to:
/// a hostile file cannot expand without limit. A manifest this large holds tens of millions
/// of chunks; Icechunk splits larger ones.
const MAX_DECODED: u64 = 1 << 30;

/// How many resolved chunks the index remembers for error messages: more than the engine has
/// in flight (a read is resolved just before it is made).
const RECENT: usize = 4096;

/// Which snapshot of the repository to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IcechunkVersion {
    /// The tip of a branch, as it is at open.
    Branch(String),
    /// A tag.
    Tag(String),
    /// A snapshot by its id.
    Snapshot(String),
}

impl std::fmt::Display for IcechunkVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Branch(b) => write!(f, "branch {b:?}"),
            Self::Tag(t) => write!(f, "tag {t:?}"),
            Self::Snapshot(s) => write!(f, "snapshot {s}"),
        }
    }
}

/// `icechunk+URL#VERSION` split into the repository's URL and the version its fragment names
/// (`#branch=NAME`, `#tag=NAME`, `#snapshot=ID`; none: branch `main`). `None` for a URL
/// without the prefix.
///
/// # Errors
/// A fragment that names no version, or not one of the three.
pub fn icechunk_url(url: &str) -> Option<Result<(&str, IcechunkVersion), String>> {
    let inner = url.strip_prefix(ICECHUNK_PREFIX)?;
    let (bare, fragment) = inner.split_once('#').unwrap_or((inner, ""));
    Some(version_of(fragment).map(|v| (bare, v)))
}

/// The version a URL's fragment names.
fn version_of(fragment: &str) -> Result<IcechunkVersion, String> {
    if fragment.is_empty() {
        return Ok(IcechunkVersion::Branch("main".into()));
    }
    let (what, name) = fragment.split_once('=').unwrap_or((fragment, ""));
    // A branch or tag name may hold any character, `%`-escaped.
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy().into_owned();
    if name.is_empty() {
        return Err(format!(
            "the URL's fragment #{fragment} names no version; write #branch=NAME, #tag=NAME or #snapshot=ID"
        ));
    }
    match what {
        "branch" => Ok(IcechunkVersion::Branch(name)),
        "tag" => Ok(IcechunkVersion::Tag(name)),
        "snapshot" => Ok(IcechunkVersion::Snapshot(name)),
        _ => Err(format!(
            "the URL's fragment #{fragment} is not a version; write #branch=NAME, #tag=NAME or #snapshot=ID"
        )),
    }
}

/// A virtual chunk container the repository declares: virtual chunks are read only under one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct Container {
    #[serde(default)]
    name: Option<String>,
    url_prefix: String,
}

/// The part of a repository's configuration a reader needs (the rest is ignored).
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
struct Config {
    #[serde(default)]
    virtual_chunk_containers: Option<HashMap<String, Container>>,
}

/// The virtual chunk containers of a spec version 2 repository's configuration, a flexbuffer
/// (what serde's flexbuffers writes for the icechunk crate's `RepositoryConfig`).
///
/// Hand-written, and only as far as the containers: the flexbuffers crate panics on some
/// malformed buffers (an offset or a length past the end: fuzz `icechunk_repository` found it)
/// and has no verifier, and a panic kills a wasm instance. Every read here is bounds-checked;
/// anything unexpected is `None`, a malformed configuration.
mod flex {
    use std::collections::HashMap;

    use super::{Config, Container};

    /// Flexbuffer value types this reader follows (the format's numbering).
    const NULL: u8 = 0;
    const KEY: u8 = 4;
    const STRING: u8 = 5;
    const MAP: u8 = 9;

    /// A value in its slot: where the slot is, its type, the width of what it points to, and
    /// the slot's own width.
    #[derive(Debug, Clone, Copy)]
    struct Value {
        slot: usize,
        kind: u8,
        width: usize,
        slot_width: usize,
    }

    /// The unsigned integer of `width` bytes at `at`.
    fn uint(buf: &[u8], at: usize, width: usize) -> Option<usize> {
        let bytes = buf.get(at..at.checked_add(width)?)?;
        let mut le = [0u8; 8];
        le.get_mut(..width)?.copy_from_slice(bytes);
        usize::try_from(u64::from_le_bytes(le)).ok()
    }

    /// Where the offset in the slot at `at` points (offsets count back from their slot).
    fn target(buf: &[u8], at: usize, width: usize) -> Option<usize> {
        at.checked_sub(uint(buf, at, width)?)
    }

    /// A width byte's bytes (1, 2, 4 or 8), from a packed type's low bits or a width field.
    fn width_of(code: usize) -> Option<usize> {
        [1, 2, 4, 8].into_iter().find(|&w| w == code)
    }

    fn packed(byte: u8, slot: usize, slot_width: usize) -> Value {
        Value { slot, kind: byte >> 2, width: 1 << (byte & 3), slot_width }
    }

    /// The buffer's root value.
    fn root(buf: &[u8]) -> Option<Value> {
        let n = buf.len();
        let slot_width = width_of(usize::from(*buf.get(n.checked_sub(1)?)?))?;
        let kind = *buf.get(n.checked_sub(2)?)?;
        Some(packed(kind, n.checked_sub(2)?.checked_sub(slot_width)?, slot_width))
    }

    /// The NUL-terminated key at `at`.
    fn key(buf: &[u8], at: usize) -> Option<&str> {
        let rest = buf.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(rest.get(..end)?).ok()
    }

    /// A string (or key) value; `None` for null.
    fn string(buf: &[u8], v: Value) -> Option<Option<String>> {
        match v.kind {
            NULL => Some(None),
            KEY => Some(Some(key(buf, target(buf, v.slot, v.slot_width)?)?.to_string())),
            STRING => {
                let at = target(buf, v.slot, v.slot_width)?;
                let len = uint(buf, at.checked_sub(v.width)?, v.width)?;
                let bytes = buf.get(at..at.checked_add(len)?)?;
                Some(Some(std::str::from_utf8(bytes).ok()?.to_string()))
            }
            _ => None,
        }
    }

    /// A map's entries, by key; `None` when `v` is not a well-formed map.
    fn map(buf: &[u8], v: Value) -> Option<HashMap<&str, Value>> {
        if v.kind != MAP {
            return None;
        }
        let (at, w) = (target(buf, v.slot, v.slot_width)?, v.width);
        let len = uint(buf, at.checked_sub(w)?, w)?;
        let keys_width = width_of(uint(buf, at.checked_sub(2 * w)?, w)?)?;
        let keys = target(buf, at.checked_sub(3 * w)?, w)?;
        let types = at.checked_add(len.checked_mul(w)?)?;
        buf.get(types..types.checked_add(len)?)?;
        let mut entries = HashMap::with_capacity(len.min(64));
        for i in 0..len {
            let key_slot = keys.checked_add(i.checked_mul(keys_width)?)?;
            let name = key(buf, target(buf, key_slot, keys_width)?)?;
            entries.insert(name, packed(*buf.get(types + i)?, at + i * w, w));
        }
        Some(entries)
    }

    /// The configuration's virtual chunk containers.
    pub(super) fn config(buf: &[u8]) -> Option<Config> {
        let root = map(buf, root(buf)?)?;
        let Some(&containers) = root.get("virtual_chunk_containers") else { return Some(Config::default()) };
        if containers.kind == NULL {
            return Some(Config::default());
        }
        let mut found = HashMap::new();
        for (prefix, entry) in map(buf, containers)? {
            let fields = map(buf, entry)?;
            let url_prefix = string(buf, *fields.get("url_prefix")?)??;
            let name = fields.get("name").map_or(Some(None), |&n| string(buf, n))?;
            found.insert(prefix.to_string(), Container { name, url_prefix });
        }
        Some(Config { virtual_chunk_containers: Some(found) })
    }
}

/// A repository's snapshot as a reference index: metadata from its nodes, each chunk's
/// location from its manifests.
pub struct IcechunkIndex {
    /// The repository's URL, without a trailing slash: its files are `{repo}/snapshots/…`,
    /// `{repo}/chunks/…`.
    repo: String,
    /// Opens the repository's store for the manifest reads (the engine's opener: a store used
    /// on the runtime that runs the epochs).
    opener: Arc<dyn FileOpener>,
    snapshot: Snapshot,
    snapshot_id: String,
    containers: Vec<Container>,
    /// Each manifest read and parsed once, by the first lookup that needs it.
    manifests: Mutex<HashMap<ManifestId, Arc<async_lock::OnceCell<Arc<Manifest>>>>>,
    /// The last [`RECENT`] chunks resolved to a range of an object, so a failed read of a
    /// range names the chunks in it ([`ReferenceIndex::in_file`]): a snapshot's manifests
    /// cannot be searched by file.
    recent: Mutex<VecDeque<Located>>,
}

impl std::fmt::Debug for IcechunkIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcechunkIndex").field("repo", &self.repo).field("snapshot", &self.snapshot_id).finish()
    }
}

/// A chunk resolved to a range of an object: `(url, key, offset, length)`.
type Located = (Arc<str>, String, u64, u64);

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
        key.rsplit_once("/c/").or_else(|| key.strip_suffix("/c").map(|n| (n, "")))?
    };
    let indices = if coords.is_empty() {
        Vec::new()
    } else {
        coords.split('/').map(|c| c.parse::<u32>().ok()).collect::<Option<Vec<_>>>()?
    };
    Some(Key::Chunk(format!("/{node}"), indices))
}

/// The bytes of the repository's file `key` in `store`; `None` when there is none.
async fn read(store: &dyn Storage, key: &str) -> Result<Option<Vec<u8>>, String> {
    match store.get(key).await {
        Ok(bytes) => Ok(bytes.map(|b| b.to_vec())),
        Err(e) => Err(format!("cannot read {key} ({})", e.message)),
    }
}

/// One of the repository's binary files (`what`, for messages): its header checked for
/// `file_type`, its body decompressed (at most [`MAX_DECODED`] bytes).
fn unpack(bytes: &[u8], file_type: FileTypeBin, what: &str) -> Result<(SpecVersionBin, Vec<u8>), String> {
    let header = parse_file_header(bytes).map_err(|e| format!("{what} is not an Icechunk file ({})", brief(&e)))?;
    if header.file_type != file_type {
        return Err(format!("{what} is an Icechunk {:?} file, not a {file_type:?}", header.file_type));
    }
    let body = &bytes[icechunk_format::format_constants::ICECHUNK_FILE_HEADER_LEN..];
    let decoded = match header.compression {
        CompressionAlgorithmBin::None => body.to_vec(),
        CompressionAlgorithmBin::Zstd => {
            decompress(body, MAX_DECODED).map_err(|e| format!("{what} does not decompress ({e})"))?
        }
    };
    Ok((header.spec_version, decoded))
}

/// A zstd frame's content, refused past `limit` bytes (never allocated beyond it).
fn decompress(frame: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let decoder = zstd::stream::read::Decoder::new(frame).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    decoder.take(limit + 1).read_to_end(&mut out).map_err(|e| e.to_string())?;
    if out.len() as u64 > limit {
        return Err(format!("it decodes to more than {limit} bytes"));
    }
    Ok(out)
}

/// The snapshot `version` names and the repository's configuration, from its repo info file
/// (spec version 2) or its `refs/` and `config.yaml` (spec version 1).
async fn resolve(store: &dyn Storage, root: &str, version: &IcechunkVersion) -> Result<(String, Config), String> {
    if let Some(bytes) = read(store, &format!("{root}repo")).await? {
        let (spec, body) = unpack(&bytes, FileTypeBin::RepoInfo, "the repository's repo file")?;
        let info = icechunk_format::serializers::deserialize_repo_info(spec, body)
            .map_err(|e| format!("the repository's repo file is malformed ({})", brief(&e)))?;
        check_indices(&info)?;
        let id = match version {
            IcechunkVersion::Branch(b) => info.resolve_branch(b).map_err(|_| no_such(version))?.to_string(),
            IcechunkVersion::Tag(t) => info.resolve_tag(t).map_err(|_| no_such(version))?.to_string(),
            IcechunkVersion::Snapshot(s) => s.clone(),
        };
        let config = match info.config_bytes_raw() {
            Ok(Some(bytes)) => flex::config(&bytes)
                .ok_or("the repository's configuration is malformed (not the flexbuffer it should be)")?,
            Ok(None) => Config::default(),
            Err(e) => return Err(format!("the repository's configuration is malformed ({})", brief(&e))),
        };
        return Ok((id, config));
    }
    let id = match version {
        IcechunkVersion::Branch(b) => v1_ref(store, root, &format!("branch.{b}"), version).await?,
        IcechunkVersion::Tag(t) => {
            if read(store, &format!("{root}refs/tag.{t}/ref.json.deleted")).await?.is_some() {
                return Err(no_such(version));
            }
            v1_ref(store, root, &format!("tag.{t}"), version).await?
        }
        IcechunkVersion::Snapshot(s) => s.clone(),
    };
    let config = match read(store, &format!("{root}config.yaml")).await? {
        Some(yaml) => serde_yaml_ng::from_slice(&yaml).map_err(|e| format!("config.yaml is malformed ({e})"))?,
        None => Config::default(),
    };
    Ok((id, config))
}

/// The snapshot id of a spec version 1 ref (`branch.main`, `tag.v1`).
async fn v1_ref(store: &dyn Storage, root: &str, name: &str, version: &IcechunkVersion) -> Result<String, String> {
    #[derive(Deserialize)]
    struct RefData {
        snapshot: String,
    }
    let Some(bytes) = read(store, &format!("{root}refs/{name}/ref.json")).await? else {
        let main = read(store, &format!("{root}refs/branch.main/ref.json")).await?;
        return Err(if main.is_none() { "no Icechunk repository exists at this URL".into() } else { no_such(version) });
    };
    let data: RefData =
        serde_json::from_slice(&bytes).map_err(|e| format!("the {version} of the repository is malformed ({e})"))?;
    Ok(data.snapshot)
}

/// The error for a branch or tag the repository does not have.
fn no_such(version: &IcechunkVersion) -> String {
    format!("the repository has no {version}")
}

/// The verifier's limits for walking a file `icechunk-format` has verified already (with its
/// own limits, which are private): never stricter than those, so a large repository that it
/// reads is not refused here (flatbuffers' defaults allow a million tables).
const VERIFIED: flatbuffers::VerifierOptions = flatbuffers::VerifierOptions {
    max_depth: 64,
    max_tables: 50_000_000,
    max_apparent_size: usize::MAX,
    ignore_missing_null_terminator: false,
};

/// Every branch and tag of a repo file names a snapshot it lists: `icechunk-format` indexes
/// its list without a check (a panic, which kills a wasm instance, on a hostile file).
fn check_indices(info: &RepoInfo) -> Result<(), String> {
    use icechunk_format::flatbuffers::generated::Repo;
    let repo = flatbuffers::root_with_opts::<Repo<'_>>(&VERIFIED, info.bytes())
        .map_err(|e| format!("the repo file is malformed ({e})"))?;
    let snapshots = repo.snapshots().len();
    let mut refs = repo.branches().iter().chain(repo.tags().iter());
    if refs.any(|r| r.snapshot_index() as usize >= snapshots) {
        return Err("the repo file is malformed (a branch or tag names a snapshot it does not list)".into());
    }
    Ok(())
}

/// Every node of a snapshot is an array or a group: `icechunk-format` panics on another
/// (which kills a wasm instance) when it reads the node, and its verifier lets one through.
fn check_nodes(snapshot: &Snapshot) -> Result<(), String> {
    use icechunk_format::flatbuffers::generated::{NodeData as Kind, Snapshot as Flat};
    let flat = flatbuffers::root_with_opts::<Flat<'_>>(&VERIFIED, snapshot.bytes()).map_err(|e| e.to_string())?;
    for node in flat.nodes() {
        let known = match node.node_data_type() {
            Kind::Array => node.node_data_as_array().is_some(),
            Kind::Group => node.node_data_as_group().is_some(),
            _ => false,
        };
        if !known {
            return Err(format!("the node {:?} is neither an array nor a group", node.path()));
        }
    }
    Ok(())
}

impl IcechunkIndex {
    /// Open the repository at `repo` (its URL without the prefix or fragment) at `version`:
    /// its refs, configuration and snapshot read through `at_open` (a store for this one
    /// open, on the caller's runtime), its manifests later through `opener`'s.
    ///
    /// # Errors
    /// No repository at `repo`, no such branch, tag or snapshot, a failed read, or a
    /// malformed file, as a message (the caller adds the URL).
    pub async fn open(
        repo: &str,
        version: &IcechunkVersion,
        at_open: &dyn FileOpener,
        opener: Arc<dyn FileOpener>,
    ) -> Result<Self, String> {
        let repo = repo.trim_end_matches('/').to_string();
        let (store, key) = at_open.open(&repo).map_err(|e| e.message)?;
        let root = if key.is_empty() { String::new() } else { format!("{}/", key.trim_end_matches('/')) };
        let (snapshot_id, config) = resolve(store.as_ref(), &root, version).await?;
        let id = SnapshotId::try_from(snapshot_id.as_str())
            .map_err(|e| format!("{snapshot_id} is not an Icechunk snapshot id ({})", brief(&e)))?;
        let what = format!("the {version}'s snapshot {id}");
        let Some(bytes) = read(store.as_ref(), &format!("{root}snapshots/{id}")).await? else {
            return Err(if matches!(version, IcechunkVersion::Snapshot(_)) {
                no_such(version)
            } else {
                format!("{what} is missing from the repository")
            });
        };
        let (spec, body) = unpack(&bytes, FileTypeBin::Snapshot, &what)?;
        let snapshot = Snapshot::from_buffer(spec, body).map_err(|e| format!("{what} is malformed ({})", brief(&e)))?;
        check_nodes(&snapshot).map_err(|m| format!("{what} is malformed ({m})"))?;
        let containers = config.virtual_chunk_containers.unwrap_or_default().into_values().collect();
        Ok(Self {
            repo,
            opener,
            snapshot,
            snapshot_id: id.to_string(),
            containers,
            manifests: Mutex::new(HashMap::new()),
            recent: Mutex::new(VecDeque::with_capacity(RECENT)),
        })
    }

    /// The id of the snapshot this index reads (a branch resolved at open).
    pub fn snapshot_id(&self) -> &str {
        &self.snapshot_id
    }

    /// The node at `path`; `None` when there is none.
    fn node(&self, path: &str) -> Result<Option<Arc<NodeSnapshot>>, StorageError> {
        let Ok(path) = Path::try_from(path) else { return Ok(None) };
        match self.snapshot.get_node(&path) {
            Ok(node) => Ok(Some(node)),
            Err(e) if matches!(e.kind, IcechunkFormatErrorKind::NodeNotFound { .. }) => Ok(None),
            Err(e) => Err(failed(&format!("reading the node {path}"), e)),
        }
    }

    /// The manifest `id`, read and parsed at its first use.
    async fn manifest(&self, id: &ManifestId) -> Result<Arc<Manifest>, StorageError> {
        let cell = {
            let mut manifests = self.manifests.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(manifests.entry(id.clone()).or_default())
        };
        let manifest = cell
            .get_or_try_init(|| async {
                let what = format!("manifest {id}");
                let (store, key) = self.opener.open(&format!("{}/manifests/{id}", self.repo))?;
                let bytes = store
                    .get(&key)
                    .await?
                    .ok_or_else(|| StorageError::permanent(format!("{what} is missing from the repository")))?;
                let (_, body) = unpack(&bytes, FileTypeBin::Manifest, &what).map_err(StorageError::permanent)?;
                let manifest = Manifest::from_buffer(body).map_err(|e| failed(&format!("parsing {what}"), e))?;
                Ok::<_, StorageError>(Arc::new(manifest))
            })
            .await?;
        Ok(Arc::clone(manifest))
    }

    /// What the chunk at `coords` of the array at `path` holds; `None` for none (a chunk
    /// never written reads as its fill value).
    async fn payload(&self, path: &str, coords: Vec<u32>) -> Result<Option<ChunkPayload>, StorageError> {
        let Some(node) = self.node(path)? else { return Ok(None) };
        let NodeData::Array { shape, manifests, .. } = &node.node_data else { return Ok(None) };
        let coords = ChunkIndices(coords);
        if coords.0.len() != shape.len() || !shape.valid_chunk_coord(&coords) {
            return Ok(None);
        }
        let Some(holder) = manifests.iter().find(|m: &&ManifestRef| m.extents.contains(&coords.0)) else {
            return Ok(None);
        };
        let manifest = self.manifest(&holder.object_id).await?;
        match manifest.get_chunk_payload(&node.id, &coords) {
            Ok(payload) => Ok(Some(payload)),
            Err(e) if matches!(e.kind, IcechunkFormatErrorKind::ChunkCoordinatesNotFound { .. }) => Ok(None),
            Err(e) => Err(failed(&format!("looking up a chunk of {path} in manifest {}", holder.object_id), e)),
        }
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
    /// containers (Icechunk's own rule: one it does not declare is refused), and a local file
    /// only for a local repository (a repository on a server must not reach this machine's
    /// files).
    fn virtual_reference(&self, key: &str, v: &VirtualChunkRef) -> Result<Reference, StorageError> {
        let location = v.location.url();
        let relative = location.strip_prefix(icechunk_format::manifest::VCC_RELATIVE_URL_SCHEME);
        let (url, container) = match relative.map(|r| r.split_once('/').unwrap_or((r, ""))) {
            Some((name, rest)) => {
                let c = self.containers.iter().find(|c| c.name.as_deref() == Some(name));
                (c.map_or_else(|| location.to_string(), |c| format!("{}{rest}", c.url_prefix)), c)
            }
            None => (location.to_string(), self.containers.iter().find(|c| location.starts_with(&c.url_prefix))),
        };
        if container.is_none() {
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

    /// Keep `key`'s range of `url` among the [`RECENT`] resolved chunks.
    fn remember(&self, url: &Arc<str>, key: &str, offset: u64, length: u64) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back((Arc::clone(url), key.to_string(), offset, length));
    }
}

/// A format error as the engine's: permanent (the engine's retries are for reads).
fn failed(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::permanent(format!("{what} failed in the Icechunk repository ({})", brief(&e)))
}

/// An `icechunk-format` error's message without the span trace its `Display` appends
/// ("context: ...").
fn brief(e: &impl std::fmt::Display) -> String {
    let full = e.to_string();
    full.split("\n\ncontext:").next().unwrap_or_default().trim().to_string()
}

impl ReferenceIndex for IcechunkIndex {
    fn lookup<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Reference>, StorageError>> {
        Box::pin(async move {
            match parse_key(key) {
                None => Ok(None),
                Some(Key::Metadata(path)) => Ok(self.node(&path)?.map(|n| Reference::Inline(n.user_data.clone()))),
                Some(Key::Chunk(path, coords)) => {
                    let payload = self.payload(&path, coords).await?;
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
            .filter(|(u, _, offset, length)| {
                u.as_ref() == url && *offset < end && offset.saturating_add(*length) > start
            })
            .map(|(_, key, offset, length)| (key.clone(), *offset, *length))
            .collect();
        found.sort_by_key(|(_, offset, _)| *offset);
        found.dedup();
        Box::pin(std::future::ready(found))
    }

    /// Every node's `zarr.json` under `prefix` (chunks are looked up, not listed).
    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        let keys = self
            .snapshot
            .iter()
            .map(|node| {
                let node = node.map_err(|e| failed("listing the nodes", e))?;
                Ok(match node.path.to_string().trim_matches('/') {
                    "" => "zarr.json".to_string(),
                    path => format!("{path}/zarr.json"),
                })
            })
            .filter(|k| k.as_ref().map_or(true, |k: &String| k.starts_with(prefix)))
            .collect();
        Box::pin(std::future::ready(keys))
    }
}

/// A small spec version 2 repository, written with `icechunk-format`'s own writers: for this
/// module's tests and the `icechunk_repository` fuzz target (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub mod sample {
    use std::collections::HashMap;

    use bytes::Bytes;
    use icechunk_format::format_constants::{
        CompressionAlgorithmBin, FileTypeBin, ICECHUNK_FORMAT_MAGIC_BYTES, SpecVersionBin,
    };
    use icechunk_format::manifest::{
        ChunkInfo, ChunkPayload, ChunkRef, Manifest, ManifestExtents, ManifestRef, VirtualChunkLocation,
        VirtualChunkRef,
    };
    use icechunk_format::repo_info::RepoInfo;
    use icechunk_format::snapshot::{ArrayShape, ManifestFileInfo, NodeData, NodeSnapshot, Snapshot, SnapshotInfo};
    use icechunk_format::{ChunkId, ChunkIndices, ManifestId, NodeId, Path, SnapshotId};

    /// Which of the repository's files.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum File {
        /// `repo`: its branches, tags and configuration.
        RepoInfo,
        /// `snapshots/ID`: its nodes.
        Snapshot,
        /// `manifests/ID`: its chunks' locations.
        Manifest,
    }

    /// The repository at key `repo/` of one store: array `a` of 4 one-byte chunks (inline,
    /// native, virtual by its container's name, virtual outside every container; the container
    /// `data` is `file://host/files/`), under branch `main`.
    #[derive(Debug)]
    pub struct Repository {
        /// Every object (`repo/...`, and the files of its virtual chunks).
        pub files: Vec<(String, Bytes)>,
        /// Each binary file's key and its body before the header and compression.
        pub bodies: Vec<(File, String, Vec<u8>)>,
        /// The id of `main`'s snapshot.
        pub snapshot: String,
    }

    /// A file's bytes as Icechunk writes them: its header, then the body (zstd when `compress`).
    ///
    /// # Panics
    /// If zstd cannot compress (it always can).
    pub fn pack(file: File, body: &[u8], compress: bool) -> Bytes {
        let file_type = match file {
            File::RepoInfo => FileTypeBin::RepoInfo,
            File::Snapshot => FileTypeBin::Snapshot,
            File::Manifest => FileTypeBin::Manifest,
        };
        let compression = if compress { CompressionAlgorithmBin::Zstd } else { CompressionAlgorithmBin::None };
        let mut out = ICECHUNK_FORMAT_MAGIC_BYTES.to_vec();
        out.extend_from_slice(format!("{:<24}", "ic-test").as_bytes());
        out.extend([SpecVersionBin::V2 as u8, file_type as u8, compression as u8]);
        if compress {
            out.extend(zstd::bulk::compress(body, 3).expect("zstd compresses"));
        } else {
            out.extend_from_slice(body);
        }
        Bytes::from(out)
    }

    /// How the icechunk crate's configuration serializes its containers (the store too: a
    /// reader skips it).
    #[derive(serde::Serialize)]
    struct WrittenConfig {
        virtual_chunk_containers: HashMap<String, WrittenContainer>,
        caching: Option<u32>,
    }
    #[derive(serde::Serialize)]
    struct WrittenContainer {
        name: Option<String>,
        url_prefix: String,
        store: WrittenStore,
    }
    #[derive(serde::Serialize)]
    enum WrittenStore {
        LocalFileSystem(String),
    }

    /// The chunks of array `a`, in order.
    fn chunks(chunk: &ChunkId) -> [ChunkPayload; 4] {
        let virtual_at =
            |location, offset| ChunkPayload::Virtual(VirtualChunkRef { location, offset, length: 1, checksum: None });
        [
            ChunkPayload::Inline(Bytes::from_static(b"A")),
            ChunkPayload::Ref(ChunkRef { id: chunk.clone(), offset: 1, length: 1 }),
            virtual_at(VirtualChunkLocation::from_vcc_path("data", "f.bin").expect("a vcc path"), 2),
            virtual_at(VirtualChunkLocation::from_url("file://host/elsewhere/g.bin").expect("a URL"), 0),
        ]
    }

    /// The repository, its files compressed when `compress`.
    ///
    /// # Panics
    /// If `icechunk-format` refuses what it is given (a bug here).
    pub fn repository(compress: bool) -> Repository {
        let (node, chunk, manifest_id) = (NodeId::new([3; 8]), ChunkId::new([4; 12]), ManifestId::new([2; 12]));
        let infos = chunks(&chunk).into_iter().zip(0u32..).map(|(payload, i)| ChunkInfo {
            node: node.clone(),
            coord: ChunkIndices(vec![i]),
            payload,
        });
        let manifest = futures::executor::block_on(Manifest::from_iter(&manifest_id, infos, None))
            .expect("a manifest")
            .expect("with chunks");
        let array = r#"{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"uint8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[1]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,"codecs":[{"name":"bytes"}]}"#;
        let extents = ManifestExtents::new(&[0], &[4]);
        let nodes = [
            NodeSnapshot {
                id: NodeId::new([1; 8]),
                path: Path::root(),
                user_data: Bytes::from_static(br#"{"zarr_format":3,"node_type":"group"}"#),
                node_data: NodeData::Group,
            },
            NodeSnapshot {
                id: node,
                path: Path::try_from("/a").expect("a path"),
                user_data: Bytes::from(array),
                node_data: NodeData::Array {
                    shape: ArrayShape::new([(4, 4)]).expect("a shape"),
                    dimension_names: None,
                    manifests: vec![ManifestRef { object_id: manifest_id.clone(), extents }],
                },
            },
        ];
        let id = SnapshotId::new([1; 12]);
        let listed = vec![ManifestFileInfo::new(&manifest, manifest.bytes().len() as u64)];
        let snapshot = Snapshot::from_iter(
            Some(id.clone()),
            None,
            SpecVersionBin::V2,
            "sample",
            None,
            listed,
            None,
            nodes.map(Ok),
        )
        .expect("a snapshot");
        let container = WrittenContainer {
            name: Some("data".into()),
            url_prefix: "file://host/files/".into(),
            store: WrittenStore::LocalFileSystem("/files".into()),
        };
        let config = WrittenConfig {
            virtual_chunk_containers: HashMap::from([("file://host/files/".to_string(), container)]),
            caching: None,
        };
        let first = SnapshotInfo::from_snapshot_file(&snapshot).expect("its info");
        let info = RepoInfo::initial(SpecVersionBin::V2, first, 100, Some(&config), None);
        let bodies = vec![
            (File::RepoInfo, "repo/repo".to_string(), info.bytes().to_vec()),
            (File::Snapshot, format!("repo/snapshots/{id}"), snapshot.bytes().to_vec()),
            (File::Manifest, format!("repo/manifests/{manifest_id}"), manifest.bytes().to_vec()),
        ];
        let mut files: Vec<(String, Bytes)> =
            bodies.iter().map(|(file, key, body)| (key.clone(), pack(*file, body, compress))).collect();
        files.push((format!("repo/chunks/{chunk}"), Bytes::from_static(b"xBx")));
        files.push(("files/f.bin".into(), Bytes::from_static(b"xxC")));
        files.push(("elsewhere/g.bin".into(), Bytes::from_static(b"D")));
        Repository { files, bodies, snapshot: id.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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
        let version = |url: &str| icechunk_url(url).map(|r| r.map(|(_, v)| v));
        assert_eq!(version("icechunk+/r"), Some(Ok(IcechunkVersion::Branch("main".into()))));
        assert_eq!(version("icechunk+/r#tag=v%201"), Some(Ok(IcechunkVersion::Tag("v 1".into()))));
        assert_eq!(version("icechunk+s3://b/r#snapshot=ABC"), Some(Ok(IcechunkVersion::Snapshot("ABC".into()))));
        assert!(version("icechunk+/r#branch=").unwrap().unwrap_err().contains("#branch=NAME"));
        assert!(version("icechunk+/r#commit=x").unwrap().unwrap_err().contains("not a version"));
        assert_eq!(version("/r"), None);
        assert_eq!(icechunk_url("icechunk+/a/r#tag=x").unwrap().unwrap().0, "/a/r");
    }

    #[test]
    fn a_spec_version_1_config_names_its_containers() {
        let yaml = "inline_chunk_threshold_bytes: null\nvirtual_chunk_containers:\n  file:///data/:\n    name: null\n    \
                    url_prefix: file:///data/\n    store: !local_file_system /data\nmanifest: null\n";
        let config: Config = serde_yaml_ng::from_str(yaml).unwrap();
        let containers = config.virtual_chunk_containers.unwrap();
        assert_eq!(containers["file:///data/"].url_prefix, "file:///data/");
        let none: Config = serde_yaml_ng::from_str("compression: null\n").unwrap();
        assert!(none.virtual_chunk_containers.is_none());
    }

    #[test]
    fn a_file_that_is_not_icechunks_or_decodes_too_far_is_refused() {
        assert!(unpack(b"PAR1", FileTypeBin::Snapshot, "x").unwrap_err().contains("not an Icechunk file"));
        // A zstd frame of zeros larger than the bound: refused, not allocated.
        let big = zstd::bulk::compress(&vec![0u8; 1 << 20], 1).unwrap();
        assert_eq!(decompress(&big, 1 << 20).unwrap().len(), 1 << 20);
        let e = decompress(&big, 4096).unwrap_err();
        assert!(e.contains("more than 4096 bytes"), "{e}");
        let mut header = icechunk_format::format_constants::ICECHUNK_FORMAT_MAGIC_BYTES.to_vec();
        header.resize(icechunk_format::format_constants::ICECHUNK_FILE_HEADER_LEN, b' ');
        let n = header.len();
        header[n - 3] = SpecVersionBin::V1 as u8;
        header[n - 2] = FileTypeBin::Manifest as u8;
        header[n - 1] = CompressionAlgorithmBin::Zstd as u8;
        let err = unpack(&header, FileTypeBin::Snapshot, "x").unwrap_err();
        assert!(err.contains("not a Snapshot"), "{err}");
    }

    use bytes::Bytes;

    use crate::testing::MemoryFiles;

    #[test]
    fn a_spec_version_2_repository_reads_through_its_repo_file() {
        let files = crate::testing::MemoryStorage::new();
        let repository = sample::repository(true);
        for (key, bytes) in &repository.files {
            files.insert(key, bytes.clone());
        }
        let id = repository.snapshot;
        let opener: Arc<dyn FileOpener> = Arc::new(MemoryFiles(files.clone()));
        let open = |version: IcechunkVersion| {
            futures::executor::block_on(IcechunkIndex::open(
                "file://host/repo/",
                &version,
                opener.as_ref(),
                Arc::clone(&opener),
            ))
        };
        let index = open(IcechunkVersion::Branch("main".into())).unwrap();
        assert_eq!(index.snapshot_id(), id);
        let storage = super::super::ReferenceStorage::lazy(Arc::new(index), Arc::clone(&opener), "icechunk+test");
        let get = |key: &str| futures::executor::block_on(storage.get(key));
        assert!(get("zarr.json").unwrap().unwrap().starts_with(b"{\"zarr_format\":3"));
        assert!(get("a/zarr.json").unwrap().is_some());
        assert_eq!(get("a/c/0").unwrap().unwrap().as_ref(), b"A", "inline");
        assert_eq!(get("a/c/1").unwrap().unwrap().as_ref(), b"B", "native");
        assert_eq!(get("a/c/2").unwrap().unwrap().as_ref(), b"C", "virtual, by its container's name");
        let outside = get("a/c/3").unwrap_err().message;
        assert!(outside.contains("\"a/c/3\"") && outside.contains("under no virtual chunk container"), "{outside}");
        assert_eq!(get("a/c/4").unwrap(), None, "past the array");
        assert_eq!(get("b/zarr.json").unwrap(), None, "no such node");
        let keys = futures::executor::block_on(storage.list("")).unwrap().unwrap();
        assert_eq!(keys, vec!["zarr.json".to_string(), "a/zarr.json".to_string()]);
        assert_eq!(open(IcechunkVersion::Snapshot(id.clone())).unwrap().snapshot_id(), id);
        assert_eq!(open(IcechunkVersion::Tag("v1".into())).unwrap_err(), "the repository has no tag \"v1\"");
        assert_eq!(open(IcechunkVersion::Branch("dev".into())).unwrap_err(), "the repository has no branch \"dev\"");
        let missing = open(IcechunkVersion::Snapshot(SnapshotId::new([9; 12]).to_string())).unwrap_err();
        assert!(missing.starts_with("the repository has no snapshot"), "{missing}");
        // Uncompressed files read as well (Icechunk's header allows them).
        for (key, bytes) in sample::repository(false).files {
            files.insert(key, bytes);
        }
        assert_eq!(open(IcechunkVersion::Branch("main".into())).unwrap().snapshot_id(), id);
        files.insert("repo/repo", Bytes::from_static(b"not a repo file"));
        assert!(open(IcechunkVersion::Branch("main".into())).unwrap_err().contains("not an Icechunk file"));
    }

    /// The hand-written reader gives what serde's flexbuffers gives for the icechunk crate's
    /// configuration, and nothing but `None` or a configuration for any cut or flipped byte.
    #[test]
    fn the_configuration_reads_as_serdes_flexbuffers_reads_it() {
        let repository = sample::repository(false);
        let (_, _, body) = repository.bodies.iter().find(|(f, _, _)| *f == sample::File::RepoInfo).unwrap();
        let info = RepoInfo::from_buffer(body.clone()).unwrap();
        let raw = info.config_bytes_raw().unwrap().unwrap();
        let serdes: Config = info.config().unwrap().unwrap();
        assert_eq!(flex::config(&raw), Some(serdes));
        assert_eq!(flex::config(&raw).unwrap().virtual_chunk_containers.unwrap().len(), 1);
        for cut in 0..raw.len() {
            let _ = flex::config(&raw[..cut]);
        }
        for i in 0..raw.len() {
            let mut flipped = raw.clone();
            flipped[i] ^= 0xff;
            let _ = flex::config(&flipped);
        }
    }

    #[test]
    fn no_repository_is_named_as_none() {
        let files = crate::testing::MemoryStorage::new();
        let opener: Arc<dyn FileOpener> = Arc::new(MemoryFiles(files));
        let version = IcechunkVersion::Branch("main".into());
        let e = futures::executor::block_on(IcechunkIndex::open(
            "file://host/nothing",
            &version,
            opener.as_ref(),
            Arc::clone(&opener),
        ))
        .unwrap_err();
        assert_eq!(e, "no Icechunk repository exists at this URL");
    }
}
