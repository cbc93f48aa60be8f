//! Icechunk repositories by URL: `icechunk+URL` opens the repository at `URL` (a local path or
//! any URL a store takes: `file://`, `s3://`, `gs://`, `az://`, `http(s)://`) at one snapshot,
//! read through core's [`IcechunkIndex`] and [`ReferenceStorage`]: the repository's files and
//! its chunks are read through the same object_store stores as any URL, with the same
//! `storage_options`, so coalescing, hedging, retries, the request counters and the disk tier
//! apply to an Icechunk repository's chunks as to a Zarr store's.
//!
//! The version follows the URL's fragment: `#branch=NAME` (the default is `main`),
//! `#tag=NAME` or `#snapshot=ID`. A branch is resolved once, at open, to its snapshot, and
//! the storage's location names that snapshot, so a run (and the disk tier, which keys its
//! cache by location) reads one fixed version while writers commit.

use std::sync::Arc;

use insitubatch_core::{ICECHUNK_PREFIX, IcechunkIndex, ReferenceStorage};

use super::refs::NativeFiles;
use super::{location_of, parse_location};
use crate::NativeError;

/// The repository's own URL (fragment included), when `url` names one (`icechunk+URL`).
pub fn icechunk_url(url: &str) -> Option<&str> {
    url.strip_prefix(ICECHUNK_PREFIX)
}

/// Open the repository at `url` (`icechunk+URL`) at the version its fragment names, with
/// `options` for the stores of a repository that is not local and of its chunks (local
/// stores take none).
///
/// # Errors
/// [`NativeError::Open`] for no repository at the URL, an unknown branch, tag or snapshot, a
/// failed read or a malformed file (core's message).
pub fn open_icechunk(
    url: &str,
    options: &[(String, String)],
) -> Result<Arc<dyn insitubatch_core::runtime::Storage>, NativeError> {
    let open_err = |message: String| NativeError::Open { message, url: url.to_string() };
    let (bare, version) = insitubatch_core::icechunk_url(url)
        .ok_or_else(|| open_err(format!("an Icechunk repository's URL starts with {ICECHUNK_PREFIX}")))?
        .map_err(open_err)?;
    let mut repo_url = parse_location(bare)?;
    let path = repo_url.path().trim_end_matches('/').to_string();
    repo_url.set_path(&path);
    if repo_url.scheme() == "file" && repo_url.to_file_path().is_ok_and(|p| !p.is_dir()) {
        return Err(open_err("no Icechunk repository exists at this path".into()));
    }
    // The refs and the snapshot are read on a runtime of this open's, through stores of their
    // own (a client's connections live on the runtime that made them); the manifests and the
    // chunks later, through the engine's.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| open_err(format!("cannot start a runtime to read the repository ({e})")))?;
    let opener = Arc::new(NativeFiles::new(options));
    let index = runtime
        .block_on(IcechunkIndex::open(repo_url.as_str(), &version, &NativeFiles::new(options), opener.clone()))
        .map_err(open_err)?;
    let location = format!("{ICECHUNK_PREFIX}{}#snapshot={}", location_of(&repo_url, bare), index.snapshot_id());
    Ok(Arc::new(ReferenceStorage::lazy(Arc::new(index), opener, location)))
}
