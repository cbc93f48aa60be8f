//! The cache log: an append-only JSON-lines file naming every persisted chunk file.
//!
//! Line 1 is a header (`{"format":"insitubatch-rs chunk cache","version":1}`); each later line
//! records one chunk file: `{"array","chunk","file","pipeline","dtype","shape"}`. A line is
//! appended with one `write` on an `O_APPEND` descriptor after its file has been renamed into
//! place, so a crash leaves at worst a torn last line, which is dropped on the next open.
//! Processes sharing the directory append to one log: a line torn by a killed process is
//! then followed by another's whole line on the same line, which is recovered. No fsync: it
//! survives a process crash, not a power loss (a lost line is a cold chunk).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use insitubatch_core::Error;
use serde::{Deserialize, Serialize};

use super::modes::{Modes, create_new};

/// The log's name inside the cache directory.
pub const LOG_FILE: &str = "insitu_cache.jsonl";
const FORMAT: &str = "insitubatch-rs chunk cache";
/// Bump when the file layout or the fingerprint changes meaning. 2: chunk files end with a
/// commit record (`npy::check_file`); a version-1 cache is stale as a whole.
pub const VERSION: u64 = 2;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u64,
}

/// One persisted chunk file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Array path.
    pub array: String,
    /// Sample-axis chunk index.
    pub chunk: u64,
    /// File name inside the cache directory (a bare name, never a path).
    pub file: String,
    /// The array's fingerprint when the file was written.
    pub pipeline: String,
    /// Element type name.
    pub dtype: String,
    /// `(rows, *inner)`.
    pub shape: Vec<usize>,
}

/// What a load found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Valid entries in log order (later entries for a key replace earlier ones).
    pub entries: Vec<Entry>,
    /// A torn final line was dropped.
    pub torn_tail: bool,
    /// The file had a header of another format or version (every entry is stale).
    pub other_version: Option<String>,
}

fn corrupt(message: String, path: &Path) -> Error {
    Error::Cache { message, key: path.display().to_string() }
}

/// True for a name that stays inside the directory: no separators, no `.`/`..`.
pub fn is_bare_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// Read and check the log.
///
/// # Errors
/// [`Error::Cache`] for an unreadable header, a malformed line before the last, or an entry
/// whose `file` is not a bare file name (path traversal).
pub fn load(path: &Path) -> Result<Loaded, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(corrupt(format!("cannot read the cache log ({e})"), path)),
    };
    parse(&bytes, path)
}

/// Check the log's bytes, as read from `path` (named in errors). Pure, so the fuzzer
/// (`fuzz/fuzz_targets/cache_log.rs`) can feed it any bytes without touching the disk.
///
/// # Errors
/// As [`load`].
pub fn parse(bytes: &[u8], path: &Path) -> Result<Loaded, Error> {
    let text = String::from_utf8_lossy(bytes);
    let ends_with_newline = text.ends_with('\n');
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let mut out = Loaded::default();
    let Some(first) = lines.first() else {
        // An empty file: a writer died between creating it and writing the header.
        return Ok(Loaded::default());
    };
    let unreadable = |detail: String| {
        corrupt(
            format!(
                "the cache log's header is unreadable ({detail}): the log is corrupt or was edited. Move the directory \
                 aside or delete it to start a cold cache"
            ),
            path,
        )
    };
    let header: serde_json::Value = serde_json::from_str(first).map_err(|e| unreadable(e.to_string()))?;
    if !header.is_object() {
        return Err(unreadable("not a JSON object".into()));
    }
    match serde_json::from_value::<Header>(header.clone()) {
        Ok(h) if h.format == FORMAT && h.version == VERSION => {}
        // Another format (an older version, or another tool's log): every entry is stale.
        _ => {
            out.other_version = Some((*first).to_string());
            return Ok(out);
        }
    }
    let last = lines.len() - 1;
    for (i, line) in lines.iter().enumerate().skip(1) {
        match serde_json::from_str::<Entry>(line) {
            Ok(entry) => {
                if !is_bare_file_name(&entry.file) {
                    return Err(corrupt(
                        format!(
                            "line {} of the cache log names file {:?}, which is not a bare file name; refusing it \
                             (the log was edited or corrupted). Delete the cache directory to start cold",
                            i + 1,
                            entry.file
                        ),
                        path,
                    ));
                }
                out.entries.push(entry);
            }
            // A crash mid-append leaves a torn final line: drop it.
            Err(_) if i == last && !ends_with_newline => out.torn_tail = true,
            Err(e) => {
                // A torn line that another process appended after: keep the whole line.
                if let Some(entry) = after_torn_prefix(line) {
                    out.entries.push(entry);
                    out.torn_tail = true;
                    continue;
                }
                return Err(corrupt(
                    format!(
                        "line {} of the cache log is malformed ({e}) and is not the last line, so it is not a torn \
                         write; the log was edited or corrupted. Delete the cache directory to start cold",
                        i + 1
                    ),
                    path,
                ));
            }
        }
    }
    Ok(out)
}

