//! The disk tier: decoded chunks in memory-mapped `.npy` files under a `cache_dir`.
//!
//! - **Spill** (`cache_dir` alone): each loaded chunk is written to an unnamed file (created,
//!   mapped, unlinked at once) and served from the mapping, so residency lives in the page
//!   cache rather than the heap, under the same byte budget; nothing is left after a crash.
//! - **Persist** (`persist = true`): chunk files keep their names and a log records them, so
//!   an evicted chunk, a later epoch or a later run revives them zero-copy, with no fetch and
//!   no decode.
//! - **Read-only** (`readonly_cache = true`): a complete warm cache shared by many
//!   processes; writes nothing, and a miss is an error naming the chunk.
//! - **Shared** (`shared_cache = true`, with `persist`): any number of processes fill and
//!   read one directory together (a machine's ranks). A chunk file is linked into place only
//!   if no other process got there first, so each chunk is written once; a process finds the
//!   chunks others wrote after it opened by their names (which hold the array's fingerprint).
//!
//! Safety across processes: one writer, many readers, or many fillers per directory
//! ([`lock`]); files are written to a temporary name and linked or renamed into place, never
//! truncated, so a mapping held elsewhere keeps its own inode and keeps reading real data,
//! and a killed process leaves only a temporary file, which never reads as a chunk. Identity
//! is per array: a changed pipeline over one array is refused as stale, naming it, and
//! `reset_stale_cache` drops only that array's files.
//!
//! Nothing on disk is served unchecked: every chunk file ends with a commit record over its
//! name, header and data ([`npy::check_file`]), checked when a revive maps it, once per file
//! version per process (`verified.rs`), on the pool; a file that fails is a miss (read from the
//! store and written again), or, read-only, an error naming it. Who may write the folder is
//! checked when it opens ([`modes`]): a folder writable by every user is refused, and what
//! the tier creates is its owner's alone (or its group's, for `shared_cache`).

pub mod lock;
pub mod log;
pub mod modes;
pub mod npy;
mod verified;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use insitubatch_core::{ArrayIdentity, CacheFlags, ChunkTier, CommitRecord, TargetAbilities, TierCounters, TierOpener};
use insitubatch_core::{DType, Error};
use memmap2::Mmap;

use log::{Appender, Entry};
use modes::Modes;

/// Where and how to keep decoded chunks on disk.
#[derive(Debug, Clone, Default)]
pub struct CacheOptions {
    /// The cache directory (local disk; created by a writer).
    pub dir: PathBuf,
    /// Keep chunk files and the log after eviction and after the run.
    pub persist: bool,
    /// Read a complete warm cache; write nothing; a miss raises. Takes the lock shared.
    pub readonly: bool,
    /// Drop the cached chunks of arrays whose pipeline changed instead of refusing.
    pub reset_stale: bool,
    /// Fill and read the directory together with other processes (needs `persist`).
    pub shared: bool,
}

/// `t2m/level` → `t2m_level`: file-name safe. Collisions are harmless because the
/// fingerprint (which hashes the real path) is part of every file name.
fn safe_name(path: &str) -> String {
    let s: String = path.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if s.is_empty() { "root".into() } else { s }
}

impl CacheOptions {
    /// The native tier the spec's cache flags describe (core's [`CacheFlags`], their rules
    /// checked there), with what only this target checks: its abilities, and that a
    /// read-only directory exists.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the flag and what to pass.
    pub fn from_flags(flags: &CacheFlags) -> Result<Self, Error> {
        flags.check_for(&TargetAbilities::NATIVE)?;
        let options = Self {
            dir: PathBuf::from(&flags.dir),
            persist: flags.persist,
            readonly: flags.readonly,
            reset_stale: flags.reset_stale,
            shared: flags.shared,
        };
        options.validate()?;
        Ok(options)
    }

    /// Check the combination before anything touches the disk: core's rules
    /// ([`CacheFlags::check`]), then that a read-only cache exists.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for flags that contradict each other, or a read-only cache
    /// that does not exist.
    pub fn validate(&self) -> Result<(), Error> {
        let flags = CacheFlags {
            dir: self.dir.display().to_string(),
            persist: self.persist,
            readonly: self.readonly,
            reset_stale: self.reset_stale,
            shared: self.shared,
        };
        flags.check()?;
        if self.readonly && !self.dir.is_dir() {
            return Err(Error::option(
                "readonly_cache",
                format!(
                    "`readonly_cache` requires an existing `cache_dir`, and this one does not exist; warm it first \
                     with `persist`: {}",
                    self.dir.display()
                ),
            ));
        }
        Ok(())
    }
}

