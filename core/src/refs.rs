//! Virtual Zarr: a store whose chunks are byte ranges of other files (kerchunk reference sets,
//! as kerchunk and VirtualiZarr write them over NetCDF4/HDF5, GRIB2 or TIFF archives).
//!
//! [`ReferenceStorage`] is a [`Storage`] over a [`ReferenceIndex`] (a [`ReferenceSet`] parsed
//! from JSON, or a lazy index a target supplies: native reads kerchunk's Parquet form) and the
//! stores that hold the files, opened by a [`FileOpener`] the target supplies (object_store
//! natively, `fetch` or `node:fs` in wasm). Metadata keys are answered from the set; a
//! chunk's key resolves to a range of its file. The engine asks where a chunk lives
//! ([`Storage::locate`]) and reads that range of the file's object (the key
//! [`FILE_OBJECT`]`url`), so the chunks of one file are ranges of one object: they wait in
//! the coalescer together and go out as one request, are hedged and retried, and are counted
//! like any read. A file the set names that does not exist, or is shorter than a range the
//! set gives, is a permanent error naming the chunk, never a missing chunk (which would read
//! as fill values) or a short read.
//!
//! Hand-written: zarrs has no reference store, and fsspec's `ReferenceFileSystem` (Python)
//! is what this replaces; the engine's storage seam is its own trait.

#[cfg(feature = "icechunk")]
mod icechunk;
#[cfg(feature = "parquet-refs")]
mod parquet;
mod set;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

#[cfg(all(feature = "icechunk", any(test, feature = "testing")))]
pub use icechunk::sample as icechunk_sample;
#[cfg(feature = "icechunk")]
pub use icechunk::{IcechunkIndex, IcechunkVersion, icechunk_url};
#[cfg(feature = "parquet-refs")]
pub use parquet::{DecodeInline, ParquetIndex, RecordDecoder, ResolveFile, decode_record};
pub use set::ReferenceSet;

use crate::runtime::{
    Body, BoxFuture, ByteRange, Location, MaybeSend, MaybeSync, Storage, StorageError, StorageErrorKind, join_url,
    past_end, reversed, slice_in_memory,
};

/// The start of the key under which a [`ReferenceStorage`] serves a file the set names (its
/// URL follows). A control character, which no Zarr key holds: a set with such a key is
/// refused.
pub const FILE_OBJECT: &str = "\u{1}file:";

/// The prefix of an Icechunk repository's URL on every target (`icechunk+s3://bucket/era5#tag=v1`,
/// `icechunk+/data/era5.icechunk`); defined in every build, so one without the reader can
/// say it has none.
pub const ICECHUNK_PREFIX: &str = "icechunk+";

/// At most this many references are checked, one zero-length read each, to find the one a
/// failed range read went past the end for (only after a permanent failure).
const MAX_DIAGNOSED: usize = 64;

/// What one key of a reference set holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// The bytes themselves (metadata, and the small chunks kerchunk inlines).
    Inline(Bytes),
    /// A file: the whole of it, or `(offset, length)`.
    File {
        /// The file's URL, as the set gives it (relative URLs resolved by the opener's caller).
        url: Arc<str>,
        /// `(offset, length)`; `None` for the whole file.
        range: Option<(u64, u64)>,
    },
}

/// A reference set the storage looks keys up in: in memory ([`ReferenceSet`]) or read lazily
/// (kerchunk's Parquet form, natively).
pub trait ReferenceIndex: MaybeSend + MaybeSync + Debug {
    /// The reference of `key`; `None` for a key the set does not have (a missing chunk reads
    /// as its fill value).
    fn lookup<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Reference>, StorageError>>;
    /// Every key starting with `prefix`.
    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>>;
    /// The keys whose ranges of file `url` overlap `start..end`, with their `(offset,
    /// length)`, by offset: what a failed read of that range held, for its error message. An
    /// index that cannot answer cheaply answers none.
    fn in_file<'a>(&'a self, url: &'a str, start: u64, end: u64) -> BoxFuture<'a, Vec<(String, u64, u64)>> {
        let _ = (url, start, end);
        Box::pin(std::future::ready(Vec::new()))
    }
}

