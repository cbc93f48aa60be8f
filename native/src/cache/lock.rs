//! Who may open a cache directory together: advisory `flock`s held for the dataset's
//! lifetime. One writer alone (`cache_dir`, the default, as insitubatch 0.2.0 specifies), or
//! any number of read-only openers, or any number of fillers (`shared_cache=True`); never
//! readers and fillers together (a cache still being filled is not complete).
//!
//! - A writer holds `.insitu.lock` exclusively; a reader holds it shared.
//! - A filler holds `.insitu.fillers` shared for its lifetime, and `.insitu.lock`
//!   exclusively only while it opens (so no reader or writer is there, and no other filler
//!   is opening); it is alone when it also gets `.insitu.fillers` exclusively (then it sweeps
//!   dead processes' temporary files and repairs the log) before sharing it. A filler that
//!   finds another filler opening waits for it, a bounded time.
//! - A reader or writer, once it holds `.insitu.lock`, checks that nobody holds
//!   `.insitu.fillers` (an exclusive try, let go at once). No filler can start meanwhile,
//!   since a filler's opening needs `.insitu.lock` exclusively. Readers create no file.
//!
//! The kernel owns the lock, not the file: it is released the moment the holding process
//! dies (SIGKILL and OOM included), so there is no stale lock and nothing to clean up, and
//! deleting the lockfile releases nothing (it only lets the next two openers lock different
//! inodes). `std::fs::File::try_lock` is `flock(2)` on Linux.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use insitubatch_core::Error;

use super::modes::{Modes, create_or_open};

/// The lockfile's name inside the cache directory.
pub const LOCK_FILE: &str = ".insitu.lock";
/// Held shared by every filler.
const FILLERS_FILE: &str = ".insitu.fillers";
/// How long a filler waits for another filler's opening (a log repair is the slow case).
const FILLER_OPEN_WAIT: Duration = Duration::from_secs(30);

/// How a process holds the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// The one writer (`cache_dir`, with or without `persist`).
    Writer,
    /// A read-only opener (`readonly_cache=True`).
    Reader,
    /// One of the processes filling it together (`shared_cache=True`).
    Filler,
}

/// Held locks; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    /// `.insitu.lock`: a writer's or reader's for the tier's lifetime, a filler's while it opens.
    main: Option<File>,
    /// `.insitu.fillers`: a filler's.
    fillers: Option<File>,
    /// How it is held.
    pub mode: LockMode,
}