impl TierOpener for CacheOptions {
    fn open(&self, arrays: &[ArrayIdentity]) -> Result<Arc<dyn ChunkTier>, Error> {
        Ok(Arc::new(DiskTier::open(self, arrays)?))
    }
}

/// An open cache directory (holds the lock until dropped).
#[derive(Debug)]
pub struct DiskTier {
    dir: PathBuf,
    persist: bool,
    readonly: bool,
    arrays: Vec<ArrayIdentity>,
    /// (array index, chunk) → its persisted file.
    index: Mutex<HashMap<(u32, u64), Entry>>,
    log: Option<Mutex<Appender>>,
    revived: AtomicU64,
    stored: AtomicU64,
    misses: AtomicU64,
    warned_missing_file: AtomicBool,
    warned_damaged: AtomicBool,
    warned_write: AtomicBool,
    /// The modes of the files this opener creates.
    modes: Modes,
    /// Set when the directory is on a network filesystem.
    pub warning: Option<String>,
    /// Declared last: fields drop in order, so the lock is released after everything else.
    lock: lock::DirLock,
}

impl DiskTier {
    /// Lock, validate and (for persisted caches) load the log.
    ///
    /// # Errors
    /// A conflicting lock, a stale pipeline (without `reset_stale`), a corrupt log, or a
    /// directory that cannot be created.
    pub fn open(opts: &CacheOptions, arrays: &[ArrayIdentity]) -> Result<Self, Error> {
        opts.validate()?;
        let dir = opts.dir.clone();
        if !opts.readonly {
            modes::create_folder(&dir).map_err(|e| Error::Cache {
                message: format!("cannot create cache_dir ({e}); check the path and permissions"),
                key: dir.display().to_string(),
            })?;
        }
        let modes = modes::check_folder(&dir, opts.shared)?;
        let (lock, alone) = if opts.shared {
            lock::acquire_filler(&dir, modes)?
        } else {
            (lock::acquire(&dir, opts.readonly, modes)?, !opts.readonly)
        };
        let warning = lock::network_fs_warning(&dir);
        if let Some(w) = &warning {
            tracing::warn!("{w}");
        }
        if alone {
            sweep_temp_files(&dir);
        }
        let mut tier = Self {
            dir,
            persist: opts.persist || opts.readonly,
            readonly: opts.readonly,
            arrays: arrays.to_vec(),
            index: Mutex::new(HashMap::new()),
            log: None,
            revived: AtomicU64::new(0),
            stored: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            warned_missing_file: AtomicBool::new(false),
            warned_damaged: AtomicBool::new(false),
            warned_write: AtomicBool::new(false),
            modes,
            warning,
            lock,
        };
        if tier.persist {
            tier.load_log(opts.reset_stale, alone)?;
        }
        tier.lock.opened(&tier.dir)?;
        Ok(tier)
    }

    fn key(&self) -> String {
        self.dir.display().to_string()
    }