/// Opens the store that holds a file of a reference set: object_store natively, `fetch` or
/// `node:fs` in wasm.
pub trait FileOpener: MaybeSend + MaybeSync + Debug {
    /// The storage that holds the file at `url`, and the file's key in it. Called once per
    /// file; a target shares one store between the files of one bucket or host.
    ///
    /// # Errors
    /// A permanent error for a URL the target cannot read (an unknown scheme, say).
    fn open(&self, url: &str) -> Result<(Arc<dyn Storage>, String), StorageError>;
}

/// A storage over a reference set: its metadata and inline chunks from the set, every other
/// chunk a range of a file.
#[derive(Debug)]
pub struct ReferenceStorage {
    index: Arc<dyn ReferenceIndex>,
    opener: Arc<dyn FileOpener>,
    /// Every file the set names, opened with it (an in-memory set); empty for a lazy index.
    /// Never changed after, so a two-step read can borrow a file's store ([`Storage::start_read`]).
    known: HashMap<String, File>,
    /// The files a lazy index has named so far, opened at their first read.
    late: Mutex<HashMap<String, File>>,
    location: String,
}

/// An opened file: its store and its key there.
#[derive(Debug, Clone)]
struct File {
    storage: Arc<dyn Storage>,
    key: String,
}

impl ReferenceStorage {
    /// A storage over an in-memory `set` whose files are all opened now by `opener`, so a
    /// URL no store can take is refused before any pass; `location` names the set in messages
    /// (`reference+s3://bucket/era5.json`).
    ///
    /// # Errors
    /// The opener's error for the first URL it refuses, naming it.
    pub fn open(
        set: ReferenceSet,
        opener: Arc<dyn FileOpener>,
        location: impl Into<String>,
    ) -> Result<Self, StorageError> {
        let mut known = HashMap::with_capacity(set.files().len());
        for url in set.files() {
            known.insert(url.to_string(), open_file(opener.as_ref(), url)?);
        }
        let late = Mutex::new(HashMap::new());
        Ok(Self { index: Arc::new(set), opener, known, late, location: location.into() })
    }

    /// A storage over a lazy `index` (kerchunk's Parquet form), each file opened by `opener`
    /// at its first read.
    pub fn lazy(index: Arc<dyn ReferenceIndex>, opener: Arc<dyn FileOpener>, location: impl Into<String>) -> Self {
        let (known, late) = (HashMap::new(), Mutex::new(HashMap::new()));
        Self { index, opener, known, late, location: location.into() }
    }

    /// The file at `url`: one the set named at open, or one opened now (a lazy index's).
    fn file(&self, url: &str) -> Result<File, StorageError> {
        if let Some(f) = self.known.get(url) {
            return Ok(f.clone());
        }
        let mut late = self.late.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = late.get(url) {
            return Ok(f.clone());
        }
        let file = open_file(self.opener.as_ref(), url)?;
        late.insert(url.to_string(), file.clone());
        Ok(file)
    }

    /// Whether every file is known at open and `all` holds for each one's store.
    fn all_known(&self, all: impl Fn(&dyn Storage) -> bool) -> bool {
        !self.known.is_empty() && self.known.values().all(|f| all(f.storage.as_ref()))
    }

    /// Where `key`'s bytes are read from: a file and its range, or the bytes (inline data, or
    /// `None` for a key the set lacks), with `range` applied.
    async fn resolve(&self, key: &str, range: Option<ByteRange>) -> Result<Resolved, StorageError> {
        if let Some(url) = key.strip_prefix(FILE_OBJECT) {
            return Ok(Resolved::File { url: url.to_string(), range, chunk: None });
        }
        Ok(match self.index.lookup(key).await? {
            None => Resolved::Bytes(None),
            Some(Reference::Inline(b)) => Resolved::Bytes(Some(slice_in_memory(&b, range)?)),
            Some(Reference::File { url, range: within }) => {
                Resolved::File { url: url.to_string(), range: file_range(within, range)?, chunk: Some(key.to_string()) }
            }
        })
    }

