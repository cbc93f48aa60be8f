//! Who may write a cache folder, and the modes of what the tier creates in it.
//!
//! A revived chunk is served to training as it is on disk, so whoever can write the folder
//! chooses training data. The commit record ([`super::npy::check_file`]) catches accidents
//! (a flipped bit, a truncation, a file under another chunk's name), not a forger, who can
//! compute a CRC too. What keeps forgers out is the folder's mode, checked here when the tier
//! opens:
//!
//! - a `cache_dir` writable by every user is refused (sticky bit or not: the sticky bit
//!   stops others deleting our files, not planting files under names we have not written
//!   yet), and so is one under a folder writable by every user without the sticky bit
//!   (anyone could rename `cache_dir` away and put their own in its place);
//! - a folder the tier creates is `0700`, and its files `0600` (chunk files, the log and the
//!   lockfiles), whatever the umask;
//! - `shared_cache=True` in a folder that is group-writable (one its owner prepared for a
//!   group: `chgrp GROUP dir && chmod 2770 dir`) gives the group what the fillers need:
//!   chunk files `0640`, the log and the lockfiles `0660`. The folder's group is then trusted
//!   as its owner is.
//!
//! A chunk file writable by every user is never served ([`super::DiskTier`]'s revive).

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use insitubatch_core::Error;

/// The "writable by every user" bit.
pub const WORLD_WRITABLE: u32 = 0o002;
const GROUP_WRITABLE: u32 = 0o020;
const STICKY: u32 = 0o1000;

/// The modes of the files an opener creates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modes {
    /// The folder is shared with its group (`shared_cache` in a group-writable folder).
    pub group: bool,
}

impl Modes {
    /// A folder the tier creates (and any missing parent): its owner's alone.
    pub const FOLDER: u32 = 0o700;

    /// A chunk file's mode: read by the group when shared, never written in place by anyone.
    pub fn data(self) -> u32 {
        if self.group { 0o640 } else { 0o600 }
    }

    /// The log's and the lockfiles' mode: written (appended, locked) by every filler.
    pub fn control(self) -> u32 {
        if self.group { 0o660 } else { 0o600 }
    }
}

/// Create `dir` (and missing parents) `0700`, whatever the umask; nothing when it exists.
///
/// # Errors
/// What the filesystem says.
pub fn create_folder(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new().recursive(true).mode(Modes::FOLDER).create(dir)?;
    std::fs::set_permissions(dir, Permissions::from_mode(Modes::FOLDER))
}

/// Create `path` for writing with exactly `mode` (`create_new`: never an existing file).
///
/// # Errors
/// What the filesystem says (`AlreadyExists` when it does).
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let f = OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(path)?;
    // The umask may have taken bits from `mode` (a group's write, in a shared folder).
    f.set_permissions(Permissions::from_mode(mode))?;
    Ok(f)
}

/// Open `path` for reading and writing, creating it with exactly `mode` when it does not
/// exist (a lockfile: another process may create it at the same moment).
///
/// # Errors
/// What the filesystem says.
pub fn create_or_open(path: &Path, mode: u32) -> io::Result<File> {
    match create_new(path, mode) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => OpenOptions::new().read(true).write(true).open(path),
        other => other,
    }
}

/// Check who may write `dir` (which exists) and its parents, and say which [`Modes`] its
/// new files get: group ones for `shared` in a group-writable folder.
///
/// # Errors
/// [`Error::Cache`] naming what to do, the folder last, for a folder writable by every
/// user, or one under a folder writable by every user without the sticky bit.
pub fn check_folder(dir: &Path, shared: bool) -> Result<Modes, Error> {
    let refuse = |message: String| Error::Cache { message, key: dir.display().to_string() };
    let meta = std::fs::metadata(dir)
        .map_err(|e| refuse(format!("cannot read cache_dir's permissions ({e}); check the path")))?;
    let mode = meta.mode() & 0o7777;
    if mode & WORLD_WRITABLE != 0 {
        return Err(refuse(format!(
            "cache_dir is writable by every user of this machine (mode {mode:o}), so any of them could put chunk \
             files there that training would read. Make it yours alone (`chmod 700` it, or use a new folder: the \
             tier creates it 0700), or, to share a cache with a group, `chgrp GROUP` it, `chmod 2770` it and open it \
             with shared_cache=True"
        )));
    }
    let canonical = dir.canonicalize().map_err(|e| refuse(format!("cannot resolve cache_dir ({e})")))?;
    for parent in canonical.ancestors().skip(1) {
        let Ok(m) = std::fs::metadata(parent) else { continue };
        if m.mode() & WORLD_WRITABLE != 0 && m.mode() & STICKY == 0 {
            return Err(refuse(format!(
                "a folder above cache_dir, {}, is writable by every user and has no sticky bit (mode {:o}), so any of \
                 them could move cache_dir aside and put a folder of their own in its place. Put cache_dir under a \
                 folder only you can write (your home, a job's scratch folder), or `chmod o-w` (or `+t`) that folder",
                parent.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(Modes { group: shared && mode & GROUP_WRITABLE != 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_folder_writable_by_every_user_is_refused_and_so_is_one_below_such_a_folder() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache");
        create_folder(&dir.join("inner")).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(check_folder(&dir, false).unwrap(), Modes { group: false });
        for open in [0o777, 0o1777, 0o702] {
            std::fs::set_permissions(&dir, Permissions::from_mode(open)).unwrap();
            let e = check_folder(&dir, false).unwrap_err().to_string();
            assert!(e.contains("writable by every user") && e.contains("chmod 700"), "{e}");
            assert!(e.ends_with(&format!(": {}", dir.display())), "the folder last: {e}");
        }
        // Below it: refused without the sticky bit (as /tmp has), allowed with it.
        std::fs::set_permissions(&dir, Permissions::from_mode(0o777)).unwrap();
        let e = check_folder(&dir.join("inner"), false).unwrap_err().to_string();
        assert!(e.contains("a folder above cache_dir") && e.contains("no sticky bit"), "{e}");
        std::fs::set_permissions(&dir, Permissions::from_mode(0o1777)).unwrap();
        assert!(check_folder(&dir.join("inner"), false).is_ok());
    }

    #[test]
    fn a_shared_cache_in_a_group_folder_gives_the_group_its_files() {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), Permissions::from_mode(0o2770)).unwrap();
        assert_eq!(check_folder(root.path(), true).unwrap(), Modes { group: true });
        assert_eq!(check_folder(root.path(), false).unwrap(), Modes { group: false }, "a writer alone");
        std::fs::set_permissions(root.path(), Permissions::from_mode(0o700)).unwrap();
        assert_eq!(check_folder(root.path(), true).unwrap(), Modes { group: false }, "same-user fillers");
        let group = Modes { group: true };
        let f = root.path().join("f");
        drop(create_new(&f, group.control()).unwrap());
        assert_eq!(mode_of(&f), 0o660, "exactly, whatever the umask");
        assert_eq!(create_new(&f, 0o600).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        drop(create_or_open(&f, 0o600).unwrap());
        assert_eq!(mode_of(&f), 0o660, "an existing file keeps its mode");
    }
}
