//! The chunk files whose commit record this process has checked (or wrote itself), by file
//! version, so a revive reads a file's every byte once per process rather than once per
//! revive: a later epoch, or a block that evicted and revives it again, maps it and serves it.
//!
//! A version is the file's device, inode, size, modification and change times. Chunk files
//! are never written in place (a new file is renamed or linked over an old one: a new
//! inode), and anything that does write one in place, or sets its times back, moves its
//! change time, which only the kernel sets. Per process, not per tier: two datasets of one
//! process over one folder (or one reopened each epoch) check a file once between them.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, PoisonError};

/// One version of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    /// The version `meta` (an open file's `fstat`) describes.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A set of versions, bounded ([`REMEMBERED`]).
#[derive(Debug, Default)]
pub struct Versions(Mutex<Option<HashSet<Stamp>>>);

/// At most this many versions are remembered (about 16 MiB of stamps); past it the set starts
/// over, and each file is checked once more. Correctness never depends on it: a forgotten
/// version is only read again. A cache of more chunk files than this, read whole every epoch,
/// is checked in full again about once per this many revives.
pub const REMEMBERED: usize = 1 << 18;

impl Versions {
    /// An empty set (a `static`'s initializer).
    pub const fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// True when this version is in the set.
    pub fn contains(&self, stamp: &Stamp) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|set| set.contains(stamp))
    }

    /// Add a version (starting over past [`REMEMBERED`]).
    pub fn insert(&self, stamp: Stamp) {
        let mut versions = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let set = versions.get_or_insert_with(HashSet::new);
        if set.len() >= REMEMBERED {
            set.clear();
        }
        set.insert(stamp);
    }

    /// How many versions it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map_or(0, HashSet::len)
    }

    /// Forget every version.
    #[cfg(test)]
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// This process's: the versions it checked or wrote.
static VERIFIED: Versions = Versions::new();

/// True when this version was checked (or written) by this process.
pub fn contains(stamp: &Stamp) -> bool {
    VERIFIED.contains(stamp)
}

/// Record a checked (or written) version.
pub fn insert(stamp: Stamp) {
    VERIFIED.insert(stamp);
}

/// Forget every version, as a new process starts: for tests that alter a file in place
/// within the clock's tick of its last check (file times move at the kernel's tick, a few
/// milliseconds), as only another process or a forger would.
#[cfg(test)]
pub fn forget_all() {
    VERIFIED.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_in_place_is_another_version() {
        use std::io::Write;
        use std::time::{Duration, UNIX_EPOCH};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        // An old modification time, so the write below moves it whatever the clock's tick.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(UNIX_EPOCH + Duration::from_secs(1000))
            .unwrap();
        let versions = Versions::new();
        let first = Stamp::of(&std::fs::metadata(&path).unwrap());
        versions.insert(first);
        assert!(versions.contains(&first));
        // The same length, written in place (same inode).
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all(b"two").unwrap();
        let second = Stamp::of(&std::fs::metadata(&path).unwrap());
        assert_eq!((second.ino, second.len), (first.ino, first.len));
        assert_ne!(second, first);
        assert!(!versions.contains(&second));
    }

    #[test]
    fn the_versions_remembered_are_bounded() {
        let meta = std::fs::metadata(std::env::temp_dir()).unwrap();
        let stamp = |n: usize| Stamp { ino: n as u64, ..Stamp::of(&meta) };
        let versions = Versions::new();
        for n in 0..=REMEMBERED {
            versions.insert(stamp(n));
        }
        assert!(versions.len() <= REMEMBERED, "{} versions remembered", versions.len());
        assert!(versions.contains(&stamp(REMEMBERED)), "the newest is kept");
    }
}