    /// A file read that found no object: the file is missing, which is an error (a missing
    /// chunk would read as fill values).
    async fn missing_file(&self, url: &str, range: Option<ByteRange>, chunk: Option<&str>) -> StorageError {
        let chunk = match chunk {
            Some(c) => Some(c.to_string()),
            None => {
                let (start, end) = bounds(range);
                self.index.in_file(url, start, end).await.into_iter().next().map(|(k, _, _)| k)
            }
        };
        let which = chunk.map_or_else(|| "a chunk".to_string(), |c| format!("chunk {c:?}"));
        StorageError::permanent(format!(
            "{which} refers to the file {url}, which does not exist (moved or deleted since the references were \
             made, or a relative URL resolved against another folder); remake the references or restore the file"
        ))
    }

    /// A permanent failure reading `range` of file `url`: if a reference in that range reaches
    /// past the file's end, an error naming it (a zero-length read at each one's end finds
    /// it); else `error` as it was.
    async fn explain(&self, url: &str, file: &File, range: Option<ByteRange>, error: StorageError) -> StorageError {
        if error.kind != StorageErrorKind::Permanent {
            return error;
        }
        let (start, end) = bounds(range);
        for (chunk, offset, length) in self.index.in_file(url, start, end).await.into_iter().take(MAX_DIAGNOSED) {
            let stop = offset.saturating_add(length);
            let probe = file.storage.get_range(&file.key, ByteRange::Bounded { start: stop, end: stop }).await;
            if let Err(e) = probe
                && e.kind == StorageErrorKind::Permanent
            {
                return StorageError::permanent(format!(
                    "chunk {chunk:?} is bytes {offset}..{stop} of the file {url}, which ends before byte {stop}: the \
                     file was truncated or replaced after the references were made, or the reference set is wrong"
                ));
            }
        }
        error
    }

    async fn read_resolved(&self, resolved: Resolved) -> Result<Option<Bytes>, StorageError> {
        let (url, range, chunk) = match resolved {
            Resolved::Bytes(b) => return Ok(b),
            Resolved::File { url, range, chunk } => (url, range, chunk),
        };
        let file = self.file(&url)?;
        match file.storage.read(&file.key, range).await {
            Ok(Some(b)) => Ok(Some(b)),
            Ok(None) => Err(self.missing_file(&url, range, chunk.as_deref()).await),
            Err(e) => Err(self.explain(&url, &file, range, e).await),
        }
    }
}

/// The store and key of the file at `url`, by `opener`.
fn open_file(opener: &dyn FileOpener, url: &str) -> Result<File, StorageError> {
    let (storage, key) = opener.open(url).map_err(|e| StorageError {
        kind: e.kind,
        message: format!("cannot open the file {url} that the reference set names ({})", e.message),
    })?;
    Ok(File { storage, key })
}

/// Where a key's bytes come from.
enum Resolved {
    Bytes(Option<Bytes>),
    /// `range` of file `url`, for `chunk` (the key asked for, when it is a chunk's).
    File {
        url: String,
        range: Option<ByteRange>,
        chunk: Option<String>,
    },
}