    /// Load the log and check staleness. Only a process `alone` with the directory repairs
    /// or resets: other processes may be reading the files a reset deletes, or appending to
    /// the log a repair replaces (their torn tail is a line still being written).
    fn load_log(&mut self, reset_stale: bool, alone: bool) -> Result<(), Error> {
        let log_path = self.dir.join(log::LOG_FILE);
        let loaded = log::load(&log_path)?;
        let mut rewrite = loaded.torn_tail;
        let mut kept: Vec<Entry> = Vec::new();
        if let Some(other) = &loaded.other_version {
            if self.readonly || !reset_stale {
                return Err(Error::Cache {
                    message: format!(
                        "the cache log was written in another format ({other}), so none of its chunks can be trusted \
                         (stale: log format changed). {}",
                        if self.readonly {
                            "Re-warm it with a writer (persist=True, reset_stale_cache=True), then open it read-only"
                        } else {
                            "Pass reset_stale_cache=True to delete its chunk files and start cold"
                        }
                    ),
                    key: log_path.display().to_string(),
                });
            }
            if !alone {
                return Err(self.reset_needs_alone());
            }
            delete_listed_files(&self.dir, &log_path);
            rewrite = true;
        } else {
            let by_path: HashMap<&str, usize> =
                self.arrays.iter().enumerate().map(|(i, a)| (a.path.as_str(), i)).collect();
            let stale: BTreeSet<String> = loaded
                .entries
                .iter()
                .filter(|e| by_path.get(e.array.as_str()).is_some_and(|&i| self.arrays[i].fingerprint != e.pipeline))
                .map(|e| e.array.clone())
                .collect();
            if !stale.is_empty() && (self.readonly || !reset_stale) {
                let names: Vec<&String> = stale.iter().collect();
                return Err(Error::Cache {
                    message: format!(
                        "the cached chunks of {names:?} are stale: the pipeline over them (chunk transforms, codecs, \
                         geometry or store) changed since they were written. {}",
                        if self.readonly {
                            "A read-only opener cannot reset them; re-warm with a writer passing \
                             reset_stale_cache=True"
                        } else {
                            "Pass reset_stale_cache=True to delete only these arrays' cached chunks (the other arrays \
                             keep theirs)"
                        }
                    ),
                    key: self.key(),
                });
            }
            if !stale.is_empty() && !alone {
                return Err(self.reset_needs_alone());
            }
            for e in loaded.entries {
                if stale.contains(&e.array) {
                    let _ = std::fs::remove_file(self.dir.join(&e.file));
                    rewrite = true;
                    continue;
                }
                if let Some(&i) = by_path.get(e.array.as_str()) {
                    let mut index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    index.insert((i as u32, e.chunk), e.clone());
                }
                // Entries of arrays this run does not read are kept untouched.
                kept.push(e);
            }
            if !stale.is_empty() {
                tracing::warn!(arrays = ?stale, "reset_stale_cache: deleted the stale cached chunks of these arrays");
            }
        }
        if !self.readonly {
            if rewrite && alone {
                log::rewrite(&self.dir, &kept, self.modes)?;
            }
            self.log = Appender::open(&self.dir, &kept, alone, self.modes)?.map(Mutex::new);
        }
        Ok(())
    }

    /// A reset deletes files that other processes sharing the directory may be reading.
    fn reset_needs_alone(&self) -> Error {
        Error::Cache {
            message: "reset_stale_cache=True must delete chunk files that other processes sharing this cache may be \
                      reading; reset it from one process while no other has it open"
                .into(),
            key: self.key(),
        }
    }

    fn file_name(&self, array: u32, chunk: u64) -> String {
        let a = &self.arrays[array as usize];
        format!("{}__{}__{chunk}.npy", safe_name(&a.path), a.fingerprint)
    }

    fn miss(&self, array: u32, chunk: u64, why: &str) -> Result<Option<Bytes>, Error> {
        self.misses.fetch_add(1, Ordering::Relaxed);
        if self.readonly {
            let path = self.arrays.get(array as usize).map_or("?", |a| a.path.as_str());
            return Err(Error::Cache {
                message: format!(
                    "readonly_cache=True but chunk {chunk} of array {path:?} {why}. A read-only cache must be complete \
                     for what the run reads; the usual cause is a different split, sample_range or transform set than \
                     the run that warmed it. Warm it with a writer (persist=True) over this configuration first"
                ),
                key: self.key(),
            });
        }
        Ok(None)
    }

    /// A chunk file that failed its checks: never served. A writer reads the chunk from the
    /// store (and writes the file again); a read-only opener stops, naming the file.
    fn damaged(&self, array: u32, chunk: u64, file: &str, why: &str) -> Result<Option<Bytes>, Error> {
        self.misses.fetch_add(1, Ordering::Relaxed);
        if self.readonly {
            let path = self.arrays.get(array as usize).map_or("?", |a| a.path.as_str());
            return Err(Error::Cache {
                message: format!(
                    "readonly_cache=True but the cached file of chunk {chunk} of array {path:?} {why}, so it is not \
                     served. A read-only opener cannot repair it: open the cache once with a writer (persist=True), \
                     which reads the chunk from the store and writes its file again"
                ),
                key: self.dir.join(file).display().to_string(),
            });
        }
        if !self.warned_damaged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                file = %file,
                dir = %self.dir.display(),
                "a cached chunk file {why}; it is read from the store instead and written again (any other such file \
                 of this cache too, without another warning)"
            );
        }
        Ok(None)
    }

    /// Map the chunk file `file` and check it: `Ok(None)` when there is none, `Err` saying
    /// what is wrong with it. The commit record is checked once per version of the file in
    /// this process ([`verified`]): a file this process wrote, or checked before and nobody
    /// changed since, is served without reading it twice.
    fn map_file(&self, file: &str, header: &[u8], nbytes: usize) -> Result<Option<Bytes>, String> {
        let path = self.dir.join(file);
        let f = match open_chunk_file(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot be opened ({e})")),
        };
        let meta = f.metadata().map_err(|e| format!("cannot be read ({e})"))?;
        plausible(&meta, npy::file_len(header, nbytes))?;
        // SAFETY: files in the cache are never truncated or written in place (they are
        // replaced by rename), so the mapped bytes cannot change or shrink under us; one that
        // a user with write access changes in place anyway is outside what a mapping can guard
        // (docs/security.md: the folder's modes keep others out).
        // `populate` faults the pages in with one call, here on the pool in admission order,
        // instead of one fault per page later in the gather the consumer waits on.
        let map =
            unsafe { memmap2::MmapOptions::new().populate().map(&f) }.map_err(|e| format!("cannot be mapped ({e})"))?;
        if map.get(..header.len()) != Some(header) {
            return Err("does not match the chunk's shape and dtype".into());
        }
        let stamp = verified::Stamp::of(&meta);
        if !verified::contains(&stamp) {
            npy::check_file(file, header, nbytes, &map)?;
            verified::insert(stamp);
        }
        Ok(Some(Bytes::from_owner(map).slice(header.len()..header.len() + nbytes)))
    }
}