impl DirLock {
    /// A filler's opening is done: share `.insitu.fillers` (it was exclusive if alone) and
    /// let `.insitu.lock` go. Nothing for writers and readers.
    ///
    /// # Errors
    /// [`Error::Cache`] when the kernel refuses.
    pub fn opened(&mut self, dir: &Path) -> Result<(), Error> {
        if self.mode != LockMode::Filler {
            return Ok(());
        }
        if let Some(f) = &self.fillers {
            // Still under `.insitu.lock`, so no other filler can be in the gap.
            f.lock_shared().map_err(|e| io_error("cannot share the cache lock", &dir.join(FILLERS_FILE), &e))?;
        }
        self.main = None;
        Ok(())
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into())
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The holder hint a writer leaves in the lockfile: `{"pid","host","since"}`.
fn read_hint(path: &Path) -> String {
    let mut text = String::new();
    let parsed = File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .ok()
        .and_then(|_| serde_json::from_str::<serde_json::Value>(&text).ok());
    match parsed {
        Some(v) => {
            let since = v["since"].as_u64().unwrap_or(0);
            let opening = if v["mode"].as_str() == Some("filler") { "opening it with shared_cache=True, " } else { "" };
            format!(
                "{opening}pid {} on host {}, holding it since unix time {since} ({} s ago)",
                v["pid"].as_u64().map_or_else(|| "?".into(), |p| p.to_string()),
                v["host"].as_str().unwrap_or("?"),
                unix_now().saturating_sub(since)
            )
        }
        None => "holder unknown (no hint in the lockfile)".into(),
    }
}

/// True when the lockfile's hint names a writer that may be alive (one of another host, or a
/// live process of this one): not worth waiting for. A filler's hint, a dead process's, or a
/// hint being rewritten (unreadable for a moment) is.
fn held_by_live_writer(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    let writer = v["mode"].as_str().is_none_or(|m| m == "writer");
    let here = v["host"].as_str() == Some(hostname().as_str());
    let alive = v["pid"].as_u64().is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
    writer && (!here || alive)
}

/// Leave the holder hint in the lockfile (only an exclusive holder writes it).
fn write_hint(file: &File, mode: &str) {
    let hint = serde_json::json!({ "pid": std::process::id(), "host": hostname(), "since": unix_now(), "mode": mode });
    let mut f = file;
    let _ = f.set_len(0);
    let _ = f.seek(SeekFrom::Start(0));
    let _ = f.write_all(hint.to_string().as_bytes());
}

fn locked_error(path: &Path, want: LockMode, held_by_readers: bool) -> Error {
    let lock = path.display();
    let holder = if held_by_readers {
        "one or more read-only openers (readonly_cache=True)".to_string()
    } else {
        format!("a writer: {}", read_hint(path))
    };
    let what = if want == LockMode::Reader {
        "cannot open this cache read-only while a writer holds it: a cache still being warmed is not complete"
    } else if want == LockMode::Filler {
        "cannot fill this cache (shared_cache=True) while a writer without shared_cache holds it: that writer is \
         alone by design"
    } else if held_by_readers {
        "cannot open this cache for writing while read-only openers use it: a writer could replace chunks under them"
    } else {
        "cannot open this cache for writing: one writer per cache_dir, and another writer holds it (to fill one \
         cache from several processes, open every one with shared_cache=True)"
    };
    Error::Cache {
        message: format!(
            "{what}. It is held by {holder}. Wait for that process to finish (check it with `fuser -v {lock}` or \
             `lsof {lock}`), use another cache_dir, or share a finished cache with readonly_cache=True. Do NOT delete \
             the lockfile: the kernel holds the lock, deleting the file releases nothing and lets two writers corrupt \
             each other"
        ),
        key: path.display().to_string(),
    }
}

fn io_error(what: &str, path: &Path, e: &std::io::Error) -> Error {
    Error::Cache {
        message: format!("{what} ({e}); check the directory's permissions"),
        key: path.display().to_string(),
    }
}

/// Take the directory's lock: exclusive for a writer, shared for `readonly`.
///
/// # Errors
/// [`Error::Cache`] when the lock is held in a conflicting mode (naming the holder) or the
/// lockfile cannot be opened.
pub fn acquire(dir: &Path, readonly: bool, modes: Modes) -> Result<DirLock, Error> {
    let path: PathBuf = dir.join(LOCK_FILE);
    let file = if readonly {
        // A reader writes nothing, not even the lockfile; a cache without one was never warmed.
        match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Cache {
                    message: "readonly_cache=True needs a cache a writer has warmed, and this directory has no \
                              lockfile (no writer ever opened it); warm it first with persist=True"
                        .into(),
                    key: dir.display().to_string(),
                });
            }
            Err(e) => return Err(io_error("cannot open the cache lockfile", &path, &e)),
        }
    } else {
        create_or_open(&path, modes.control()).map_err(|e| io_error("cannot create the cache lockfile", &path, &e))?
    };
    let mode = if readonly { LockMode::Reader } else { LockMode::Writer };
    let attempt = if readonly { file.try_lock_shared() } else { file.try_lock() };
    match attempt {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let held_by_readers = !readonly && readers_hold(&path);
            return Err(locked_error(&path, mode, held_by_readers));
        }
        Err(TryLockError::Error(e)) => return Err(io_error("cannot lock the cache directory", &path, &e)),
    }
    if fillers_present(dir) {
        return Err(fillers_conflict(&path, readonly));
    }
    if !readonly {
        // Only the exclusive holder rewrites the hint; the lock itself is untouched by this.
        write_hint(&file, "writer");
    }
    Ok(DirLock { main: Some(file), fillers: None, mode })
}

/// Who holds a lockfile that refused an exclusive lock: readers when a shared one is
/// obtainable (a writer or an opening filler holds it exclusively otherwise).
fn readers_hold(path: &Path) -> bool {
    File::open(path).is_ok_and(|probe| {
        let ok = probe.try_lock_shared().is_ok();
        let _ = probe.unlock();
        ok
    })
}

/// True while a filler holds `.insitu.fillers` (an exclusive try, let go at once; creates nothing).
fn fillers_present(dir: &Path) -> bool {
    let Ok(f) = File::open(dir.join(FILLERS_FILE)) else { return false };
    match f.try_lock() {
        Ok(()) => {
            let _ = f.unlock();
            false
        }
        Err(_) => true,
    }
}