/// The range of the file that `range` of a chunk at `within` (its offset and length; `None`:
/// the whole file) is.
fn file_range(within: Option<(u64, u64)>, range: Option<ByteRange>) -> Result<Option<ByteRange>, StorageError> {
    let Some((offset, length)) = within else { return Ok(range) };
    let (start, end) = match range {
        None => (0, length),
        Some(ByteRange::Suffix(n)) => (length - n.min(length), length),
        Some(ByteRange::Bounded { start, end }) if start > end => return Err(reversed(start, end)),
        Some(ByteRange::Bounded { start, end }) if end > length => return Err(past_end(start, end, length)),
        Some(ByteRange::Bounded { start, end }) => (start, end),
    };
    match (offset.checked_add(start), offset.checked_add(end)) {
        (Some(start), Some(end)) => Ok(Some(ByteRange::Bounded { start, end })),
        _ => Err(StorageError::permanent(format!(
            "the reference's range {offset}+{length} runs past the largest byte offset (2^64); the reference is \
             corrupt: remake it"
        ))),
    }
}

/// `range` as bounds for [`ReferenceIndex::in_file`] (everything for a whole file or a suffix).
fn bounds(range: Option<ByteRange>) -> (u64, u64) {
    match range {
        Some(ByteRange::Bounded { start, end }) => (start, end.max(start.saturating_add(1))),
        _ => (0, u64::MAX),
    }
}

impl Storage for ReferenceStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        self.read(key, None)
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        self.read(key, Some(range))
    }

    /// The set's keys (never the files' objects).
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async move { self.index.keys(prefix).await.map(Some) })
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    /// Local when every file's store is (a lazy index's files are not known: remote, the
    /// default).
    fn reads_are_local(&self) -> bool {
        self.all_known(|s| s.reads_are_local())
    }

    fn read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move { self.read_resolved(self.resolve(key, range).await?).await })
    }

    /// A range of a file opened with the set resolves at its store's answer, so the engine
    /// hedges it by its time to first byte; a failure (at the answer or in the body) is
    /// explained as [`Self::read`] explains it. The rest is read whole first.
    fn start_read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, Result<Option<Body<'a>>, StorageError>> {
        Box::pin(async move {
            let resolved = self.resolve(key, range).await?;
            let file = match &resolved {
                Resolved::File { url, .. } => self.known.get(url.as_str()),
                Resolved::Bytes(_) => None,
            };
            let (Some(file), Resolved::File { url, range, chunk }) = (file, &resolved) else {
                return Ok(self.read_resolved(resolved).await?.map(crate::runtime::ready_body));
            };
            let (url, range, chunk) = (url.clone(), *range, chunk.clone());
            let body = match file.storage.start_read(&file.key, range).await {
                Ok(Some(body)) => body,
                Ok(None) => return Err(self.missing_file(&url, range, chunk.as_deref()).await),
                Err(e) => return Err(self.explain(&url, file, range, e).await),
            };
            let checked: Body<'a> = Box::pin(async move {
                match body.await {
                    Ok(b) => Ok(b),
                    Err(e) => Err(self.explain(&url, file, range, e).await),
                }
            });
            Ok(Some(checked))
        })
    }

    /// Only when every file is known at open and its store answers before its body (a lazy
    /// index's reads are whole reads, hedged at their size).
    fn answers_before_body(&self) -> bool {
        self.all_known(|s| s.answers_before_body())
    }

    /// A chunk that is a range of a file is read as that range of the file's object; a key the
    /// set does not list is missing (no request); inline data is read as the key itself.
    fn locate<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Location>, StorageError>> {
        Box::pin(async move {
            if key.starts_with(FILE_OBJECT) {
                return Ok(None);
            }
            Ok(match self.index.lookup(key).await? {
                Some(Reference::File { url, range }) => Some(Location::In {
                    object: format!("{FILE_OBJECT}{url}"),
                    range: range.map(|(offset, length)| ByteRange::Bounded { start: offset, end: offset + length }),
                }),
                Some(Reference::Inline(_)) => None,
                None => Some(Location::Missing),
            })
        })
    }

    /// A file's object is named by the file's URL.
    fn key_url(&self, key: &str) -> String {
        match key.strip_prefix(FILE_OBJECT) {
            Some(url) => url.to_string(),
            None => join_url(&self.location, key),
        }
    }
}

#[cfg(test)]
mod tests;