/// The whole entry at the end of `line` when its start is a torn one (a line begins with
/// `{"array":`, the first field serialized; the entry's file name is checked like any other).
fn after_torn_prefix(line: &str) -> Option<Entry> {
    const START: &str = "{\"array\":";
    let at = line.rfind(START).filter(|&at| at > 0)?;
    serde_json::from_str::<Entry>(&line[at..]).ok().filter(|e| is_bare_file_name(&e.file))
}

/// The header line, with its newline.
fn header_line() -> String {
    let h = Header { format: FORMAT.into(), version: VERSION };
    format!("{}\n", serde_json::to_string(&h).unwrap_or_default())
}

fn entry_line(e: &Entry) -> String {
    format!("{}\n", serde_json::to_string(e).unwrap_or_default())
}

/// Replace the log with a header and `entries`: written to a temporary name, then renamed.
///
/// # Errors
/// [`Error::Cache`] when it cannot be written.
pub fn rewrite(dir: &Path, entries: &[Entry], modes: Modes) -> Result<(), Error> {
    let path = dir.join(LOG_FILE);
    let tmp = dir.join(format!("{LOG_FILE}.{}.insitu-tmp", std::process::id()));
    let mut text = header_line();
    for e in entries {
        text.push_str(&entry_line(e));
    }
    // Only a process alone with the directory rewrites: a temporary file of this name is an
    // earlier failed rewrite's.
    let _ = std::fs::remove_file(&tmp);
    create_new(&tmp, modes.control())
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            corrupt(format!("cannot rewrite the cache log ({e}); check free space and permissions"), &path)
        })
}

/// The open log of a writer: appends one line per newly persisted chunk.
#[derive(Debug)]
pub struct Appender {
    file: File,
    path: PathBuf,
    /// (array, chunk) → pipeline already recorded, so each file is logged once.
    recorded: HashMap<(String, u64), String>,
}

impl Appender {
    /// Open for appending, creating the file with a header when it does not exist. A process
    /// not `alone` with the directory creates it only if nobody has (`O_EXCL`), and logs
    /// nothing when it finds it empty (a creator died before its header; a later lone opener
    /// repairs it): a lost line costs nothing, as chunk files are also found by name.
    ///
    /// # Errors
    /// [`Error::Cache`] when it cannot be opened.
    pub fn open(dir: &Path, existing: &[Entry], alone: bool, modes: Modes) -> Result<Option<Self>, Error> {
        let path = dir.join(LOG_FILE);
        let empty = || !path.exists() || std::fs::metadata(&path).is_ok_and(|m| m.len() == 0);
        if alone && empty() {
            rewrite(dir, &[], modes)?;
        } else if !alone
            && !path.exists()
            && let Ok(mut f) = create_new(&path, modes.control())
        {
            f.write_all(header_line().as_bytes())
                .map_err(|e| corrupt(format!("cannot write the cache log ({e}); check free space"), &path))?;
        }
        if empty() {
            return Ok(None);
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| corrupt(format!("cannot open the cache log for appending ({e})"), &path))?;
        let recorded = existing.iter().map(|e| ((e.array.clone(), e.chunk), e.pipeline.clone())).collect();
        Ok(Some(Self { file, path, recorded }))
    }