fn fillers_conflict(path: &Path, readonly: bool) -> Error {
    let what = if readonly {
        "cannot open this cache read-only while processes fill it (shared_cache=True): a cache still being filled is \
         not complete. Open it read-only once they are done, or fill it with shared_cache=True too"
    } else {
        "cannot open this cache for writing while shared_cache fillers use it: a writer is alone with its cache_dir. \
         Open this one with shared_cache=True too, or use another cache_dir"
    };
    Error::Cache {
        message: format!("{what}. Check the holders with `fuser -v {}`", path.display()),
        key: path.display().to_string(),
    }
}

/// Take the directory as a filler: `(lock, alone)`, where `alone` means no other filler
/// holds it. Call [`DirLock::opened`] once the opening is done.
///
/// # Errors
/// [`Error::Cache`] when a writer holds the directory, read-only openers use it, or another
/// filler's opening does not finish within `FILLER_OPEN_WAIT` (30 s).
pub fn acquire_filler(dir: &Path, modes: Modes) -> Result<(DirLock, bool), Error> {
    let path: PathBuf = dir.join(LOCK_FILE);
    let create = |p: &Path| create_or_open(p, modes.control());
    let main = create(&path).map_err(|e| io_error("cannot create the cache lockfile", &path, &e))?;
    lock_for_opening(&main, dir)?;
    write_hint(&main, "filler");
    let fillers_path = dir.join(FILLERS_FILE);
    let fillers = create(&fillers_path).map_err(|e| io_error("cannot create the cache lockfile", &fillers_path, &e))?;
    let alone = match fillers.try_lock() {
        Ok(()) => true,
        // Other fillers hold it shared (none exclusively: that needs `.insitu.lock`, ours).
        Err(TryLockError::WouldBlock) => {
            fillers.lock_shared().map_err(|e| io_error("cannot lock the cache directory", &fillers_path, &e))?;
            false
        }
        Err(TryLockError::Error(e)) => return Err(io_error("cannot lock the cache directory", &fillers_path, &e)),
    };
    Ok((DirLock { main: Some(main), fillers: Some(fillers), mode: LockMode::Filler }, alone))
}