/// Open a chunk file for reading: never through a symbolic link, and never waiting on a
/// FIFO planted under a chunk's name (`O_NONBLOCK` does nothing to a regular file).
fn open_chunk_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = File::options();
    options.read(true);
    #[cfg(target_os = "linux")]
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    options.open(path)
}

/// Whether an opened chunk file may hold the chunk, before reading it: a regular file of the
/// chunk file's length that not every user may write.
fn plausible(meta: &std::fs::Metadata, len: usize) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    if meta.mode() & modes::WORLD_WRITABLE != 0 {
        return Err("is writable by every user, so anyone could have changed it".into());
    }
    if meta.len() != len as u64 {
        return Err("does not have the chunk's length (truncated, or another shape)".into());
    }
    Ok(())
}

/// True when the file at `path` (named `name`) holds this chunk, whole and unaltered.
fn file_matches(path: &Path, name: &str, header: &[u8], nbytes: usize) -> bool {
    let Ok(f) = open_chunk_file(path) else { return false };
    let Ok(meta) = f.metadata() else { return false };
    if plausible(&meta, npy::file_len(header, nbytes)).is_err() {
        return false;
    }
    // SAFETY: as in `map_file`: chunk files are never written in place.
    let Ok(map) = (unsafe { Mmap::map(&f) }) else { return false };
    npy::check_file(name, header, nbytes, &map).is_ok()
}

/// Numbers this process's temporary chunk files.
static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Write `header`, `data` and `record` to a new file at `tmp` (mode `mode`) and map it.
fn write_mapped(tmp: &Path, mode: u32, parts: [&[u8]; 3]) -> std::io::Result<(File, Mmap)> {
    let mut f = modes::create_new(tmp, mode)?;
    for part in parts {
        f.write_all(part)?;
    }
    // SAFETY: this file is ours alone until it is linked into place, and is never written again.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&f) }?;
    Ok((f, map))
}

impl DiskTier {
    /// Put the written `tmp` file in place as `name`; false when another process already
    /// had. A lone writer replaces (a re-admitted chunk is its latest bytes); a filler never
    /// replaces a valid file, so each chunk is written once, by the first to get there.
    fn place(&self, tmp: &Path, name: &str, header: &[u8], nbytes: usize) -> Result<bool, Error> {
        let path = self.dir.join(name);
        if self.lock.mode != lock::LockMode::Filler {
            self.replace(tmp, &path)?;
            return Ok(true);
        }
        let placed = match std::fs::hard_link(tmp, &path) {
            Ok(()) => true,
            // Someone got there first: theirs stays unless it is not this chunk's file.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && file_matches(&path, name, header, nbytes) => {
                false
            }
            // Not this chunk's file, or a filesystem without hard links: replace.
            Err(_) => {
                self.replace(tmp, &path)?;
                true
            }
        };
        let _ = std::fs::remove_file(tmp);
        Ok(placed)
    }

    /// Rename over `path`: never truncate, so a reader's mapping of the old file keeps its inode.
    fn replace(&self, tmp: &Path, path: &Path) -> Result<(), Error> {
        std::fs::rename(tmp, path).map_err(|e| Error::Cache {
            message: format!("cannot rename a chunk file into place ({e})"),
            key: tmp.display().to_string(),
        })
    }

    /// Log a placed chunk file and index it.
    fn record(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize], name: String) -> Result<(), Error> {
        let entry = Entry {
            array: self.arrays[array as usize].path.clone(),
            chunk,
            file: name,
            pipeline: self.arrays[array as usize].fingerprint.clone(),
            dtype: dtype.name().into(),
            shape: shape.to_vec(),
        };
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).append(&entry)?;
        }
        self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert((array, chunk), entry);
        Ok(())
    }
}