    /// Record `entry` unless the same file is already logged.
    ///
    /// # Errors
    /// [`Error::Cache`] when the write fails.
    pub fn append(&mut self, entry: &Entry) -> Result<(), Error> {
        let key = (entry.array.clone(), entry.chunk);
        if self.recorded.get(&key) == Some(&entry.pipeline) {
            return Ok(());
        }
        // One write of one short line on an O_APPEND descriptor: never interleaved, at worst torn.
        self.file
            .write_all(entry_line(entry).as_bytes())
            .map_err(|e| corrupt(format!("cannot append to the cache log ({e}); check free space"), &self.path))?;
        self.recorded.insert(key, entry.pipeline.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(array: &str, chunk: u64, file: &str) -> Entry {
        Entry {
            array: array.into(),
            chunk,
            file: file.into(),
            pipeline: "0123456789abcdef".into(),
            dtype: "float32".into(),
            shape: vec![2, 3],
        }
    }

    #[test]
    fn round_trip_and_dedup() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Appender::open(dir.path(), &[], true, Modes::default()).unwrap().unwrap();
        log.append(&entry("t2m", 0, "a.npy")).unwrap();
        log.append(&entry("t2m", 0, "a.npy")).unwrap();
        log.append(&entry("t2m", 1, "b.npy")).unwrap();
        drop(log);
        let loaded = load(&dir.path().join(LOG_FILE)).unwrap();
        assert_eq!(loaded.entries, vec![entry("t2m", 0, "a.npy"), entry("t2m", 1, "b.npy")]);
        assert!(!loaded.torn_tail && loaded.other_version.is_none());
        // Reopened: already-recorded files are not logged again.
        let mut log = Appender::open(dir.path(), &loaded.entries, true, Modes::default()).unwrap().unwrap();
        log.append(&entry("t2m", 1, "b.npy")).unwrap();
        assert_eq!(load(&dir.path().join(LOG_FILE)).unwrap().entries.len(), 2);
    }

    #[test]
    fn torn_tail_is_dropped_but_interior_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        rewrite(dir.path(), &[entry("t2m", 0, "a.npy")], Modes::default()).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{good}{{\"array\":\"t2m\",\"chu")).unwrap();
        let loaded = load(&path).unwrap();
        assert!(loaded.torn_tail);
        assert_eq!(loaded.entries.len(), 1);
        std::fs::write(&path, format!("{good}not json\n{}", entry_line(&entry("t2m", 1, "b.npy")))).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("malformed"), "{e}");
        // A complete (newline-terminated) bad last line is not a torn write either.
        std::fs::write(&path, format!("{good}not json\n")).unwrap();
        assert!(load(&path).is_err());
        // A process killed mid-line, then another's whole line: the whole one is kept.
        let whole = entry_line(&entry("t2m", 1, "b.npy"));
        std::fs::write(&path, format!("{good}{{\"array\":\"t2m\",\"chu{whole}{whole}")).unwrap();
        let loaded = load(&path).unwrap();
        assert!(loaded.torn_tail);
        assert_eq!(loaded.entries, vec![entry("t2m", 0, "a.npy"), entry("t2m", 1, "b.npy"), entry("t2m", 1, "b.npy")]);
        // ... but not a path-traversing one.
        let evil = entry_line(&entry("t2m", 1, "../x.npy"));
        std::fs::write(&path, format!("{good}{{\"array\":\"t2m\",\"chu{evil}{whole}")).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("line 3"));
    }

    #[test]
    fn unreadable_header_and_path_traversal_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("header is unreadable"));
        for bad in ["../etc/passwd", "/tmp/x.npy", "sub/x.npy", ".."] {
            rewrite(dir.path(), &[entry("t2m", 0, bad)], Modes::default()).unwrap();
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains("not a bare file name"), "{bad}: {e}");
        }
    }

    #[test]
    fn another_version_is_reported_not_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        std::fs::write(&path, "{\"format\":\"insitubatch-rs chunk cache\",\"version\":0}\n{}\n").unwrap();
        let loaded = load(&path).unwrap();
        assert!(loaded.other_version.unwrap().contains("\"version\":0"));
        std::fs::write(&path, "{\"format_version\": 4}\n").unwrap();
        assert!(load(&path).unwrap().other_version.is_some(), "insitubatch 0.2.0's log is another format");
        std::fs::write(&path, "[1]\n").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("header is unreadable"));
    }
}