/// `.insitu.lock` exclusively for a filler's opening: refused at once for a writer or
/// readers; waited for (bounded) while another filler opens.
fn lock_for_opening(main: &File, dir: &Path) -> Result<(), Error> {
    let path = &dir.join(LOCK_FILE);
    let deadline = Instant::now() + FILLER_OPEN_WAIT;
    let mut pause = Duration::from_millis(1);
    let mut readers_seen = false;
    loop {
        match main.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(io_error("cannot lock the cache directory", path, &e)),
        }
        // A shared lock obtainable after the exclusive one was refused means readers, or a
        // holder that let go between the two tries: another filler whose opening just ended
        // (it shares `.insitu.fillers` before it lets `.insitu.lock` go, and readers never
        // stay beside fillers), or one that died opening (then the next try takes the lock).
        // Taking the first for readers refused a filler beside other fillers' openings
        // (tests/tests/shared_cache.rs failed 2 runs in 31 under load; 0 in 40 since).
        let readers_now = readers_hold(path) && !fillers_present(dir);
        if readers_now && readers_seen {
            return Err(Error::Cache {
                message: format!(
                    "cannot fill this cache (shared_cache=True) while read-only openers (readonly_cache=True) use \
                     it: they were promised a complete cache. Fill it once they are done, or use another cache_dir. \
                     Check the holders with `fuser -v {}`",
                    path.display()
                ),
                key: path.display().to_string(),
            });
        }
        // A live writer is not worth waiting for; with readers there, the hint is an earlier writer's.
        if (!readers_now && held_by_live_writer(path)) || Instant::now() >= deadline {
            return Err(locked_error(path, LockMode::Filler, false));
        }
        readers_seen = readers_now;
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Filesystems on which `flock` may be emulated per client (or not at all), so two hosts
/// can both believe they hold the write lock.
const NETWORK_FS: &[&str] =
    &["nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "ceph", "glusterfs", "gpfs", "9p", "afs", "beegfs"];

/// The filesystem type of the mount holding `dir`, from `/proc/self/mountinfo` (Linux).
pub fn filesystem_type(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_type(&info, &dir)
}

/// The type of the innermost mount in `mountinfo` (the `/proc/self/mountinfo` format) that
/// contains `dir`.
fn mount_type(info: &str, dir: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        // "id parent major:minor root mountpoint options ... - fstype source superoptions"
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else { continue };
        let (Some(mount), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else { continue };
        let mount = mount.replace("\\040", " ");
        if dir.starts_with(&mount) && best.as_ref().is_none_or(|(len, _)| mount.len() >= *len) {
            best = Some((mount.len(), (*fstype).to_string()));
        }
    }
    best.map(|(_, t)| t)
}

/// A warning when `dir` sits on a network filesystem, naming it.
pub fn network_fs_warning(dir: &Path) -> Option<String> {
    network_warning_for(&filesystem_type(dir)?, dir)
}

fn network_warning_for(fstype: &str, dir: &Path) -> Option<String> {
    let network = NETWORK_FS.contains(&fstype) || fstype.starts_with("fuse.") || fstype.starts_with("nfs");
    network.then(|| {
        format!(
            "cache_dir is on a network filesystem ({fstype}): the writer lock may be emulated per client, so two \
             hosts can both write and corrupt each other's chunks, and mapped reads are slow. Put cache_dir on local \
             disk (NVMe): {}",
            dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_excludes_writer_and_reader_in_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let w = acquire(dir.path(), false, Modes::default()).unwrap();
        let e = acquire(dir.path(), false, Modes::default()).unwrap_err().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(e.contains("fuser -v") && e.contains("Do NOT delete"), "{e}");
        assert!(
            acquire(dir.path(), true, Modes::default()).unwrap_err().to_string().contains("read-only while a writer")
        );
        drop(w);
        let r1 = acquire(dir.path(), true, Modes::default()).unwrap();
        let _r2 = acquire(dir.path(), true, Modes::default()).unwrap();
        let e = acquire(dir.path(), false, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("read-only openers"), "{e}");
        drop(r1);
    }

    #[test]
    fn fillers_share_a_directory_and_never_meet_a_writer_or_readers() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (mut f1, alone) = acquire_filler(d, Modes::default()).unwrap();
        assert!(alone);
        let e = acquire(d, true, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("opening it with shared_cache=True"), "a reader meets a filler opening: {e}");
        f1.opened(d).unwrap();
        let (mut f2, alone) = acquire_filler(d, Modes::default()).unwrap();
        assert!(!alone, "a second filler is not alone");
        f2.opened(d).unwrap();
        let e = acquire(d, true, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("read-only while processes fill it"), "{e}");
        let e = acquire(d, false, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("while shared_cache fillers use it"), "{e}");
        drop((f1, f2));
        let w = acquire(d, false, Modes::default()).unwrap();
        let e = acquire_filler(d, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("while a writer without shared_cache holds it"), "{e}");
        drop(w);
        let r = acquire(d, true, Modes::default()).unwrap();
        let e = acquire_filler(d, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("while read-only openers"), "{e}");
        drop(r);
        let (_f, alone) = acquire_filler(d, Modes::default()).unwrap();
        assert!(alone, "the last filler's exit leaves the directory alone");
    }

    #[test]
    fn reader_needs_a_warmed_directory() {
        let dir = tempfile::tempdir().unwrap();
        let e = acquire(dir.path(), true, Modes::default()).unwrap_err().to_string();
        assert!(e.contains("no lockfile"), "{e}");
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "a reader wrote something");
    }

    #[test]
    fn network_mounts_are_found_in_mountinfo_and_warned_about() {
        let info = "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n\
                    40 22 0:40 / /data rw,relatime - nfs4 server:/export rw,vers=4.2\n\
                    41 40 0:41 / /data/local\\040disk rw - xfs /dev/nvme0n1 rw\n\
                    42 22 0:42 / /mnt/s3 rw - fuse.s3fs s3fs rw\n";
        assert_eq!(mount_type(info, Path::new("/data/era5-cache")).as_deref(), Some("nfs4"));
        assert_eq!(mount_type(info, Path::new("/data/local disk/c")).as_deref(), Some("xfs"));
        assert_eq!(mount_type(info, Path::new("/home/me")).as_deref(), Some("ext4"));
        let w = network_warning_for("nfs4", Path::new("/data/era5-cache")).unwrap();
        assert!(w.contains("network filesystem (nfs4)") && w.ends_with("/data/era5-cache"), "{w}");
        assert!(network_warning_for("fuse.s3fs", Path::new("/mnt/s3")).is_some());
        assert!(network_warning_for("xfs", Path::new("/data/local disk")).is_none());
    }

    #[test]
    fn local_tmp_is_not_a_network_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        assert!(filesystem_type(dir.path()).is_some());
        assert_eq!(network_fs_warning(dir.path()), None);
    }
}