/// Remove temporary files a crashed process left behind (only ever called under the
/// exclusive lock, so no live process owns them).
fn sweep_temp_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().ends_with(".insitu-tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Delete the bare-named files a log of another format lists (best effort, lenient parse).
fn delete_listed_files(dir: &Path, log_path: &Path) {
    let Ok(text) = std::fs::read_to_string(log_path) else { return };
    for line in text.lines().skip(1) {
        let file = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("file").and_then(|f| f.as_str()).map(str::to_string));
        if let Some(f) = file.filter(|f| log::is_bare_file_name(f)) {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
}

impl ChunkTier for DiskTier {
    fn revive(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize]) -> Result<Option<Bytes>, Error> {
        if !self.persist {
            return Ok(None);
        }
        let logged = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&(array, chunk)).cloned();
        // This opener's log first; then the file's own name, which finds what processes
        // sharing the directory wrote after it opened (the name holds the fingerprint).
        let file = match &logged {
            Some(e) if e.dtype != dtype.name() || e.shape != shape => {
                return self.miss(array, chunk, "was cached with another shape or dtype");
            }
            Some(e) => e.file.clone(),
            None => self.file_name(array, chunk),
        };
        let header = npy::header(dtype, shape);
        let nbytes = shape.iter().product::<usize>() * dtype.size();
        match self.map_file(&file, &header, nbytes) {
            Ok(Some(bytes)) => {
                self.revived.fetch_add(1, Ordering::Relaxed);
                Ok(Some(bytes))
            }
            Ok(None) if logged.is_none() => self.miss(array, chunk, "is not in the cache"),
            Ok(None) => {
                if !self.warned_missing_file.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        file = %file,
                        dir = %self.dir.display(),
                        "persist=True but cached chunk files are missing (deleted?); they are fetched and decoded again"
                    );
                }
                self.miss(array, chunk, "is logged but its file is missing")
            }
            Err(why) => self.damaged(array, chunk, &file, &why),
        }
    }

    fn store(
        &self,
        array: u32,
        chunk: u64,
        dtype: DType,
        shape: &[usize],
        data: &[u8],
    ) -> Result<Option<Bytes>, Error> {
        if self.readonly || data.is_empty() {
            return Ok(None);
        }
        let name = self.file_name(array, chunk);
        // Unique per process and call: two datasets of one process may share the directory.
        let seq = TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!("{name}.{}-{seq}.insitu-tmp", std::process::id()));
        let header = npy::header(dtype, shape);
        // A spilled file is never revived, so it needs no record.
        let record = if self.persist { npy::commit_record(&name, &header, data) } else { [0; CommitRecord::LEN] };
        let record = if self.persist { &record[..] } else { &[] };
        let (file, map) = match write_mapped(&tmp, self.modes.data(), [&header, data, record]) {
            Ok(written) => written,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                if !self.warned_write.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        "cannot write chunks to cache_dir ({e}); keeping them on the heap under the same budget"
                    );
                }
                return Ok(None);
            }
        };
        if !self.persist {
            // Spill only: the mapping keeps the unlinked inode alive; nothing outlives the run.
            let _ = std::fs::remove_file(&tmp);
        } else if self.place(&tmp, &name, &header, data.len())? {
            // Our inode is in place, checked by construction: a revive of it in this process
            // need not read it again (taken after the link or rename, which change its ctime).
            if let Ok(meta) = file.metadata() {
                verified::insert(verified::Stamp::of(&meta));
            }
            self.record(array, chunk, dtype, shape, name)?;
        }
        self.stored.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Bytes::from_owner(map).slice(header.len()..header.len() + data.len())))
    }

    fn persists(&self) -> bool {
        self.persist
    }

    fn counters(&self) -> TierCounters {
        TierCounters {
            revived: self.revived.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn describe(&self) -> String {
        let mode = match (self.lock.mode, self.persist) {
            (lock::LockMode::Reader, _) => "read-only (shared lock)",
            (lock::LockMode::Filler, _) => "persist, shared with other processes (shared lock)",
            (lock::LockMode::Writer, true) => "persist (writer lock)",
            (lock::LockMode::Writer, false) => "spill (writer lock)",
        };
        format!("{} [{mode}]", self.dir.display())
    }

    fn warnings(&self) -> Vec<String> {
        self.warning.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
